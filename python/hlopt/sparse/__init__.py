"""Batched-COO sparse arrays whose operations lower through the lower-bcoo pass.

The API mirrors JAX's experimental sparse module: build a `BCOO` with
`BCOO.fromdense` or from `(data, indices)`, use the `bcoo_*` functions or the
methods, and run under `hlopt.jit` / `hlopt.lower` (or eagerly). Each op is an
`hlopt.bcoo.*` annotation that the `lower-bcoo` pass turns into StableHLO.

The examples of this package's functions and classes assume `import jax.numpy as jnp`
and `from hlopt import sparse`, as JAX's documentation assumes `jnp`.

Example:
  >>> import jax.numpy as jnp
  >>> import hlopt
  >>> from hlopt import sparse
  >>> a = sparse.BCOO.fromdense(jnp.array([[0.0, 2.0], [3.0, 0.0]]))
  >>> hlopt.jit(lambda a, x: a @ x)(a, jnp.array([1.0, 1.0])).tolist()
  [2.0, 3.0]
"""

from hlopt.sparse.bcoo import (
    BCOO,
    SparseEfficiencyError,
    SparseEfficiencyWarning,
    bcoo_fromdense,
    bcoo_gather,
    bcoo_multiply_dense,
    bcoo_multiply_sparse,
    bcoo_reduce_sum,
    bcoo_reshape,
    bcoo_rev,
    bcoo_slice,
    bcoo_sort_indices,
    bcoo_squeeze,
    bcoo_sum_duplicates,
    bcoo_todense,
    bcoo_todense_p,
    bcoo_transpose,
    bcoo_update_layout,
    todense,
    todense_p,
)
from hlopt.sparse.bcsr import BCSR, bcsr_dot_general, bcsr_fromdense, bcsr_todense
from hlopt.sparse.bcsr_spgemm import bcsr_spdot_general
from hlopt.sparse.construct import empty, eye, random_bcoo
from hlopt.sparse.products import bcoo_dot_general, bcoo_dot_general_sampled, bcoo_spdot_general, bcoo_spdot_nse
from hlopt.sparse.structure import (
    bcoo_broadcast_in_dim,
    bcoo_concatenate,
    bcoo_conv_general_dilated,
    bcoo_dynamic_slice,
    bcoo_extract,
)
from hlopt.sparse.transform import grad, jacfwd, jacobian, jacrev, value_and_grad
from hlopt.sparse import bcoo as _bcoo, bcsr as _bcsr, serialization as _serialization
from hlopt.passes.tpu import sparse_products as _sparse_products

# jax.export and executable files may hold BCOO and BCSR arguments and results
_serialization.register(BCOO, _bcoo.node_problem)
_serialization.register(BCSR, _bcsr.node_problem)


def _tpu_product(m: int, x_shape: tuple[int, ...], nse: int, dtype: str, index_dtype: str) -> str | None:
    """`tpu-sparse-products`' kernel: the Pallas kernels of `hlopt.sparse.tpu_products` where they take the
    product (Pallas is imported only then)."""
    from hlopt.sparse import tpu_products

    return tpu_products.lowered_text(m, x_shape, nse, dtype, index_dtype) if tpu_products.takes(m, x_shape, dtype) else None


_sparse_products.register_product_kernel(_tpu_product)

__all__ = [
    "BCOO",
    "BCSR",
    "SparseEfficiencyError",
    "SparseEfficiencyWarning",
    "bcoo_broadcast_in_dim",
    "bcoo_concatenate",
    "bcoo_conv_general_dilated",
    "bcoo_dynamic_slice",
    "bcoo_extract",
    "bcoo_dot_general",
    "bcoo_dot_general_sampled",
    "bcoo_fromdense",
    "bcoo_gather",
    "bcoo_multiply_dense",
    "bcoo_multiply_sparse",
    "bcoo_reduce_sum",
    "bcoo_reshape",
    "bcoo_rev",
    "bcoo_slice",
    "bcoo_sort_indices",
    "bcoo_spdot_general",
    "bcoo_spdot_nse",
    "bcoo_squeeze",
    "bcoo_sum_duplicates",
    "bcoo_todense",
    "bcoo_todense_p",
    "bcoo_transpose",
    "bcoo_update_layout",
    "bcsr_dot_general",
    "bcsr_spdot_general",
    "bcsr_fromdense",
    "bcsr_todense",
    "empty",
    "eye",
    "grad",
    "jacfwd",
    "jacobian",
    "jacrev",
    "random_bcoo",
    "todense",
    "todense_p",
    "value_and_grad",
]

