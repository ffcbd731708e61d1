"""Linear algebra in `jet-expand` and `vjp-expand`: one record per operation, keyed on its meaning.

JAX spells a factorization or a triangular solve as a LAPACK custom call on CPU
(`@lapack_{s,d,c,z}potrf_ffi`, `...trsm_ffi`, `...getrf_ffi`, `...syevd_ffi` /
`...heevd_ffi`, `...geqrf_ffi`, the Householder product `...orgqr_ffi` /
`...ungqr_ffi` and the SVD `...gesdd_ffi` / `...gesvd_ffi`) and as
`stablehlo.cholesky` / `stablehlo.triangular_solve` elsewhere; the op table
`passes/optable/linalg.py` lists those spellings and names each meaning's
record here: `Cholesky`, `TriangularSolve`, `LU`, `Eigh`, `QR`,
`HouseholderProduct` or `SVD`. `meaning(op)` finds the entry and builds its record
from either spelling (`Record.from_call` reads the call's attribute characters,
`Record.from_op` the op's attributes). Each record holds its Taylor rule (`jet`,
order by order, with the derivation in its docstring) and its reverse-mode rule
(`vjp`) side by side; the op table (`passes/autodiff/table.py`) gives every
spelling the rules `jet` and `vjp` below, which find its record (through
`jet_rules.linear_algebra` and `vjp_rules.linear_algebra`, which import this module
when a program first holds a spelling).

Matrices are the last two dimensions; leading ones are batch dimensions. The
rules build plain StableHLO: `triangular_solve` on the primal factor,
`dot_general`, masks by `iota` and `select` (and, for LU's row permutation, a
`while` over the pivots). In a directions-batched or collapsed jet a coefficient
carries a leading directions axis that the primal lacks: a solve or product of
it with a primal folds that axis into a free matrix dimension (one solve for all
directions), a product of two coefficients batches over it, and the JetBuilder's
sums reduce the batched terms of the collapsed K-th coefficient over it.
Complex matrices follow JAX's convention in reverse mode: the cotangent of
x -> M x is ct -> M^T ct (no conjugation), i.e. the conjugate of the adjoint map
applied to the conjugate cotangent, which is how `vjp` rules are written here.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING, Optional

from hlopt.passes.ir import builders
from hlopt.passes.base import PassError
from hlopt.passes.optable import linalg
from hlopt.passes.optable.kernel_types import Config
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.ir.walk import call_target

if TYPE_CHECKING:
    from hlopt.passes.autodiff.jet_rules import JetBuilder, Series
    from hlopt.passes.autodiff.vjp_rules import VjpBuilder

Term = Optional[ir.Value]
Value = ir.Value

# --- matrices: masks, adjoints, products and solves (with a directions axis) -------------


def _is_complex(v: Value) -> bool:
    return isinstance(builders.elem_of(v), ir.ComplexType)


def _conj(v: Value) -> Value:
    return builders.complex_(builders.real(v), builders.neg(builders.imag(v))) if _is_complex(v) else v


def _swap_last(v: Value) -> Value:
    r = len(builders.shape_of(v))
    return builders.transpose(v, [*range(r - 2), r - 1, r - 2])


def _op(v: Value, how: str) -> Value:
    """`v` (N), its transpose (T) or its adjoint (C), over the last two dimensions."""
    if how == "N":
        return v
    t = _swap_last(v)
    return _conj(t) if how == "C" else t


def _offsets(v: Value) -> Value:
    """col - row for every element of `v` (i32, `v`'s shape)."""
    shape = builders.shape_of(v)
    r = len(shape)
    return builders.sub(builders.iota(shape, r - 1, builders.i32()), builders.iota(shape, r - 2, builders.i32()))


def _where_offset(v: Value, direction: str, k: int, other: Value | None = None) -> Value:
    """`v` where col - row `direction` k (`LE`, `GE`, `EQ`, `LT`, `GT`), else `other` (zero)."""
    shape = builders.shape_of(v)
    pred = builders.compare(_offsets(v), builders.full(shape, k, builders.i32()), direction)
    return builders.select(pred, v, other if other is not None else builders.zeros_like(v))


def _tril(v: Value, k: int = 0) -> Value:
    return _where_offset(v, "LE", k)


def _triu(v: Value, k: int = 0) -> Value:
    return _where_offset(v, "GE", k)


def _phi(v: Value) -> Value:
    """The lower triangle of `v` with its diagonal halved."""
    half = builders.mul(v, builders.full(builders.shape_of(v), 0.5, builders.elem_of(v)))
    return _tril(_where_offset(v, "NE", 0, half))


def _eye_plus(v: Value) -> Value:
    """`v` with its diagonal replaced by ones (a unit-triangular factor from a packed one)."""
    return _where_offset(v, "NE", 0, builders.full(builders.shape_of(v), 1, builders.elem_of(v)))


def _real_diagonal(v: Value) -> Value:
    """The diagonal of `v` (zeros elsewhere), its imaginary part dropped."""
    d = _where_offset(v, "EQ", 0)
    return builders.convert(builders.real(d), builders.elem_of(v)) if _is_complex(v) else d


def _hermitian(a: Value, lower: bool) -> Value:
    """The Hermitian matrix LAPACK reads from the `lower` (or upper) triangle of `a`: that
    strict triangle, its adjoint, and the real part of the diagonal."""
    strict = _tril(a, -1) if lower else _triu(a, 1)
    return builders.add(builders.add(strict, _op(strict, "C")), _real_diagonal(a))


def _hermitian_adjoint(g: Value, lower: bool) -> Value:
    """The adjoint of `_hermitian` (real inner product): a cotangent G of the Hermitian
    matrix goes to the strict triangle as G + G^H and to the diagonal as its real part."""
    both = builders.add(g, _op(g, "C"))
    return builders.add(_tril(both, -1) if lower else _triu(both, 1), _real_diagonal(g))


def _lead(v: Value, primal: Value) -> bool:
    """Whether `v`, a coefficient of a value like `primal`, carries the directions axis."""
    return len(builders.shape_of(v)) > len(builders.shape_of(primal))


def _mm(x: Value, y: Value, lead_x: bool, lead_y: bool, tx: str = "N", ty: str = "N") -> Value:
    """op(x) @ op(y) over the last two dimensions (`tx`, `ty`: N, T or C), batched over
    the leading ones; a directions axis (`lead_x`, `lead_y`) stays leading in the result."""
    if tx == "C":
        x, tx = _conj(x), "T"
    if ty == "C":
        y, ty = _conj(y), "T"
    ox, oy = int(lead_x), int(lead_y)
    nb = len(builders.shape_of(x)) - 2 - ox
    xc = ox + nb + (1 if tx == "N" else 0)
    yc = oy + nb + (0 if ty == "N" else 1)
    if lead_x and lead_y:
        batch_x, batch_y = [0, *range(1, nb + 1)], [0, *range(1, nb + 1)]
    else:
        batch_x, batch_y = list(range(ox, ox + nb)), list(range(oy, oy + nb))
    out = builders.dot_general(x, y, lhs_batch=batch_x, rhs_batch=batch_y, lhs_contract=[xc], rhs_contract=[yc],
                               elem=builders.elem_of(x), precision_config=None)
    if lead_x != lead_y:  # the axis is a free dimension: at nb (lhs) or nb + 1 (rhs)
        at = nb if lead_x else nb + 1
        out = builders.transpose(out, [at, *[d for d in range(nb + 3) if d != at]])
    return out


_TRANSPOSE_ATTR = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "C": "ADJOINT"}  # `how` -> stablehlo's transpose_a


def _triangular_solve(a: Value, rhs: Value, lead: bool, left: bool, lower: bool, how: str, unit: bool) -> Value:
    """X with op(A) X = rhs (`left`) or X op(A) = rhs, A the `lower` (or upper) triangle of
    `a` (unit diagonal if `unit`), op by `how` (N, T, C): one `stablehlo.triangular_solve`,
    a directions axis of `rhs` (`lead`) folded into its free matrix dimension."""
    transpose = _TRANSPOSE_ATTR[how]
    if not lead:
        return stablehlo.triangular_solve(a, rhs, left, lower, unit, stablehlo.TransposeAttr.get(transpose))
    shape = builders.shape_of(rhs)
    r, n, batch = len(shape), shape[0], shape[1:-2]
    nb, (m, p) = len(batch), shape[-2:]
    if left:  # [n, *batch, m, p] -> [*batch, m, n * p]
        perm, folded = [*range(1, nb + 2), 0, r - 1], [*batch, m, n * p]
        unfolded = [*batch, m, n, p]
    else:  # [n, *batch, m, p] -> [*batch, n * m, p]
        perm, folded = [*range(1, nb + 1), 0, r - 2, r - 1], [*batch, n * m, p]
        unfolded = [*batch, n, m, p]
    x = builders.reshape(builders.transpose(rhs, perm), folded)
    x = stablehlo.triangular_solve(a, x, left, lower, unit, stablehlo.TransposeAttr.get(transpose))
    return builders.transpose(builders.reshape(x, unfolded), [perm.index(d) for d in range(r)])


def product(x: Value, y: Value, tx: str = "N", ty: str = "N") -> Value:
    """op(x) @ op(y) over the last two dimensions (`tx`, `ty`: N, T or C), batched over the leading ones."""
    return _mm(x, y, False, False, tx, ty)


def triangular_solve(a: Value, rhs: Value, *, left: bool, lower: bool, how: str, unit: bool) -> Value:
    """X with op(A) X = rhs (`left`) or X op(A) = rhs: one `stablehlo.triangular_solve` (see `_triangular_solve`)."""
    return _triangular_solve(a, rhs, False, left, lower, how, unit)


def _two_sided(b: "JetBuilder", s: Term, like: Value, k: int, a: Value, left: tuple[bool, str, bool],
               right: tuple[bool, str, bool]) -> tuple[Term, bool]:
    """op_l(A_l)^{-1} S op_r(A_r)^{-1} for S, coefficient k of a value like `like`, with
    triangles of `a` named by `left` and `right` (lower, N/T/C, unit diagonal), and whether
    the result carries the directions axis; (None, False) if S is known to be zero."""
    if s is None:
        return None, False
    s = b.conform(s, like, k)
    lead = _lead(s, like)
    x = _triangular_solve(a, s, lead, True, *left)
    return _triangular_solve(a, x, lead, False, *right), lead


def _check_layouts(op: ir.Operation, name: str) -> None:
    """Refuse LAPACK matrices (operands and results of the first operand's rank) not laid
    out as JAX lays them out (column-major, batch dimensions major), whose triangles the
    attributes would not name."""
    r = ir.RankedTensorType(op.operands[0].type).rank
    want = [r - 2, r - 1, *reversed(range(r - 2))]
    for attr in ("operand_layouts", "result_layouts"):
        if attr not in op.attributes:
            continue
        values = [v.type for v in (op.operands if attr == "operand_layouts" else op.results)]
        for i, (layout, t) in enumerate(zip(ir.ArrayAttr(op.attributes[attr]), values)):
            got = [int(x) for x in ir.DenseIntElementsAttr(layout)]
            if ir.RankedTensorType(t).rank == r and got != want:
                raise PassError(f"{name}: @{call_target(op)} {attr}[{i}] is {got}; the linear-algebra rules take "
                                f"JAX's column-major layout {want}", op.location)


def _elem_check(op: ir.Operation, name: str) -> None:
    if not builders.is_differentiable(op.operands[0].type):
        raise PassError(f"{name}: {op.name} of {op.operands[0].type} has no derivative", op.location)


# --- the operations -----------------------------------------------------------------------


class Record(abc.ABC):
    """The rules of one linear-algebra meaning, built from a spelling of it; `linalg.TABLE`
    names the record of each entry."""

    @classmethod
    def from_call(cls, chars: Config, op: ir.Operation, name: str) -> "Record":
        """The record of the LAPACK call `op`, whose attributes hold `chars`; a mode without
        a rule is refused with a PassError of pass `name`."""
        return cls()

    @classmethod
    def from_op(cls, op: ir.Operation) -> "Record":
        """The record of the StableHLO op `op`."""
        return cls()

    @abc.abstractmethod
    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """The Taylor coefficients of `op`'s results from those of its operands, `ins`."""

    @abc.abstractmethod
    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """The cotangents of `op`'s operands (those `wants` asks for) from its results' `cts`."""


@dataclasses.dataclass(frozen=True)
class Cholesky(Record):
    """A = L L^H from the `lower` triangle of A (or A = U^H U from the upper one). Only
    that triangle is read (`_hermitian`: it, its adjoint, a real diagonal); the
    LAPACK form (`packed`) returns the other triangle of A unchanged, the StableHLO form
    an implementation-defined one, whose coefficients are zero here."""

    lower: bool
    packed: bool

    @classmethod
    def from_call(cls, chars: Config, op: ir.Operation, name: str) -> "Cholesky":
        return cls(lower=chars["uplo"] == "L", packed=True)

    @classmethod
    def from_op(cls, op: ir.Operation) -> "Cholesky":
        return cls(lower="lower" in op.attributes and ir.BoolAttr(op.attributes["lower"]).value, packed=False)

    def _factor(self, result: Value) -> Value:
        """The lower factor L (for an upper Cholesky, U^H)."""
        return _tril(result) if self.lower else _op(_triu(result), "C")

    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """L(t) L(t)^H = A(t) order by order: A_k = sum_{i=0..k} L_i L_{k-i}^H, so
        L_0 L_k^H + L_k L_0^H = S_k with S_k = A_k - sum_{i=1..k-1} L_i L_{k-i}^H. With
        M = L_0^{-1} L_k (lower triangular, real diagonal), M + M^H = L_0^{-1} S_k L_0^{-H}:
        M is the lower triangle of the right side with its diagonal halved (Phi), so
        L_k = L_0 Phi(L_0^{-1} S_k L_0^{-H}): two triangular solves and a product per order.
        An upper factor is U_k = L_k^H; the unread triangle of the LAPACK result is A's."""
        (a,), x0 = ins, op.results[0]
        l0 = self._factor(x0)
        ls: list[Term] = [l0] + [None] * b.order
        out = b.series(x0)
        for k in range(1, b.order + 1):
            ak = None if a[k] is None else _hermitian(a[k], self.lower)
            s = b.sub(ak, b.total(_product_terms(ls, ls, k, x0, x0, lo=1, hi=k - 1, ty="C")))
            y, lead = _two_sided(b, s, x0, k, l0, (True, "N", False), (True, "C", False))
            if y is None:
                continue
            ls[k] = _mm(l0, _phi(y), False, lead)
            own = ls[k] if self.lower else _op(ls[k], "C")
            if self.packed and a[k] is not None:
                rest = _tril(a[k], -1) if not self.lower else _triu(a[k], 1)
                own = builders.add(own, rest)
            out[k] = own
        return [out] + [None] * (len(op.results) - 1)

    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """dL = L Phi(L^{-1} dA_h L^{-H}) for the Hermitian dA_h the op reads, so with the
        real inner product <X, Y> = Re tr(X^H Y) and Phi self-adjoint the adjoint map is
        G = L^{-H} Phi(L^H tril(Lbar)) L^{-1} (upper: U = L^H, so Lbar = triu(Ubar)^H), and
        Abar = `_hermitian_adjoint`(G) for the triangle read; the LAPACK result's
        other triangle is A's, so its cotangent passes straight through."""
        ct = cts[0]
        if ct is None or not wants[0]:
            return [None]
        ct = _conj(ct)
        l0 = self._factor(op.results[0])
        lbar = _tril(ct) if self.lower else _op(_triu(ct), "C")
        g = _phi(_mm(l0, lbar, False, False, "C", "N"))
        g = _triangular_solve(l0, g, False, True, True, "C", False)
        g = _triangular_solve(l0, g, False, False, True, "N", False)
        abar = _hermitian_adjoint(g, self.lower)
        if self.packed:
            abar = builders.add(abar, _triu(ct, 1) if self.lower else _tril(ct, -1))
        return [_conj(abar)]


@dataclasses.dataclass(frozen=True)
class TriangularSolve(Record):
    """X with op(A) X = B (`left`) or X op(A) = B, A the `lower` (or upper) triangle of
    its operand (diagonal taken as ones if `unit`), op = N, T or C (`how`)."""

    left: bool
    lower: bool
    how: str
    unit: bool

    @classmethod
    def from_call(cls, chars: Config, op: ir.Operation, name: str) -> "TriangularSolve":
        return cls(left=chars["side"] == "L", lower=chars["uplo"] == "L", how=chars["trans_x"],
                   unit=chars["diag"] == "U")

    @classmethod
    def from_op(cls, op: ir.Operation) -> "TriangularSolve":
        attr = lambda key: ir.BoolAttr(op.attributes[key]).value  # noqa: E731
        transpose = stablehlo.TransposeAttr(op.attributes["transpose_a"]).value
        how = next(h for h, name in _TRANSPOSE_ATTR.items() if name == transpose)
        return cls(attr("left_side"), attr("lower"), how, attr("unit_diagonal"))

    def _read(self, a: Value) -> Value:
        """The part of `a` the solve reads (the diagonal is fixed when `unit`)."""
        k = 1 if self.unit else 0
        return _tril(a, -k) if self.lower else _triu(a, k)

    def _solve(self, a0: Value, rhs: Value, lead: bool, how: str | None = None) -> Value:
        return _triangular_solve(a0, rhs, lead, self.left, self.lower, how or self.how, self.unit)

    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """op(A(t)) X(t) = B(t) order by order (left; the right side mirrors it):
        sum_{i=0..k} op(A_i) X_{k-i} = B_k, so op(A_0) X_k = B_k - sum_{i=1..k} op(A_i) X_{k-i}:
        one solve with the primal matrix per order. A_i is the read part of A's coefficient."""
        (a, rhs), x0, a0 = ins, op.results[0], op.operands[0]
        xs: list[Term] = [x0] + [None] * b.order
        reads = [None] + [None if t is None else self._read(t) for t in a[1:]]
        for k in range(1, b.order + 1):
            products = []
            for i in range(1, k + 1):
                if reads[i] is None or xs[k - i] is None:
                    continue
                la, lx = _lead(reads[i], a0), _lead(xs[k - i], x0)
                products.append(_mm(reads[i], xs[k - i], la, lx, self.how, "N") if self.left else
                                _mm(xs[k - i], reads[i], lx, la, "N", self.how))
            r = b.sub(rhs[k], b.total(products))
            if r is not None:
                r = b.conform(r, x0, k)
                xs[k] = self._solve(a0, r, _lead(r, x0))
        return [xs]

    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """X = op(A)^{-1} B (left): Bbar = op(A)^{-H} Xbar, a solve with the adjoint op, and
        dX = -op(A)^{-1} op(dA) X gives op(A)bar = -Bbar X^H, hence Abar = op*(-Bbar X^H)
        masked to the part read. Right: Bbar = Xbar op(A)^{-H}, op(A)bar = -X^H Bbar."""
        (ct,), a0, x0 = cts, op.operands[0], op.results[0]
        if ct is None:
            return [None, None]
        ct = _conj(ct)
        if self.how == "T" and _is_complex(a0):  # op(A)^H = conj(A): solve A conj(Y) = conj(Xbar)
            bbar = _conj(self._solve(a0, _conj(ct), False, "N"))
        else:
            bbar = self._solve(a0, ct, False, {"N": "C", "T": "N", "C": "N"}[self.how])
        abar = None
        if wants[0]:
            g = _mm(bbar, x0, False, False, "N", "C") if self.left else _mm(x0, bbar, False, False, "C", "N")
            abar = _conj(self._read(builders.neg(_op(g, {"N": "N", "T": "T", "C": "C"}[self.how]))))
        return [abar, _conj(bbar) if wants[1] else None]


@dataclasses.dataclass(frozen=True)
class LU(Record):
    """P A = L U with partial pivoting (LAPACK getrf): the packed factors (L strictly
    below the diagonal, its unit diagonal implied, U on and above it), the pivots (the
    1-based row swaps, in order) and an info code. Square matrices."""

    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """The pivots stay the primal's (piecewise constant), so (P A)_k = sum_{i=0..k} L_i U_{k-i}:
        L_0 U_k + L_k U_0 = S_k with S_k = P A_k - sum_{i=1..k-1} L_i U_{k-i}. Then
        X = L_0^{-1} S_k U_0^{-1} = L_0^{-1} L_k + U_k U_0^{-1}, the first strictly lower
        (L_k has a zero diagonal), the second upper, so L_k = L_0 tril(X, -1) and
        U_k = triu(X) U_0; the packed coefficient is L_k + U_k."""
        (a,), lu0 = ins, op.results[0]
        _square(op, "jet-expand")
        perm = _permutation_matrix(op.results[1], lu0)
        l0, u0 = _eye_plus(_tril(lu0)), _triu(lu0)
        ls: list[Term] = [l0] + [None] * b.order
        us: list[Term] = [u0] + [None] * b.order
        out = b.series(lu0)
        for k in range(1, b.order + 1):
            pa = None if a[k] is None else _mm(perm, a[k], False, _lead(a[k], lu0))
            s = b.sub(pa, b.total(_product_terms(ls, us, k, lu0, lu0, lo=1, hi=k - 1)))
            x, lead = _two_sided(b, s, lu0, k, lu0, (True, "N", True), (False, "N", False))
            if x is None:
                continue
            ls[k] = _mm(l0, _tril(x, -1), False, lead)
            us[k] = _mm(_triu(x), u0, lead, False)
            out[k] = builders.add(ls[k], us[k])
        return [out] + [None] * (len(op.results) - 1)

    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """d(LU) = L tril(X, -1) + triu(X) U with X = L^{-1} P dA U^{-1} (see `jet`); the
        first term is strictly lower, the second upper, so Xbar = tril(L^H tril(LUbar, -1), -1)
        + triu(triu(LUbar) U^H), and Abar = P^T L^{-H} Xbar U^{-H}."""
        ct = cts[0]
        if ct is None or not wants[0]:
            return [None]
        _square(op, "vjp-expand")
        ct, lu0 = _conj(ct), op.results[0]
        l0, u0 = _eye_plus(_tril(lu0)), _triu(lu0)
        xbar = builders.add(_tril(_mm(l0, _tril(ct, -1), False, False, "C", "N"), -1),
                            _triu(_mm(_triu(ct), u0, False, False, "N", "C")))
        g = _triangular_solve(lu0, xbar, False, True, True, "C", True)
        g = _triangular_solve(lu0, g, False, False, False, "C", False)
        return [_conj(_mm(_permutation_matrix(op.results[1], lu0), g, False, False, "T", "N"))]


@dataclasses.dataclass(frozen=True)
class Eigh(Record):
    """A V = V diag(w), V unitary, w ascending, from the `lower` (or upper) triangle of
    the Hermitian A (LAPACK syevd / heevd, eigenvectors computed: results V, w, info)."""

    lower: bool

    @classmethod
    def from_call(cls, chars: Config, op: ir.Operation, name: str) -> "Eigh":
        if chars["mode"] != "V":
            raise PassError(f"{name}: @{call_target(op)} without eigenvectors (mode {chars['mode']!r}) has no "
                            "rule here: the rules need the eigenvectors (compute_eigenvectors=True)", op.location)
        return cls(lower=chars["uplo"] == "L")

    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """Distinct eigenvalues. In the eigenbasis, A~_i = V_0^H A_i V_0 and C_k = V_0^H V_k
        (C_0 = I). Order k of A V = V diag(w), times V_0^H:
        sum_{i=0..k} A~_i C_{k-i} = sum_{i=0..k} C_i diag(w_{k-i}), so with
        R_k = sum_{i=1..k} A~_i C_{k-i} - sum_{i=1..k-1} C_i diag(w_{k-i}):
        diag(w_0) C_k - C_k diag(w_0) + R_k = diag(w_k), i.e. w_k = diag(R_k) and
        C_k[a, b] = R_k[a, b] / (w_0[b] - w_0[a]) off the diagonal. The diagonal is the
        gauge JAX's derivative follows (V^H V' has a zero diagonal along the curve, which
        keeps V^H V = I): diag(C_k) = -(1/k) sum_{i=1..k-1} (k - i) diag(C_i^H C_{k-i}).
        V_k = V_0 C_k. At a degenerate eigenvalue (w_0[a] = w_0[b], a != b) the
        eigenvectors are not differentiable: their coefficients, and the eigenvalues' from
        order 2 on, divide by zero and come out inf or NaN, as JAX's own derivatives do."""
        (a,), v0, w0 = ins, op.results[0], op.results[1]
        shape = builders.shape_of(v0)
        real = builders.elem_of(w0)
        gaps = builders.sub(builders.broadcast(w0, shape, [*range(len(shape) - 2), len(shape) - 1]),
                            builders.broadcast(w0, shape, range(len(shape) - 1)))
        eye = _where_offset(builders.full(shape, 1, real), "EQ", 0)
        # 1 / (w_0[b] - w_0[a]) off the diagonal, 0 on it (the diagonal is set apart)
        inverse_gaps = _where_offset(builders.div(builders.full(shape, 1, real), builders.add(gaps, eye)), "NE", 0)
        inverse_gaps = builders.convert(inverse_gaps, builders.elem_of(v0))
        rotated: list[Term] = [None] + [None if t is None else _mm(_mm(v0, _hermitian(t, self.lower), False, _lead(t, v0), "C"),
                                                                    v0, _lead(t, v0), False) for t in a[1:]]
        cs: list[Term] = [None] * (b.order + 1)  # C_0 = I is implied
        ws, vs = b.series(w0), b.series(v0)
        for k in range(1, b.order + 1):
            terms = [rotated[k]] + [_mm(rotated[i], cs[k - i], _lead(rotated[i], v0), _lead(cs[k - i], v0))
                                    for i in range(1, k) if rotated[i] is not None and cs[k - i] is not None]
            terms += [builders.neg(_scale_columns(cs[i], ws[k - i])) for i in range(1, k)
                      if cs[i] is not None and ws[k - i] is not None]
            r = b.total(terms)
            if r is None:
                continue
            r = b.conform(r, v0, k)
            ws[k] = builders.real(_diagonal(r)) if _is_complex(r) else _diagonal(r)
            gauge = b.total([b.scale(_diagonal(_mm(cs[i], cs[k - i], _lead(cs[i], v0), _lead(cs[k - i], v0), "C")),
                                     -(k - i) / k) for i in range(1, k) if cs[i] is not None and cs[k - i] is not None])
            cs[k] = b.mul(r, inverse_gaps)
            if gauge is not None:
                cs[k] = b.add(cs[k], _embed_diagonal(b.conform(gauge, w0, k)))
            vs[k] = _mm(v0, cs[k], False, _lead(cs[k], v0))
        return [vs, ws, None]

    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """dw = diag(V^H dA_h V) and dV = V (F o (V^H dA_h V)) with F[a, b] = 1 / (w[b] - w[a])
        off the diagonal, 0 on it (see `jet`); F o is self-adjoint, so the adjoint map is
        G = V (diag(wbar) + F o (V^H Vbar)) V^H, and Abar = `_hermitian_adjoint`(G) for
        the triangle read (as for `Cholesky`)."""
        vbar, wbar = cts[0], cts[1]
        if (vbar is None and wbar is None) or not wants[0]:
            return [None]
        v0, w0 = op.results[0], op.results[1]
        shape = builders.shape_of(v0)
        inner = None
        if vbar is not None:
            gaps = builders.sub(builders.broadcast(w0, shape, [*range(len(shape) - 2), len(shape) - 1]),
                                builders.broadcast(w0, shape, range(len(shape) - 1)))
            eye = _where_offset(builders.full(shape, 1, builders.elem_of(w0)), "EQ", 0)
            f = _where_offset(builders.div(builders.full(shape, 1, builders.elem_of(w0)), builders.add(gaps, eye)),
                              "NE", 0)
            inner = builders.mul(_mm(v0, _conj(vbar), False, False, "C"), builders.convert(f, builders.elem_of(v0)))
        if wbar is not None:
            inner = b.add(inner, _embed_diagonal(builders.convert(wbar, builders.elem_of(v0))))
        g = _mm(_mm(v0, inner, False, False), v0, False, False, "N", "C")
        return [_conj(_hermitian_adjoint(g, self.lower))]


def _reflectors(packed: Value) -> Value:
    """The unit lower-trapezoidal Householder vectors V stored below the diagonal of `packed`."""
    return _eye_plus(_tril(packed))


def _rows(tau: Value, m: Value) -> Value:
    """diag(tau) m: row i of the matrices of `m` times tau[i] (`tau` one vector per matrix;
    either may carry a directions axis, which then leads both)."""
    ts, ms = builders.shape_of(tau), builders.shape_of(m)
    if len(ts) == len(ms) - 1:
        return builders.mul(builders.broadcast(tau, ms, range(len(ts))), m)
    if len(ts) < len(ms) - 1:  # m carries the axis
        shape = ms[1:]
        return builders.mul(builders.broadcast(builders.broadcast(tau, shape, range(len(ts))), ms,
                                               range(1, len(ms))), m)
    shape = [ts[0], *ms]  # tau carries the axis
    return builders.mul(builders.broadcast(tau, shape, range(len(ts))), builders.broadcast(m, shape, range(1, len(shape))))


def _gram(v: Value) -> Value:
    return _triu(_mm(v, v, False, False, "C", "N"), 1)


def _wy(v: Value, tau: Value) -> tuple[Value, Value]:
    """(N, W) of the compact WY form H_1 ... H_n = I - V T V^H, n = the number of reflectors
    (the columns of V): T = N^{-1} diag(tau) with N = I + diag(tau) striu(V^H V) (unit upper;
    LAPACK's larft recurrence T[:i, i] = -tau_i T[:i, :i] V[:, :i]^H v_i, inverted blockwise:
    T^{-1} = striu(V^H V) + diag(1 / tau), scaled by diag(tau) so that tau = 0 is allowed),
    and W = T V_1^H (V_1: the first n rows), so the first n columns of I - Q are V W."""
    n = builders.shape_of(v)[-1]
    big_n = _eye_plus(_rows(tau, _gram(v)))
    return big_n, _triangular_solve(big_n, _rows(tau, _op(_top(v, n), "C")), False, True, False, "N", True)


def _top(v: Value, n: int) -> Value:
    """The first `n` rows of the matrices of `v`."""
    return builders.slice_dim(v, len(builders.shape_of(v)) - 2, 0, n)


def _columns(v: Value, n: int) -> Value:
    """The first `n` columns of the matrices (or vectors) of `v`."""
    return builders.slice_dim(v, len(builders.shape_of(v)) - 1, 0, n)


def _product_terms(xs: list[Term], ys: list[Term], k: int, like_x: Value, like_y: Value, lo: int = 0,
                   hi: int | None = None, tx: str = "N", ty: str = "N") -> list[Value]:
    """op(x_i) op(y_{k-i}) for i = lo..hi (k by default), the known-zero ones left out."""
    hi = k if hi is None else hi
    return [_mm(xs[i], ys[k - i], _lead(xs[i], like_x), _lead(ys[k - i], like_y), tx, ty)
            for i in range(lo, hi + 1) if xs[i] is not None and ys[k - i] is not None]


def _row_terms(taus: list[Term], xs: list[Term], k: int, lo: int = 0) -> list[Value]:
    """diag(tau_i) x_{k-i} for i = lo..k, the known-zero ones left out."""
    return [_rows(taus[i], xs[k - i]) for i in range(lo, k + 1) if taus[i] is not None and xs[k - i] is not None]


@dataclasses.dataclass(frozen=True)
class HouseholderProduct(Record):
    """Q = H_1 ... H_n (the first n columns), H_i = I - tau_i v_i v_i^H, from the packed
    reflectors (LAPACK orgqr / ungqr): m x n matrices with m >= n and n reflectors."""

    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """Q = I - V Y with Y = N^{-1} diag(tau) V_1^H (`_wy`), N = I + diag(tau) striu(V^H V).
        Order k: G_k = sum_i V_i^H V_{k-i}, N_k = sum_i diag(tau_i) striu(G_{k-i}),
        N_0 Y_k = sum_i diag(tau_i) V_{1,k-i}^H - sum_{i=1..k} N_i Y_{k-i} (unit upper), and
        Q_k = -sum_i V_i Y_{k-i}."""
        (packed, tau), q0 = ins, op.results[0]
        _householder_shape(op, "jet-expand")
        n = builders.shape_of(q0)[-1]
        vs = [_reflectors(op.operands[0])] + [None if t is None else _tril(t, -1) for t in packed[1:]]
        n0, y0 = _wy(vs[0], tau[0])
        ns: list[Term] = [n0] + [None] * b.order
        ys: list[Term] = [y0] + [None] * b.order
        tops = [None if v is None else _op(_top(v, n), "C") for v in vs]
        out = b.series(q0)
        for k in range(1, b.order + 1):
            grams = [None if g is None else _triu(g, 1)
                     for g in [b.total(_product_terms(vs, vs, j, vs[0], vs[0], tx="C")) for j in range(k + 1)]]
            grams[0] = _gram(vs[0])
            ns[k] = b.total(_row_terms(tau, grams, k))
            rhs = b.sub(b.total(_row_terms(tau, tops, k)), b.total(_product_terms(ns, ys, k, n0, y0, lo=1)))
            if rhs is not None:
                rhs = b.conform(rhs, y0, k)
                ys[k] = _triangular_solve(n0, rhs, _lead(rhs, y0), True, False, "N", True)
            out[k] = b.neg(b.total(_product_terms(vs, ys, k, vs[0], y0)))
        return [out]

    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """dQ = -(dV Y + V dY), N dY = dD V_1^H + D dV_1^H - dN Y, dN = dD striu(G)
        + D striu(dV^H V + V^H dV), D = diag(tau) (see `jet`). Adjoint: Z = N^{-H} (-V^H Qbar),
        Nbar = -Z Y^H, E = striu(D^H Nbar); Vbar = -Qbar Y^H + [Z^H D; 0] + V (E + E^H), its
        strict lower part to the packed operand; taubar = diag(Z V_1 + Nbar striu(G)^H)."""
        (ct,), (packed, tau) = cts, op.operands
        if ct is None:
            return [None, None]
        _householder_shape(op, "vjp-expand")
        ct = _conj(ct)
        n = builders.shape_of(ct)[-1]
        v = _reflectors(packed)
        big_n, y = _wy(v, tau)
        z = _triangular_solve(big_n, builders.neg(_mm(v, ct, False, False, "C")), False, True, False, "C", True)
        nbar = builders.neg(_mm(z, y, False, False, "N", "C"))
        e = _triu(_rows(_conj(tau), nbar), 1)
        shape = builders.shape_of(v)
        zt = _op(_rows(_conj(tau), z), "C")  # (D^H Z)^H = Z^H D
        zt = _pad_rows(zt, shape[-2])
        vbar = builders.add(builders.add(builders.neg(_mm(ct, y, False, False, "N", "C")), zt),
                            _mm(v, builders.add(e, _op(e, "C")), False, False))
        taubar = _diagonal(builders.add(_mm(z, _top(v, n), False, False),
                                        _mm(nbar, _gram(v), False, False, "N", "C")))
        return [_conj(_tril(vbar, -1)) if wants[0] else None, _conj(taubar) if wants[1] else None]


def _householder_primal(packed: Value, tau: Value, n: int) -> tuple[Value, Value, Value, Value]:
    """(V, W, Q, R) of geqrf's results with the first `n` reflectors: V, W = T V_1^H (upper,
    diag(W) = tau, so I - Q = V W on the first n columns), Q and R (upper)."""
    cols = builders.shape_of(packed)[-1]
    v, tau_n = _columns(_reflectors(packed), n), _columns(tau, n)
    _, w = _wy(v, tau_n)
    full = _wy(_reflectors(packed), tau)[1]
    q = builders.sub(_eye_plus(builders.zeros_like(packed)), _mm(_reflectors(packed), full, False, False))
    return v, w, q, _top(_triu(packed), cols)


def _pad_rows(v: Value, rows: int) -> Value:
    """`v` with zero rows appended to `rows` rows."""
    return _pad_last(v, rows, 2)


def _pad_last(v: Value, size: int, from_end: int) -> Value:
    """`v` with zeros appended along dimension -`from_end` to `size`."""
    shape = builders.shape_of(v)
    high = [0] * len(shape)
    high[-from_end] = size - shape[-from_end]
    return builders.pad(v, [0] * len(shape), high, [0] * len(shape), builders.scalar(0, builders.elem_of(v)))


def _effective_reflectors(op: ir.Operation) -> int:
    """The reflectors of a geqrf that vary: all n, but the last of a real square matrix is
    the identity (LAPACK gives a 1-element column tau = 0 whatever its value)."""
    m, n = builders.shape_of(op.operands[0])[-2:]
    return n - 1 if m == n and not _is_complex(op.operands[0]) else n


@dataclasses.dataclass(frozen=True)
class QR(Record):
    """A = Q R (LAPACK geqrf), m x n with m >= n: R above the diagonal of the packed
    result, the Householder reflectors of Q below it, and their factors tau."""

    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """QR order by order: S_k = A_k - sum_{i=1..k-1} Q_i R_{k-i} = Q_0 R_k + Q_k R_0, so
        with X = Q_0^H S_k R_0^{-1} = C_k + R_k R_0^{-1} (C_k = Q_0^H Q_k) and
        C_k + C_k^H = -Z_k, Z_k = sum_{i=1..k-1} Q_i^H Q_{k-i} (Q^H Q = I): R_k R_0^{-1} is
        upper with a real diagonal (R's is real), so C_k = tril(X, -1) - tril(X, -1)^H
        - triu(Z_k, 1) + diag(-Re Z_k / 2 + i Im X); R_k = (X - C_k) R_0 and
        Q_k = (S_k - Q_0 R_k) R_0^{-1}. Then the reflectors: I - Q = V W on the first n
        columns (`_wy`) is an LU factorization without pivoting (V unit lower
        trapezoidal, W upper, diag(W) = tau), so with Y_k = -Q_k,
        X' = V_{1,0}^{-1} (Y_{1,k} - sum_{i=1..k-1} V_{1,i} W_{k-i}) W_0^{-1} on the top n rows,
        W_k = triu(X') W_0, V_k = (Y_k - sum_{i=0..k-1} V_i W_{k-i}) W_0^{-1}, tau_k = diag(W_k)
        (over the reflectors that vary, `_effective_reflectors`)."""
        (a,), packed0, tau0 = ins, op.results[0], op.results[1]
        _qr_shape(op, "jet-expand")
        m, n = builders.shape_of(packed0)[-2:]
        ne = _effective_reflectors(op)
        v0, w0, q0, r0 = _householder_primal(packed0, tau0, ne)
        qs: list[Term] = [q0] + [None] * b.order
        rs: list[Term] = [r0] + [None] * b.order
        vs: list[Term] = [v0] + [None] * b.order
        ws: list[Term] = [w0] + [None] * b.order
        packed, taus = b.series(packed0), b.series(tau0)
        for k in range(1, b.order + 1):
            s = b.sub(a[k], b.total(_product_terms(qs, rs, k, q0, r0, lo=1, hi=k - 1)))
            if s is None:
                continue
            s = b.conform(s, q0, k)
            lead = _lead(s, q0)
            x = _triangular_solve(r0, _mm(q0, s, False, lead, "C"), lead, False, False, "N", False)
            z = b.total(_product_terms(qs, qs, k, q0, q0, lo=1, hi=k - 1, tx="C"))
            z = None if z is None else b.conform(z, r0, k)
            strict = _tril(x, -1)
            c = builders.sub(strict, _op(strict, "C"))
            if _is_complex(x):
                im = builders.imag(_diagonal(x))
                c = builders.add(c, _embed_diagonal(builders.complex_(builders.zeros_like(im), im)))
            if z is not None:
                c = builders.sub(c, builders.add(_triu(z, 1), _scale_diagonal(_real_diagonal(z), 0.5)))
            rs[k] = _triu(_mm(builders.sub(x, c), r0, lead, False))
            qs[k] = _triangular_solve(r0, builders.sub(s, _mm(q0, rs[k], False, lead)), lead, False, False, "N", False)
            packed[k] = _pad_rows(rs[k], m)
            if ne == 0:
                continue
            y = builders.neg(_columns(qs[k], ne))
            top = b.sub(_top(y, ne), b.total([_top(t, ne) for t in _product_terms(vs, ws, k, v0, w0, lo=1, hi=k - 1)]))
            xp = _triangular_solve(_top(v0, ne), top, lead, True, True, "N", True)
            xp = _triangular_solve(w0, xp, lead, False, False, "N", False)
            ws[k] = _mm(_triu(xp), w0, lead, False)
            rest = b.sub(y, b.total(_product_terms(vs, ws, k, v0, w0, lo=0, hi=k - 1)))
            vs[k] = _tril(_triangular_solve(w0, rest, lead, False, False, "N", False), -1)
            packed[k] = b.add(packed[k], _pad_last(vs[k], n, 1))
            taus[k] = _pad_last(_diagonal(ws[k]), n, 1)
        return [packed, taus]

    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """The adjoints of `jet`'s two steps at order 1. Reflectors (Y = I - Q = V W): the
        bottom rows give Ybar_2 = Vbar_2 W^{-H} and add -V_2^H Ybar_2 to Wbar; the top, as
        for `LU`: Ybar_1 = V_1^{-H} (tril(V_1^H tril(Vbar_1, -1), -1) + triu(Wbar W^H)) W^{-H};
        Qbar = -Ybar. QR: dR = U(X) R and dQ = dA R^{-1} - Q U(X), X = Q^H dA R^{-1},
        U(X) = triu(X, 1) + tril(X, -1)^H + Re diag(X); with Ubar = Rbar R^H - Q^H Qbar,
        Xbar = triu(Ubar, 1) + tril(Ubar^H, -1) + Re diag(Ubar) and Abar = (Qbar + Q Xbar) R^{-H}."""
        packed_bar, tau_bar = cts
        if (packed_bar is None and tau_bar is None) or not wants[0]:
            return [None]
        _qr_shape(op, "vjp-expand")
        packed0, tau0 = op.results[0], op.results[1]
        m, n = builders.shape_of(packed0)[-2:]
        ne = _effective_reflectors(op)
        v, w, q, r = _householder_primal(packed0, tau0, ne)
        pbar = _conj(packed_bar) if packed_bar is not None else builders.zeros_like(packed0)
        qbar = builders.zeros_like(q)
        if ne:
            vbar = _columns(_tril(pbar, -1), ne)
            wbar = _embed_diagonal(builders.convert(_conj(_columns(tau_bar, ne)), builders.elem_of(w))) \
                if tau_bar is not None else builders.zeros_like(w)
            rows = len(builders.shape_of(v)) - 2
            ybar2 = None
            if m > ne:
                v2, vbar2 = (builders.slice_dim(t, rows, ne, m) for t in (v, vbar))
                ybar2 = _triangular_solve(w, vbar2, False, False, False, "C", False)
                wbar = builders.sub(wbar, _mm(v2, ybar2, False, False, "C"))
            v1 = _top(v, ne)
            xbar = builders.add(_tril(_mm(v1, _top(vbar, ne), False, False, "C"), -1),
                                _triu(_mm(_triu(wbar), w, False, False, "N", "C")))
            ybar1 = _triangular_solve(v1, xbar, False, True, True, "C", True)
            ybar1 = _triangular_solve(w, ybar1, False, False, False, "C", False)
            qbar = _pad_last(builders.neg(builders.concat([ybar1, ybar2], rows) if ybar2 is not None else ybar1),
                             n, 1)
        ubar = builders.sub(_mm(_top(_triu(pbar), n), r, False, False, "N", "C"), _mm(q, qbar, False, False, "C"))
        xbar = builders.add(builders.add(_triu(ubar, 1), _tril(_op(ubar, "C"), -1)), _real_diagonal(ubar))
        abar = _triangular_solve(r, builders.add(qbar, _mm(q, xbar, False, False)), False, False, False, "C", False)
        return [_conj(abar)]


def _scale_diagonal(v: Value, c: float) -> Value:
    return builders.mul(v, builders.full(builders.shape_of(v), c, builders.elem_of(v)))


def _qr_shape(op: ir.Operation, name: str) -> None:
    m, n = builders.shape_of(op.operands[0])[-2:]
    if m < n:
        raise PassError(f"{name}: the QR rules take m x n matrices with m >= n; @{call_target(op)} factors "
                        f"{m}x{n} ones", op.location)


def _householder_shape(op: ir.Operation, name: str) -> None:
    m, n = builders.shape_of(op.operands[0])[-2:]
    k = builders.shape_of(op.operands[1])[-1]
    if m < n or k != n:
        raise PassError(f"{name}: the Householder product rules take m x n reflectors with m >= n and n of them; "
                        f"@{call_target(op)} has {m}x{n} and {k}", op.location)


def _diagonal(v: Value) -> Value:
    """The diagonal of the matrices of `v` (the last dimension dropped)."""
    return builders.reduce(_where_offset(v, "EQ", 0), [len(builders.shape_of(v)) - 1])


def _embed_diagonal(d: Value) -> Value:
    """The matrices with diagonal `d` (a vector per matrix) and zeros elsewhere."""
    shape = builders.shape_of(d)
    full = builders.broadcast(d, [*shape, shape[-1]], range(len(shape)))
    return _where_offset(full, "EQ", 0)


def _scale_columns(m: Value, d: Value) -> Value:
    """m diag(d): column j of `m` times d[j] (`d` of `m`'s element type or its real part)."""
    shape = builders.shape_of(m)
    scale = builders.broadcast(builders.convert(d, builders.elem_of(m)), shape,
                               [*range(len(shape) - 2), len(shape) - 1])
    return builders.mul(m, scale)


def _square(op: ir.Operation, name: str) -> None:
    shape = builders.shape_of(op.operands[0])
    if shape[-1] != shape[-2]:
        raise PassError(f"{name}: the LU rules take square matrices; @{call_target(op)} factors "
                        f"{shape[-2]}x{shape[-1]} ones", op.location)


def _permutation_matrix(pivots: Value, like: Value) -> Value:
    """P (of `like`'s type) with P A = A's rows in the order the 1-based row swaps
    `pivots` leave them: perm starts as the identity and swaps entries i and
    pivots[i] - 1 for each i in turn (a `while` over i), and P[r, c] = (perm[r] == c)."""
    shape = builders.shape_of(pivots)
    batch, n = shape[:-1], shape[-1]
    nb, i32 = len(batch), builders.i32()
    cols = builders.iota(shape, nb, i32)

    def cond(i: Value, perm: Value) -> Value:
        return builders.compare(i, builders.scalar(n, i32), "LT")

    def body(i: Value, perm: Value) -> list[Value]:
        starts = [builders.scalar(0, i32)] * nb + [i]
        column = [*batch, 1]
        j = builders.broadcast_to(builders.sub(builders.dynamic_slice(pivots, starts, column),
                                               builders.full(column, 1, i32)), shape)
        at_i = builders.broadcast_to(builders.dynamic_slice(perm, starts, column), shape)
        at_j = builders.reduce(builders.select(builders.compare(cols, j, "EQ"), perm, builders.zeros_like(perm)), [nb])
        at_j = builders.broadcast(at_j, shape, range(nb))
        is_i = builders.compare(cols, builders.broadcast(i, shape, []), "EQ")
        swapped = builders.select(is_i, at_j, builders.select(builders.compare(cols, j, "EQ"), at_i, perm))
        return [builders.add(i, builders.scalar(1, i32)), swapped]

    _, perm = builders.while_loop([builders.scalar(0, i32), builders.convert(cols, i32)], cond, body)
    square = [*batch, n, n]
    rows = builders.broadcast(perm, square, [*range(nb), nb])
    hit = builders.compare(rows, builders.iota(square, nb + 1, i32), "EQ")
    elem = builders.elem_of(like)
    return builders.select(hit, builders.full(square, 1, elem), builders.full(square, 0, elem))


def meaning(op: ir.Operation, name: str = "jet-expand") -> Record | None:
    """The record of the entry of `linalg.TABLE` that `op` spells (a LAPACK custom call
    or a StableHLO op), or None if it spells none."""
    entry = linalg.TABLE.find(op)
    if entry is None:
        return None
    record: type[Record] = globals()[entry.record]
    if op.name != "stablehlo.custom_call":
        return record.from_op(op)
    _check_layouts(op, name)
    return record.from_call(entry.read_chars(op), op, name)


def jet(b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
    """The Taylor rule of `op`, a spelling of an entry of `linalg.TABLE`."""
    _elem_check(op, "jet-expand")
    return meaning(op, "jet-expand").jet(b, op, ins)


def vjp(b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
    """The reverse-mode rule of `op`, a spelling of an entry of `linalg.TABLE`."""
    _elem_check(op, "vjp-expand")
    return meaning(op, "vjp-expand").vjp(b, op, cts, wants)


# --- the singular value decomposition -------------------------------------------------------


def _cols(d: Value, m: Value) -> Value:
    """m diag(d): column j of the matrices of `m` times d[j] (either may carry a directions axis)."""
    return _swap_last(_rows(d, _swap_last(m)))


def _inverse_square_gaps(s: Value, elem: ir.Type) -> Value:
    """F[a, b] = 1 / (s[b]^2 - s[a]^2) off the diagonal, 0 on it, of element type `elem`."""
    shape = [*builders.shape_of(s), builders.shape_of(s)[-1]]
    r, real = len(shape), builders.elem_of(s)
    squares = builders.mul(s, s)
    gaps = builders.sub(builders.broadcast(squares, shape, [*range(r - 2), r - 1]),
                        builders.broadcast(squares, shape, range(r - 1)))
    eye = _where_offset(builders.full(shape, 1, real), "EQ", 0)
    inverse = builders.div(builders.full(shape, 1, real), builders.add(gaps, eye))
    return builders.convert(_where_offset(inverse, "NE", 0), elem)


def _imaginary(v: Value, elem: ir.Type) -> Value:
    """i v for the real `v`, as `elem` (complex)."""
    return builders.complex_(builders.zeros_like(v), v) if isinstance(elem, ir.ComplexType) else v


@dataclasses.dataclass(frozen=True)
class SVD(Record):
    """A = U diag(s) V^H, the thin decomposition (LAPACK gesdd / gesvd in mode 'S', i.e.
    full_matrices=False): A m x n, p = min(m, n), U m x p and V n x p with orthonormal
    columns, s descending and real; results (A overwritten, s, U, V^H, info)."""

    @classmethod
    def from_call(cls, chars: Config, op: ir.Operation, name: str) -> "SVD":
        mode = chars["mode"]
        if mode != "S":
            what = {"N": "without singular vectors (compute_uv=False)", "A": "with full matrices (full_matrices=True)"}
            raise PassError(f"{name}: @{call_target(op)} {what.get(mode, f'in mode {mode!r}')} has no rule here: the "
                            "rules take the thin decomposition with its vectors, jnp.linalg.svd(a, full_matrices=False)",
                            op.location)
        return cls()

    def jet(self, b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
        """Distinct nonzero singular values. With C_k = U_0^H U_k, D_k = V_0^H V_k (C_0 = D_0 = I)
        and S_k = diag(s_k), order k of U_0^H A V_0 = sum_{i+j+l=k} C_i S_j D_l^H reads
        C_k S_0 + S_0 D_k^H + S_k = R_k, R_k = U_0^H A_k V_0 - sum_{i+j+l=k, all<k} C_i S_j D_l^H,
        and U^H U = I, V^H V = I give C_k + C_k^H = -Z_k, D_k + D_k^H = -W_k with
        Z_k = sum_{i=1..k-1} U_i^H U_{k-i}, W_k likewise of V. Off the diagonal the pair of
        equations (a, b) and (b, a) in x = C_k[a, b], y = conj(D_k[b, a]):
        x s_b + y s_a = P[a, b] and x s_a + y s_b = Q[a, b], with P = R_k and
        Q = -R_k^H - S_0 Z_k - W_k S_0, give, with F[a, b] = 1 / (s_b^2 - s_a^2),
        C_k = F o (P S_0 - S_0 Q) and D_k^H = F o (Q S_0 - S_0 P) there. On it,
        Re C_k = -Z_k / 2, Re D_k = -W_k / 2 and s_k = Re diag(R_k) + s_0 (Z_k + W_k) / 2 (real
        diagonals); the imaginary parts (complex only) are the gauge JAX's derivative follows:
        V^H V' has a zero diagonal along the curve, so
        diag(D_k) = -(1/k) sum_{i=1..k-1} (k - i) diag(V_i^H V_{k-i}) (as for `Eigh`), and then
        Im C_k[a, a] = Im R_k[a, a] / s_a + Im D_k[a, a]. The parts of U_k and V_k outside the
        spans of U_0 and V_0 (m > p, n > p) come from A V = U S and A^H U = V S, whose order k,
        projected by I - U_0 U_0^H (which annihilates A_0 and U_0), is
        (I - U_0 U_0^H) U_k S_0 = (I - U_0 U_0^H)(sum_{i=1..k} A_i V_{k-i} - sum_{i=1..k-1} U_i S_{k-i}),
        and likewise for V with A^H. So U_k = U_0 C_k + that part, V_k = V_0 D_k + its own.
        At a degenerate singular value (s_a = s_b, a != b) F divides by zero, and where
        m != n or A is complex so does 1 / s at a zero one: U's and V's coefficients, and s's
        from order 2 on, come out inf or NaN, as JAX's own derivatives do (a real square
        matrix with one zero singular value is fine)."""
        (a,), (s0, u0, vh0, v0, f, sc, inverse) = ins, _svd_primal(op)
        elem, m, n, p = builders.elem_of(u0), builders.shape_of(u0)[-2], builders.shape_of(vh0)[-1], \
            builders.shape_of(s0)[-1]
        us, vs, ss = b.series(u0), b.series(v0), b.series(s0)
        cs: list[Term] = [None] * (b.order + 1)  # C_0 = D_0 = I are implied
        ds: list[Term] = [None] * (b.order + 1)
        for k in range(1, b.order + 1):
            terms = []
            for i, j in ((i, j) for i in range(k) for j in range(k - i + 1)):
                l = k - i - j
                if l == k or (i and cs[i] is None) or ss[j] is None or (l and ds[l] is None):
                    continue
                sj = builders.convert(ss[j], elem)
                x = _cols(sj, cs[i]) if i else None
                if l:
                    x = _rows(sj, _op(ds[l], "C")) if x is None else \
                        _mm(x, ds[l], _lead(x, f), _lead(ds[l], f), "N", "C")
                terms.append(x)
            lead = a[k] is not None and _lead(a[k], u0)
            rotated = None if a[k] is None else _mm(_mm(u0, a[k], False, lead, "C"), v0, lead, False)
            r = b.conform(b.sub(rotated, b.total(terms)), f, k)
            z = b.conform(b.total(_product_terms(us, us, k, u0, u0, lo=1, hi=k - 1, tx="C")), f, k)
            w = b.conform(b.total(_product_terms(vs, vs, k, v0, v0, lo=1, hi=k - 1, tx="C")), f, k)
            if r is None and z is None and w is None:
                continue
            q = b.sub(b.neg(None if r is None else _op(r, "C")),
                      b.add(None if z is None else _rows(sc, z), None if w is None else _cols(sc, w)))
            cs[k] = b.mul(f, b.sub(None if r is None else _cols(sc, r), None if q is None else _rows(sc, q)))
            dh = b.mul(f, b.sub(None if q is None else _cols(sc, q), None if r is None else _rows(sc, r)))
            ds[k] = None if dh is None else _op(dh, "C")
            cs[k], ds[k] = b.add(cs[k], _minus_half_diagonal(z)), b.add(ds[k], _minus_half_diagonal(w))
            zw = b.add(_real_diagonal_of(z), _real_diagonal_of(w))
            ss[k] = b.add(_real_diagonal_of(r), b.mul(s0, b.scale(zw, 0.5)))
            if _is_complex(u0):
                gauge = b.total([b.scale(builders.imag(_diagonal(_mm(vs[i], vs[k - i], _lead(vs[i], v0),
                                                                        _lead(vs[k - i], v0), "C"))), -(k - i) / k)
                                 for i in range(1, k) if vs[i] is not None and vs[k - i] is not None])
                gauge = b.conform(gauge, s0, k)
                phase = b.add(None if r is None else b.div(builders.imag(_diagonal(r)), s0), gauge)
                cs[k] = b.add(cs[k], None if phase is None else _embed_diagonal(_imaginary(phase, elem)))
                ds[k] = b.add(ds[k], None if gauge is None else _embed_diagonal(_imaginary(gauge, elem)))
            us[k] = None if cs[k] is None else _mm(u0, cs[k], False, _lead(cs[k], f))
            vs[k] = None if ds[k] is None else _mm(v0, ds[k], False, _lead(ds[k], f))
            if m > p:
                us[k] = b.add(us[k], _outside(b, a, vs, us, ss, k, u0, v0, inverse, "N"))
            if n > p:
                vs[k] = b.add(vs[k], _outside(b, a, us, vs, ss, k, v0, u0, inverse, "C"))
        return [None, ss, us, [vh0] + [None if t is None else _op(t, "C") for t in vs[1:]], None]

    def vjp(self, b: "VjpBuilder", op: ir.Operation, cts: list[Term], wants: list[bool]) -> list[Term]:
        """The adjoint of `jet` at order 1, dS = U^H dA V: ds = Re diag(dS),
        dU = U (F o (dS S + S dS^H) + i Im diag(dS) / S) + (I - U U^H) dA V S^{-1},
        dV = V (F o (S dS + dS^H S)) + (I - V V^H) dA^H U S^{-1}. With J = U^H Ubar, K = V^H Vbar
        (Vbar = Vhbar^H) and F o self-adjoint up to F^T = -F:
        Abar = U (F o (J - J^H) S + S F o (K - K^H) + diag(sbar) + i diag(Im J) S^{-1}) V^H
        + (I - U U^H) Ubar S^{-1} V^H + U S^{-1} Vbar^H (I - V V^H)."""
        _, sbar, ubar, vhbar, _ = cts
        if (sbar is None and ubar is None and vhbar is None) or not wants[0]:
            return [None]
        s0, u0, vh0, v0, f, sc, inverse = _svd_primal(op)
        elem, m, n, p = builders.elem_of(u0), builders.shape_of(u0)[-2], builders.shape_of(vh0)[-1], \
            builders.shape_of(s0)[-1]
        inner = None if sbar is None else _embed_diagonal(builders.convert(sbar, elem))
        outer = None
        if ubar is not None:
            ubar = _conj(ubar)
            j = _mm(u0, ubar, False, False, "C")
            inner = b.add(inner, _cols(sc, builders.mul(f, builders.sub(j, _op(j, "C")))))
            if _is_complex(u0):
                inner = b.add(inner, _embed_diagonal(_imaginary(builders.div(builders.imag(_diagonal(j)), s0), elem)))
            if m > p:
                outside = builders.sub(ubar, _mm(u0, j, False, False))
                outer = _mm(_cols(inverse, outside), v0, False, False, "N", "C")
        if vhbar is not None:
            vbar = _swap_last(vhbar)  # (conj Vhbar)^H
            kk = _mm(v0, vbar, False, False, "C")
            inner = b.add(inner, _rows(sc, builders.mul(f, builders.sub(kk, _op(kk, "C")))))
            if n > p:
                outside = builders.sub(vbar, _mm(v0, kk, False, False))
                outer = b.add(outer, _mm(u0, _cols(inverse, outside), False, False, "N", "C"))
        abar = _mm(_mm(u0, inner, False, False), v0, False, False, "N", "C")
        return [_conj(b.add(abar, outer))]


def _outside(b: "JetBuilder", a: "Series", others: list[Term], own: list[Term], ss: list[Term], k: int,
             own0: Value, other0: Value, inverse: Value, how: str) -> Term:
    """The part of coefficient k of U outside span(U_0) (`how` N: from A V = U S; C: of V from
    A^H U = V S): (I - X_0 X_0^H)(sum_{i=1..k} op(A_i) Y_{k-i} - sum_{i=1..k-1} X_i S_{k-i}) S_0^{-1}."""
    elem = builders.elem_of(own0)
    products = [_mm(a[i], others[k - i], _lead(a[i], own0), _lead(others[k - i], other0), how, "N")
                for i in range(1, k + 1) if a[i] is not None and others[k - i] is not None]
    scaled = [_cols(builders.convert(ss[k - i], elem), own[i]) for i in range(1, k)
              if own[i] is not None and ss[k - i] is not None]
    y = b.conform(b.sub(b.total(products), b.total(scaled)), own0, k)
    if y is None:
        return None
    y = _cols(inverse, y)
    lead = _lead(y, own0)
    return builders.sub(y, _mm(own0, _mm(own0, y, False, lead, "C"), False, lead))


def _svd_primal(op: ir.Operation) -> tuple[Value, ...]:
    """s, U, V^H and V of a thin SVD, F (`_inverse_square_gaps`, also the `like` of p x p
    coefficients), s and 1 / s of U's element type."""
    s0, u0, vh0 = op.results[1], op.results[2], op.results[3]
    elem = builders.elem_of(u0)
    sc = builders.convert(s0, elem)
    return (s0, u0, vh0, _op(vh0, "C"), _inverse_square_gaps(s0, elem), sc,
            builders.div(builders.full(builders.shape_of(s0), 1, elem), sc))


def _minus_half_diagonal(t: Term) -> Term:
    """-Re diag(t) / 2 as a matrix (zero off the diagonal)."""
    return None if t is None else _scale_diagonal(_real_diagonal(t), -0.5)


def _real_diagonal_of(t: Term) -> Term:
    """The real part of the diagonal of `t`, a vector per matrix."""
    if t is None:
        return None
    return builders.real(_diagonal(t)) if _is_complex(t) else _diagonal(t)


