"""`xla-cpu-summed-batch-dots`: a sum over a batch dimension of a dot_general contracts that
dimension in the dot instead.

A collapsed jet sums products over its directions (the Laplacian of `log|det Phi|` through
`slogdet`'s JVP rule, bench/wavefunction.py: a small product per direction and walker).
XLA:CPU runs a dot_general with many small batches one small matmul at a time, writes all
of them, and sums them in another loop. The same sum is one product per walker whose
contraction runs over the direction and the matrices' inner dimension together, with no
product per direction in memory.

The rewrites, their conditions and examples are `hlopt.passes.rewrite.summed_batch_dots`,
which `tpu-summed-batch-dots` declares for a TPU too: a change of them for XLA:CPU changes
TPU output as well (a CPU-only rule belongs in this module). The pass runs before
`xla-cpu-sum-as-dot`, which would make the sum a product with ones.
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes.rewrite import summed_batch_dots
from hlopt.passes.rewrite.patterns import PatternPass, PatternSet


class SummedBatchDots(PatternPass):
    """Contract a summed batch dimension inside its dot_general.

    Backend: XLA:CPU runs a dot_general of many small batches one small matmul at a time and sums
    the results in another loop; benchmark: `bench/xla_cpu_tuning.py --workloads wavefunction
    --electrons 8`.

    A floating sum from zero over one batch dimension of a dot_general (read by the sum alone)
    becomes that dot_general with the dimension contracted, first among the contracted ones; a
    dot_general one of whose operands is a broadcast along a batch dimension has that dimension
    free in the other operand instead (the result transposed back). `tpu-summed-batch-dots` shares
    these patterns (`hlopt.passes.rewrite.summed_batch_dots`)."""

    name: ClassVar[str] = "xla-cpu-summed-batch-dots"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    PATTERNS: ClassVar[PatternSet] = summed_batch_dots.PATTERNS
