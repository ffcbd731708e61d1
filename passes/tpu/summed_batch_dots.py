"""`tpu-summed-batch-dots`: for a TPU, a sum over a batch dimension of a dot_general contracts
that dimension in the dot instead.

A collapsed jet sums products over its directions: the second coefficient of a linear
solve `A x = b` is `A^-1 (b_2 - sum_d A_1d x_1d)`, one small matrix product per direction
and point, then their sum over the directions (the Laplacian of `log|det Phi|` through
`slogdet`'s JVP rule, bench/wavefunction.py); the gradient of that sum in reverse mode is
a product per direction with the cotangent of the sum, broadcast along the directions.
XLA's TPU compiler computes both as written, a product per direction and point. The same
sum is one product per point whose contraction runs over the direction and the matrices'
inner dimension together, and the broadcast one product per point with the directions a
free dimension of the other operand: no copy of the broadcast operand per direction.

The rewrites are `hlopt.passes.rewrite.summed_batch_dots` (its docstring gives them and
their conditions), which `xla-cpu-summed-batch-dots` declares for XLA:CPU too: the summed
dimension first among the contracted ones, and a dot_general one of whose operands is a
broadcast along a batch dimension (the transposed form reverse mode makes) with that
dimension free in the other operand.

Platform: declared `tpu`, so it rewrites only a module compiled for a TPU (`hlopt-opt
--platform tpu` for IR work).
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes.rewrite import summed_batch_dots
from hlopt.passes.rewrite.patterns import PatternPass, PatternSet


class SummedBatchDots(PatternPass):
    """Contract a summed batch dimension inside its dot_general, for a TPU.

    Backend: XLA's TPU compiler computes a product per batch of a dot_general one of whose
    operands is a broadcast along that batch dimension, and of one summed over a batch dimension
    after it; benchmark: `bench/taylor_tpu.py --without tpu-summed-batch-dots` (kinetic, gradient).

    The patterns of `hlopt.passes.rewrite.summed_batch_dots`, shared with `xla-cpu-summed-batch-dots`:
    a floating sum from zero over one batch dimension of a dot_general (read by the sum alone)
    becomes that dot_general with the dimension contracted, first among the contracted ones; a
    dot_general one of whose operands is a broadcast along a batch dimension has that dimension
    free in the other operand instead (the result transposed back). The shared module's docstring
    shows both rewrites.
    """

    name: ClassVar[str] = "tpu-summed-batch-dots"
    platforms: ClassVar[tuple[str, ...]] = ("tpu",)
    PATTERNS: ClassVar[PatternSet] = summed_batch_dots.PATTERNS
