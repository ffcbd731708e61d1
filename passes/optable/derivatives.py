"""The derivatives of elementwise ops: one table, read by jet-expand and vjp-expand.

`DERIVATIVES` maps a StableHLO or CHLO op name to the derivative of y = f(x)
in its last operand, as a formula of the operand `x`, the result `y` and the
op's other (non-differentiable) operands, written once with the operators of
`Expr` and `op(name, ...)`:

    def_deriv("stablehlo.tanh", lambda x, y: (1 + y) * (1 - y))
    def_quotient("stablehlo.log", lambda x, y: x)          # f'(x) = 1 / x

From that one entry, as JAX's jet.py builds rules from the derivatives JAX
knows (`def_deriv`):

- vjp-expand's rule is `ct * f'(x)` (or `ct / g(x)` for a quotient), the formula
  evaluated on the forward values (`evaluate`);
- jet-expand's rule solves the ODE y' = f'(x) x' for the Taylor coefficients,
  the formula evaluated on truncated series (`jet_rules.derivative_series`;
  its arithmetic is the jet builder's, so batched and collapsed jets come with it);
- a formula that is a polynomial in y (tanh, logistic, tan, exp) is known as one
  (`polynomial`), which lets the jet expand it without series products.

An op a formula applies (`op("stablehlo.cosine", x)`) has an entry of its own,
which the jet rule reads for that op's series (sine and cosine read each other).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Union

from hlopt.passes.ir import builders
from hlopt.passes.mlir import ir
from hlopt.passes.ir.terms import TermAlgebra

Number = Union[int, float]


@dataclasses.dataclass(frozen=True, eq=False)
class Expr:
    """A formula over the variables `x`, `y` and `p0, p1...` (the fixed operands).

    `kind` is one of var, const, scale (`value` times the one argument), add, sub,
    mul, div, apply (op `value` of the arguments). Python numbers combine with
    expressions; constants fold; nested scales multiply."""

    kind: str
    args: tuple["Expr", ...] = ()
    value: Number | str | None = None

    def __add__(self, other: "Expr | Number") -> "Expr":
        return _binary("add", self, other)

    def __radd__(self, other: Number) -> "Expr":
        return _binary("add", other, self)

    def __sub__(self, other: "Expr | Number") -> "Expr":
        return _binary("sub", self, other)

    def __rsub__(self, other: Number) -> "Expr":
        return _binary("sub", other, self)

    def __mul__(self, other: "Expr | Number") -> "Expr":
        if not isinstance(other, Expr):
            return _scale(other, self)
        return _binary("mul", self, other)

    def __rmul__(self, other: Number) -> "Expr":
        return _scale(other, self)

    def __truediv__(self, other: "Expr | Number") -> "Expr":
        return _binary("div", self, other)

    def __rtruediv__(self, other: Number) -> "Expr":
        return _binary("div", other, self)

    def __neg__(self) -> "Expr":
        return _scale(-1, self)


def _lift(v: Expr | Number) -> Expr:
    return v if isinstance(v, Expr) else Expr("const", value=v)


_FOLD: dict[str, Callable[[Number, Number], Number]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b}


def _binary(kind: str, a: Expr | Number, b: Expr | Number) -> Expr:
    a, b = _lift(a), _lift(b)
    if a.kind == b.kind == "const":
        return Expr("const", value=_FOLD[kind](a.value, b.value))
    return Expr(kind, (a, b))


def _scale(c: Number, e: Expr) -> Expr:
    if e.kind == "const":
        return Expr("const", value=c * e.value)
    if e.kind == "scale":
        return _scale(c * e.value, e.args[0])
    return Expr("scale", (e,), c)


def op(name: str, *operands: Expr | Number) -> Expr:
    """Op `name` (an elementwise op with an entry of its own) of `operands`; the last
    one is the differentiable operand."""
    return Expr("apply", tuple(_lift(v) for v in operands), name)


X, Y = Expr("var", value="x"), Expr("var", value="y")


@dataclasses.dataclass(frozen=True)
class Derivative:
    """f'(x) of y = f(p0, ..., x) as `formula` (or 1 / f'(x) when `reciprocal`);
    `fixed` leading operands (`p0`...) are not differentiable."""

    formula: Expr
    reciprocal: bool = False
    fixed: int = 0


Table = dict[str, Derivative]
DERIVATIVES: Table = {}


def _define(table: Table, name: str, formula: Callable[..., Expr | Number], reciprocal: bool, fixed: int) -> None:
    params = [Expr("var", value=f"p{i}") for i in range(fixed)]
    table[name] = Derivative(_lift(formula(X, Y, *params)), reciprocal, fixed)


def def_deriv(name: str, formula: Callable[..., Expr | Number], *, fixed: int = 0,
              table: Table = DERIVATIVES) -> None:
    """Register f'(x) = formula(x, y, p0, ...) for op `name` in `table`."""
    _define(table, name, formula, False, fixed)


def def_quotient(name: str, formula: Callable[..., Expr | Number], *, table: Table = DERIVATIVES) -> None:
    """Register f'(x) = 1 / formula(x, y) for op `name` in `table` (log, sqrt, atan...)."""
    _define(table, name, formula, True, 0)


def polynomial(e: Expr) -> list[float] | None:
    """The coefficients (constant first) of `e` as a polynomial in y, or None if it is
    not one (it reads x, an op, or divides by a non-constant)."""
    if e.kind == "const":
        return [float(e.value)]
    if e.kind == "var":
        return [0.0, 1.0] if e.value == "y" else None
    parts = [polynomial(a) for a in e.args]
    if any(p is None for p in parts):
        return None
    if e.kind == "scale":
        return [e.value * c for c in parts[0]]
    if e.kind in ("add", "sub"):
        p, q = parts
        sign = 1.0 if e.kind == "add" else -1.0
        n = max(len(p), len(q))
        return [(p[i] if i < len(p) else 0.0) + sign * (q[i] if i < len(q) else 0.0) for i in range(n)]
    if e.kind == "mul":
        return poly_mul(*parts)
    if e.kind == "div" and e.args[1].kind == "const":
        return [c / e.args[1].value for c in parts[0]]
    return None


def poly_mul(p: list[float], q: list[float]) -> list[float]:
    """The product of two polynomials (constant coefficient first)."""
    out = [0.0] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, c in enumerate(q):
            out[i + j] += a * c
    return out


def evaluate(e: Expr, b: TermAlgebra, env: Mapping[str, ir.Value]) -> ir.Value:
    """The value of `e` with its variables bound by `env` (`x`, `y`, `p0`...), built by
    `b`; constants take the type of `x`."""
    if e.kind == "var":
        return env[e.value]
    if e.kind == "const":
        return b.constant(e.value, env["x"].type)
    args = [evaluate(a, b, env) for a in e.args]
    if e.kind == "scale":
        return b.scale(args[0], e.value)
    if e.kind == "apply":
        return builders.op(e.value, args)
    return {"add": b.add, "sub": b.sub, "mul": b.mul, "div": b.div}[e.kind](*args)


def derivative_at(entry: Derivative, b: TermAlgebra, operands: list[ir.Value], result: ir.Value) -> ir.Value:
    """The entry's formula at the forward values: f'(x), or 1 / f'(x) for a quotient."""
    env = {f"p{i}": v for i, v in enumerate(operands[:-1])}
    env.update(x=operands[-1], y=result)
    return evaluate(entry.formula, b, env)


# --- the table ----------------------------------------------------------------

def _exp(v: Expr) -> Expr:
    return op("stablehlo.exponential", v)


def _rsqrt(v: Expr) -> Expr:
    return op("stablehlo.rsqrt", v)


def_deriv("stablehlo.exponential", lambda x, y: y)
def_deriv("stablehlo.exponential_minus_one", lambda x, y: y + 1)
def_quotient("stablehlo.log", lambda x, y: x)
def_quotient("stablehlo.log_plus_one", lambda x, y: x + 1)
def_quotient("stablehlo.sqrt", lambda x, y: 2 * y)
def_deriv("stablehlo.rsqrt", lambda x, y: -0.5 * (y / x))
def_deriv("stablehlo.cbrt", lambda x, y: (1 / 3) / (y * y))
def_deriv("stablehlo.sine", lambda x, y: op("stablehlo.cosine", x))
def_deriv("stablehlo.cosine", lambda x, y: -op("stablehlo.sine", x))
def_deriv("stablehlo.tan", lambda x, y: 1 + y * y)
def_deriv("chlo.tan", lambda x, y: 1 + y * y)
def_deriv("stablehlo.tanh", lambda x, y: (1 + y) * (1 - y))
def_deriv("stablehlo.logistic", lambda x, y: y * (1 - y))
def_deriv("chlo.sinh", lambda x, y: op("chlo.cosh", x))
def_deriv("chlo.cosh", lambda x, y: op("chlo.sinh", x))
def_deriv("chlo.asin", lambda x, y: _rsqrt(1 - x * x))
def_deriv("chlo.acos", lambda x, y: -_rsqrt(1 - x * x))
def_quotient("chlo.atan", lambda x, y: 1 + x * x)
def_deriv("chlo.asinh", lambda x, y: _rsqrt(x * x + 1))
def_deriv("chlo.acosh", lambda x, y: _rsqrt(x * x - 1))
def_quotient("chlo.atanh", lambda x, y: (1 + x) * (1 - x))
def_deriv("chlo.erf", lambda x, y: 2 / math.sqrt(math.pi) * _exp(-(x * x)))
def_deriv("chlo.erfc", lambda x, y: -2 / math.sqrt(math.pi) * _exp(-(x * x)))
def_deriv("chlo.erf_inv", lambda x, y: math.sqrt(math.pi) / 2 * _exp(y * y))
def_deriv("chlo.lgamma", lambda x, y: op("chlo.digamma", x))
def_deriv("chlo.digamma", lambda x, y: op("chlo.polygamma", 1, x))
def_deriv("chlo.polygamma", lambda x, y, n: op("chlo.polygamma", n + 1, x), fixed=1)
def_deriv("chlo.square", lambda x, y: 2 * x)
