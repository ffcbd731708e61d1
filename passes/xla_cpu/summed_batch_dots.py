"""`xla-cpu-summed-batch-dots`: a sum over a batch dimension of a dot_general contracts that
dimension in the dot instead.

A collapsed jet sums products over its directions: the second coefficient of a
linear solve `A x = b` is `A^-1 (b_2 - sum_d A_1d x_1d)`, one small matrix product
per direction and point, then their sum over the directions (the Laplacian of
`log|det Phi|` through `slogdet`'s JVP rule, bench/wavefunction.py: 24 x 128
products of 8x8 matrices at n = 8). XLA:CPU (jaxlib 0.10.2) runs a dot_general
with many small batches one small matmul at a time, writes all of them, and sums
them in another loop. The same sum is one product per point whose contraction
runs over the direction and the matrices' inner dimension together (an 8x192 by
192x8 matmul per walker), with no product per direction in memory.

The summed dimension goes first among the contracted ones, so each operand is read
as [batch, free, (summed, contracted)]: where the contracted dimension is
already the operand's last (a row of a matrix), XLA copies it in runs of whole
rows. Put last, the summed dimension would be the fastest-varying index of that
copy (a transpose of single elements, which on bench/wavefunction.py's kinetic
energy took longer than the products it saved).

    %p = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]
         : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32>
    %s = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [0]
         : (tensor<24x128x8x8xf32>, tensor<f32>) -> tensor<128x8x8xf32>

becomes

    %s = stablehlo.dot_general %a, %b, batching_dims = [1] x [1], contracting_dims = [0, 3] x [0, 2]
         : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<128x8x8xf32>

The pass runs before `xla-cpu-sum-as-dot`, which would make the sum a product with ones.
Only a floating sum from zero over one batch dimension, of a dot_general it alone reads,
is rewritten; the values are the same up to the order of the additions.
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes import builders
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.xla_cpu.rewrite import OpRewrite

_DOT_ATTRIBUTES = {"dot_dimension_numbers", "precision_config"}


def _summed_dot(op: ir.Operation) -> tuple[ir.Operation, int] | None:
    """(the dot_general, the batch index) when `op` is a floating `reduce` add from zero over one
    dimension of a dot_general's result that is one of its batch dimensions and read by `op` alone."""
    if len(op.operands) != 2 or builders.reducer_kind(op) != "stablehlo.add" or \
            not builders.is_zero_constant(op.operands[1]):
        return None
    x = op.operands[0]
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    if len(dims) != 1 or not isinstance(x, ir.OpResult) or x.owner.operation.name != "stablehlo.dot_general" or \
            not builders.is_differentiable(x.type) or len(list(x.uses)) != 1:
        return None
    dot = x.owner.operation
    if set(dot.attributes) - _DOT_ATTRIBUTES or min(builders.shape_of(x)) < 0:
        return None
    batches = len(stablehlo.DotDimensionNumbers(dot.attributes["dot_dimension_numbers"]).lhs_batching_dimensions)
    return (dot, dims[0]) if dims[0] < batches else None


class SummedBatchDots(OpRewrite):
    """A floating sum from zero over one batch dimension of a dot_general (read by the sum alone)
    becomes that dot_general with the dimension contracted, first among the contracted ones."""

    name: ClassVar[str] = "xla-cpu-summed-batch-dots"
    anchors: ClassVar[tuple[str, ...]] = ("stablehlo.reduce",)

    def rewrite(self, op: ir.Operation) -> list[ir.Value] | None:
        found = _summed_dot(op)
        if found is None:
            return None
        dot, i = found
        d = stablehlo.DotDimensionNumbers(dot.attributes["dot_dimension_numbers"])
        lb, rb = list(d.lhs_batching_dimensions), list(d.rhs_batching_dimensions)
        lc, rc = list(d.lhs_contracting_dimensions), list(d.rhs_contracting_dimensions)
        precision = dot.attributes["precision_config"] if "precision_config" in dot.attributes else None
        return [builders.dot_general(dot.operands[0], dot.operands[1],
                                     lhs_batch=lb[:i] + lb[i + 1:], rhs_batch=rb[:i] + rb[i + 1:],
                                     lhs_contract=[lb[i], *lc], rhs_contract=[rb[i], *rc],
                                     elem=builders.elem_of(op.results[0]), precision_config=precision)]
