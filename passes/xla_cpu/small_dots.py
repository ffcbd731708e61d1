"""`xla-cpu-small-dots`: a batched dot_general of tiny matrices becomes the sum of its broadcast products.

XLA:CPU gives a dot to its YNNPACK matmul only when one of the
matrices' sizes m, k or n reaches 8 (`IsDotSupportedByYnn`: smaller ones are left
out as too small for its overhead). A smaller dot with batch dimensions then runs
in XLA's own emitter as a loop over the batch that calls a matrix kernel per batch
element, a fixed cost per call whatever the matrix's size (bench/wavefunction.py's
kinetic energy at 4 or 6 electrons is made of such per-direction products, where the
8x8 ones at 8 electrons go to YNNPACK). Here such a
dot is the sum over its k < 8 contracting positions of the products of the operands'
slices broadcast to the result's shape, which XLA:CPU fuses into one elementwise loop.
XLA:CPU fuses the ops that compute the operands into that loop too, so each operand
element is computed once per result element that reads it (n or m times), where the
dot read it from memory; an `optimization_barrier` would not stop that (XLA:CPU drops
barriers before fusion). That recomputation is why the sum's gain shrinks with the
size, and why `max-size` stops at YNNPACK's bound rather than above it:
`bench/xla_cpu_tuning.py --workloads wavefunction` measures the pass on those programs
(records in bench/results/).

Only dots with batch dimensions (a single small product is one call of XLA's own
small-matrix code), of floating or complex elements and with m, k and n all below
`max-size` (8, YNNPACK's bound) are rewritten. The terms are added in the order of
the contracting positions, as a dot of that size accumulates them: the values agree
to rounding (a fused multiply-add or not).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.base import option
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet
from hlopt.passes.mlir import ir
from hlopt.passes.rewrite.matching import DOT_ATTRIBUTES, dot_dims, free_dims

# XLA:CPU leaves a dot to its own emitter when m, k and n are all below this (YNNPACK's bound)
YNN_MIN_SIZE = 8


def _arranged(v: ir.Value, batch: list[int], contract: list[int], elem: ir.Type) -> ir.Value:
    """`v` (in `elem`) transposed to (batch, free, contracting) with the contracting
    dimensions joined into one last dimension."""
    shape, free = builders.shape_of(v), free_dims(v, batch, contract)
    v = builders.transpose(builders.convert(v, elem), [*batch, *free, *contract])
    joined = [shape[d] for d in batch] + [shape[d] for d in free] + [math.prod(shape[d] for d in contract)]
    return builders.reshape(v, joined)


def _term(v: ir.Value, k: int, out: list[int], dims: list[int]) -> ir.Value:
    """The slice of arranged `v` at contracting position `k`, broadcast to `out` along `dims`."""
    shape = builders.shape_of(v)
    column = builders.reshape(builders.slice_dim(v, len(shape) - 1, k, k + 1), shape[:-1])
    return builders.broadcast(column, out, dims)


def _small_dot(op: ir.Operation, max_size: int) -> list[ir.Value] | None:
    """The batched dot_general `op` of matrices below `max_size` in m, k and n as the sum of its broadcast
    products; None for any other dot."""
    if set(op.attributes) - DOT_ATTRIBUTES:
        return None
    result = op.results[0]
    if not builders.is_differentiable(result.type):
        return None
    lhs, rhs = op.operands
    lb, rb, lc, rc = dot_dims(op)
    ls, rs = builders.shape_of(lhs), builders.shape_of(rhs)
    lf, rf = free_dims(lhs, lb, lc), free_dims(rhs, rb, rc)
    m, n, k = math.prod(ls[i] for i in lf), math.prod(rs[i] for i in rf), math.prod(ls[i] for i in lc)
    if not lb or 0 in (m, n, k) or max(m, n, k) >= max_size:
        return None
    elem, out = builders.elem_of(result), builders.shape_of(result)
    a, b = _arranged(lhs, lb, lc, elem), _arranged(rhs, rb, rc, elem)
    nb, nm, nn = len(lb), len(lf), len(rf)
    a_dims = [*range(nb), *range(nb, nb + nm)]
    b_dims = [*range(nb), *range(nb + nm, nb + nm + nn)]
    terms = (builders.mul(_term(a, i, out, a_dims), _term(b, i, out, b_dims)) for i in range(k))
    return [functools.reduce(builders.add, terms)]


@dataclasses.dataclass(frozen=True)
class SmallDots(PatternPass):
    """Batched products of small matrices as sums XLA:CPU fuses.

    Backend: XLA:CPU runs a batched dot whose m, k and n are all below YNNPACK's bound as one
    matrix-kernel call per batch element; benchmark: `bench/xla_cpu_tuning.py --workloads
    wavefunction`.

    A `dot_general` with batch dimensions whose matrices are all smaller than `max-size` (8)
    in m, k and n becomes the sum over the k contracting positions of the broadcast products
    of the operands' slices, which XLA:CPU fuses into one loop instead of calling a matrix
    kernel per batch element.

        %d = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1]
             : (tensor<128x4x2xf32>, tensor<128x2x3xf32>) -> tensor<128x4x3xf32>

    becomes

        %a0 = a[:, :, 0] broadcast to 128x4x3 along [0, 1]; %b0 = b[:, 0, :] along [0, 2]
        %a1, %b1 likewise at position 1
        %d = (%a0 * %b0) + (%a1 * %b1)
    """

    name: ClassVar[str] = "xla-cpu-small-dots"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    max_size: int = option(YNN_MIN_SIZE, low=1, high=1 << 10,
                           what="a dot is rewritten when its m, k and n are all below this")

    def patterns(self, module: ir.Operation) -> PatternSet:
        return PatternSet(Pattern("stablehlo.dot_general", functools.partial(_small_dot, max_size=self.max_size)))
