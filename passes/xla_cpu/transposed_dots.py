"""`xla-cpu-transposed-dots`: a batched dot_general whose lhs does not contract its trailing
dimension becomes one of operands copied in the order XLA:CPU's YNNPACK matmul takes.

XLA:CPU (jaxlib 0.10.2) gives a batched dot to its YNNPACK matmul only when the
lhs is in row-major (batch, m, k) order, contracting its last dimension
(`IsDotSupportedByYnn`: "lhs_canonical"). A product such as `A^T B` of batched
matrices, which the Taylor and reverse rules of LU and triangular solves are full
of, then runs in XLA's own emitter as a loop over the batch that calls a matrix
kernel per batch element, several times slower than YNNPACK's matmul of the
transposed copy (float32 and float64). `bench/xla_cpu_tuning.py --workloads
wavefunction --electrons 8` measures the pass on bench/wavefunction.py's programs,
where the gradient of the kinetic energy holds such products of the LU's 8x8 factors
along 24 directions and 128 walkers.

Here the lhs is transposed to (batch, free, contracting) and the rhs, where its
batch dimensions do not lead or its contracting and free dimensions interleave, to
(batch, contracting, free); the batch dimensions of both are joined into one, and
the product's result is reshaped back. XLA folds a transpose that feeds a dot
straight back into the dot's dimension numbers, but not one behind a reshape of the
batch dimensions, which is why they are joined; a single batch dimension is split
into two (its smallest prime factor and the rest), and a prime one leaves the dot as
it is. XLA:CPU fuses the transposes into the loops that compute the operands.

Only dots of float32 or float64 operands and result (YNNPACK's element types)
whose m and n are both above 1 and whose m, k or n reaches 8 (below, YNNPACK does
not take it: `xla-cpu-small-dots`) are rewritten. The copy adds a pass over each
transposed operand, small beside the matrix kernel calls it saves at these sizes.
"""

from __future__ import annotations

import math
from typing import ClassVar

from hlopt.passes import builders
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.xla_cpu.rewrite import OpRewrite
from hlopt.passes.xla_cpu.small_dots import KNOWN, YNN_MIN_SIZE, _free


def _is_ynn_type(t: ir.Type) -> bool:
    elem = ir.RankedTensorType(t).element_type
    return isinstance(elem, (ir.F32Type, ir.F64Type))


def _batch_split(sizes: list[int]) -> list[int] | None:
    """The batch dimensions joined into one, or a single one split into two (its smallest
    prime factor and the rest); None for a single prime (or unit) batch."""
    if len(sizes) > 1:
        return [math.prod(sizes)]
    (size,) = sizes
    factor = next((p for p in range(2, math.isqrt(size) + 1) if size % p == 0), None)
    return None if factor is None else [factor, size // factor]


def _groups_contiguous(order: list[int], first: list[int], second: list[int]) -> bool:
    """True when `order` (an operand's dims after its batch dims) is `first` then `second`,
    or `second` then `first`, each in its own order."""
    return order == first + second or order == second + first


class TransposedDots(OpRewrite):
    """A batched `dot_general` whose lhs does not contract its trailing dimensions (or whose
    batch dimensions do not lead) becomes the product of the operands transposed to
    (batch, free, contracting) and (batch, contracting, free), with the batch dimensions
    joined into one, reshaped back to the result's shape.

        %d = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2]
             : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32>

    becomes

        %at = stablehlo.transpose %a, dims = [0, 1, 3, 2]
        %a3 = stablehlo.reshape %at : (tensor<24x128x8x8xf32>) -> tensor<3072x8x8xf32>
        %b3 = stablehlo.reshape %b : (tensor<24x128x8x8xf32>) -> tensor<3072x8x8xf32>
        %p = stablehlo.dot_general %a3, %b3, batching_dims = [0] x [0], contracting_dims = [2] x [1]
        %d = stablehlo.reshape %p : (tensor<3072x8x8xf32>) -> tensor<24x128x8x8xf32>
    """

    name: ClassVar[str] = "xla-cpu-transposed-dots"
    anchors: ClassVar[tuple[str, ...]] = ("stablehlo.dot_general",)

    def rewrite(self, op: ir.Operation) -> list[ir.Value] | None:
        if set(op.attributes) - KNOWN:
            return None
        lhs, rhs = op.operands
        result = op.results[0]
        if not all(_is_ynn_type(v.type) for v in (lhs, rhs, result)) or \
                len({str(ir.RankedTensorType(v.type).element_type) for v in (lhs, rhs, result)}) != 1:
            return None
        d = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
        lb, rb = list(d.lhs_batching_dimensions), list(d.rhs_batching_dimensions)
        lc, rc = list(d.lhs_contracting_dimensions), list(d.rhs_contracting_dimensions)
        if not lb or not lc:
            return None
        ls, rs = builders.shape_of(lhs), builders.shape_of(rhs)
        if min(ls + rs + builders.shape_of(result), default=0) < 0:  # a dynamic dimension: no static reshape
            return None
        lf, rf = _free(lhs, lb, lc), _free(rhs, rb, rc)
        m, n, k = math.prod(ls[i] for i in lf), math.prod(rs[i] for i in rf), math.prod(ls[i] for i in lc)
        if m <= 1 or n <= 1 or max(m, n, k) < YNN_MIN_SIZE:
            return None
        nb = len(lb)
        lhs_in_order = lb == list(range(nb)) and list(range(nb, len(ls))) == lf + lc
        rhs_in_order = rb == list(range(nb)) and _groups_contiguous(list(range(nb, len(rs))), rc, rf)
        if lhs_in_order and rhs_in_order:
            return None
        batch = _batch_split([ls[i] for i in lb])
        if batch is None:
            return None
        a = builders.reshape(builders.transpose(lhs, lb + lf + lc), batch + [m, k])
        if rhs_in_order and list(range(nb, len(rs)))[:len(rf)] == rf:
            b, b_contract = builders.reshape(rhs, batch + [n, k]), len(batch) + 1  # (batch, free, contracting)
        else:
            b, b_contract = builders.reshape(builders.transpose(rhs, rb + rc + rf), batch + [k, n]), len(batch)
        batch_dims = list(range(len(batch)))
        product = builders.dot_general(a, b, lhs_batch=batch_dims, rhs_batch=batch_dims,
                                       lhs_contract=[len(batch) + 1], rhs_contract=[b_contract],
                                       elem=builders.elem_of(result),
                                       precision_config=op.attributes["precision_config"]
                                       if "precision_config" in op.attributes else None)
        return [builders.reshape(product, builders.shape_of(result))]
