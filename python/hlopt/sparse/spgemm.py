"""The exact output size of a sparse x sparse matrix product, counted on the host by hlopt's CPU
SpGEMM count kernel (runtime/native/spgemm.cc).

The product itself is the `spdot_general` annotation, lowered portably by lower-bcoo and, for
CPU, by the kernels (`xla-cpu-sparse-kernels`). Its `nse` is a static size: with concrete indices
it is the structural nonzero count (scipy's), counted before the program is built. For two
matrices (no batch or dense dims, one contracting dim each, int32/int64 indices) the count
kernel `hlopt_spgemm_count` takes it on the host's CPU device, whatever the platform the
program is for; without hlopt's native extension, or for other layouts, the caller counts in
numpy (`hlopt.sparse.symbolic`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from hlopt.passes.sparse import shapes
from hlopt.passes.xla_cpu.sparse_kernels import (
    SPGEMM_COUNT, SpgemmPlan, spgemm_count_runs, spgemm_plan,
)
from hlopt.runtime import kernels


def exact_nse(lhs: shapes.Layout, rhs: shapes.Layout, dimension_numbers: shapes.DotDims, lhs_indices: Any,
              rhs_indices: Any) -> int | None:
    """The structural nonzero count of the product of these concrete indices (rhs's of lhs's dtype),
    counted now on the host's CPU; None where the count kernel does not apply or is not built."""
    index = np.dtype(lhs_indices.dtype)
    plan = spgemm_plan(lhs, rhs, dimension_numbers, f"i{8 * index.itemsize}" if index.kind == "i" else "")
    if plan is None or not kernels.available():
        return None
    kernels.register()
    cpu = jax.devices("cpu")[0]
    with jax.ensure_compile_time_eval():
        li, ri = (jax.device_put(x if x.dtype == index else np.asarray(x).astype(index), cpu)
                  for x in (lhs_indices, rhs_indices))
        counts = _counts(plan, li, ri)
    return int(np.asarray(counts).sum(dtype=np.int64))


@functools.partial(jax.jit, static_argnums=0)
def _counts(plan: SpgemmPlan, lhs_indices: Any, rhs_indices: Any) -> jax.Array:
    """The output entries of each run of SPGEMM_ROWS_PER_COUNT rows (`hlopt_spgemm_count`)."""
    li = lhs_indices[:, ::-1] if plan.swap_lhs else lhs_indices
    ri = rhs_indices[:, ::-1] if plan.swap_rhs else rhs_indices
    out = jax.ShapeDtypeStruct((spgemm_count_runs(plan.rows),), li.dtype)
    attrs = {k: np.int64(v) for k, v in plan.attrs.items()}
    return jax.ffi.ffi_call(SPGEMM_COUNT, out, vmap_method="sequential")(li, ri, **attrs)
