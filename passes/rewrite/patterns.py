"""Pattern sets and the one driver that applies them.

A rewrite pass declares what it rewrites as data: a `PatternSet` of `Pattern`s, each the
names of the ops it looks at and a rule `rule(op)` that gives the values replacing the op's
results, built at the op (insertion point before it, its location), or None to leave it.
A rule that is a one-liner is written as one:

    DOUBLE_NEGATE = PatternSet(Pattern("stablehlo.negate", lambda op: negated(op.operands[0])))

`PatternSet.apply` (the driver) offers each op of the names the set knows, in MLIR's walk order
as the module stood before the first rewrite, to the patterns of its name in the order they were
declared; the first rule that gives values replaces the op. The ops it replaced are erased
afterwards, and with `erase_feeders` (the default) so is every op that fed only them (ops
without regions, not custom calls). A rule may give `ERASE` for an op whose results nothing uses
once the walk is over (unused already, or replaced by a rule that rewrote a group of ops at its
last one): it is then erased as a replaced op is. A rule that rewrote the ops reading a result
itself gives None for that result: its old readers, and the ops reading them, are then erased with
the op (they must be left unused: the rule replaced what they computed).

A `PatternPass` declares its set (`PATTERNS`), or several applied one after another, each in a
walk of its own; where a rule needs facts about the whole module (which ops group together, an
option of the module as a whole), `patterns(module)` builds the set from them before the walk,
and a `Plan` holds what was decided per op. With `FIXPOINT`, the pass walks again until a walk
rewrites nothing (a rewrite may make another possible).

An `ir.Operation`'s hash changes when its operands do, so an op met after earlier rewrites is not
found in a set or dictionary of ops built before the walk: a `Plan` keys its ops by their first
result, which stays the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar, Generic, TypeVar

from hlopt.passes.base import Pass, PassError
from hlopt.passes.ir.walk import walk_ops
from hlopt.passes.mlir import ir

Rule = Callable[[ir.Operation], "Sequence[ir.Value | None] | None"]
T = TypeVar("T")

# What a rule gives for an op whose results nothing uses once the walk is over, to have it erased
# with the replaced ops.
ERASE: tuple[ir.Value, ...] = ()


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A rule offered every op named in `ops` (one op name, or a tuple of them)."""

    ops: str | tuple[str, ...]
    rule: Rule

    @property
    def names(self) -> tuple[str, ...]:
        """The op names this pattern looks at."""
        return (self.ops,) if isinstance(self.ops, str) else self.ops


class PatternSet:
    """Patterns applied together in one walk of a module (`apply`); see the module docstring."""

    def __init__(self, *patterns: Pattern, erase_feeders: bool = True):
        self.patterns = patterns
        self.erase_feeders = erase_feeders
        self.by_name: dict[str, list[Rule]] = {}
        for pattern in patterns:
            for name in pattern.names:
                self.by_name.setdefault(name, []).append(pattern.rule)

    def __add__(self, other: PatternSet) -> PatternSet:
        """The patterns of both sets, this set's first (a pass extending another's set)."""
        return PatternSet(*self.patterns, *other.patterns, erase_feeders=self.erase_feeders)

    def rewrite(self, op: ir.Operation) -> Sequence[ir.Value | None] | None:
        """What the first rule for `op`'s name that matches gives, built at `op`; None if none matches."""
        with ir.InsertionPoint(op), op.location:
            for rule in self.by_name.get(op.name, ()):
                values = rule(op)
                if values is not None:
                    return values
        return None

    def apply(self, root: ir.Operation) -> list[ir.Operation]:
        """Rewrite the ops nested in `root` (see the module docstring); the ops replaced, now erased."""
        replaced: list[ir.Operation] = []
        rewritten_readers: list[ir.Value] = []
        for op in walk_ops(root, *self.by_name):
            values = self.rewrite(op)
            if values is None:
                continue
            if values is not ERASE:
                if len(values) != len(op.results):
                    raise ValueError(f"a pattern for {op.name} gave {len(values)} values for an op of "
                                     f"{len(op.results)} results; a rule gives one value per result, or None")
                for old, new in zip(op.results, values):
                    if new is None:
                        rewritten_readers.append(old)
                    else:
                        old.replace_all_uses_with(new)
            replaced.append(op)
        for value in rewritten_readers:
            erase_readers(value)
        if self.erase_feeders:
            erase_unused(replaced)
        else:
            for op in replaced:
                op.erase()
        return replaced


def erase_readers(value: ir.Value) -> None:
    """Erase the ops reading `value`, each after the ops reading its results (a rule that gave None for
    `value` rewrote them); an op without results among them is an error, as it would be lost."""
    while (use := next(iter(value.uses), None)) is not None:
        reader = use.owner
        if not len(reader.results):
            raise ValueError(f"a pattern gave None for a result that {reader.name} still reads; a rule gives None "
                             "only for a result whose readers it replaced, as far as the ops without results")
        for result in reader.results:
            erase_readers(result)
        reader.erase()


def erase_unused(ops: Sequence[ir.Operation]) -> None:
    """Erase `ops` and then every op that fed only them, as far as nothing else uses it
    (ops without regions, not custom calls)."""
    pending = list(ops)
    erased: set[ir.Operation] = set()
    while pending:
        op = pending.pop()
        if op in erased or any(next(iter(r.uses), None) is not None for r in op.results):
            continue
        feeders = [v.owner.operation for v in op.operands if isinstance(v, ir.OpResult)]
        erased.add(op)
        op.erase()
        pending.extend(f for f in feeders if not len(f.regions) and f.name != "stablehlo.custom_call"
                       and f not in pending and f not in erased)


class Plan(Generic[T]):
    """What a pass decided about some ops before the walk (`PatternPass.patterns`), for its rules to read
    when the driver offers them: keyed by each op's first result, which earlier rewrites leave as it
    is, where they change the op's operands and with them its hash."""

    def __init__(self) -> None:
        self._by_result: dict[ir.Value, T] = {}

    def __setitem__(self, op: ir.Operation, decided: T) -> None:
        if not len(op.results):
            raise ValueError(f"a Plan keys an op by its first result; {op.name} has none: decide about the op "
                             "that uses what it does instead")
        self._by_result[op.results[0]] = decided

    def get(self, op: ir.Operation) -> T | None:
        """What was decided about `op`, or None."""
        return self._by_result.get(op.results[0]) if len(op.results) else None

    def __contains__(self, op: ir.Operation) -> bool:
        return bool(len(op.results)) and op.results[0] in self._by_result


# The most walks a FIXPOINT pass makes: its rules must stop rewriting what they built.
MAX_WALKS = 64


class PatternPass(Pass):
    """A pass that applies its pattern sets: `PATTERNS` (one set, or sets applied one after another, each in
    its own walk), or what `patterns(module)` builds from the pass's options and the module; with
    `FIXPOINT`, again until a walk rewrites nothing."""

    PATTERNS: ClassVar[PatternSet | tuple[PatternSet, ...]]
    FIXPOINT: ClassVar[bool] = False

    def patterns(self, module: ir.Operation) -> PatternSet | tuple[PatternSet, ...]:
        """The pattern sets this pass applies to `module`, in order."""
        return self.PATTERNS

    def apply(self, module: ir.Operation) -> None:
        for _ in range(MAX_WALKS):
            sets = self.patterns(module)
            rewrote = False
            for pattern_set in (sets,) if isinstance(sets, PatternSet) else sets:
                rewrote |= bool(pattern_set.apply(module))
            if not (self.FIXPOINT and rewrote):
                return
        raise PassError(f"{self.name}: its patterns still rewrote the module after {MAX_WALKS} walks; a rule "
                        "rewrites what the rules built: make it leave its own results alone", module.location)
