"""`vjp-expand`: reverse-mode differentiation (vector-Jacobian products) of StableHLO functions.

`@NAME_vjp` takes the primal inputs of `@NAME`, then one cotangent per result,
and returns one cotangent per input. Inputs that are not floating-point or
complex (integers, booleans) get a zero cotangent of their own type, where
`jax.vjp` returns float0 zeros. The rules per op are those of the op table
(`hlopt.passes.autodiff.table`); this module is vjp-expand's plug-in on the
function-transform driver (`hlopt.passes.rewrite.transform`, which caches the generated
functions, finds what reaches what and erases dead values): it records which
values depend on the differentiated inputs, walks each block backward, and
turns `hlopt.vjp` annotations into calls of the generated functions.

Residual policy (what the backward part reads, and where it comes from):

- `@NAME_vjp` runs the primal computation first, then the backward ops, which
  read the forward values where they are: no value is stored twice. Forward
  values that neither the backward ops nor anything else needs are erased, and
  cotangents known to be zero (constants, values that do not depend on a
  differentiated input, results whose cotangent is a zero constant) are
  absent and build no ops. A cotangent that is a slice or a scatter-add
  written into zeros (of a `dynamic_slice` or `gather`) is added in place;
  cotangents of the slices of one value that meet are concatenated, and a
  `dot_general` or a slice reads a zero-padded cotangent unpadded.
- `func.call` of a small leaf function (at most `INLINE_OPS` ops, no calls,
  loops or branches: JAX's helper wrappers such as `dynamic_index_in_dim`)
  is differentiated in place, as if inlined. Any other call is kept for its
  forward results and the backward calls `@callee_vjp`, which recomputes the
  callee's forward inside (after `inline`, CSE merges the two copies): one vjp
  function per callee and per pattern of zero cotangents and undifferentiated
  arguments.
- `case` / `if`: each backward branch recomputes its forward branch, then runs
  its backward; the backward case returns the cotangents of the values the
  branches capture.
- `while` with a known trip count (a counter compared with `LT` against a
  constant, stepped by 1 from a constant: JAX's `fori_loop` and `scan`): the
  forward loop writes into `[trip count, ...]` tapes what the backward body
  reads: the body values it needs (the residuals, as JAX's scan stores them)
  and the state values it starts from. Values that do not change between
  iterations are not taped (loop-invariant state is read from the loop's
  operand, loop-invariant body values are recomputed, which XLA hoists), and
  the counter is derived from the iteration. The backward loop runs the
  iterations in reverse.
- `while` with any other condition (a data-dependent trip count): the forward
  loop counts its iterations, and backward iteration t recomputes the state by
  running the forward body t times from the initial state: no tape, quadratic
  time in the trip count (JAX refuses these loops).
- `sort`: the forward sort carries an iota, whose permutation sends the
  cotangents back.

An op without a rule fails with `vjp-expand: no reverse-mode rule for '<op>'`
at its location; ops that do not depend on a differentiated input need none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

from hlopt.passes.ir import annotation_names, builders
from hlopt.passes.base import SYMBOL_NAME, Pass, PassError, option
from hlopt.passes.autodiff.jet_rules import remove_stop_gradients
from hlopt.passes.mlir import ir
from hlopt.passes.autodiff import table
from hlopt.passes.target import PORTABLE
from hlopt.passes.rewrite.transform import (ModuleTransform, block_ops, branch_carried, erase_dead, is_pure_op,
                                    loop_carried, uses_any)
from hlopt.passes.autodiff.vjp_rules import Term, VjpBuilder
from hlopt.passes.ir.walk import MAX_INLINED_OPS, CallGraph, callee_of

ANNOTATION = annotation_names.VJP
INLINE_OPS = 32  # callees up to this size (JAX's helper wrappers) are differentiated in place
VJP_GROWTH = 3  # ops a vjp holds per op of its function, at most about: forward, backward, cotangent sum
RULE_TABLE = table.pass_rules("vjp", table.TABLE, table.CALLS)


class Scope:
    """Which values of one block depend on a differentiated input, and their cotangents.

    Values from enclosing blocks are looked up in the parent scope; cotangents of
    such values found here are collected in `captured` for the op that owns the block.
    """

    def __init__(self, module: "ModuleVjp", parent: "Scope | None" = None):
        self.module = module
        self.parent = parent
        self.builder = VjpBuilder(self)
        self.local: set[ir.Value] = set()
        self.active: set[ir.Value] = set()
        self.cts: dict[ir.Value, ir.Value] = {}
        self.captured: dict[ir.Value, ir.Value] = {}
        # for a recomputed loop body: its values -> the forward loop's values they recompute
        self.origin: dict[ir.Value, ir.Value] = {}

    def child(self, values: Sequence[ir.Value], active: Sequence[bool]) -> "Scope":
        """A scope for a nested block whose arguments are `values` (`active` says which vary)."""
        scope = Scope(self.module, self)
        scope.define(values, active)
        return scope

    def define(self, values: Sequence[ir.Value], active: Sequence[bool]) -> None:
        self.local.update(values)
        self.active.update(v for v, a in zip(values, active) if a and builders.is_differentiable(v.type))

    def is_active(self, value: ir.Value) -> bool:
        return value in self.active or (self.parent is not None and self.parent.is_active(value))

    def add_ct(self, value: ir.Value, ct: Term) -> None:
        """Add `ct` to the cotangent of `value` (dropped if `value` does not vary)."""
        if ct is None or not self.is_active(value):
            return
        table = self.cts if value in self.local else self.captured
        table[value] = ct if value not in table else self.builder.accumulate(table[value], ct)

    def materialized_ct(self, value: ir.Value) -> ir.Value:
        ct = self.cts.get(value)
        return ct if ct is not None else builders.zeros_like(value)

    # --- activity (forward) ---------------------------------------------------------

    def loop_activity(self, op: ir.Operation) -> list[bool]:
        """Which state values of a `while` vary: a fixpoint over its body."""
        return loop_carried(op, self.is_active)

    def prepare(self, ops: Sequence[ir.Operation]) -> list[ir.Operation]:
        """Inline the small leaf calls among `ops`, then record which values vary; the ops
        to differentiate."""
        ops = self.inline_calls(ops)
        self.mark(ops)
        return ops

    def inline_calls(self, ops: Sequence[ir.Operation]) -> list[ir.Operation]:
        """`ops` with each call of a small leaf function (JAX's helper wrappers such as
        `dynamic_index_in_dim` or `relu`) replaced by a copy of the callee's ops, so that
        they are differentiated in place."""
        out: list[ir.Operation] = []
        for op in ops:
            callee = self.module.inlinable(op)
            if callee is None:
                out.append(op)
                continue
            with ir.InsertionPoint(op):
                inlined, term = self.clone_region(callee, 0, list(op.operands))
            for r, v in zip(op.results, self.returned(term)):
                r.replace_all_uses_with(v)
            op.erase()
            out.extend(inlined)
        return out

    def mark(self, ops: Sequence[ir.Operation]) -> None:
        """Record the results of `ops` as local, and which of them vary."""
        for op in ops:
            self.local.update(op.results)
            if op.name == "stablehlo.while":
                varies = self.loop_activity(op)
            elif op.name in ("stablehlo.case", "stablehlo.if"):
                varies = branch_carried(op, self.is_active)
            else:
                varies = [uses_any(op, self.is_active)] * len(op.results)
            self.active.update(r for r, v in zip(op.results, varies) if v and builders.is_differentiable(r.type))

    # --- cotangents (backward) ------------------------------------------------------

    def pull_back(self, ops: Sequence[ir.Operation], outs: Sequence[ir.Value], cts: Sequence[Term]) -> None:
        """At the current insertion point, the backward ops of `ops` (a block without its
        terminator) for cotangents `cts` of the block's results `outs`."""
        for v, ct in zip(outs, cts):
            self.add_ct(v, ct)
        for op in reversed(ops):
            cts_out = [self.cts.get(r) for r in op.results]
            if all(ct is None for ct in cts_out):
                continue
            operands = list(op.operands)
            wants = [self.is_active(v) for v in operands]
            if not uses_any(op, self.is_active):
                continue
            rule = RULE_TABLE.lookup(op)
            if rule is None:
                raise PassError(f"vjp-expand: no reverse-mode rule for '{op.name}'", op.location)
            name = op.name
            with op.location:
                ct_in = rule(self.builder, op, cts_out, wants)
            for v, ct, want in zip(operands, ct_in, wants):
                if want and ct is not None:
                    if ct.type != v.type:
                        raise PassError(f"vjp-expand: internal error: the rule for '{name}' gave a cotangent of "
                                        f"type {ct.type} for an operand of type {v.type}", v.location)
                    self.add_ct(v, ct)

    # --- rebuilding the forward -----------------------------------------------------

    def clone_region(self, op: ir.Operation, index: int, args: Sequence[ir.Value]) -> tuple[list, ir.Operation]:
        """Copy the ops of region `index` of `op` to the current insertion point, its block
        arguments replaced by `args`; the copied ops, and the copied terminator, which the
        caller reads and erases (`returned`)."""
        shell = op.clone(ip=ir.InsertionPoint.current)
        block = shell.regions[index].blocks[0]
        for arg, v in zip(block.arguments, args):
            arg.replace_all_uses_with(v)
        ops = block_ops(block)
        for inner in ops:
            inner.move_before(shell)
        shell.erase()
        return ops[:-1], ops[-1]

    @staticmethod
    def returned(term: ir.Operation) -> list[ir.Value]:
        """The values a copied terminator returns; the terminator is erased."""
        values = list(term.operands)
        term.erase()
        return values

    def replace_forward(self, op: ir.Operation, values: Sequence[ir.Value]) -> None:
        """Replace the forward op `op` (already differentiated) by `values` and erase it."""
        for r, v in zip(op.results, values):
            r.replace_all_uses_with(v)
            self.local.discard(r)
            self.active.discard(r)
            self.cts.pop(r, None)
            if r in self.origin:
                self.origin[v] = self.origin.pop(r)
        op.erase()

    def erase_dead(self, block: ir.Block) -> None:
        self.module.erase_dead(block)


class ModuleVjp(ModuleTransform):
    """Generates `@NAME_vjp` functions in one module and expands its annotations."""

    pass_name = "vjp-expand"
    annotation = ANNOTATION

    def __init__(self, module: ir.Operation):
        super().__init__(module)
        self.pure_funcs: dict[str, bool] = {}
        self.inlined_ops: dict[str, int] | None = None  # of the functions before any vjp, read by `charge`

    def charge(self, name: str, location: ir.Location | None) -> None:
        """Refuse (PassError) the vjp of `@name` if, once every call in it is inlined (as hlopt-default's
        `inline` and XLA do), it would hold more than MAX_INLINED_OPS ops: a function that calls another
        twice doubles its size, and a chain of them grows exponentially."""
        if self.inlined_ops is None:
            graph = CallGraph.of(self.module)
            order, cycle = graph.post_order()
            if cycle is not None:
                raise PassError(f"vjp-expand: {cycle[1]}", cycle[0].location)
            self.inlined_ops = graph.inlined_ops(order)
        ops = VJP_GROWTH * self.inlined_ops.get(name, 0)
        if ops > MAX_INLINED_OPS:
            raise PassError(f"vjp-expand: the vjp of @{name} would hold about {ops:.3g} ops once its calls are "
                            f"inlined ({VJP_GROWTH} x the {self.inlined_ops[name]:.3g} ops of @{name} inlined), past "
                            f"the budget of {MAX_INLINED_OPS} ops; call a function once per loop iteration "
                            "(stablehlo.while) instead of repeating calls", location)

    def vjp_function(self, name: str, zero_cts: frozenset = frozenset(), unwanted: frozenset = frozenset(),
                     location: ir.Location | None = None, public: bool = False) -> tuple[str, frozenset]:
        """The name of the vjp of `@name` whose result cotangents in `zero_cts` are known to
        be zero and whose inputs in `unwanted` need no cotangent, and the inputs whose
        cotangent it returns as a known zero."""
        return self.generate((name, zero_cts, unwanted), lambda: self._build_vjp(name, zero_cts, unwanted,
                                                                                  location, public))

    def _build_vjp(self, name: str, zero_cts: frozenset, unwanted: frozenset, location: ir.Location | None,
                   public: bool) -> tuple[str, frozenset]:
        self.expand_annotations(self.function(name, location))
        inputs, results = self.signature(name)
        new_name, new = self.new_function(name, f"{name}_vjp", public)
        block = new.regions[0].blocks[0]
        ops = block_ops(block)
        term = ops.pop()
        args = list(block.arguments)
        ct_args = [block.add_argument(t, new.location) for t in results]
        scope = Scope(self)
        scope.define(args, [i not in unwanted for i in range(len(args))])
        ops = scope.prepare(ops)
        with ir.InsertionPoint(term), term.location:
            scope.pull_back(ops, list(term.operands), [None if i in zero_cts else ct for i, ct in enumerate(ct_args)])
            cts = [scope.cts.get(a) for a in args]
            ir.Operation.create("func.return", operands=[scope.materialized_ct(a) for a in args])
        term.erase()
        with new.context:
            new.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs + results, inputs))
        self.erase_dead(block)
        return new_name, frozenset(i for i, ct in enumerate(cts) if ct is None)

    def inlinable(self, op: ir.Operation) -> ir.Operation | None:
        """The callee of `op` if `op` calls a small leaf function (at most INLINE_OPS ops, no
        calls, loops or branches) that is differentiated in place rather than by a vjp."""
        if op.name != "func.call":
            return None
        callee = self.funcs.get(callee_of(op))
        if callee is None:
            return None
        inner = builders.nested_ops(callee)
        if len(inner) > INLINE_OPS or any(o.name in ("func.call", "stablehlo.while", "stablehlo.case",
                                                      "stablehlo.if") for o in inner):
            return None
        return callee

    # --- dead code --------------------------------------------------------------------

    def is_pure(self, op: ir.Operation) -> bool:
        """An op without side effects (nested ones included): dead when its results are."""
        if op.name == "func.call":
            return self._pure_func(callee_of(op))
        if not is_pure_op(op):
            return False
        return all(self.is_pure(inner) or inner.name == "stablehlo.return" for inner in builders.nested_ops(op))

    def _pure_func(self, name: str) -> bool:
        if name not in self.pure_funcs:
            self.pure_funcs[name] = False  # until shown otherwise (no recursion in StableHLO anyway)
            func = self.funcs.get(name)
            self.pure_funcs[name] = func is not None and all(
                self.is_pure(op) or op.name == "func.return" for op in builders.nested_ops(func))
        return self.pure_funcs[name]

    def erase_dead(self, block: ir.Block) -> None:
        """Erase the pure ops of `block` (and of the blocks nested in it) whose results are unused."""
        erase_dead(block, self.is_pure, nested=True)

    # --- annotations ------------------------------------------------------------------

    def expand_annotation(self, op: ir.Operation) -> None:
        callee = _annotation_callee(op)
        inputs, results = self.signature(callee, op.location)
        expected = inputs + results
        got = [v.type for v in op.operands]
        if got != expected or [r.type for r in op.results] != inputs:
            raise PassError(
                f"vjp-expand: @{ANNOTATION} of @{callee} takes its {len(inputs)} input(s) then one cotangent per "
                f"result ({_types(expected)}) and returns one cotangent per input ({_types(inputs)}); got "
                f"({_types(got)}) -> ({_types([r.type for r in op.results])})", op.location)
        zero_cts = frozenset(i for i in range(len(results)) if builders.is_zero_constant(op.operands[len(inputs) + i]))
        unwanted = frozenset(i for i, r in enumerate(op.results) if not builders.has_uses(r))
        if len(unwanted) < len(inputs):
            self.charge(callee, op.location)
            name, _ = self.vjp_function(callee, zero_cts, unwanted, op.location)
            with ir.InsertionPoint(op), op.location:
                call = ir.Operation.create("func.call", results=inputs, operands=list(op.operands),
                                           attributes={"callee": ir.FlatSymbolRefAttr.get(name)})
            for old, new in zip(op.results, call.results):
                old.replace_all_uses_with(new)
        op.erase()


def _types(types: Sequence[ir.Type]) -> str:
    return ", ".join(str(t) for t in types)


def _annotation_callee(op: ir.Operation) -> str:
    """The callee of an `hlopt.vjp` annotation, after checking its attributes."""
    found = op.attributes["called_computations"] if "called_computations" in op.attributes else None
    if not isinstance(found, ir.ArrayAttr) or len(found) != 1 or not isinstance(found[0], ir.FlatSymbolRefAttr):
        raise PassError(f"vjp-expand: @{ANNOTATION} needs called_computations = [@f] (the function to "
                        f"differentiate), got {found}", op.location)
    callee = ir.FlatSymbolRefAttr(found[0]).value
    config = op.attributes["backend_config"] if "backend_config" in op.attributes else None
    if not isinstance(config, ir.DictAttr):
        raise PassError(f"vjp-expand: @{ANNOTATION} needs a dictionary backend_config (api_version = 4), got "
                        f"{config}", op.location)
    if len(config):
        names = ", ".join(config[i].name for i in range(len(config)))
        raise PassError(f"vjp-expand: @{ANNOTATION} has unknown backend_config fields: {names} (none are defined)",
                        op.location)
    return callee


@dataclasses.dataclass(frozen=True)
class VjpExpand(Pass):
    """Expand `hlopt.vjp` annotations into calls of generated reverse-mode functions.

    A vjp function takes the primal inputs of `@f`, then one cotangent per result
    of `@f`, and returns one cotangent per input. With `func=NAME` it also builds
    `@NAME_vjp` from any function. The annotation is
    `stablehlo.custom_call @hlopt.vjp(primals..., cotangents...)` with
    `called_computations = [@f]`, `api_version = 4` and `backend_config = {}`
    (no fields are defined yet; unknown ones are refused).

        %g = stablehlo.custom_call @hlopt.vjp(%x, %ct)
               {called_computations = [@f], backend_config = {}, api_version = 4 : i32}
        func.func private @f(%x: tensor<f32>) -> tensor<f32> { %y = stablehlo.sine %x ... }

    becomes

        %g = func.call @f_vjp(%x, %ct)
        func.func private @f_vjp(%x, %ct) {
          %c = stablehlo.cosine %x
          %g = stablehlo.multiply %ct, %c        // ct * cos(x)
          return %g
        }
    """

    name: ClassVar[str] = "vjp-expand"
    platforms: ClassVar[tuple[str, ...]] = PORTABLE
    func: str = option("", pattern=SYMBOL_NAME, what="a function name")

    def apply(self, module: ir.Operation) -> None:
        vjps = ModuleVjp(module)
        if self.func:
            vjps.charge(self.func, None)
            vjps.vjp_function(self.func, public=True)
        vjps.expand_all()
        remove_stop_gradients(module, self.name)
