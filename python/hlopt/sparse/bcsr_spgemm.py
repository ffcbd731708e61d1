"""`bcsr_spdot_general`: the product of two `hlopt.sparse.BCSR` matrices as a BCSR matrix.

CSR in, CSR out, on the CSR SpGEMM kernels (`hlopt.sparse.spgemm.csr_product`): the symbolic
phase writes the output's indptr directly, the numeric phase its columns and values, so the output
stores 8 bytes an entry (float32, int32 indices) plus its row pointers, as scipy's CSR product does.
With concrete indices the output stores exactly the structural nonzeros (`indptr[-1]`, counted
first); under jit with traced indices `nse=` is needed. Columns ascend within each row
(`indices_sorted=True`, `unique_indices=True`). The data is differentiable (JVP and transpose
through the sampled product). Shapes or dtypes the kernels do not take (integer or half-precision
data, more than 2^24 output columns) are computed as the BCOO product of `to_bcoo()`, converted
back.

The module does not import `hlopt.sparse.bcsr` (which may dispatch `A @ B` here): the result has
the lhs's type.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from hlopt.sparse import products, spgemm

MATMUL = (((1,), (0,)), ((), ()))


def bcsr_spdot_general(lhs: Any, rhs: Any, *, dimension_numbers: Any = MATMUL, preferred_element_type: Any = None,
                       nse: int | None = None) -> Any:
    """`lhs @ rhs` of two BCSR matrices (the only contraction: lhs's columns with rhs's rows) as a
    BCSR matrix with `nse` entries.

    Args:
      lhs: a `BCSR`.
      rhs: a `BCSR`.
      dimension_numbers: `(((1,), (0,)), ((), ()))`, the only one supported.
      preferred_element_type: the result's dtype.
      nse: the result's stored entries; None: the exact count, from concrete indices.

    Returns:
      A `BCSR`.

    Example:
      >>> import jax.numpy as jnp
      >>> from hlopt import sparse
      >>> m = sparse.bcsr_fromdense(jnp.array([[1.0, 2.0], [0.0, 3.0]]))
      >>> sparse.bcsr_spdot_general(m, m).todense().tolist()
      [[1.0, 8.0], [0.0, 9.0]]
    """
    if products._dims_key(dimension_numbers) != MATMUL:
        raise NotImplementedError(f"bcsr_spdot_general contracts lhs's columns with rhs's rows "
                                  f"(dimension_numbers {MATMUL}), got {dimension_numbers}: use to_bcoo()")
    nse = None if nse is None else operator.index(nse)
    pet = None if preferred_element_type is None else np.dtype(preferred_element_type)
    plan = spgemm.csr_plan(lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, pet, lhs.indices.dtype, rhs.indices.dtype)
    out_shape = (lhs.shape[0], rhs.shape[1])
    if plan is None:
        out = products.bcoo_spdot_general(lhs.to_bcoo(), rhs.to_bcoo(), dimension_numbers=MATMUL,
                                          preferred_element_type=pet, nse=nse)
        return type(lhs).from_bcoo(out)
    data, indices, indptr = spgemm.csr_product(plan, lhs.data, lhs.indices, lhs.indptr, rhs.data, rhs.indices,
                                               rhs.indptr, nse, products.spdot_general_sampled_p)
    return type(lhs)((data, indices, indptr), shape=out_shape, indices_sorted=True, unique_indices=True)
