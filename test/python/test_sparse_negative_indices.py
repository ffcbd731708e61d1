"""Negative BCOO indices are padding in every hlopt op alike (docs/sparse.md, "Deviations").

JAX reads an index in [-size, 0) as numpy does (size added) in most of its BCOO ops but not in
all (bcoo_slice drops it, sparse x sparse products and reshape give neither reading), so hlopt
takes one rule everywhere: an index outside [0, size), negative included, is padding. Each op
on forged indices (negative values next to in-range ones, at -1, -size, -size - 1 and the
type's minimum) must equal jax.experimental.sparse on the same array with those entries made
padding explicitly (index = size), over layouts with batch and dense dims and several dtypes;
2-d products run on CPU both on hlopt's kernels (rows claimed sorted) and in StableHLO.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as jsparse

import hlopt
from hlopt import sparse as hs

pytestmark = pytest.mark.usefixtures("x64_module")

SHAPE = (3, 4, 5)
MM = (((1,), (0,)), ((), ()))


def forged(shape, n_batch: int, n_dense: int, dtype, seed: int):
    """(data, indices with negative entries, the same indices with those entries as padding)."""
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < 0.5, rng.integers(1, 9, shape), 0).astype(dtype)
    m = jsparse.BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense, nse=12)
    indices = np.array(m.indices)
    sizes = np.array(shape[n_batch:len(shape) - n_dense])
    info = np.iinfo(indices.dtype)
    negative = rng.random(indices.shape) < 0.3
    choices = np.stack(np.broadcast_arrays(-1, -sizes, -sizes - 1, info.min), 0)
    picks = np.take_along_axis(choices, rng.integers(0, 4, indices.shape[-1])[None], 0)[0]
    forged_indices = np.where(negative, np.broadcast_to(picks, indices.shape), indices).astype(indices.dtype)
    padded = np.where(negative, np.broadcast_to(sizes, indices.shape), indices).astype(indices.dtype)
    return np.asarray(m.data) + 1, forged_indices, padded


def ops(s, n_batch: int, n_dense: int, dtype):
    """Each op as a function of one BCOO array of SHAPE (module `s`: hlopt.sparse or jax's), dense out."""
    keep_dense = (0, 1, 2) if n_batch + n_dense == 2 else (0, 2, 1) if n_batch == 1 else (
        (1, 0, 2) if n_dense == 1 else (2, 1, 0))
    d = jnp.arange(60, dtype=dtype).reshape(SHAPE)
    table = {
        "todense": lambda m: m.todense(),
        "dot middle axis": lambda m: s.bcoo_dot_general(m, jnp.arange(4, dtype=dtype),
                                                        dimension_numbers=(((1,), (0,)), ((), ()))),
        "reduce_sum": lambda m: s.bcoo_reduce_sum(m, axes=(1,)).todense(),
        "reduce_sum all": lambda m: s.bcoo_reduce_sum(m, axes=(0, 1, 2)).todense(),
        # its data; padding's is any value: read as an array with the op's own indices
        "multiply_dense": lambda m: s.BCOO((s.bcoo_multiply_dense(m, d), m.indices), shape=SHAPE).todense(),
        "multiply_sparse": lambda m: s.bcoo_multiply_sparse(m, m).todense(),
        "extract": lambda m: s.bcoo_extract(m, d).todense(),
        "transpose": lambda m: s.bcoo_transpose(m, permutation=keep_dense).todense(),
        "sum_duplicates": lambda m: s.bcoo_sum_duplicates(m, nse=m.nse).todense(),
        "sort_indices": lambda m: s.bcoo_sort_indices(m).todense(),
        "slice": lambda m: s.bcoo_slice(m, start_indices=(0, 1, 1), limit_indices=(3, 4, 5)).todense(),
    }
    if n_dense == 0:  # neither contracts a dense dim
        table["dot last axis"] = lambda m: s.bcoo_dot_general(m, jnp.arange(5, dtype=dtype),
                                                              dimension_numbers=(((2,), (0,)), ((), ())))
    if n_batch == 0 and n_dense == 0:
        table["reshape"] = lambda m: s.bcoo_reshape(m, new_sizes=(12, 5)).todense()
    return table


@pytest.mark.parametrize("n_batch,n_dense,dtype", [pytest.param(0, 0, np.float64, marks=pytest.mark.float64),
                                                   (1, 0, np.float32), (0, 1, np.int32),
                                                   pytest.param(1, 1, np.float64, marks=pytest.mark.float64),
                                                   (2, 0, np.complex64)])
def test_every_op_treats_negative_indices_as_padding(n_batch, n_dense, dtype):
    data, indices, padded = forged(SHAPE, n_batch, n_dense, dtype, seed=n_batch * 2 + n_dense)
    ours = ops(hs, n_batch, n_dense, dtype)
    theirs = ops(jsparse, n_batch, n_dense, dtype)
    got = hlopt.jit(lambda d, i: {k: f(hs.BCOO((d, i), shape=SHAPE)) for k, f in ours.items()})(data, indices)
    want = jax.jit(lambda d, i: {k: f(jsparse.BCOO((d, i), shape=SHAPE)) for k, f in theirs.items()})(data, padded)
    assert (indices < 0).any() and (np.asarray(padded) != indices).any()
    for name in ours:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("sorted_rows", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.float64)])
def test_matrix_products_treat_negative_indices_as_padding(dtype, sorted_rows):
    """Matrix x vector, vector x matrix, matrix x matrix, the sampled product and sparse x sparse;
    with rows claimed sorted (negative rows first) hlopt's CPU kernels compute the first three."""
    data, indices, padded = forged((6, 5), 0, 0, dtype, seed=7)
    order = np.argsort(indices[:, 0], kind="stable") if sorted_rows else np.arange(len(indices))
    data, indices, padded = data[order], indices[order], padded[order]
    rng = np.random.default_rng(1)
    x, v, p, q = (rng.standard_normal(s).astype(dtype) for s in ((5, 3), (6,), (6, 2), (2, 5)))
    other = jsparse.BCOO.fromdense(rng.standard_normal((5, 4)).astype(dtype))

    def products(s, d, i):
        m = s.BCOO((d, i), shape=(6, 5), indices_sorted=sorted_rows)
        o = s.BCOO((other.data, other.indices), shape=(5, 4))
        return {"matmat": m @ x, "matvec": m @ x[:, 0],
                "vecmat": s.bcoo_dot_general(v, m, dimension_numbers=(((0,), (0,)), ((), ()))),
                "sampled": s.bcoo_dot_general_sampled(p, q, i, dimension_numbers=MM),
                "sparse x sparse": (m @ o).todense()}

    compiled = hlopt.jit(lambda d, i: products(hs, d, i)).lower(data, indices).compile()
    got = compiled(data, indices)
    want = jax.jit(lambda d, i: products(jsparse, d, i))(data, padded)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for name in want:
        np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=tol, atol=tol, err_msg=name)
    assert ("hlopt_bcoo_spmm" in compiled.as_text()) == sorted_rows
