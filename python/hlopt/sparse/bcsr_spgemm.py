"""`bcsr_spdot_general`: the product of two `hlopt.sparse.BCSR` matrices as a BCSR matrix.

The product of the operands' BCOO forms (`to_bcoo()`: the `spdot_general` annotation, on CPU
hlopt's SpGEMM kernels), its entries in row-major order, turned back into row pointers. With
concrete indices the output stores exactly the structural nonzeros (`indptr[-1]`, counted
first); under jit with traced indices `nse=` is needed. Columns ascend within each row
(`indices_sorted=True`, `unique_indices=True`). The data is differentiable.

The module does not import `hlopt.sparse.bcsr` (which may dispatch `A @ B` here): the result has
the lhs's type.
"""

from __future__ import annotations

import operator
from typing import Any

import jax
import numpy as np

from hlopt.sparse import products, rules

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
      >>> m = sparse.bcsr_fromdense(jnp.array([[1.0, 2.0], [0.0, 3.0]]))
      >>> sparse.bcsr_spdot_general(m, m).todense().tolist()
      [[1.0, 8.0], [0.0, 9.0]]
    """
    if products._dims_key(dimension_numbers) != MATMUL:
        raise NotImplementedError(f"bcsr_spdot_general contracts lhs's columns with rhs's rows "
                                  f"(dimension_numbers {MATMUL}), got {dimension_numbers}: use to_bcoo()")
    if lhs.shape[1] != rhs.shape[0]:
        raise ValueError(f"a matrix product of shapes {tuple(lhs.shape)} and {tuple(rhs.shape)}: inner sizes differ")
    if nse is None and rules.is_traced(lhs.indices, lhs.indptr, rhs.indices, rhs.indptr):
        raise jax.errors.ConcretizationTypeError(
            lhs.indices, "the exact nse of a CSR product needs concrete indices: under jit give nse= "
            "(the count of the same product outside jit, its indptr[-1])")
    pet = None if preferred_element_type is None else np.dtype(preferred_element_type)
    out = products.bcoo_spdot_general(lhs.to_bcoo(), rhs.to_bcoo(), dimension_numbers=MATMUL,
                                      preferred_element_type=pet, nse=None if nse is None else operator.index(nse))
    return type(lhs).from_bcoo(out)
