"""The driver of the passes that transform or analyse whole functions: `jet-expand`,
`vjp-expand` and `check-key-reuse`.

A pass is a plug-in: a `ModuleTransform` subclass naming its pass and its
annotation, saying how one annotation becomes a call (`expand_annotation`),
with its per-op rules in `RuleTable`s and its per-function state (series,
cotangents, key cells) in its own class. The driver holds what they share:

- the module's functions by name, and the errors of looking one up (`function`);
- annotation -> generated function: the annotations of each function are expanded
  once however many callers reach it (`expand_annotations`); a generated function
  is a copy of its source under a fresh name (`new_function`), cached by callee and
  options (`generate`);
- walking a block's ops in order, each handed to the pass (`walk`) and its rule
  (`RuleTable.lookup`: a custom call by its target, any other op by its name);
- which values a set of values reaches: through the regions an op holds, the state
  of a `while` (a fixpoint over its body), the results of a `case` / `if`
  (`reaches`, `uses_any`, `loop_carried`, `branch_carried`);
- liveness: the values something impure needs, and erasing the pure ops whose
  results nothing uses (`live_values`, `erase_dead`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import ClassVar, Generic, TypeVar

from hlopt.passes.ir import builders
from hlopt.passes.base import PassError
from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import call_target, custom_calls_once

R = TypeVar("R")
T = TypeVar("T")

# Ops with effects beyond their results (or whose results differ between runs): never dead.
EFFECTFUL = ("stablehlo.custom_call", "stablehlo.send", "stablehlo.recv", "stablehlo.infeed", "stablehlo.outfeed",
             "stablehlo.all_gather", "stablehlo.all_reduce", "stablehlo.all_to_all", "stablehlo.reduce_scatter",
             "stablehlo.collective_permute", "stablehlo.collective_broadcast", "stablehlo.optimization_barrier")

Known = Callable[[ir.Value], bool]


@dataclasses.dataclass(frozen=True)
class RuleTable(Generic[R]):
    """A pass's per-op rules: a custom call's by its `call_target_name` (`by_target`),
    then any op's by its name (`by_name`, where `stablehlo.custom_call` takes the rest)."""

    by_name: Mapping[str, R]
    by_target: Mapping[str, R] = dataclasses.field(default_factory=dict)

    def lookup(self, op: ir.Operation) -> R | None:
        """The rule for `op`, or None."""
        name = op.name
        if self.by_target and name == "stablehlo.custom_call":
            rule = self.by_target.get(call_target(op))
            if rule is not None:
                return rule
        return self.by_name.get(name)


def block_ops(block: ir.Block) -> list[ir.Operation]:
    """The ops of `block`, its terminator last, as a list taken now."""
    return [op.operation for op in block.operations]


def walk(block: ir.Block, visit: Callable[[ir.Operation, ir.Operation], None]) -> list[ir.Value]:
    """Hand each op of `block` but its terminator to `visit(op, next_op)`, in order; the
    operands of the terminator afterwards. The ops are those of the block before the
    first visit, so a visit may insert ops after its op (before `next_op`) or replace it."""
    ops = block_ops(block)
    for op, after in zip(ops, ops[1:]):
        visit(op, after)
    return list(ops[-1].operands)


# --- which values a set of values reaches (a conservative forward dataflow) -------------

def captures(op: ir.Operation, known: Known) -> bool:
    """Whether an op inside the regions of `op` reads a `known` value."""
    return any(known(v) for inner in builders.nested_ops(op) for v in inner.operands)


def uses_any(op: ir.Operation, known: Known) -> bool:
    """Whether `op`, or an op inside its regions, reads a `known` value."""
    return any(known(v) for v in op.operands) or captures(op, known)


def reaches(block: ir.Block, seeds: Sequence[ir.Value], known: Known) -> list[bool]:
    """Which terminator operands of `block` may be computed from `seeds` or the values
    `known` outside: the differentiable results of every op that reads one reach."""
    marked = set(seeds)

    def hit(v: ir.Value) -> bool:
        return v in marked or known(v)

    ops = block_ops(block)
    for op in ops[:-1]:
        if uses_any(op, hit):
            marked.update(r for r in op.results if builders.is_differentiable(r.type))
    return [hit(v) for v in ops[-1].operands]


def loop_carried(op: ir.Operation, known: Known) -> list[bool]:
    """Which state values of the `stablehlo.while` `op` may be computed from `known`
    values: those it starts from, and the differentiable ones its body computes from
    them (a fixpoint)."""
    body = op.regions[1].blocks[0]
    carried = [known(v) for v in op.operands]
    while True:
        reached = reaches(body, [a for a, c in zip(body.arguments, carried) if c], known)
        grown = [c or (r and builders.is_differentiable(v.type)) for c, r, v in zip(carried, reached, op.operands)]
        if grown == carried:
            return carried
        carried = grown


def branch_carried(op: ir.Operation, known: Known) -> list[bool]:
    """Which differentiable results of the `stablehlo.case` / `if` `op` any branch may
    compute from `known` values."""
    branches = [reaches(region.blocks[0], [], known) for region in op.regions]
    return [builders.is_differentiable(r.type) and any(b[i] for b in branches) for i, r in enumerate(op.results)]


# --- liveness ---------------------------------------------------------------------------

def is_pure_op(op: ir.Operation) -> bool:
    """A StableHLO/CHLO op with results and no effect of its own (what its regions do aside)."""
    return op.name.startswith(("stablehlo.", "chlo.")) and len(op.results) > 0 and op.name not in EFFECTFUL


def live_values(block: ir.Block, is_pure: Callable[[ir.Operation], bool]) -> set[ir.Value]:
    """The values whose uses in `block` reach an op that is not pure (a return, a call,
    a loop, ...): one backward sweep; everything such an op or its regions read is live."""
    live: set[ir.Value] = set()
    for op in reversed(block_ops(block)):
        if not is_pure(op) or any(r in live for r in op.results):
            live.update(v for inner in [op, *builders.nested_ops(op)] for v in inner.operands)
    return live


def erase_dead(block: ir.Block, is_pure: Callable[[ir.Operation], bool], nested: bool = False) -> None:
    """Erase the pure ops of `block` whose results are unused, last first; with `nested`,
    those of the blocks inside the ops that stay too."""
    for op in reversed(block_ops(block)):
        if is_pure(op) and not any(builders.has_uses(r) for r in op.results):
            op.erase()
        elif nested:
            for region in op.regions:
                for inner in region.blocks:
                    erase_dead(inner, is_pure, nested)


# --- the module ---------------------------------------------------------------------------

class ModuleTransform:
    """One run of a function transform over a module: its functions by name, the
    functions it generated (`generated`, keyed by callee and options), and the
    annotations of each function expanded once. A plug-in sets `pass_name` (the
    prefix of its errors) and `annotation`, and defines `expand_annotation`."""

    pass_name: ClassVar[str]
    annotation: ClassVar[str] = ""

    def __init__(self, module: ir.Operation):
        self.module = module
        self.body = module.regions[0].blocks[0]
        self.funcs, self.names = builders.functions(self.body)
        self.generated: dict[Hashable, object] = {}
        self.annotations_expanded: set[str] = set()

    def function(self, name: str, location: ir.Location | None) -> ir.Operation:
        """The `func.func @name` with a body, or a PassError at `location`."""
        src = self.funcs.get(name)
        if src is None:
            raise PassError(f"{self.pass_name}: no function @{name} in the module", location)
        if not src.regions[0].blocks:
            raise PassError(f"{self.pass_name}: @{name} is a declaration without a body", location)
        return src

    def signature(self, name: str, location: ir.Location | None = None) -> tuple[list[ir.Type], list[ir.Type]]:
        """The input and result types of `@name`, or a PassError at `location` (`function`)."""
        fn_type = ir.FunctionType(ir.TypeAttr(self.function(name, location).attributes["function_type"]).value)
        return list(fn_type.inputs), list(fn_type.results)

    def generate(self, key: Hashable, build: Callable[[], T]) -> T:
        """What `build` gives, once per `key` (a callee and the options it is built for)."""
        if key not in self.generated:
            self.generated[key] = build()
        return self.generated[key]

    def new_function(self, src: str, name: str, public: bool) -> tuple[str, ir.Operation]:
        """A copy of `@src` at the end of the module named `name` (or `name_1`... if taken)."""
        new_name = builders.unique_symbol(self.names, name)
        new = self.funcs[new_name] = builders.clone_function(self.funcs[src], self.body, new_name, public)
        return new_name, new

    def expand_annotations(self, func_op: ir.Operation) -> None:
        """Replace every annotation of this pass in `func_op` by a call of what it generates."""
        for op in custom_calls_once(func_op, self.annotation, self.annotations_expanded):
            self.expand_annotation(op)

    def expand_all(self) -> None:
        """Expand the annotations of every function of the module."""
        for func_op in list(self.funcs.values()):
            self.expand_annotations(func_op)

    def expand_annotation(self, op: ir.Operation) -> None:
        """Replace the annotation `op` by a call of the function it generates."""
        raise NotImplementedError(f"{type(self).__name__} defines no annotation")
