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
without regions, not custom calls). A rule may give `ERASE` for an op whose results are unused:
it is then erased as a replaced op is.

An `ir.Operation`'s hash changes when its operands do, so a rule that meets an op after earlier
rewrites may not find it in a set or dictionary built before the walk: test what the op is instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar

from hlopt.passes.base import Pass
from hlopt.passes.ir.walk import walk_ops
from hlopt.passes.mlir import ir

Rule = Callable[[ir.Operation], "Sequence[ir.Value] | None"]

# What a rule gives for an op whose results nothing uses, to have it erased with the replaced ops.
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

    def rewrite(self, op: ir.Operation) -> Sequence[ir.Value] | None:
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
        for op in walk_ops(root, *self.by_name):
            values = self.rewrite(op)
            if values is None:
                continue
            if values is not ERASE:
                if len(values) != len(op.results):
                    raise ValueError(f"a pattern for {op.name} gave {len(values)} values for an op of "
                                     f"{len(op.results)} results; a rule gives one value per result, or None")
                for old, new in zip(op.results, values):
                    old.replace_all_uses_with(new)
            replaced.append(op)
        if self.erase_feeders:
            erase_unused(replaced)
        else:
            for op in replaced:
                op.erase()
        return replaced


def erase_unused(ops: Sequence[ir.Operation]) -> None:
    """Erase `ops` and then every op that fed only them, as far as nothing else uses it
    (ops without regions, not custom calls)."""
    pending = list(dict.fromkeys(ops))  # an op may be listed twice (a dot stacked from both sides)
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


class PatternPass(Pass):
    """A pass that applies one pattern set: `PATTERNS`, or what `patterns()` builds from the pass's options."""

    PATTERNS: ClassVar[PatternSet]

    def patterns(self) -> PatternSet:
        """The pattern set this pass applies."""
        return self.PATTERNS

    def apply(self, module: ir.Operation) -> None:
        self.patterns().apply(module)
