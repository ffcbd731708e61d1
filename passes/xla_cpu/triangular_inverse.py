"""`xla-cpu-triangular-inverse`: triangular solves with one factor become products with its inverse.

XLA:CPU (jaxlib 0.10.2) expands `stablehlo.triangular_solve` into a loop over the
factor's rows, and LAPACK's trsm (`@lapack_strsm_ffi` and its d/c/z kin, JAX's CPU
spelling of the solve) is slower still on a wide right-hand side, while a batched
`dot_general` goes to the matmul emitter. Left lower unit-diagonal solves, batch 128,
float32, one op each (microseconds: triangular_solve / trsm / dot_general): n = 4 with
48 right-hand-side columns 30 / 70 / 16, n = 6 with 108 columns 109 / 350 / 33, n = 8
with 192 columns 530 / 1000 / 67. After `hlopt-default`'s rules every solve of a
determinant's Laplacian and its gradient (bench/wavefunction.py: `jnp.linalg.slogdet`
under `hlopt.laplacian`, then `jax.grad`) reads one factor, the packed LU of the
matrix, in several solves, plain and (the reverse sweep) transposed. Here the
triangle is inverted once, by one solve against the identity (n columns), and each
solve becomes op(inv) @ B, or B @ op(inv) for a solve from the right.

Only where it pays: the solves of one factor, triangle and diagonal kind whose
right-hand sides hold more columns in all (rows, for a solve from the right) than
the matrix has rows are rewritten; the others stay solves. With `min-rows`, only
factors of at least that many rows (XLA's expanded solve costs about one step per
row, so the inverse, one more such solve, and the products it adds pay off with the
rows). `bench/xla_cpu_tuning.py --workloads wavefunction --electrons N` measures the
pass on bench/wavefunction.py's programs; on a loaded 2-core machine its effect there
(n = 4, 6, 8) stayed within the run-to-run spread of about 10%, n = 8 leaning faster.

Rounding: X = op(inv) B is not the backward-stable substitution X = op(A) \\ B.
Each column of the explicit inverse is a backward-stable solve, so for a
well-conditioned factor (a pivoted LU's, the Cholesky factor of a well-conditioned
matrix) the two differ by a few ulps times the condition number; the product's
residual op(A) X - B, though, may be larger than the substitution's by up to the
condition number. The pass trades that for speed on CPU, as a tuning pass of
`hlopt-default`; the pipeline without it keeps the substitution's rounding.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

from hlopt.passes import linalg_names
from hlopt.passes.base import Pass, PassError, option
from hlopt.passes.builders import shape_of
from hlopt.passes.mlir import ir
from hlopt.passes.walk import walk_ops
from hlopt.passes.xla_cpu.rewrite import erase_unused

if TYPE_CHECKING:
    from hlopt.passes.linalg_rules import TriangularSolve


def _solve(op: ir.Operation) -> TriangularSolve | None:
    """What `op` solves, if it is a triangular solve (either spelling) this pass can read."""
    if not linalg_names.is_linalg(op):
        return None
    from hlopt.passes import linalg_rules  # only for a module with linear algebra (see linalg_names)

    try:
        found = linalg_rules.meaning(op, TriangularInverse.name)
    except PassError:  # a LAPACK call in a layout the rules do not read: left as it is
        return None
    return found if isinstance(found, linalg_rules.TriangularSolve) else None


def _columns(op: ir.Operation, solve: TriangularSolve) -> int:
    """The right-hand sides `op` solves for: columns of B (from the left) or its rows (from the right)."""
    rhs = shape_of(op.operands[1])
    return rhs[-1] if solve.left else rhs[-2]


@dataclasses.dataclass(frozen=True)
class TriangularInverse(Pass):
    """Triangular solves of one factor as products with its inverse.

    The triangular solves (`stablehlo.triangular_solve`, LAPACK trsm) of one factor, triangle
    and diagonal kind in one block, with more right-hand-side columns in all than the factor
    has rows (and at least `min-rows` rows, 1 by default), become products with the triangle's inverse, computed once by a solve against
    the identity: X = op(inv) B (solves from the left) or B op(inv) (from the right).

        %x = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true,
             transpose_a = #stablehlo<transpose TRANSPOSE>, unit_diagonal = true}
             : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>

    becomes

        %inv = "stablehlo.triangular_solve"(%a, %eye) {left_side = true, lower = true,
               transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true}
               : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
        %x = stablehlo.dot_general %inv, %b, contracting_dims = [0] x [0]
             : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>

    (op(inv) by the contracting dimensions; an adjoint reads the inverse conjugated.)
    """

    name: ClassVar[str] = "xla-cpu-triangular-inverse"
    min_rows: int = option(1, low=1, high=1 << 20, what="the fewest rows of a factor whose solves are rewritten")

    def apply(self, module: ir.Operation) -> None:
        groups: dict[tuple, list[tuple[ir.Operation, TriangularSolve]]] = {}
        for op in walk_ops(module, "stablehlo.triangular_solve", "stablehlo.custom_call"):
            solve = _solve(op)
            if solve is not None:
                key = (op.operands[0], solve.lower, solve.unit, op.parent, op.block)
                groups.setdefault(key, []).append((op, solve))
        if not groups:
            return
        from hlopt.passes import linalg_rules  # loaded by _solve already

        replaced: list[ir.Operation] = []
        for (a, lower, unit, *_), members in groups.items():
            n = shape_of(a)[-1]
            if n < self.min_rows or sum(_columns(op, solve) for op, solve in members) <= n:
                continue  # the inverse and the products would take about as long as the solves
            first = members[0][0]
            with ir.InsertionPoint(first), first.location:
                inv = linalg_rules.triangular_solve(a, linalg_rules.identity_like(a), left=True, lower=lower,
                                                    how="N", unit=unit)
            for op, solve in members:
                with ir.InsertionPoint(op), op.location:
                    b = op.operands[1]
                    x = linalg_rules.product(inv, b, solve.how, "N") if solve.left else \
                        linalg_rules.product(b, inv, "N", solve.how)
                op.results[0].replace_all_uses_with(x)
                replaced.append(op)
        erase_unused(replaced)
