"""`check-key-reuse`: find PRNG keys consumed more than once, statically, in StableHLO.

A key is a pair of uint32 words: raw `uint32[..., 2]` keys and typed
`key<fry>` arrays lower to the same tensors. Every draw of random bits and
every split hashes the key with JAX's threefry2x32 kernel, so a *consumer* is
one application of that kernel whose counters are iota or constant data: a call
of the kernel function JAX emits (`@threefry2x32...`, recognised by its key
schedule constant 0x1BD11BDA, not by name), the same kernel inlined, or the
GPU custom calls. A kernel application whose counters come from a block
argument or from JAX's `threefry_seed` (`data & 0xFFFFFFFF`) is a `fold_in`,
which JAX's own checker does not count as consuming (`fold-in-consumes=true`
counts it).

The analysis gives every uint32 element an identity (a *cell*) and follows
cells through the ops that move key data (slice, reshape, broadcast,
transpose, concatenate, dynamic slices, gathers of rows, selects, sharding
constraints, `Sharding` custom calls; a row picked at a run-time index may be
any row), into function calls (each function is summarised once: which
argument keys it consumes, which it returns), through
`stablehlo.while` (a key consumed in the cond or body that is captured or
carried unchanged is consumed in every iteration) and through
`stablehlo.case`/`if` (each branch sees the keys consumed before it, not those
consumed by its sibling branches). Two consumers whose results only meet as
the two sides of selects are exclusive per element (JAX's poisson and
binomial run two algorithms on one key that way). Values that pass through
`stablehlo.optimization_barrier` (JAX's marker of rematerialised
recomputation) start fresh, as JAX's checker ignores the recomputed pass.

    %w0 = stablehlo.reshape %s0 ...       // words 0 and 1 of %key
    %a:2 = call @threefry2x32(%w0, %w1, %c0, %c1)
    %b:2 = call @threefry2x32(%w0, %w1, %c0, %c1)
    // f.py:3:8: error: PRNG key is consumed a second time      (at %b)
    // f.py:2:8: note: the key was first consumed here          (at %a)

The pass changes nothing; it fails with `KeyReuseError` listing every reuse.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Iterable, MutableMapping
from typing import ClassVar

import numpy as np

from hlopt.passes.base import Pass, PassError
from hlopt.passes.ir.locations import Frames, format_frames, source_frames
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.target import PORTABLE
from hlopt.passes.rewrite.transform import ModuleTransform, RuleTable, walk
from hlopt.passes.ir.walk import call_target, callee_of, walk_ops

# The threefry2x32 key-schedule parity constant: ks[2] = k0 ^ k1 ^ 0x1BD11BDA.
THREEFRY_PARITY = 0x1BD11BDA

# custom_call targets of the threefry kernel on GPU (operands: k0, k1, x0, x1).
THREEFRY_CUSTOM_CALLS = frozenset(
    {"cu_threefry2x32", "cu_threefry2x32_ffi", "hip_threefry2x32", "hip_threefry2x32_ffi"}
)

# custom_call targets that pass operand 0 through unchanged when shapes agree.
FORWARDING_CUSTOM_CALLS = frozenset(
    {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost", "MoveToDevice"}
)

# Larger uint32 tensors are not followed as key data (their elements are fresh).
MAX_TRACKED_ELEMENTS = 1 << 16

Cells = np.ndarray  # int64 cell ids, the shape of the value they describe
Pair = tuple[int, int]  # the cells of a key's two words


@dataclasses.dataclass(frozen=True)
class KeyReuse:
    """One reuse: where the key is consumed again, and where it was consumed before."""

    message: str
    location: str
    note: str
    note_location: str

    def __str__(self) -> str:
        return f"{self.location}: error: {self.message}\n{self.note_location}: note: {self.note}"


class KeyReuseError(PassError):
    """A PRNG key is consumed more than once; `reports` lists every reuse.

    Example:
      >>> import jax
      >>> import hlopt
      >>> def f(key):
      ...     return jax.random.normal(key) + jax.random.uniform(key)
      >>> try:
      ...     hlopt.lower(f, jax.random.key(0), check_key_reuse=True)
      ... except hlopt.KeyReuseError as e:
      ...     print(len(e.reports), "reuse")
      1 reuse
    """

    __module__ = "hlopt"  # raised and printed as users import it

    def __init__(self, reports: list[KeyReuse]):
        self.reports = list(reports)
        super().__init__("\n".join(str(r) for r in self.reports))
        self.location, self.where, self.notes = None, None, []  # each report carries its own locations


def _base_name(symbol: str) -> str:
    """`g` for the symbols `g`, `g_0`, `g_12` JAX gives the lowerings of one function."""
    return re.sub(r"_\d+$", "", symbol)


def _tracked_shape(value: ir.Value) -> tuple[int, ...] | None:
    """The static shape of a uint32 tensor small enough to follow, else None."""
    t = value.type
    if not isinstance(t, ir.RankedTensorType):
        return None
    et = t.element_type
    if not (isinstance(et, ir.IntegerType) and et.width == 32 and et.is_unsigned) or not t.has_static_shape:
        return None
    shape = tuple(t.shape)
    return shape if math.prod(shape) <= MAX_TRACKED_ELEMENTS else None


def _i64s(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _int_attr(op: ir.Operation, name: str) -> int:
    return ir.IntegerAttr(op.attributes[name]).value


def _defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _splat_int(value: ir.Value) -> int | None:
    """The integer a (broadcast or reshaped) `stablehlo.constant` splat holds, else None."""
    op = _defining_op(value)
    while op is not None and op.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape"):
        op = _defining_op(op.operands[0])
    if op is None or op.name != "stablehlo.constant":
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseIntElementsAttr) or not attr.is_splat:
        return None
    return int(np.asarray(attr).reshape(-1)[0]) & 0xFFFFFFFF


def _constant_ints(value: ir.Value) -> np.ndarray | None:
    op = _defining_op(value)
    if op is None or op.name != "stablehlo.constant":
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.DenseIntElementsAttr):
        return None
    return np.asarray(attr).reshape(-1)


def _is_gpu_kernel(op: ir.Operation) -> bool:
    return call_target(op) in THREEFRY_CUSTOM_CALLS


def _parity_key_words(op: ir.Operation) -> tuple[ir.Value, ir.Value] | None:
    """(k0, k1) if `op` is `xor(xor(k0, k1), 0x1BD11BDA)`: the kernel's key schedule."""
    if op.name != "stablehlo.xor":
        return None
    a, b = op.operands
    for inner, const in ((a, b), (b, a)):
        if _splat_int(const) == THREEFRY_PARITY:
            producer = _defining_op(inner)
            if producer is not None and producer.name == "stablehlo.xor":
                return producer.operands[0], producer.operands[1]
    return None


def _inlined_counters(k0: ir.Value) -> list[ir.Value]:
    """The counter inputs of an inlined kernel: the other addend of `x0 + k0` (k0 maybe broadcast)."""
    counters = []
    for use in k0.uses:
        user = use.owner.operation
        added = [user.result] if user.name == "stablehlo.broadcast_in_dim" else [k0]
        adds = [u.owner.operation for u in user.result.uses] if added[0] != k0 else [user]
        for add in adds:
            if add.name == "stablehlo.add":
                counters.extend(v for v in add.operands if v != added[0])
    return counters


@dataclasses.dataclass
class _Summary:
    """What a function does to the keys it is given, in its own cell ids."""

    params: list[Cells | None]
    results: list[Cells | None]
    events: list[tuple[Pair, "_Place", bool]]  # the argument keys it (may) consume, and where
    start: int
    stop: int
    candidates: dict[int, np.ndarray]  # result cells that are rows picked at unknown indices


class _Place:
    """Where a key is consumed; resolved to source frames only when reported.

    `op` is the consumer (or the call or loop that holds it) in the function
    analysed, `inner` the place inside the callee for a consumption lifted
    from a call. The place inside is the better one when its frames extend
    this call's, or when the callee is called once; a callee JAX lowered once
    for many calls keeps the frames of its first call, so the call is the place.
    """

    __slots__ = ("op", "elsewhere", "inner", "called_once", "_frames")

    def __init__(self, op: ir.Operation, elsewhere: frozenset[str], inner: "_Place | None" = None,
                 called_once: bool = False):
        self.op, self.elsewhere, self.inner, self.called_once = op, elsewhere, inner, called_once
        self._frames: Frames | None = None

    @property
    def frames(self) -> Frames:
        if self._frames is None:
            frames = source_frames(self.op.location, self.elsewhere)
            if self.inner is not None:
                inner = self.inner.frames
                if (frames and frames[0] in inner[1:]) or (len(inner) == 1 and self.called_once):
                    frames = inner
            self._frames = frames
        return self._frames


# Where a key was consumed, the op of this block that consumed it, and whether the
# key may be another (a row picked at an unknown index from an array of keys).
Use = tuple[_Place, ir.Operation, bool]


class _Scope:
    """The keys consumed so far on one control path, and where."""

    def __init__(self, consumed: MutableMapping[Pair, Use] | None = None):
        self.consumed: MutableMapping[Pair, Use] = {} if consumed is None else consumed


class KeyReuseAnalysis(ModuleTransform):
    """One run of the analysis over a module, the driver's plug-in for `check-key-reuse`
    (`find_key_reuse` runs it): cells, function summaries (`generated`, by function name), reports."""

    pass_name = "check-key-reuse"

    def __init__(self, module: ir.Operation, fold_in_consumes: bool):
        super().__init__(module)
        self.fold_in_consumes = fold_in_consumes
        # declarations are unknown calls
        self.funcs = {name: op for name, op in self.funcs.items() if op.regions[0].blocks}
        self.function_names = frozenset(_base_name(name) for name in self.funcs)
        self.elsewhere: frozenset[str] = frozenset()
        self.call_sites = collections.Counter(callee_of(op) for op in walk_ops(module, "func.call"))
        self.next_id = 0
        self.env: dict[ir.Value, Cells | None] = {}
        self.kernels: dict[str, bool] = {}
        self.candidates: dict[int, np.ndarray] = {}  # cell of a dynamic slice -> the cells it may be
        self.fold_in_data: dict[ir.Value, bool] = {}
        self.reports: list[KeyReuse] = []
        self.reported: set[KeyReuse] = set()
        self.handlers: RuleTable[Callable[[ir.Operation, _Scope], None]] = RuleTable({
            "func.call": self._call,
            "stablehlo.while": self._while,
            "stablehlo.case": self._branches,
            "stablehlo.if": self._branches,
            "stablehlo.xor": self._xor,
            "stablehlo.custom_call": self._custom_call,
            "sdy.manual_computation": self._manual_computation,
            "stablehlo.dynamic_slice": self._dynamic_slice,
            "stablehlo.gather": self._gather,
        })

    def place(self, op: ir.Operation) -> _Place:
        """Where `op`, in the function being analysed, is in the source."""
        return _Place(op, self.elsewhere)

    # ---- cells ------------------------------------------------------------

    def fresh(self, shape: tuple[int, ...]) -> Cells:
        n = math.prod(shape)
        cells = np.arange(self.next_id, self.next_id + n, dtype=np.int64).reshape(shape)
        self.next_id += n
        return cells

    def bind_fresh(self, value: ir.Value) -> Cells | None:
        shape = _tracked_shape(value)
        cells = None if shape is None else self.fresh(shape)
        self.env[value] = cells
        return cells

    def cells(self, value: ir.Value) -> Cells | None:
        if value in self.env:
            return self.env[value]
        return self.bind_fresh(value)  # defined by an op this analysis never visited

    def bind(self, value: ir.Value, cells: Cells | None) -> None:
        shape = _tracked_shape(value)
        if shape is None:
            self.env[value] = None
        elif cells is None or cells.shape != shape:
            self.bind_fresh(value)
        else:
            self.env[value] = cells

    # ---- reports ----------------------------------------------------------

    def report(self, message: str, loc: _Place, note: str, note_loc: _Place) -> None:
        """Report a reuse once per pair of places (a key array reused is one report)."""
        reuse = KeyReuse(message, format_frames(loc.frames) or "<unknown>", note,
                         format_frames(note_loc.frames) or "<unknown>")
        if reuse not in self.reported:
            self.reported.add(reuse)
            self.reports.append(reuse)

    def consume(self, scope: _Scope, pair: Pair, loc: _Place, op: ir.Operation, may: bool = False) -> None:
        first = scope.consumed.get(pair)
        if first is None:
            scope.consumed[pair] = (loc, op, may)
        elif (may or first[2]) and first[1] == op:
            pass  # rows one op picks at run-time indices: taken as distinct, as JAX does
        elif not _exclusive(first[1], op):
            self.report("PRNG key is consumed a second time", loc, "the key was first consumed here", first[0])
        w0, w1 = self.candidates.get(pair[0]), self.candidates.get(pair[1])
        if w0 is not None or w1 is not None:  # a row at an unknown index: any row may be consumed
            n = len(w0) if w0 is not None else len(w1)
            w0 = np.full(n, pair[0]) if w0 is None else w0
            w1 = np.full(n, pair[1]) if w1 is None else w1
            for row in sorted(set(zip(w0.tolist(), w1.tolist()))):
                self.consume(scope, row, loc, op, may=True)

    def consume_words(self, scope: _Scope, k0: ir.Value, k1: ir.Value, loc: _Place, op: ir.Operation) -> None:
        c0, c1 = self.cells(k0), self.cells(k1)
        if c0 is None or c1 is None:
            return
        b0, b1 = np.broadcast_arrays(c0, c1) if c0.shape != c1.shape else (c0, c1)
        pairs = np.unique(np.stack([b0.reshape(-1), b1.reshape(-1)], axis=1), axis=0)
        for p0, p1 in pairs.tolist():
            self.consume(scope, (p0, p1), loc, op)

    # ---- walking ----------------------------------------------------------

    def run(self) -> list[KeyReuse]:
        for name in self.funcs:
            if not self.is_kernel(name):
                self.summary(name)
        return self.reports

    def walk_block(self, block: ir.Block, scope: _Scope) -> list[ir.Value]:
        """Interpret `block`; return the operands of its terminator."""
        return walk(block, lambda op, _: self.visit(op, scope))

    def visit(self, op: ir.Operation, scope: _Scope) -> None:
        """Interpret `op`: its handler, the move of key data it makes, or fresh results."""
        handler = self.handlers.lookup(op)
        if handler is not None:
            handler(op, scope)
            return
        move = MOVES.get(op.name)
        if move is not None and len(op.results) == 1:
            source, rule = move
            cells = [self.cells(v) for v in op.operands]
            result = op.results[0]
            shape = _tracked_shape(result)
            moved = None
            if shape is not None and len(cells) > source and cells[source] is not None:
                moved = rule(op, cells, shape)
            self.bind(result, moved)
            return
        for result in op.results:
            self.bind_fresh(result)

    def summary(self, name: str) -> _Summary:
        """What function `name` does to the keys it is given (analysed once)."""
        return self.generate(name, lambda: self._summarize(name))

    def _summarize(self, name: str) -> _Summary:
        func = self.funcs[name]
        block = func.regions[0].blocks[0]
        caller_elsewhere = self.elsewhere
        self.elsewhere = self.function_names - {_base_name(name)}
        start = self.next_id
        params = [self.bind_fresh(arg) for arg in block.arguments]
        param_stop = self.next_id
        scope = _Scope()
        returned = self.walk_block(block, scope)
        events = [(pair, place, may) for pair, (place, _, may) in scope.consumed.items()
                  if start <= min(pair) and max(pair) < param_stop]
        results = [self.cells(v) for v in returned]
        picked = {c: self.candidates[c] for cells in results if cells is not None
                  for c in cells.reshape(-1).tolist() if c in self.candidates}
        result = _Summary(params, results, events, start, self.next_id, picked)
        self.elsewhere = caller_elsewhere
        return result

    # ---- consumers --------------------------------------------------------

    def is_kernel(self, name: str) -> bool:
        """True if function `name` is the threefry2x32 kernel with key words (arg0, arg1):
        JAX's kernel function, or its wrapper of the GPU custom call."""
        known = self.kernels.get(name)
        if known is None:
            func = self.funcs.get(name)
            known = False
            if func is not None and len(func.regions[0].blocks[0].arguments) >= 4:
                args = list(func.regions[0].blocks[0].arguments)
                for op in func.regions[0].blocks[0].operations:
                    op = op.operation
                    words = _parity_key_words(op)
                    if (words is not None and set(words) == {args[0], args[1]}) or _is_gpu_kernel(op):
                        known = True
                        break
            self.kernels[name] = known
        return known

    def is_fold_in_data(self, counter: ir.Value) -> bool:
        """True if a kernel counter is computed from a block argument or by JAX's
        `threefry_seed` (`x & 0xFFFFFFFF`): a fold_in's data, not iota counters."""
        memo = self.fold_in_data
        stack = [(counter, False)]
        while stack:
            v, expanded = stack.pop()
            if v in memo:
                continue
            op = _defining_op(v)
            if op is None or (op.name == "stablehlo.and" and any(_splat_int(o) == 0xFFFFFFFF for o in op.operands)):
                memo[v] = True
            elif expanded:
                memo[v] = any(memo[o] for o in op.operands)
            else:
                stack.append((v, True))
                stack.extend((o, False) for o in op.operands if o not in memo)
        return memo[counter]

    def kernel_application(self, scope: _Scope, k0: ir.Value, k1: ir.Value,
                           counters: Iterable[ir.Value], op: ir.Operation) -> None:
        """Record a threefry2x32 application: a consumption unless it is a fold_in."""
        if self.fold_in_consumes or not any(self.is_fold_in_data(c) for c in counters):
            self.consume_words(scope, k0, k1, self.place(op), op)

    def _xor(self, op: ir.Operation, scope: _Scope) -> None:
        words = _parity_key_words(op)
        if words is not None:
            self.kernel_application(scope, words[0], words[1], _inlined_counters(words[0]), op)
        self.bind_fresh(op.results[0])

    def _custom_call(self, op: ir.Operation, scope: _Scope) -> None:
        target = call_target(op)
        operands = list(op.operands)
        if _is_gpu_kernel(op) and len(operands) == 4:
            self.kernel_application(scope, operands[0], operands[1], operands[2:], op)
        if target in FORWARDING_CUSTOM_CALLS and len(op.results) == 1 and operands:
            self.bind(op.results[0], self.cells(operands[0]))
            return
        for result in op.results:
            self.bind_fresh(result)

    # ---- calls, loops, branches -------------------------------------------

    def _call(self, op: ir.Operation, scope: _Scope) -> None:
        callee = callee_of(op)
        operands = list(op.operands)
        if self.is_kernel(callee):
            self.kernel_application(scope, operands[0], operands[1], operands[2:4], op)
            for result in op.results:
                self.bind_fresh(result)
            return
        if callee not in self.funcs:
            for result in op.results:
                self.bind_fresh(result)
            return
        summary = self.summary(callee)
        table = np.arange(self.next_id, self.next_id + summary.stop - summary.start, dtype=np.int64)
        self.next_id += summary.stop - summary.start
        for param, arg in zip(summary.params, operands):
            actual = self.cells(arg)
            if param is not None and actual is not None and param.shape == actual.shape:
                table[param.reshape(-1) - summary.start] = actual.reshape(-1)
        called_once = self.call_sites[callee] == 1
        for (p0, p1), inner, may in summary.events:
            where = _Place(op, self.elsewhere, inner, called_once)
            self.consume(scope, (int(table[p0 - summary.start]), int(table[p1 - summary.start])), where, op, may)
        for result, cells in zip(op.results, summary.results):
            self.bind(result, None if cells is None else table[cells - summary.start])
        for cell, rows in summary.candidates.items():
            self.candidates[int(table[cell - summary.start])] = table[rows - summary.start]

    def _while(self, op: ir.Operation, scope: _Scope) -> None:
        init = [self.cells(v) for v in op.operands]
        cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
        start = self.next_id
        carried = [self.bind_fresh(arg) for arg in body.arguments]
        carried_stop = self.next_id  # carried cells are [start, carried_stop)
        for arg, cells in zip(cond.arguments, carried):
            self.env[arg] = cells
        inner = _Scope()
        self.walk_block(cond, inner)
        returned = [self.cells(v) for v in self.walk_block(body, inner)]
        # for each carried cell: its initial cell, and whether the body carries it unchanged
        initial = np.full(carried_stop - start, -1, np.int64)
        kept = np.zeros(carried_stop - start, bool)
        for before, after, first in zip(carried, returned, init):
            if before is not None and first is not None:
                index = before.reshape(-1) - start
                initial[index] = first.reshape(-1)
                if after is not None:
                    kept[index] = (after == before).reshape(-1)
        loop_loc = self.place(op)
        for pair, (loc, _, may) in inner.consumed.items():
            outer, every_iteration = [], True
            for cell in pair:
                if cell < start:
                    outer.append(cell)
                elif cell < carried_stop and initial[cell - start] >= 0:
                    outer.append(int(initial[cell - start]))
                    every_iteration &= bool(kept[cell - start])
                else:
                    break  # made inside the loop: a new key each iteration
            else:
                if every_iteration and not may:  # `may`: a row picked per iteration, as scan does
                    self.report("PRNG key is consumed in every iteration of a loop without being split",
                                loc, "in this loop", loop_loc)
                self.consume(scope, (outer[0], outer[1]), loc, op, may)
        for result, before, after, first in zip(op.results, carried, returned, init):
            cells = None
            if before is not None and after is not None and first is not None:
                cells = np.where(after == before, first, np.where(after < start, after, -1))
                fresh = cells == -1
                if fresh.any():
                    cells[fresh] = self.fresh((int(fresh.sum()),))
            self.bind(result, cells)

    def _branches(self, op: ir.Operation, scope: _Scope) -> None:
        new: dict[Pair, Use] = {}
        returned: list[list[Cells | None]] = []
        for region in op.regions:
            branch = _Scope(collections.ChainMap({}, scope.consumed))
            returned.append([self.cells(v) for v in self.walk_block(region.blocks[0], branch)])
            for pair, use in branch.consumed.maps[0].items():
                new.setdefault(pair, use)
        scope.consumed.update(new)
        for i, result in enumerate(op.results):
            options = [r[i] for r in returned]
            cells = None
            if all(c is not None and c.shape == options[0].shape for c in options):
                agree = np.logical_and.reduce([c == options[0] for c in options])
                cells = np.where(agree, options[0], -1)
                if not agree.all():
                    cells[~agree] = self.fresh((int((~agree).sum()),))
            self.bind(result, cells)

    def _dynamic_slice(self, op: ir.Operation, scope: _Scope) -> None:
        """A constant start is a slice; an unknown one may pick any in-bounds window."""
        result = op.results[0]
        source, shape = self.cells(op.operands[0]), _tracked_shape(result)
        if source is None or shape is None or source.shape == shape:
            self.bind(result, source)  # the whole operand, wherever the slice starts
            return
        starts = _constant_starts(op, 1, source.ndim)
        if starts is not None:
            starts = [min(max(s, 0), d - n) for s, d, n in zip(starts, source.shape, shape)]
            self.bind(result, _slice_at(source, starts, shape))
            return
        windows = list(itertools.product(*(range(d - n + 1) for d, n in zip(source.shape, shape))))
        cells = self.bind_fresh(result)
        if len(windows) * cells.size <= MAX_TRACKED_ELEMENTS:
            choices = np.stack([_slice_at(source, w, shape).reshape(-1) for w in windows])
            for j, cell in enumerate(cells.reshape(-1).tolist()):
                self.candidates[cell] = choices[:, j]

    def _gather(self, op: ir.Operation, scope: _Scope) -> None:
        """Whole rows gathered at run-time indices (`keys[idx]`): each may be any row."""
        cells, source = self.bind_fresh(op.results[0]), self.cells(op.operands[0])
        if cells is None or source is None:
            return
        dims = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
        rank, rest = cells.ndim, source.ndim - 1
        if (list(dims.start_index_map) != [0] or list(dims.collapsed_slice_dims) != [0]
                or list(dims.operand_batching_dims) or _i64s(op, "slice_sizes") != [1, *source.shape[1:]]
                or list(dims.offset_dims) != list(range(rank - rest, rank))
                or source.shape[0] * cells.size > MAX_TRACKED_ELEMENTS):
            return
        rows = source.reshape(source.shape[0], -1)
        for picked in cells.reshape(-1, rows.shape[1]):
            for column, cell in enumerate(picked.tolist()):
                self.candidates[cell] = rows[:, column]

    def _manual_computation(self, op: ir.Operation, scope: _Scope) -> None:
        block = op.regions[0].blocks[0]
        for arg, operand in zip(block.arguments, op.operands):
            self.bind(arg, self.cells(operand))
        returned = self.walk_block(block, scope)
        for result, value in zip(op.results, returned):
            self.bind(result, self.cells(value))


def _exclusive(first: ir.Operation, second: ir.Operation) -> bool:
    """True if what two consumers compute only meets in `select`s, never in one element.

    JAX's poisson and binomial run two algorithms on one key and keep one
    result per element; that is not a reuse. Both consumers are followed to
    their ancestors in the innermost block that holds both; from there, values
    computed from each are followed forward. They must meet, and only as the
    chosen operands of selects (a value computed from both, by such a select,
    may then go on alone).
    """
    a, b = _ancestors_in_common_block(first, second)
    if a is None or a == b:
        return False
    from_a, from_b = _forward_slice(a), _forward_slice(b)
    met = False
    for user, uses in _users(from_a, from_b, a.block).items():
        only_a = any(v in from_a and v not in from_b for v, _ in uses)
        only_b = any(v in from_b and v not in from_a for v, _ in uses)
        both = any(v in from_a and v in from_b for v, _ in uses)
        if user.name == "stablehlo.select" and all(n in (1, 2) for _, n in uses):
            met |= only_a and only_b
        elif (only_a and only_b) or (both and (only_a or only_b)):
            return False
    return met


def _ancestors_in_common_block(x: ir.Operation, y: ir.Operation) -> tuple[ir.Operation | None, ir.Operation | None]:
    """The ancestors of `x` and `y` (themselves included) that share a block."""
    in_block = {}
    op = y
    while op is not None and op.name != "func.func":
        in_block[op.block] = op
        op = op.parent
    op = x
    while op is not None and op.name != "func.func":
        if op.block in in_block:
            return op, in_block[op.block]
        op = op.parent
    return None, None


def _in_block(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    while op is not None and op.block != block:
        op = op.parent if op.name != "func.func" else None
    return op


def _forward_slice(op: ir.Operation) -> set[ir.Value]:
    """The values of `op`'s block computed from `op`'s results (uses in regions count for their op)."""
    block, seen, work = op.block, set(), list(op.results)
    while work:
        value = work.pop()
        if value in seen:
            continue
        seen.add(value)
        for use in value.uses:
            user = _in_block(use.owner.operation, block)
            if user is not None:
                work.extend(user.results)
    return seen


def _users(from_a: set[ir.Value], from_b: set[ir.Value], block: ir.Block) -> dict[ir.Operation, list]:
    """Ops of `block` that use values of either slice: op -> [(value, operand number or -1)]."""
    users: dict[ir.Operation, list] = collections.defaultdict(list)
    for value in from_a | from_b:
        for use in value.uses:
            owner = use.owner.operation
            user = _in_block(owner, block)
            if user is not None:
                users[user].append((value, use.operand_number if user == owner else -1))
    return users




# ---- ops that move key data: (op, operand cells, result shape) -> result cells ----

def _slice(op: ir.Operation, cells: list[Cells], shape: tuple[int, ...]) -> Cells:
    start, limit, strides = _i64s(op, "start_indices"), _i64s(op, "limit_indices"), _i64s(op, "strides")
    return cells[0][tuple(slice(a, b, s) for a, b, s in zip(start, limit, strides))]


def _broadcast_in_dim(op: ir.Operation, cells: list[Cells], shape: tuple[int, ...]) -> Cells:
    dims = _i64s(op, "broadcast_dimensions")
    order = np.argsort(dims)
    source = cells[0].transpose(order) if len(dims) else cells[0]
    expanded = [1] * len(shape)
    for axis, size in zip(sorted(dims), source.shape):
        expanded[axis] = size
    return np.broadcast_to(source.reshape(expanded), shape)


def _concatenate(op: ir.Operation, cells: list[Cells | None], shape: tuple[int, ...]) -> Cells | None:
    if any(c is None for c in cells):
        return None
    return np.concatenate(cells, axis=_int_attr(op, "dimension"))


def _constant_starts(op: ir.Operation, first: int, rank: int) -> list[int] | None:
    starts = []
    for value in list(op.operands)[first:first + rank]:
        const = _constant_ints(value)
        if const is None or const.size != 1:
            return None
        starts.append(int(const[0]))
    return starts


def _slice_at(source: Cells, starts: Iterable[int], shape: tuple[int, ...]) -> Cells:
    return source[tuple(slice(s, s + n) for s, n in zip(starts, shape))]


def _dynamic_update_slice(op: ir.Operation, cells: list[Cells | None], shape: tuple[int, ...]) -> Cells | None:
    source, update = cells[0], cells[1]
    starts = _constant_starts(op, 2, source.ndim)
    if update is None or starts is None:
        return None
    starts = [min(max(s, 0), d - n) for s, d, n in zip(starts, source.shape, update.shape)]
    result = source.copy()
    result[tuple(slice(s, s + n) for s, n in zip(starts, update.shape))] = update
    return result


def _select(op: ir.Operation, cells: list[Cells | None], shape: tuple[int, ...]) -> Cells | None:
    on_true, on_false = cells[1], cells[2]
    if on_true is None or on_false is None:
        return None
    pred = _constant_ints(op.operands[0])
    if pred is not None and pred.size == 1:
        return on_true if pred[0] else on_false
    return on_true if np.array_equal(on_true, on_false) else None


def _forward(op: ir.Operation, cells: list[Cells], shape: tuple[int, ...]) -> Cells:
    return cells[0]


# op name -> (the operand whose key data the result is made of, the rule that moves it)
MOVES: dict[str, tuple[int, Callable[[ir.Operation, list, tuple[int, ...]], Cells | None]]] = {
    "stablehlo.slice": (0, _slice),
    "stablehlo.reshape": (0, lambda op, cells, shape: cells[0].reshape(shape)),
    "stablehlo.broadcast_in_dim": (0, _broadcast_in_dim),
    "stablehlo.transpose": (0, lambda op, cells, shape: cells[0].transpose(_i64s(op, "permutation"))),
    "stablehlo.reverse": (0, lambda op, cells, shape: np.flip(cells[0], axis=tuple(_i64s(op, "dimensions")))),
    "stablehlo.concatenate": (0, _concatenate),
    "stablehlo.dynamic_update_slice": (0, _dynamic_update_slice),
    "stablehlo.select": (1, _select),
    "stablehlo.convert": (0, _forward),
    "stablehlo.bitcast_convert": (0, _forward),
    "sdy.sharding_constraint": (0, _forward),
    "sdy.reshard": (0, _forward),
    "mhlo.copy": (0, _forward),
}


def find_key_reuse(module: ir.Operation, *, fold_in_consumes: bool = False) -> list[KeyReuse]:
    """Every PRNG key consumed more than once in the `builtin.module` `module`."""
    return KeyReuseAnalysis(module, fold_in_consumes).run()


@dataclasses.dataclass(frozen=True)
class CheckKeyReuse(Pass):
    """Report every PRNG key consumed more than once, with both locations; change nothing.

    Before and after: the same module. On reuse the pass fails with one
    `file:line:col: error: PRNG key is consumed a second time` per reuse,
    followed by `file:line:col: note: the key was first consumed here`.
    """

    name: ClassVar[str] = "check-key-reuse"
    platforms: ClassVar[tuple[str, ...]] = PORTABLE
    fold_in_consumes: bool = False

    def apply(self, module: ir.Operation) -> None:
        reports = find_key_reuse(module, fold_in_consumes=self.fold_in_consumes)
        if reports:
            raise KeyReuseError(reports)
