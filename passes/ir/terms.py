"""Zero-aware arithmetic on terms: the algebra under `JetBuilder` and `VjpBuilder`.

A *term* is an `ir.Value` or `None`, meaning "known to be zero": such terms
build no ops, and every operation folds them away (`add(None, b)` is `b`,
`mul(None, b)` is None). Ops are built at the current insertion point and
location.

Subclasses may align the two operands of a binary operation first (`aligned`):
the jet builder broadcasts a primal along the directions axis of a coefficient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from hlopt.passes.ir import builders
from hlopt.passes.mlir import ir

Term = Optional[ir.Value]


class TermAlgebra:
    """Zero-aware add, subtract, negate, multiply, divide and scale of terms."""

    def aligned(self, a: ir.Value, b: ir.Value, linear: bool) -> tuple[ir.Value, ir.Value]:
        """`a` and `b` made operands of one elementwise op; `linear` for add and subtract."""
        return a, b

    def constant(self, value: float, t: ir.Type) -> ir.Value:
        """A constant of tensor type `t` with every element `value` (real part for complex)."""
        return builders.splat(value, t)

    def zeros(self, like: ir.Value) -> ir.Value:
        return self.constant(0, like.type)

    def materialize(self, term: Term, like: ir.Value) -> ir.Value:
        """`term`, or zeros like `like` for a zero term."""
        return term if term is not None else self.zeros(like)

    def add(self, a: Term, b: Term) -> Term:
        if a is None:
            return b
        if b is None:
            return a
        return builders.add(*self.aligned(a, b, linear=True))

    def sub(self, a: Term, b: Term) -> Term:
        if b is None:
            return a
        if a is None:
            return self.neg(b)
        return builders.sub(*self.aligned(a, b, linear=True))

    def neg(self, a: Term) -> Term:
        return None if a is None else builders.neg(a)

    def mul(self, a: Term, b: Term) -> Term:
        if a is None or b is None:
            return None
        return builders.mul(*self.aligned(a, b, linear=False))

    def div(self, a: Term, b: ir.Value) -> Term:
        return None if a is None else builders.div(*self.aligned(a, b, linear=False))

    def scale(self, a: Term, c: float) -> Term:
        """`c a`; scaling by 0, 1 and -1 builds no multiply."""
        if a is None or c == 0:
            return None
        if c == 1:
            return a
        if c == -1:
            return self.neg(a)
        return self.mul(a, self.constant(c, a.type))

    def total(self, terms: Sequence[Term]) -> Term:
        """The sum of `terms` (None if all are zero)."""
        out = None
        for t in terms:
            out = self.add(out, t)
        return out
