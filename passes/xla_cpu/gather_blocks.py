"""The `xla-cpu-gather-blocks` pass: a gather of rows, the products made of them and the
scatter-add, sum or array they feed are computed in blocks of rows, in a loop.

`lower-bcoo` lowers a sparse x dense product as one gather of the dense operand's slices
(one row per stored entry), a product and a scatter-add (or a sum) over all the entries, and a
sampled product (SDDMM) as two gathers and a batched dot: portable StableHLO. XLA:CPU
materializes the gathered `[entries, ...]` buffer, which is allocated, paged in and read back on
every call; computed `BLOCK_BYTES` of gathered slices at a time, it stays in cache between the
gather and its consumer (bench/sparse.py, unsorted and batched SpMM, SDDMM with batch dims).

Rows: a value of leading size `n` is computed row by row when its op is one of `ROW_OPS` (an
elementwise op, a gather whose start indices hold the rows, a broadcast, slice, transpose,
reshape, reduce or concatenate that keeps dim 0, a dot_general batched over dim 0) and the
operands that carry dim 0 are again computed row by row or taken as they are (sliced per block);
its other operands are used whole. A root is

- a scatter-add whose indices and updates have the rows in dim 0 (the loop carries the sum),
- a sum (`reduce` add from zero) over dim 0 (the loop carries the partial sum),
- any other value computed row by row whose gathers take more than twice its own bytes a row
  (a sampled product: the loop writes its blocks into the result),

when its computation holds a gather and `n` makes at least two blocks of `max(MIN_ROWS,
BLOCK_BYTES // bytes gathered a row)` rows; the rows past the last full block are one more block.

Platform: declared `cpu`: it rewrites only a module compiled for CPU (`hlopt-opt --platform cpu` for
IR work). XLA:CPU runs a gather-multiply-scatter over all entries from memory; in blocks the gathered
rows stay in cache.

Before (SpMM of 20000 entries with a 5000x64 matrix):
  %g = "stablehlo.gather"(%x, %cols) ... : (tensor<5000x64xf32>, tensor<20000x1xi32>) -> tensor<20000x64xf32>
  %d = stablehlo.broadcast_in_dim %data, dims = [0] : (tensor<20000xf32>) -> tensor<20000x64xf32>
  %p = stablehlo.multiply %d, %g : tensor<20000x64xf32>
  %s = "stablehlo.scatter"(%zeros, %rows, %p) ... -> tensor<4000x64xf32>
After:
  %w:2 = stablehlo.while(%t = %c0, %acc = %zeros) : tensor<i32>, tensor<4000x64xf32>
    cond { %t < 4 }
    do { the slices of %cols, %data and %rows at rows [%t * 4096, %t * 4096 + 4096), the gather,
         broadcast and multiply of those 4096 rows, and their scatter into %acc }
  %s = the last 3616 rows' gather, multiply and scatter into %w#1
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import ClassVar

from hlopt.passes.ir import builders as b
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet
from hlopt.passes.rewrite.matching import owner_op

Value = ir.Value

# Bytes of gathered slices a block computes: they stay in cache between the gather and its consumer.
BLOCK_BYTES = 1 << 20
# The fewest rows of a block (each loop trip has a fixed cost).
MIN_ROWS = 1024

ELEMENTWISE = frozenset(f"stablehlo.{name}" for name in (
    "abs", "add", "and", "compare", "convert", "divide", "exponential", "imag", "maximum", "minimum", "multiply",
    "negate", "not", "or", "real", "remainder", "select", "sign", "subtract", "xor", "complex"))


def _ints(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def _lead(v: Value) -> int | None:
    """The size of `v`'s dim 0 (None for a scalar)."""
    shape = b.shape_of(v)
    return shape[0] if shape else None


def _broadcast_rows(op: ir.Operation) -> list[int] | None:
    dims = _ints(op, "broadcast_dimensions")
    if dims and dims[0] == 0:
        return [0]
    return None if 0 in dims else []


def _slice_rows(op: ir.Operation) -> list[int] | None:
    whole = (_ints(op, "start_indices")[0] == 0 and _ints(op, "strides")[0] == 1
             and _ints(op, "limit_indices")[0] == _lead(op.operands[0]))
    return [0] if whole else None


def _gather_rows(op: ir.Operation) -> list[int] | None:
    d = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    rows = 0 not in d.offset_dims and not d.operand_batching_dims and d.index_vector_dim != 0
    return [1] if rows else None


def _dot_rows(op: ir.Operation) -> list[int] | None:
    d = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    batch = list(d.lhs_batching_dimensions), list(d.rhs_batching_dimensions)
    return [0, 1] if batch[0][:1] == [0] and batch[1][:1] == [0] else None


def _reduce_rows(op: ir.Operation) -> list[int] | None:
    inputs = len(op.operands) // 2
    return None if 0 in _ints(op, "dimensions") else list(range(inputs))


def _transpose_rows(op: ir.Operation) -> list[int] | None:
    return [0] if _ints(op, "permutation")[0] == 0 else None


def _concatenate_rows(op: ir.Operation) -> list[int] | None:
    return None if ir.IntegerAttr(op.attributes["dimension"]).value == 0 else list(range(len(op.operands)))


# op name -> the positions of the operands that carry the result's dim 0 (the others are used
# whole), or None where the op does not compute its result row by row.
ROW_OPS: dict[str, Callable[[ir.Operation], list[int] | None]] = {
    **{name: (lambda op: list(range(len(op.operands)))) for name in ELEMENTWISE},
    "stablehlo.broadcast_in_dim": _broadcast_rows,
    "stablehlo.slice": _slice_rows,
    "stablehlo.gather": _gather_rows,
    "stablehlo.dot_general": _dot_rows,
    "stablehlo.reduce": _reduce_rows,
    "stablehlo.reshape": lambda op: [0],
    "stablehlo.transpose": _transpose_rows,
    "stablehlo.concatenate": _concatenate_rows,
    "stablehlo.iota": lambda op: [] if ir.IntegerAttr(op.attributes["iota_dimension"]).value != 0 else None,
}


def _row_operands(op: ir.Operation, n: int) -> list[int] | None:
    """The operands of `op` that carry its rows when it computes its `n` rows one by one, else None."""
    rule = ROW_OPS.get(op.name)
    if rule is None or not op.results or any(_lead(r) != n for r in op.results):
        return None
    rows = rule(op)
    if rows is None or any(_lead(op.operands[i]) != n for i in rows):
        return None
    return rows


@dataclasses.dataclass
class _Cone:
    """The ops that compute some values row by row (in order) and the values they read rows of."""

    ops: list[ir.Operation]
    rows: dict[ir.Operation, list[int]]
    leaves: list[Value]

    def gathered_bytes(self) -> int:
        """Bytes a row of the cone's gathers hold."""
        return sum(_row_bytes(op.results[0]) for op in self.ops if op.name == "stablehlo.gather")


def _row_bytes(v: Value) -> int:
    shape, elem = b.shape_of(v), b.elem_of(v)
    bits = elem.width if isinstance(elem, (ir.IntegerType, ir.FloatType)) else 2 * ir.FloatType(elem.element_type).width
    return math.prod(shape[1:]) * max(bits // 8, 1)


def _cone(values: Sequence[Value], n: int) -> _Cone:
    cone = _Cone([], {}, [])
    seen: set[Value] = set()

    def visit(v: Value) -> None:
        if v in seen:
            return
        seen.add(v)
        op = owner_op(v) if isinstance(v, ir.OpResult) else None
        rows = None if op is None or op.name == "stablehlo.constant" else _row_operands(op, n)
        if rows is None:
            cone.leaves.append(v)
            return
        if op in cone.rows:
            return
        for i in rows:
            visit(op.operands[i])
        cone.rows[op] = rows
        cone.ops.append(op)

    for v in values:
        visit(v)
    return cone


def _blocked_type(t: ir.Type, size: int) -> ir.Type:
    shaped = ir.RankedTensorType(t)
    return b.tensor([size, *shaped.shape[1:]], shaped.element_type)


def _block(cone: _Cone, start: Value, size: int) -> dict[Value, Value]:
    """The cone's values for rows `[start, start + size)`: clones of its ops on slices of its leaves."""
    zero = b.scalar(0, b.elem_of(start))
    at: dict[Value, Value] = {
        v: b.dynamic_slice(v, [start] + [zero] * (len(b.shape_of(v)) - 1), [size, *b.shape_of(v)[1:]])
        for v in cone.leaves}
    for op in cone.ops:
        new = op.clone(ip=ir.InsertionPoint.current)
        for i in cone.rows[op]:
            new.operands[i] = at[op.operands[i]]
        for old, result in zip(op.results, new.results):
            result.set_type(_blocked_type(old.type, size))
            at[old] = result
        if op.name == "stablehlo.slice":
            new.attributes["limit_indices"] = ir.DenseI64ArrayAttr.get([size, *_ints(op, "limit_indices")[1:]])
    return at


@dataclasses.dataclass(frozen=True)
class _Root:
    """A value computed from rows: the rows it reads, its first state and how a block updates the state."""

    op: ir.Operation
    reads: list[Value]
    positions: tuple[int, ...]  # the operands of `op` that `reads` are (none for an array root)
    init: Callable[[], Value]
    step: Callable[[dict[Value, Value], Value, Value], Value]  # (block values, start, state) -> state


def _scatter_root(op: ir.Operation) -> _Root | None:
    if len(op.operands) != 3 or b.reducer_kind(op) != "stablehlo.add":
        return None
    d = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
    _, indices, updates = op.operands
    n = _lead(updates)
    plain = (list(d.update_window_dims) == list(range(1, len(b.shape_of(updates)))) and not d.input_batching_dims
             and d.index_vector_dim == 1 and _lead(indices) == n)
    if not plain:
        return None

    def step(at: dict[Value, Value], _start: Value, state: Value) -> Value:
        new = op.clone(ip=ir.InsertionPoint.current)
        new.operands[0], new.operands[1], new.operands[2] = state, at[indices], at[updates]
        return new.results[0]

    return _Root(op, [indices, updates], (1, 2), lambda: op.operands[0], step)


def _sum_root(op: ir.Operation) -> _Root | None:
    if len(op.operands) != 2 or b.reducer_kind(op) != "stablehlo.add" or not b.is_zero_constant(op.operands[1]):
        return None
    if 0 not in _ints(op, "dimensions"):
        return None
    x, out = op.operands[0], op.results[0]

    def step(at: dict[Value, Value], _start: Value, state: Value) -> Value:
        new = op.clone(ip=ir.InsertionPoint.current)
        new.operands[0] = at[x]
        return b.add(state, new.results[0])

    return _Root(op, [x], (0,), lambda: b.full(b.shape_of(out), 0, b.elem_of(out)), step)


def _array_root(v: Value) -> _Root:
    def step(at: dict[Value, Value], start: Value, state: Value) -> Value:
        zero = b.scalar(0, b.elem_of(start))
        return b.dynamic_update_slice(state, at[v], [start] + [zero] * (len(b.shape_of(v)) - 1))

    return _Root(owner_op(v), [v], (), lambda: b.full(b.shape_of(v), 0, b.elem_of(v)), step)


ROOTS: dict[str, Callable[[ir.Operation], _Root | None]] = {"stablehlo.scatter": _scatter_root,
                                                             "stablehlo.reduce": _sum_root}


def _rows_consumer(use: ir.OpOperand, n: int) -> bool:
    """Whether the user computes its rows from the used value's (so the value need not be whole)."""
    user = owner_op(use)
    rows = _row_operands(user, n)
    if rows is not None:
        return use.operand_number in rows
    root = ROOTS[user.name](user) if user.name in ROOTS else None
    return root is not None and use.operand_number in root.positions


def _block_rows(n: int, cone: _Cone) -> int | None:
    """Rows a block takes, or None where the rows make fewer than two blocks (or nothing is gathered)."""
    gathered = cone.gathered_bytes()
    if not gathered:
        return None
    rows = max(MIN_ROWS, BLOCK_BYTES // gathered)
    return rows if n >= 2 * rows else None


def _blocked(root: _Root, n: int) -> Value | None:
    """The root's value computed in blocks, built at the root; None where it is not worth it."""
    cone = _cone(root.reads, n)
    rows = _block_rows(n, cone)
    if rows is None:
        return None
    full, tail = divmod(n, rows)
    it = b.i32() if n < 2**31 else b.i64()

    def body(t: Value, state: Value) -> list[Value]:
        start = b.mul(t, b.scalar(rows, it))
        return [b.add(t, b.scalar(1, it)), root.step(_block(cone, start, rows), start, state)]

    _, state = b.while_loop([b.scalar(0, it), root.init()], lambda t, _: b.compare(t, b.scalar(full, it), "LT"), body)
    if tail:
        start = b.scalar(full * rows, it)
        state = root.step(_block(cone, start, tail), start, state)
    return state


def _blocked_root(op: ir.Operation) -> list[Value] | None:
    """The scatter-add or sum `op` of gathered rows computed in blocks of rows; None where it is not one,
    or not worth it."""
    root = ROOTS[op.name](op)
    n = None if root is None else _lead(root.reads[-1])
    new = None if n is None else _blocked(root, n)
    return None if new is None else [new]


def _blocked_array(op: ir.Operation) -> list[Value] | None:
    """The value `op` computes row by row, used whole, in blocks of rows where its gathers take more than
    twice its own bytes a row; None otherwise."""
    if len(op.results) != 1:
        return None
    v, n = op.results[0], _lead(op.results[0])
    if n is None or _row_operands(op, n) is None or all(_rows_consumer(u, n) for u in v.uses):
        return None
    if _cone([v], n).gathered_bytes() <= 2 * _row_bytes(v):
        return None
    new = _blocked(_array_root(v), n)
    return None if new is None else [new]


class GatherBlocks(PatternPass):
    """Compute a gather of rows and the products, scatter-add, sum or array it feeds in blocks of rows (XLA:CPU).

    Backend: XLA:CPU materializes a gather's whole `[entries, ...]` result before its consumer reads
    it, where blocks of it stay in cache; benchmark: `bench/sparse.py` (unsorted and batched SpMM,
    SDDMM). For CPU compiles only.
    """

    name: ClassVar[str] = "xla-cpu-gather-blocks"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    # The roots first, then, in a walk of their own, the arrays used whole that no root took.
    PATTERNS: ClassVar[tuple[PatternSet, ...]] = (PatternSet(Pattern(tuple(ROOTS), _blocked_root)),
                                                  PatternSet(Pattern(tuple(ROW_OPS), _blocked_array)))
