"""The `sparse` section of `hlopt demo`."""

from __future__ import annotations

from collections import Counter
from typing import TextIO

import numpy as np


def sparse_section(out: TextIO) -> None:
    """Build BCOO arrays, show the hlopt.bcoo annotations and their lowering, run, check."""
    import jax.numpy as jnp

    import hlopt
    from hlopt.demos import banner, check_close
    from hlopt.passes.ir.walk import walk_ops
    from hlopt.sparse import BCOO, bcoo_multiply_sparse

    banner(out, "sparse: BCOO arrays lowered by lower-bcoo")
    rng = np.random.RandomState(0)
    a = (rng.rand(4, 6) < 0.4) * rng.randn(4, 6).astype(np.float32)
    b = (rng.rand(4, 6) < 0.5) * rng.randn(4, 6).astype(np.float32)
    w = rng.randn(6).astype(np.float32)

    def f(a, b, w):
        sa, sb = BCOO.fromdense(a, nse=12), BCOO.fromdense(b, nse=12)
        product = bcoo_multiply_sparse(sa, sb)  # nse 12, not 12 * 12
        return (product * w).sum(1).todense(), sa.T[1:5].todense()

    lowered = hlopt.lower(f, a, b, w)
    out.write("--- StableHLO with hlopt.bcoo annotations ---\n" + lowered.as_text())
    after = lowered.apply("lower-bcoo")
    counts = Counter(op.name for op in walk_ops(after.module.operation))
    summary = ", ".join(f"{counts['stablehlo.' + k]} {k}" for k in ("gather", "scatter", "sort", "custom_call"))
    out.write(f"--- after lower-bcoo: {summary} ---\n")
    got = after.compile()(a, b, w)
    want = ((a * b) * w).sum(1), a.T[1:5]
    check_close(out, "sparse", got, (jnp.asarray(want[0]), jnp.asarray(want[1])))
