"""Taylor-mode rules of `jet-expand` and their constructors; the op table
(`hlopt.passes.autodiff.table`) names each op's rule, one entry per op.

A *series* is a list `[x0, x1, ..., xK]` of plain Taylor coefficients
(x_k = x^(k)(0) / k!) of one SSA value; `x0` is the primal and any coefficient
may be `None`, meaning "known to be zero": such terms are never materialized
and produce no ops. A rule `rule(b, op, ins) -> outs` receives the builder
`b` (insertion point already set right after `op`), the op and one series per
operand, and returns one series per result (or `None` for "all zero"). A rule
that rebuilds the op (sort, variadic reductions) returns the new op's results
as the primals; the driver then replaces and erases the old op. Every op is
built with the typed helpers of `hlopt.passes.ir.builders`.

Control flow (`while`, `case`, `if`, `func.call`) needs the walker (series of
values outside the op, jets of callees): `hlopt.passes.autodiff.jet_expand` expands it
and imports this module, never the other way round.

The families, as in JAX's experimental jet module (`def_deriv` is the ODE one),
of which the table's entries build their rules:

- zero:        floor, sign, ... have zero Taylor coefficients;
- linear:      the op itself applied to each coefficient (`linear(0, 2)` names
               the operands it is linear in; the others, like indices, keep
               their primal);
- bilinear:    the Cauchy product v_k = sum_j op(u_j, w_{k-j});
- ODE:         y' = c(x) u' gives y_k = 1/k sum_{j=1..k} j u_j c_{k-j}, with
               c = f'(x) the entry of the derivative table (`hlopt.passes.optable.derivatives`,
               which vjp-expand reads too) evaluated on series alongside y (exp,
               sin/cos, tanh, logistic, erf, lgamma...; `derivative_rule`);
- composition: Faa di Bruno with known derivatives f^(m)(x0) (power).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Optional

from hlopt.passes.ir import annotation_names, builders
from hlopt.passes.ir.annotation_names import STOP_GRADIENT
from hlopt.passes.optable import derivatives
from hlopt.passes.autodiff import jet_directions
from hlopt.passes.base import PassError, lowering_pass_for
from hlopt.passes.mlir import ir
from hlopt.passes.ir.terms import Term, TermAlgebra
from hlopt.passes.ir.walk import call_target, walk_ops

Series = list  # [primal, c1, ..., cK]; None entries are zero
Rule = Callable[["JetBuilder", ir.Operation, list[Series]], list[Optional[Series]]]

# The markers `hlopt.jet` bodies carry (targets of `annotation_names`), which jet-expand removes when done:
# `lax.stop_gradient` (the identity on values, a zero series), and a `custom_jvp`
# function, called_computations = [@primal, @tangents] (its primal function, and
# its JVP rule from (operands, tangents of the inexact ones) to the tangents of
# the inexact results), whose series jet_expand builds from a jet of @tangents;
# and a `custom_linear_solve`, called_computations = [@matvec, @solve] (operands: the
# matvec's constants, the solve's constants, the right-hand sides; results: the
# solutions), whose series jet_expand builds order by order from solves (the
# structural rule, `FunctionJet.expand_linear_solve`).
# The stop_gradient marker is a zero derivative for vjp-expand too: it stays while
# an `hlopt.jet` or `hlopt.vjp` annotation is left (`DIFFERENTIATING`), so a vjp of
# a jet does not differentiate through it, and the last of the two passes removes it.
DIFFERENTIATING = (annotation_names.JET, annotation_names.VJP)


def check_stop_gradient(op: ir.Operation, pass_name: str = "jet-expand") -> None:
    """Refuse a stop_gradient marker that is not one operand to one result of its type."""
    if len(op.operands) != 1 or len(op.results) != 1 or op.operands[0].type != op.results[0].type:
        raise PassError(f"{pass_name}: @{STOP_GRADIENT} needs one operand and one result of the same type, "
                        f"got {len(op.operands)} operand(s) and {len(op.results)} result(s)", op.location)


def remove_stop_gradients(module: ir.Operation, pass_name: str) -> None:
    """Replace every stop_gradient marker in `module` by its operand, unless an annotation
    whose pass treats the marker as a zero derivative (`DIFFERENTIATING`) is left."""
    found = walk_ops(module, "stablehlo.custom_call")
    if any(call_target(op) in DIFFERENTIATING for op in found):
        return
    for op in found:
        if call_target(op) == STOP_GRADIENT:
            check_stop_gradient(op, pass_name)
            op.result.replace_all_uses_with(op.operands[0])
            op.erase()


def scalar_type(t: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get([], ir.RankedTensorType(t).element_type)


@dataclasses.dataclass(frozen=True)
class Directions:
    """A jet along `size` directions at once: every coefficient carries a leading axis
    of that size, primals do not (they are computed once). With `collapsed`, the K-th
    coefficient is the sum over the directions instead (weighted by `weights`), with a
    leading axis of size 1 inside the expansion."""

    size: int
    collapsed: bool = False
    weights: tuple[float, ...] | None = None


def _rank(v: ir.Value) -> int:
    return ir.RankedTensorType(v.type).rank


class JetBuilder(TermAlgebra):
    """Builds coefficient ops at the current insertion point; None is zero throughout.

    It is the one object rules receive besides the op: the order and the zero-aware
    arithmetic on terms.

    With `directions` (a batched or collapsed jet) a coefficient term carries a
    leading directions axis and a primal-derived value does not; the arithmetic
    broadcasts the second along the first, and a linear combination (add, subtract,
    select, a linear op) of batched terms with the collapsed K-th one sums the
    batched ones over the directions first. That is the whole of collapsing for the
    rules: the K-th coefficient of every rule is its linear term in the collapsed
    input plus its nonlinear terms in the batched lower coefficients, summed."""

    def __init__(self, order: int, directions: Directions | None = None, zero_primals_vanish: bool = False):
        self.order = order
        self.directions = directions
        self.zero_primals_vanish = zero_primals_vanish  # see ModuleJet.jet_function's `linear`

    # --- the directions axis ------------------------------------------------

    def lead_size(self, k: int) -> int:
        """The size of the directions axis of coefficient k."""
        d = self.directions
        return 1 if d.collapsed and k == self.order else d.size

    def coefficient_type(self, t: ir.Type, k: int) -> ir.Type:
        """The type of coefficient k of a value of type `t`."""
        if self.directions is None:
            return t
        t = ir.RankedTensorType(t)
        return ir.RankedTensorType.get([self.lead_size(k), *t.shape], t.element_type,
                                       loc=ir.Location.unknown(t.context))

    def conform(self, term: Term, like: ir.Value, k: int) -> Term:
        """`term`, coefficient k of a value like `like`, with that coefficient's type:
        broadcast along the directions, or summed over them for the collapsed K-th."""
        if term is None or self.directions is None:
            return term
        n = self.lead_size(k)
        if _rank(term) == _rank(like):
            return builders.broadcast(term, [n, *builders.shape_of(like)], range(1, _rank(like) + 1))
        return term if builders.shape_of(term)[0] == n else self.summed(term)

    def coefficient(self, term: Term, like: ir.Value, k: int) -> ir.Value:
        """Coefficient k of a value like `like`, with its type; zeros if `term` is None."""
        if term is None:
            return self.zeros_like(self.coefficient_type(like.type, k))
        return self.conform(term, like, k)

    def summed(self, v: ir.Value) -> ir.Value:
        """The (weighted) sum of `v` over its directions axis, kept with size 1."""
        return builders.reshape(jet_directions.lead_sum(v, self.directions.weights), [1, *builders.shape_of(v)[1:]])

    def spread(self, v: ir.Value, like: ir.Value, n: int) -> ir.Value:
        """`v` (a value like `like`, or a coefficient of one) with a directions axis of size
        `n`: without the axis, broadcast along it; a collapsed coefficient (axis of size 1)
        as the row of the first direction with a nonzero weight, divided by that weight,
        zeros elsewhere: the weighted sum over the directions of a result linear in it
        gives it back (`summed`)."""
        shape = builders.shape_of(v)
        if not self._lead_of(v, like):
            return builders.broadcast(v, [n, *shape], range(1, len(shape) + 1))
        if shape[0] == n:
            return v
        weights = self.directions.weights or (1.0,)
        row = next(r for r, w in enumerate(weights) if w != 0)
        v = self.scale(v, 1.0 / weights[row])
        return builders.pad(v, [row] + [0] * (len(shape) - 1), [n - 1 - row] + [0] * (len(shape) - 1),
                            [0] * len(shape), builders.splat(0, scalar_type(v.type)))

    def aligned(self, a: ir.Value, c: ir.Value, linear: bool) -> tuple[ir.Value, ir.Value]:
        """`a` and `c` with the same directions axis (see the class docstring)."""
        if self.directions is None:
            return a, c
        ra, rc = _rank(a), _rank(c)
        if ra == rc + 1:
            return a, builders.broadcast(c, builders.shape_of(a), range(1, ra))
        if rc == ra + 1:
            return builders.broadcast(a, builders.shape_of(c), range(1, rc)), c
        if ra and builders.shape_of(a)[0] != builders.shape_of(c)[0] and \
                1 in (builders.shape_of(a)[0], builders.shape_of(c)[0]):
            if not linear:
                raise PassError("jet-expand: internal error: a product of a collapsed and a batched coefficient")
            return (self.summed(a) if builders.shape_of(a)[0] != 1 else a,
                    self.summed(c) if builders.shape_of(c)[0] != 1 else c)
        return a, c

    def _lead_of(self, v: ir.Value, like: ir.Value) -> int:
        """1 if `v` carries the directions axis that a value like `like` lacks, else 0."""
        return int(self.directions is not None and _rank(v) > _rank(like))

    # --- single terms -----------------------------------------------------

    def zeros_like(self, t: ir.Type) -> ir.Value:
        return self.constant(0, t)

    def select(self, pred: ir.Value, on_true: ir.Value, on_false: ir.Value) -> ir.Value:
        """select(pred, on_true, on_false); a primal `pred` is broadcast along the directions."""
        on_true, on_false = self.aligned(on_true, on_false, linear=True)
        if _rank(pred) and _rank(pred) < _rank(on_true):
            pred = builders.broadcast(pred, [*builders.shape_of(on_true)[:1], *builders.shape_of(pred)],
                                      range(1, _rank(pred) + 1))
        return builders.select(pred, on_true, on_false)

    def reduce(self, term: Term, dims: Sequence[int], like: ir.Value) -> Term:
        """The sum of `term` (a coefficient of a value like `like`) over `dims` of that value."""
        lead = None if term is None else self._lead_of(term, like)
        return None if term is None else builders.reduce(term, [d + lead for d in dims])

    def broadcast(self, term: Term, like: ir.Value, shape: Sequence[int], dims: Sequence[int]) -> Term:
        """`broadcast_in_dim` of `term` (a coefficient of a value like `like`) to `shape`."""
        if term is None:
            return None
        if self._lead_of(term, like):
            return builders.broadcast(term, [builders.shape_of(term)[0], *shape], [0] + [d + 1 for d in dims])
        return builders.broadcast(term, shape, dims)

    def clone(self, op: ir.Operation, replace: dict[int, ir.Value]) -> ir.Operation:
        """A copy of `op` (attributes, regions) at the insertion point with some operands replaced."""
        new = op.clone(ip=ir.InsertionPoint.current)
        for i, v in replace.items():
            new.operands[i] = v
        return new

    def apply(self, op: ir.Operation, replace: dict[int, ir.Value],
              directions: jet_directions.Apply | None) -> ir.Value:
        """The result of `op` with some operands replaced by coefficient terms; when they
        carry the directions axis, by the op's `directions` rule (its batching rule with
        the axis leading; None: the op has none)."""
        if self.directions is None:
            return self.clone(op, replace).result
        operands, lead = list(op.operands), [False] * len(op.operands)
        for i, v in replace.items():
            operands[i], lead[i] = v, bool(self._lead_of(v, op.operands[i]))
        if not any(lead):
            return self.clone(op, replace).result
        if directions is None:
            raise jet_directions.unsupported(op, "coefficients")
        sizes = {builders.shape_of(operands[i])[0] for i in range(len(lead)) if lead[i]}
        if len(sizes) > 1:  # batched terms in a linear op with the collapsed K-th one
            operands = [self.summed(v) if d and builders.shape_of(v)[0] != 1 else v for v, d in zip(operands, lead)]
            sizes = {1}
        return directions(op, operands, lead, sizes.pop())

    # --- series -----------------------------------------------------------

    def series(self, x0: ir.Value) -> Series:
        return [x0] + [None] * self.order

    def settle(self, s: Series) -> Series:
        """A rule's output series with each coefficient of its type (`conform`): where
        the collapsed K-th coefficient's nonlinear terms are summed over the directions."""
        if self.directions is None:
            return s
        return [s[0]] + [self.conform(s[k], s[0], k) for k in range(1, self.order + 1)]

    def cauchy(self, u: Series, w: Series, k: int, lo: int = 0, hi: int | None = None) -> Term:
        """sum_{j=lo..hi} u_j w_{k-j} (hi defaults to k)."""
        hi = k if hi is None else hi
        return self.total([self.mul(u[j], w[k - j]) for j in range(lo, hi + 1)])

    def scaled_derivative(self, u: Series) -> Series:
        """[0, 1 u_1, 2 u_2, ..., K u_K]: the coefficients of t u'(t)."""
        return [None] + [self.scale(u[j], j) for j in range(1, len(u))]


def has_series(s: Series) -> bool:
    """True if some coefficient of `s` is not known to be zero."""
    return any(t is not None for t in s[1:])


def coefficients(b: JetBuilder, outs: Sequence[Series], which: Sequence[int]) -> list[ir.Value]:
    """The K coefficients of each series `outs[i]`, `i` in `which`, zeros materialized."""
    return [b.coefficient(outs[i][k], outs[i][0], k) for i in which for k in range(1, b.order + 1)]


def split_results(b: JetBuilder, results: Sequence[ir.Value], carried: Sequence[bool]) -> list[Series]:
    """Primal-major values (primals, then K coefficients per carried value) as series."""
    pos, outs = len(carried), []
    for i, c in enumerate(carried):
        if c:
            outs.append([results[i]] + list(results[pos: pos + b.order]))
            pos += b.order
        else:
            outs.append(b.series(results[i]))
    return outs


# --- series-level building blocks shared by several rules --------------------

def div_series(b: JetBuilder, u: Series, w: Series, v0: Term) -> Series:
    """u / w: v_k = (u_k - sum_{j<k} v_j w_{k-j}) / w0."""
    v = [v0] + [None] * b.order
    for k in range(1, b.order + 1):
        v[k] = b.div(b.sub(u[k], b.cauchy(v, w, k, hi=k - 1)), w[0])
    return v


def mul_series(b: JetBuilder, u: Series, w: Series, v0: Term) -> Series:
    return [v0] + [b.cauchy(u, w, k) for k in range(1, b.order + 1)]


def square_term(b: JetBuilder, y: Series, j: int) -> Term:
    """[t^j] y(t)^2 = 2 sum_{i < j/2} y_i y_{j-i} (+ y_{j/2}^2): half the products of a Cauchy product."""
    pairs = b.scale(b.cauchy(y, y, j, hi=(j - 1) // 2), 2.0)
    return b.add(pairs, b.mul(y[j // 2], y[j // 2]) if j % 2 == 0 else None)


def compose(b: JetBuilder, u: Series, y0: ir.Value, d: Callable[[int], ir.Value]) -> Series:
    """f(u) by Faa di Bruno; d(m) = f^(m)(u0) / m!. y_k = sum_m d(m) [t^k] (u - u0)^m."""
    shifted = [None] + u[1:]
    powers = [None, shifted]
    for m in range(2, b.order + 1):
        powers.append([None] * m + [b.cauchy(powers[-1], shifted, k, lo=m - 1, hi=k - 1)
                                    for k in range(m, b.order + 1)])
    derivs = {m: d(m) for m in range(1, b.order + 1) if any(powers[m][k] is not None for k in range(m, b.order + 1))}
    y = [y0] + [None] * b.order
    for k in range(1, b.order + 1):
        y[k] = b.total([b.mul(derivs[m], powers[m][k]) for m in range(1, k + 1) if m in derivs])
    return y


def choose_series(b: JetBuilder, x: Series, y: Series, direction: str, out: ir.Value) -> Series:
    """max (direction GT) or min (LT) of x and y; tied terms are averaged, as in JAX."""
    wins = builders.compare(x[0], y[0], direction)
    ties = builders.compare(x[0], y[0], "EQ")
    series = [out] + [None] * b.order
    for k in range(1, b.order + 1):
        if x[k] is None and y[k] is None:
            continue
        xk, yk = b.materialize(x[k], x[0]), b.materialize(y[k], y[0])
        half = b.scale(b.add(xk, yk), 0.5)
        series[k] = b.select(ties, half, b.select(wins, xk, yk))
    return series


# --- the derivative table's rules: y' = f'(x) x' ---------------------------------

_PENDING = object()


class LazySeries:
    """A truncated series whose coefficients are built when first read (`s[k]`), so a
    derivative's series may read the series it defines, up to the order before.
    `scaled` is (c, s) for the series c * s, which the ODE step folds into its 1/k."""

    def __init__(self, compute: Callable[[int], Term], scaled: tuple[float, "LazySeries"] | None = None):
        self._compute, self._known, self.scaled = compute, {}, scaled

    def __getitem__(self, k: int) -> Term:
        if k not in self._known:
            self._known[k] = _PENDING
            self._known[k] = self._compute(k)
        if self._known[k] is _PENDING:
            raise PassError(f"jet-expand: internal error: coefficient {k} of a derivative series reads itself")
        return self._known[k]


class TaylorOfFormulas:
    """The series of the derivative table's formulas on series (`derivatives.Expr`), each
    op or product built once (sine's series and cosine's read each other)."""

    def __init__(self, b: JetBuilder, table: derivatives.Table):
        self.b, self.table = b, table
        self.memo: dict[tuple, LazySeries] = {}

    def lazy(self, key: tuple, compute: Callable[[int], Term], scaled=None) -> LazySeries:
        if key not in self.memo:
            self.memo[key] = LazySeries(compute, scaled)
        return self.memo[key]

    def given(self, s: Series) -> LazySeries:
        return self.lazy(("given", id(s)), lambda k: s[k])

    def scaled_derivative(self, u: LazySeries) -> LazySeries:
        """[0, 1 u_1, 2 u_2, ...]: the coefficients of t u'(t)."""
        return self.lazy(("d", id(u)), lambda j: self.b.scale(u[j], j) if j else None)

    def evaluate(self, e: derivatives.Expr, env: dict[str, LazySeries]) -> LazySeries:
        b = self.b
        if e.kind == "var":
            return env[e.value]
        if e.kind == "const":
            t = env["x"][0].type
            return self.lazy(("const", e.value, str(t)), lambda k: b.constant(e.value, t) if k == 0 else None)
        args = [self.evaluate(a, env) for a in e.args]
        key = (e.kind, e.value, *map(id, args))
        if e.kind == "apply":
            return self.apply(e.value, args[:-1], args[-1])
        if e.kind == "scale":
            return self.lazy(key, lambda k: b.scale(args[0][k], e.value), scaled=(e.value, args[0]))
        u, w = args
        if e.kind == "add":
            return self.lazy(key, lambda k: b.add(u[k], w[k]))
        if e.kind == "sub":
            return self.lazy(key, lambda k: b.sub(u[k], w[k]))
        if e.kind == "mul":
            return self.product(u, w)
        return self.lazy(key, lambda k: b.div(b.sub(u[k], b.cauchy(self.memo[key], w, k, hi=k - 1) if k else None),
                                              w[0]))

    def product(self, u: LazySeries, w: LazySeries) -> LazySeries:
        """u w, by half the products for a square."""
        return self.lazy(("mul", None, id(u), id(w)),
                         lambda k: square_term(self.b, u, k) if u is w else self.b.cauchy(u, w, k))

    def powers_of(self, p: list[float], y: LazySeries) -> LazySeries:
        """The series of the polynomial p(y), constant coefficient first."""
        b, powers = self.b, [None, y]
        while len(powers) < len(p):
            powers.append(self.product(powers[-1], y))

        def coefficient(j: int) -> Term:
            total = None
            for i in range(1, len(p)):
                if p[i]:
                    term = b.scale(powers[i][j], abs(p[i]))
                    total = b.sub(total, term) if p[i] < 0 else b.add(total, term)
            return b.add(b.constant(p[0], y[0].type), total) if j == 0 and p[0] else total

        return self.lazy(("poly", tuple(p), id(y)), coefficient)

    def apply(self, name: str, fixed: Sequence[LazySeries], u: LazySeries, primal: ir.Value | None = None) -> LazySeries:
        """The series of op `name` of `fixed` (without series) and `u`, by its table entry."""
        key = ("apply", name, *map(id, fixed), id(u))
        if key in self.memo:
            return self.memo[key]
        entry = self.table.get(name)
        if entry is None:
            raise PassError(f"jet-expand: internal error: no derivative of '{name}' in the derivative table")
        b, order = self.b, self.b.order
        for i, f in enumerate(fixed):
            if any(f[k] is not None for k in range(1, order + 1)):
                raise PassError(f"jet-expand: no Taylor rule for '{name}' with a series in operand {i}")
        y0 = primal if primal is not None else builders.op(name, [f[0] for f in fixed] + [u[0]])
        poly = derivatives.polynomial(entry.formula)
        if not entry.reciprocal and poly is not None and len(poly) > 2 and \
                u[1] is not None and all(u[k] is None for k in range(2, order + 1)):
            closed = _polynomial_ode_of_line(b, poly, u[1], y0)
            self.memo[key] = self.lazy(key + ("closed",), lambda k: closed[k])
            return self.memo[key]
        y = self.memo[key] = LazySeries(lambda k: y0 if k == 0 else step(k))
        env = {f"p{i}": f for i, f in enumerate(fixed)}
        env.update(x=u, y=y)
        derivative: list[LazySeries] = []  # built when first read: polygamma's chain ends at the order

        def c() -> LazySeries:
            if not derivative:
                derivative.append(self.powers_of(poly, y) if poly is not None else self.evaluate(entry.formula, env))
            return derivative[0]

        if entry.reciprocal:  # y' g = u': k y_k g_0 = k u_k - sum_{j=1..k-1} j y_j g_{k-j}
            dy = self.scaled_derivative(y)

            def step(k: int) -> Term:
                conv = b.scale(b.cauchy(dy, c(), k, lo=1, hi=k - 1), 1.0 / k)
                return b.div(b.sub(u[k], conv), c()[0])
        else:  # y' = c u': y_k = 1/k sum_{j=1..k-1} j u_j c_{k-j} + u_k c_0
            # (the j = k term without the multiply by k and by 1/k, and the sum's 1/k on the
            # products alone: no multiply after the add, which XLA would copy into each consumer)
            du = self.scaled_derivative(u)

            def step(k: int) -> Term:
                factor, inner = c().scaled or (1.0, c())
                return b.add(b.scale(b.cauchy(du, inner, k, lo=1, hi=k - 1), factor / k),
                             b.scale(b.mul(u[k], inner[0]), factor))
        return y


def _polynomial_ode_of_line(b: JetBuilder, p: list[float], u1: ir.Value, y0: ir.Value) -> Series:
    """The series of y with y' = p(y) u' for u = u0 + u1 t (the first nonlinearity of a
    directional derivative): y_k = u1^k P_k(y0) with P_0 = y and P_k = P_{k-1}' p(y) / k,
    polynomials found here: one Horner evaluation per coefficient, where the recurrence
    reads every lower coefficient (and XLA recomputes those in each consumer)."""
    y, q, power = [y0] + [None] * b.order, [0.0, 1.0], u1
    for k in range(1, b.order + 1):
        q = [c / k for c in derivatives.poly_mul([i * c for i, c in enumerate(q)][1:], p)]
        power = power if k == 1 else b.mul(power, u1)
        y[k] = b.mul(_horner(b, q, y0), power)
    return y


def _horner(b: JetBuilder, coeffs: Sequence[float], x: ir.Value) -> Term:
    """sum_i coeffs[i] x^i; zero coefficients build no ops."""
    value = None
    for c in reversed(coeffs):
        value = b.add(b.mul(value, x), b.constant(c, x.type) if c else None)
    return value


def derivative_series(b: JetBuilder, name: str, u: Series, y0: ir.Value, fixed: Sequence[Series] = (),
                      table: derivatives.Table | None = None) -> Series:
    """The series of op `name` (an entry of `table`, by default `derivatives.DERIVATIVES`)
    of `u`, with primal `y0` and other operands `fixed` (without series)."""
    taylor = TaylorOfFormulas(b, derivatives.DERIVATIVES if table is None else table)
    y = taylor.apply(name, [taylor.given(f) for f in fixed], taylor.given(u), primal=y0)
    return [y[k] for k in range(b.order + 1)]


def derivative_rule(name: str, table: derivatives.Table) -> Rule:
    """The Taylor rule of the entry `name` of the derivative table `table`."""
    return grows(CUBIC if _unbounded_family(name, table) else QUADRATIC)(
        lambda b, op, ins: [derivative_series(b, name, ins[-1], op.result, ins[:-1], table)])


def _unbounded_family(name: str, table: derivatives.Table) -> bool:
    """Whether the series of op `name` needs the series of a new formula per order: its derivative reaches
    an entry with fixed operands whose derivative applies itself (polygamma of n has polygamma of n + 1),
    so order K solves K recurrences of K^2 terms (lgamma, digamma, polygamma)."""
    seen, stack = set(), [name]
    while stack:
        entry = stack.pop()
        if entry in seen or entry not in table:
            continue
        seen.add(entry)
        applied, exprs = set(), [table[entry].formula]
        while exprs:
            e = exprs.pop()
            applied |= {e.value} if e.kind == "apply" else set()
            exprs.extend(e.args)
        if table[entry].fixed and entry in applied:
            return True
        stack.extend(applied)
    return False


# --- what a rule costs --------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Growth:
    """At most how many ops a rule emits for one op at order K: cubic K^3 + quadratic K^2 + linear K + constant.

    Each family's coefficients bound from above what jet-expand builds for
    the ops of that family (test_jet_budget.py measures every elementwise
    rule against its family's bound)."""

    cubic: float = 0
    quadratic: float = 0
    linear: float = 0
    constant: float = 1

    def ops(self, order: int) -> int:
        return int(((self.cubic * order + self.quadratic) * order + self.linear) * order + self.constant)


LINEAR = Growth(linear=1, constant=2)  # one op per coefficient (a zero one materialized where it is used)
PIECEWISE = Growth(linear=5, constant=16)  # a select of the operands' coefficients (max, min, remainder)
# Cauchy products, quotients and the ODE recurrences: K^2 / 2 products per series, two to eight series
# (atan2 and the inverse trigonometric functions build the most)
QUADRATIC = Growth(quadratic=5, linear=8, constant=16)
# Faa di Bruno (power) and the unbounded derivative families (lgamma): K series of K^2 terms
CUBIC = Growth(cubic=0.5, quadratic=8, constant=64)


def grows(growth: Growth) -> Callable[[Rule], Rule]:
    """Record on a rule how its ops grow with the order (`growth_of`): unmarked rules are QUADRATIC."""
    def mark(rule: Rule) -> Rule:
        rule.growth = growth
        return rule

    return mark


def growth_of(rule: Rule | None) -> Growth:
    """How the ops `rule` emits grow with the order. No rule is control flow (`while`, `case`,
    `func.call`, a `return`), which carries each coefficient once: its regions' ops are charged
    on their own."""
    return LINEAR if rule is None else getattr(rule, "growth", QUADRATIC)


# --- rule constructors --------------------------------------------------------

@grows(LINEAR)
def zero(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
    return [None] * len(op.results)


def linear(*positions: int, directions: jet_directions.Apply | None = None) -> Rule:
    """The op applied to the coefficients of the operands at `positions` (all if none given);
    with the directions axis, by the op's `directions` rule."""

    @grows(LINEAR)
    def rule(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
        where = positions or range(len(ins))
        out = b.series(op.result)
        for k in range(1, b.order + 1):
            if all(ins[p][k] is None for p in where):
                continue
            out[k] = b.apply(op, {p: b.materialize(ins[p][k], ins[p][0]) for p in where}, directions)
        return [out]

    return rule


def bilinear(directions: jet_directions.Apply | None = None) -> Rule:
    """v_k = sum_j op(u_j, w_{k-j}), with the directions axis by the op's `directions` rule;
    where zero primals vanish (`JetBuilder.zero_primals_vanish`), a primal that is a zero
    constant adds no terms (the solution x_0 = 0 of a custom_jvp rule's solve of its zero
    tangent, say)."""

    def rule(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
        u, w = ([None if b.zero_primals_vanish and builders.is_zero_constant(s[0]) else s[0]] + s[1:] for s in ins)
        out = b.series(op.result)
        for k in range(1, b.order + 1):
            out[k] = b.total([b.apply(op, {0: u[j], 1: w[k - j]}, directions)
                              for j in range(k + 1) if u[j] is not None and w[k - j] is not None])
        return [out]

    return rule


def square(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
    """x^2 by the Cauchy square (half the products), not the ODE of its derivative."""
    (u,) = ins
    return [[op.result] + [square_term(b, u, k) for k in range(1, b.order + 1)]]


# --- the rules ----------------------------------------------------------------

@grows(LINEAR)
def add(b, op, ins):
    (u, w), out = ins, b.series(op.result)
    return [out[:1] + [b.add(u[k], w[k]) for k in range(1, b.order + 1)]]


@grows(LINEAR)
def subtract(b, op, ins):
    (u, w), out = ins, b.series(op.result)
    return [out[:1] + [b.sub(u[k], w[k]) for k in range(1, b.order + 1)]]


def divide(b, op, ins):
    return [div_series(b, ins[0], ins[1], op.result)]



def atan2(b, op, ins):
    """atan2(u, w): t y'(t) = (w t u' - u t w') / (u^2 + w^2), which stays finite where
    w0 = 0 (unlike atan(u / w), JAX jet's rule)."""
    u, w = ins
    du, dw = b.scaled_derivative(u), b.scaled_derivative(w)
    num = [None] + [b.sub(b.cauchy(w, du, k), b.cauchy(u, dw, k)) for k in range(1, b.order + 1)]
    den = [b.add(b.mul(u[0], u[0]), b.mul(w[0], w[0]))] + [
        b.add(square_term(b, u, k), square_term(b, w, k)) for k in range(1, b.order + 1)]
    q = div_series(b, num, den, None)
    return [[op.result] + [b.scale(q[k], 1.0 / k) for k in range(1, b.order + 1)]]


@grows(CUBIC)
def power(b, op, ins):
    """x^w. With a constant exponent, Faa di Bruno in x (exact at x <= 0 for integer w).
    With a series in w, x^w0 * exp((w - w0) log x): the second factor has primal 1, so
    the large (x_k/x0)^j terms of log x meet x0^w0 in a product instead of cancelling
    inside exp(w log x) (which JAX's jet uses, and which loses everything for tiny x).
    At x0 = 0 only the first factor counts, as in JAX's jvp (log of a replaced zero)."""
    x, w = ins
    one = b.constant(1, x[0].type)
    zero_ = b.constant(0, x[0].type)
    falling = [one]

    def d(m: int) -> ir.Value:
        """binomial(w0, m) x0^(w0 - m): the m-th derivative of x^w0 over m!. The factors
        multiply the power one by one (a huge w0 with a vanishing power gives 0, not
        inf * 0); where the binomial is exactly 0 (integer w0 < m) so is the term."""
        while len(falling) <= m:
            i = len(falling)
            falling.append(b.scale(b.mul(falling[-1], b.sub(w[0], b.constant(i - 1, x[0].type))), 1.0 / i))
        value = builders.op("stablehlo.power", [x[0], b.sub(w[0], b.constant(m, x[0].type))])
        for i in range(m):
            value = b.scale(b.mul(value, w[0] if i == 0 else b.sub(w[0], b.constant(i, x[0].type))), 1.0 / (i + 1))
        return builders.select(builders.compare(falling[m], zero_, "EQ"), zero_, value)

    fixed = compose(b, x, op.result, d)
    if not has_series(w):
        return [fixed]
    log_x = derivative_series(b, "stablehlo.log", x, builders.op("stablehlo.log", [x[0]]))
    z = mul_series(b, [None] + w[1:], log_x, None)
    y = mul_series(b, fixed, derivative_series(b, "stablehlo.exponential", z, one), op.result)
    at_zero = builders.compare(x[0], zero_, "EQ")
    return [[y[0]] + [None if y[k] is None else b.select(at_zero, b.materialize(fixed[k], x[0]), y[k])
                      for k in range(1, b.order + 1)]]


def abs_(b, op, ins):
    """|u| = sign(u0) u for real u; for complex u, sqrt(re(u)^2 + im(u)^2) (singular at 0)."""
    (u,) = ins
    if isinstance(builders.elem_of(u[0]), ir.ComplexType):
        re, im = ([None if t is None else part(t) for t in u] for part in (builders.real, builders.imag))
        r = [None] + [b.add(square_term(b, re, k), square_term(b, im, k)) for k in range(1, b.order + 1)]
        return [derivative_series(b, "stablehlo.sqrt", r, op.result)]
    sign = builders.select(builders.compare(u[0], b.zeros(u[0]), "LT"), b.constant(-1, u[0].type),
                           b.constant(1, u[0].type))
    return [[op.result] + [b.mul(sign, u[k]) for k in range(1, b.order + 1)]]


@grows(PIECEWISE)
def remainder(b, op, ins):
    """rem(x, y) = x - trunc(x / y) y; trunc(x / y) is piecewise constant."""
    (x, y), out = ins, b.series(op.result)
    if all(t is None for t in y[1:]):
        return [out[:1] + x[1:]]
    q = builders.div(x[0], y[0])
    trunc = builders.select(builders.compare(q, b.zeros(q), "LT"), builders.op("stablehlo.ceil", [q]), builders.op("stablehlo.floor", [q]))
    return [out[:1] + [b.sub(x[k], b.mul(trunc, y[k])) for k in range(1, b.order + 1)]]


@grows(PIECEWISE)
def maximum(b, op, ins):
    return [choose_series(b, ins[0], ins[1], "GT", op.result)]


@grows(PIECEWISE)
def minimum(b, op, ins):
    return [choose_series(b, ins[0], ins[1], "LT", op.result)]


@grows(PIECEWISE)
def clamp(b, op, ins):
    """clamp(lo, x, hi) = min(max(lo, x), hi), ties averaged as in JAX."""
    lo, x, hi = ins
    t = x[0].type

    def full(s: Series) -> Series:
        if ir.RankedTensorType(s[0].type).shape == ir.RankedTensorType(t).shape:
            return s
        return [builders.broadcast(s[0], ir.RankedTensorType(t).shape, [])] + [
            b.broadcast(c, s[0], ir.RankedTensorType(t).shape, []) for c in s[1:]]

    lo, hi = full(lo), full(hi)
    inner = choose_series(b, lo, x, "GT", builders.maximum(lo[0], x[0]))
    return [choose_series(b, inner, hi, "LT", op.result)]


def _reduce_choose(b: JetBuilder, op: ir.Operation, u: Series) -> Series:
    """reduce max/min: the tied elements' coefficients are averaged, as in JAX."""
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    rank = ir.RankedTensorType(u[0].type).rank
    kept = [d for d in range(rank) if d not in dims]
    out_b = builders.broadcast(op.results[0], builders.shape_of(u[0]), kept)
    mask = builders.convert(builders.compare(u[0], out_b, "EQ"), builders.elem_of(u[0]))
    counts = builders.reduce(mask, dims)
    return [op.results[0]] + [None if u[k] is None else b.div(b.reduce(b.mul(u[k], mask), dims, u[0]), counts)
                               for k in range(1, b.order + 1)]


def _variadic(b: JetBuilder, op: ir.Operation, values: Sequence[ir.Value], inits: Sequence[ir.Value] = (),
              updates: Sequence[ir.Value] = ()) -> list[ir.Value]:
    """`op` (a reduce or reduce_window with scalar `inits`, or a scatter with `updates`
    shaped like its updates; its body filled by the caller) grown to carry `values`
    (shaped like its operand); its results. In a batched or collapsed jet every value and
    update gets the directions axis (a primal broadcast along it, a collapsed K-th
    coefficient as direction 0 and zeros elsewhere, so the K-th result, linear in it,
    sums to the collapsed one) and the results carry it."""
    types = [op.result.type] * len(values)
    attributes = {}
    if b.directions is not None:
        n = b.directions.size
        values = [b.spread(v, op.operands[0], n) for v in values]
        updates = [b.spread(v, op.operands[-1], n) for v in updates]
        types = [b.coefficient_type(t, 1) for t in types]
        attributes = jet_directions.lead_attributes(op, n)
    indices = [op.operands[1]] if op.name == "stablehlo.scatter" else []
    new = builders.regrown(op, [*values, *inits, *indices, *updates], types, regions=1)
    for name, attr in attributes.items():
        new.attributes[name] = attr
    return list(new.results)


def _primal(b: JetBuilder, op: ir.Operation, results: list[ir.Value]) -> ir.Value:
    """The primal of a `_variadic` op: its own (the old op goes) in a standard jet; the
    old op's with directions (the grown op's is broadcast along them)."""
    return results[0] if b.directions is None else op.result


def _polynomial_product(b: JetBuilder, op: ir.Operation, u: Series, init: Series) -> Series:
    """A multiply reduction (reduce or reduce_window) of truncated polynomials, as one
    variadic op whose body multiplies two series: exact at zeros, unlike exp(sum log)."""
    K = b.order
    st = scalar_type(u[0].type)
    if b.directions is not None and has_series(init):
        raise jet_directions.unsupported(op, "an init value with a series")
    results = _variadic(b, op, [b.materialize(t, u[0]) for t in u],
                        [b.materialize(t, init[0]) for t in init])
    builders.fill_region(results[0].owner.regions[0], [st] * (2 * K + 2), _product_body(b))
    return [_primal(b, op, results)] + results[1:]


def _product_body(b: JetBuilder) -> Callable[..., list[ir.Value]]:
    """The body of a variadic op that multiplies two truncated series of scalars."""
    K = b.order
    return lambda *args: [b.cauchy(args[: K + 1], args[K + 1:], k) for k in range(K + 1)]


def _choose_body(order: int, direction: str) -> Callable[..., list[ir.Value]]:
    """The body of a variadic op that combines two (value, coefficients, count) of scalars:
    the winner's by `direction` (GT: max, LT: min), coefficients and counts summed on ties."""

    def body(*args: ir.Value) -> list[ir.Value]:
        left, right = args[: order + 2], args[order + 2:]
        wins = builders.compare(left[0], right[0], direction)
        ties = builders.compare(left[0], right[0], "EQ")
        return [builders.select(wins, left[0], right[0])] + [
            builders.select(ties, builders.add(x, y), builders.select(wins, x, y))
            for x, y in zip(left[1:], right[1:])]

    return body


def _window_choose(b: JetBuilder, op: ir.Operation, u: Series, init: Series, direction: str) -> Series:
    """reduce_window max (direction GT) or min (LT), e.g. cummax: one variadic
    reduce_window carries (value, coefficients, count); the body keeps the
    winner's coefficients and count and sums them on ties, so tied terms are
    averaged as in reduce_max."""
    K = b.order
    st = scalar_type(u[0].type)
    if b.directions is not None and has_series(init):
        raise jet_directions.unsupported(op, "an init value with a series")
    results = _variadic(b, op, [b.materialize(t, u[0]) for t in u] + [b.constant(1, u[0].type)],
                        [init[0]] + [b.constant(0, st) for _ in range(K + 1)])
    builders.fill_region(results[0].owner.regions[0], [st] * (2 * K + 4), _choose_body(K, direction))
    return [_primal(b, op, results)] + [b.div(c, results[K + 1]) if t is not None else None
                          for c, t in zip(results[1: K + 1], u[1:])]


def has_reduction_rule(op: ir.Operation) -> bool:
    """Whether a reduce / reduce_window has a rule here: one result, a body of add,
    multiply, max or min (jet-expand folds the jet of any other body)."""
    return len(op.results) == 1 and builders.reducer_kind(op) in (
        "stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum")


def reduce_like(linear_rule: Rule) -> Rule:
    """reduce / reduce_window by the kind of their body: add, multiply, max, min (only
    reductions `has_reduction_rule` accepts reach it)."""

    def rule(b, op, ins):
        kind = builders.reducer_kind(op)
        if len(op.results) == 1 and kind == "stablehlo.add":
            return linear_rule(b, op, ins)
        if len(op.results) == 1 and kind == "stablehlo.multiply":
            return [_polynomial_product(b, op, ins[0], ins[1])]
        if op.name == "stablehlo.reduce":  # max or min (`has_reduction_rule`; jet-expand folds other bodies)
            return [_reduce_choose(b, op, ins[0])]
        return [_window_choose(b, op, ins[0], ins[1], "GT" if kind == "stablehlo.maximum" else "LT")]

    return rule


SCATTER_KINDS = ("stablehlo.add", "replace", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.minimum")


def scatter_of(linear_rule: Rule) -> Rule:
    """scatter by the kind of its body: add and replace are linear (`linear_rule`); multiply
    multiplies the series of the operand and of the updates that meet at an element, max and
    min keep the winner's series (tied ones averaged, as JAX), each as one variadic scatter,
    exact for repeated indices."""

    def rule(b, op, ins):
        kind = builders.reducer_kind(op)
        if len(op.operands) != 3 or kind not in SCATTER_KINDS:
            raise PassError("jet-expand: stablehlo.scatter has a Taylor rule only for one operand combined by "
                            f"add, replace, multiply, maximum or minimum, not {len(op.operands) // 2} combined "
                            f"by {kind or 'a general body'}", op.location)
        if kind in ("stablehlo.add", "replace"):
            return linear_rule(b, op, ins)
        return [_scatter_series(b, op, ins[0], ins[2], kind)]

    return rule


def _scatter_series(b: JetBuilder, op: ir.Operation, x: Series, u: Series, kind: str) -> Series:
    """The series of a scatter multiply, max or min of operand `x` and updates `u`."""
    K, st = b.order, scalar_type(x[0].type)
    values = [b.materialize(t, x[0]) for t in x]
    updates = [b.materialize(t, u[0]) for t in u]
    if kind == "stablehlo.multiply":
        results = _variadic(b, op, values, updates=updates)
        builders.fill_region(results[0].owner.regions[0], [st] * (2 * K + 2), _product_body(b))
        return [_primal(b, op, results)] + results[1:]
    results = _variadic(b, op, values + [b.constant(1, x[0].type)], updates=updates + [b.constant(1, u[0].type)])
    builders.fill_region(results[0].owner.regions[0], [st] * (2 * K + 4),
                         _choose_body(K, "GT" if kind == "stablehlo.maximum" else "LT"))
    return [_primal(b, op, results)] + [None if x[k] is None and u[k] is None else b.div(results[k], results[K + 1])
                                        for k in range(1, K + 1)]


def sort(b, op, ins):
    """The coefficients ride along as extra sort operands: the permutation is the primal's."""
    if b.directions is not None:
        return _sort_with_directions(b, op, ins)
    extra = coefficients(b, ins, [i for i, s in enumerate(ins) if has_series(s)])
    operands = list(op.operands) + extra
    new = builders.regrown(op, operands, [v.type for v in operands], regions=1)
    old_block = op.regions[0].blocks[0]
    types = [a.type for a in old_block.arguments] + [scalar_type(v.type) for v in extra for _ in range(2)]
    builders.move_block(old_block, new.regions[0], types)
    return split_results(b, list(new.results), [has_series(s) for s in ins])


def _sort_with_directions(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Series]:
    """Per size of the directions axis (R, and 1 for a collapsed K-th coefficient), one
    more sort of the primal operands broadcast along it, with those coefficients riding
    along; the primal results stay the op's own."""
    with_series = [i for i, s in enumerate(ins) if has_series(s)]
    outs = [b.series(r) for r in op.results]
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    for n in sorted({b.lead_size(k) for k in range(1, b.order + 1)}):
        ks = [k for k in range(1, b.order + 1) if b.lead_size(k) == n]
        shape = builders.shape_of(op.operands[0])
        keys = [builders.broadcast(v, [n, *shape], range(1, len(shape) + 1)) for v in op.operands]
        extra = [b.coefficient(ins[i][k], ins[i][0], k) for i in with_series for k in ks]
        operands = keys + extra
        new = builders.regrown(op, operands, [v.type for v in operands], regions=1)
        new.attributes["dimension"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim + 1)
        comparator = op.clone(ip=ir.InsertionPoint(new))
        block = comparator.regions[0].blocks[0]
        builders.move_block(block, new.regions[0],
                            [a.type for a in block.arguments] + [scalar_type(v.type) for v in extra for _ in range(2)])
        comparator.erase()
        for result, (i, k) in zip(list(new.results)[len(keys):], [(i, k) for i in with_series for k in ks]):
            outs[i][k] = result
    return outs


def linear_algebra(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
    """The Taylor rule of a spelling of a linear-algebra meaning (`linalg_rules.jet`); that
    module is imported when a module first holds one, so a dense program loads none of it."""
    from hlopt.passes.autodiff import linalg_rules

    return linalg_rules.jet(b, op, ins)


# --- custom calls, by target (the op table's `CALL_ENTRIES`) -----------------------------------

def stop_gradient(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
    """The stop_gradient marker: a zero series; the marker stays (the pass removes it last,
    so an enclosing jet sees it too)."""
    check_stop_gradient(op)
    return [b.series(op.result)]


def one_operand(rule: Rule) -> Rule:
    """`rule` for a custom call of one operand (the partitioner's annotations); a call of
    another arity is refused."""

    def checked(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
        if len(op.operands) != 1:
            raise PassError(f"jet-expand: no Taylor rule for 'stablehlo.custom_call' @{call_target(op)} with "
                            f"{len(op.operands)} operands (it takes one)", op.location)
        return rule(b, op, ins)

    checked.growth = growth_of(rule)
    return checked


# What a refusal of a custom call without rules says to do (but for an hlopt annotation, which another pass lowers).
ADD_CALL_RULES = "a custom call's rules are an entry of CALL_ENTRIES in passes/autodiff/table.py"


def unknown_call(b: JetBuilder, op: ir.Operation, ins: list[Series]) -> list[Optional[Series]]:
    """A custom call whose target has no entry in the op table: refused, naming the target."""
    target = call_target(op)
    hint = "" if lowering_pass_for(target) else f" ({ADD_CALL_RULES})"
    raise PassError(f"jet-expand: no Taylor rule for 'stablehlo.custom_call' @{target}{hint}", op.location)
