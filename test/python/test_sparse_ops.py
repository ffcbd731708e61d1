"""hlopt.sparse against jax.experimental.sparse: every op, every layout, padding, duplicates, nse=0.

Each test computes JAX's side of its case in one `jax.jit` (JAX's eager sparse
ops compile a program per primitive and per jnp call inside them, which was
most of this file's time); nothing is computed at collection, so `-k` selects
cheaply.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs

from support.sparse_util import (  # noqa: F401 - strict_promotion: autouse
    DTYPES, LAYOUTS, SHAPE, assert_close, buffers, dense, pair, random_data, strict_promotion, x64,
)


def rng(seed: int = 0) -> np.random.RandomState:
    return np.random.RandomState(seed)


def stored_elements(x: np.ndarray, n_batch: int, n_dense: int) -> int:
    """JAX's `nse=None` rule for `fromdense`: the most nonzero sparse positions in any batch."""
    mask = np.asarray(x) != 0
    mask = mask.any(tuple(range(x.ndim - n_dense, x.ndim))) if n_dense else mask
    return int(mask.reshape(*x.shape[:n_batch], -1).sum(-1).max(initial=0))


def parts(m: js.BCOO) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(todense, data, indices) of a JAX BCOO, for returning from a jitted reference."""
    return m.todense(), m.data, m.indices


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_fromdense_matches_jax_buffers(n_batch, n_dense):
    r = rng(1)
    x = np.asarray(random_data(r, SHAPE, "float32")) * (r.rand(*SHAPE) < 0.4)
    cases = [(None, stored_elements(x, n_batch, n_dense)), (0, 0), (7, 7)]  # (nse, JAX's nse)
    refs = jax.jit(lambda x: [parts(js.BCOO.fromdense(x, nse=k, n_batch=n_batch, n_dense=n_dense)) for _, k in cases])(x)
    for (nse, k), (want_dense, want_data, want_indices) in zip(cases, refs, strict=True):
        ours = hs.BCOO.fromdense(x, nse=nse, n_batch=n_batch, n_dense=n_dense)
        assert (ours.nse, ours.n_batch, ours.n_sparse, ours.n_dense) == (k, n_batch, 4 - n_batch - n_dense, n_dense)
        assert_close(ours.indices, want_indices, "int32")
        assert_close(ours.data, want_data)
        assert_close(ours.todense(), want_dense)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fromdense_todense_dtypes(dtype):
    r = rng(2)
    with x64(dtype):
        x = np.asarray(random_data(r, SHAPE, dtype))
        x = np.where(r.rand(*SHAPE) < 0.5, x, np.zeros_like(x))
        ours = hs.BCOO.fromdense(x, n_batch=1, n_dense=1, index_dtype=np.int32)
        nse = stored_elements(x, 1, 1)
        want = jax.jit(lambda x: js.BCOO.fromdense(x, nse=nse, n_batch=1, n_dense=1).data)(x)
        assert_close(ours.data, want, dtype)
        assert_close(ours.todense(), x, dtype)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_todense_padding_duplicates(n_batch, n_dense):
    ours, ref = pair(buffers(rng(3), n_batch=n_batch, n_dense=n_dense), SHAPE)
    assert_close(ours.todense(), jax.jit(js.BCOO.todense)(ref))


@pytest.mark.parametrize("dtype", DTYPES)
def test_todense_dtypes_and_empty(dtype):
    with x64(dtype):
        for nse in (0, 5):
            ours, ref = pair(buffers(rng(4), n_batch=1, n_dense=1, nse=nse, dtype=dtype), SHAPE)
            assert_close(ours.todense(), jax.jit(js.BCOO.todense)(ref), dtype)


def test_todense_broadcast_batch_buffers():
    bufs = buffers(rng(5), n_batch=2, indices_batch=(1, 3), data_batch=(2, 1))
    ours, ref = pair(bufs, SHAPE)
    assert_close(ours.todense(), jax.jit(js.BCOO.todense)(ref))


def test_out_of_range_indices_are_padding():
    """Negative indices and indices past the end contribute nothing (JAX wraps negatives)."""
    data = np.arange(1, 5, dtype=np.float32)
    indices = np.array([[0, 1], [-1, 2], [2, 5], [1, 1]], np.int32)
    got = hs.BCOO((data, indices), shape=(3, 4)).todense()
    want = np.zeros((3, 4), np.float32)
    want[0, 1] = 1
    want[1, 1] = 4
    assert_close(got, want)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_sort_indices(n_batch, n_dense):
    ours, ref = pair(buffers(rng(6), n_batch=n_batch, n_dense=n_dense, nse=7), SHAPE)
    out = ours.sort_indices()
    want_dense, want_data, want_indices = jax.jit(lambda r: parts(js.bcoo_sort_indices(r)))(ref)
    assert out.data.shape == want_data.shape and out.indices.shape == want_indices.shape
    assert out.indices_sorted
    assert_close(out.todense(), want_dense)
    sizes = np.array(SHAPE[n_batch : n_batch + out.n_sparse])
    idx = np.asarray(out.indices).reshape(-1, out.nse, out.n_sparse)
    for row in idx:
        valid = np.all(row < sizes, -1)
        assert not np.any(valid[1:] & ~valid[:-1]), "padding must come last"
        keys = np.ravel_multi_index(tuple(row[valid].T), sizes)
        assert np.all(np.diff(keys) >= 0)


def distinct_entries(indices, shape: tuple[int, ...]) -> int:
    """The most distinct in-range sparse indices of any batch, in numpy (padding not counted)."""
    indices = np.asarray(indices)
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    sizes = np.array(shape[n_batch:n_batch + n_sparse])
    batches = indices.reshape(-1, *indices.shape[-2:])
    return max(len(np.unique(b[np.all(b < sizes, -1)], axis=0)) for b in batches)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_sum_duplicates(n_batch, n_dense):
    ours, ref = pair(buffers(rng(7), n_batch=n_batch, n_dense=n_dense, nse=7), SHAPE)
    # nse=None: the most distinct in-range indices of a batch, what JAX infers from concrete indices
    cases = [(None, distinct_entries(ref.indices, SHAPE)), (2, 2), (9, 9)]  # (nse, JAX's nse)
    refs = jax.jit(lambda r: [parts(js.bcoo_sum_duplicates(r, nse=k)) for _, k in cases])(ref)
    for (nse, _), (want_dense, want_data, want_indices) in zip(cases, refs, strict=True):
        out = hs.bcoo_sum_duplicates(ours, nse=nse)
        assert out.data.shape == want_data.shape
        assert_close(out.indices, want_indices, "int32")
        # JAX sums the padding entries into its padding slot; hlopt leaves padding data zero.
        valid = np.all(np.asarray(out.indices) < np.array(out.shape[n_batch : n_batch + out.n_sparse]), -1)
        valid = valid.reshape(*valid.shape, *(1,) * n_dense)
        assert_close(np.where(valid, out.data, 0), np.where(valid, want_data, 0))
        assert_close(out.todense(), want_dense)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_duplicates_dtypes(dtype):
    with x64(dtype):
        ours, ref = pair(buffers(rng(8), n_batch=1, nse=6, dtype=dtype), SHAPE)
        out = hs.bcoo_sum_duplicates(ours, nse=6)
        assert_close(out.todense(), jax.jit(lambda r: js.bcoo_sum_duplicates(r, nse=6).todense())(ref), dtype)


def test_sum_duplicates_broadcast_and_no_sparse_dims():
    bufs = buffers(rng(9), n_batch=2, nse=5, indices_batch=(1, 3))
    ours, ref = pair(bufs, SHAPE)
    out = hs.bcoo_sum_duplicates(ours, nse=5)
    want_dense, want_data, want_indices = jax.jit(lambda r: parts(js.bcoo_sum_duplicates(r, nse=5)))(ref)
    assert out.indices.shape == want_indices.shape and out.data.shape == want_data.shape
    assert_close(out.todense(), want_dense)
    ours, ref = pair(buffers(rng(9), shape=(2, 3), n_batch=1, n_dense=1, nse=4), (2, 3))
    want = jax.jit(lambda r: js.bcoo_sum_duplicates(r, nse=2).todense())(ref)
    assert_close(hs.bcoo_sum_duplicates(ours, nse=2).todense(), want)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_transpose(n_batch, n_dense):
    ours, ref = pair(buffers(rng(10), n_batch=n_batch, n_dense=n_dense), SHAPE)
    n_sparse = 4 - n_batch - n_dense
    perm = (*reversed(range(n_batch)), *reversed(range(n_batch, n_batch + n_sparse)), *range(n_batch + n_sparse, 4))
    out = hs.bcoo_transpose(ours, permutation=perm)
    plain = n_batch == 0 and n_dense == 0
    want_dense, want_data, want_indices = jax.jit(
        lambda r: parts(r.T if plain else js.bcoo_transpose(r, permutation=perm)))(ref)
    assert out.shape == want_dense.shape
    assert_close(out.data, want_data)
    assert_close(out.indices, want_indices, "int32")
    assert_close(ours.T.todense() if plain else out.todense(), want_dense)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_squeeze(n_batch, n_dense):
    shape = (1, 3, 1, 2) if n_batch != 1 else (2, 1, 3, 1)
    ours, ref = pair(buffers(rng(11), shape=shape, n_batch=n_batch, n_dense=n_dense, padding=False), shape)
    dims = [d for d, s in enumerate(shape) if s == 1]
    out = hs.bcoo_squeeze(ours, dimensions=dims)
    want_dense, want_data, want_indices = jax.jit(lambda r: parts(js.bcoo_squeeze(r, dimensions=dims)))(ref)
    assert out.shape == want_dense.shape
    assert out.data.shape == want_data.shape and out.indices.shape == want_indices.shape
    assert_close(out.todense(), want_dense)


def test_squeeze_entry_out_of_range_only_in_squeezed_dim():
    """JAX keeps such an entry; hlopt treats it as padding, like every out-of-range index."""
    data = np.array([1.0, 2.0], np.float32)
    indices = np.array([[0, 2], [1, 3]], np.int32)
    out = hs.bcoo_squeeze(hs.BCOO((data, indices), shape=(1, 4)), dimensions=[0])
    assert_close(out.todense(), np.array([0, 0, 1, 0], np.float32))


@pytest.mark.parametrize("n_batch", [0, 1])
def test_squeeze_of_several_dims_pads_every_entry_outside_them(n_batch):
    """An entry survives only if its index is 0 in every squeezed dim (negative, large and
    int32-extreme indices there make it padding) and in range in the kept dim."""
    big, small = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    rows = [(0, 2, 0), (0, 3, -1), (-1, 1, 0), (5, 0, 7), (0, 1, big), (small, 0, 0), (0, 4, 0), (0, 0, 0)]
    data = np.arange(1, len(rows) + 1, dtype=np.float32)
    indices = np.array(rows, np.int32)
    expect = np.zeros(4, np.float32)
    for value, (a, k, c) in zip(data, rows):
        if a == 0 and c == 0 and 0 <= k < 4:
            expect[k] += value
    if n_batch:  # the same entries in two batches, the second reversed
        data, indices = np.stack([data, data[::-1]]), np.stack([indices, indices[::-1]])
        expect = np.stack([expect, expect])
    shape = (2, 1, 4, 1)[1 - n_batch:]
    out = hs.bcoo_squeeze(hs.BCOO((data, indices), shape=shape), dimensions=[n_batch, n_batch + 2])
    assert out.shape == expect.shape
    assert_close(out.todense(), expect)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_slice(n_batch, n_dense):
    ours, ref = pair(buffers(rng(12), n_batch=n_batch, n_dense=n_dense, nse=7), SHAPE)
    windows = [((0, 1, 1, 0), (2, 3, 4, 2), None), ((1, 0, 0, 1), (2, 3, 4, 2), (1, 2, 3, 1))]
    refs = jax.jit(lambda r: [parts(js.bcoo_slice(r, start_indices=start, limit_indices=limit, strides=strides))
                              for start, limit, strides in windows])(ref)
    for (start, limit, strides), (want_dense, want_data, _) in zip(windows, refs, strict=True):
        out = hs.bcoo_slice(ours, start_indices=start, limit_indices=limit, strides=strides)
        assert out.shape == want_dense.shape and out.nse == want_data.shape[n_batch]
        assert_close(out.todense(), want_dense)


def test_getitem():
    x = np.asarray(random_data(rng(13), (4, 5, 3), "float32"))
    ours = hs.BCOO.fromdense(x, n_batch=1)
    assert_close(ours[1:3, ::2].todense(), x[1:3, ::2])
    assert_close(ours[2].todense(), x[2])
    assert_close(ours[..., 1].todense(), x[..., 1])


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_reshape(n_batch, n_dense):
    shape = (2, 3, 4, 2)
    ours, ref = pair(buffers(rng(14), shape=shape, n_batch=n_batch, n_dense=n_dense), shape)
    n_sparse = 4 - n_batch - n_dense
    new = list(shape[:n_batch])
    sparse = shape[n_batch : n_batch + n_sparse]
    new += [int(np.prod(sparse))] if n_sparse > 1 else [sparse[0]]
    new += list(shape[n_batch + n_sparse :])
    out = hs.bcoo_reshape(ours, new_sizes=new)
    # jax's bcoo_reshape fails for n_batch=1, n_dense=1: compare with the dense reshape.
    assert (out.n_batch, out.n_dense, out.nse) == (n_batch, n_dense, ours.nse)
    assert_close(out.todense(), jax.jit(lambda r: r.todense().reshape(new))(ref))


def test_reshape_dimensions_and_split():
    ours, ref = pair(buffers(rng(15), shape=(6, 4), nse=5), (6, 4))
    out = hs.bcoo_reshape(ours, new_sizes=(2, 12), dimensions=(1, 0))
    want, want_split = jax.jit(lambda r: (js.bcoo_reshape(r, new_sizes=(2, 12), dimensions=(1, 0)).todense(),
                                          r.todense().reshape(3, 8)))(ref)
    assert_close(out.todense(), want)
    assert_close(ours.reshape(3, -1).todense(), want_split)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_reduce_sum(n_batch, n_dense):
    ours, ref = pair(buffers(rng(16), n_batch=n_batch, n_dense=n_dense), SHAPE)
    axes_list = [(0,), (1, 3), (2,), (0, 1, 2, 3)]
    refs = jax.jit(lambda r: [parts(js.bcoo_reduce_sum(r, axes=axes)) for axes in axes_list])(ref)
    for axes, (want_dense, want_data, _) in zip(axes_list, refs, strict=True):
        out = hs.bcoo_reduce_sum(ours, axes=axes)
        assert out.shape == want_dense.shape and out.data.shape == want_data.shape
        assert_close(out.todense(), want_dense)


def test_reduce_sum_broadcast_batch():
    bufs = buffers(rng(17), n_batch=2, indices_batch=(1, 1), data_batch=(1, 1))
    ours, ref = pair(bufs, SHAPE)
    x = np.asarray(jax.jit(js.BCOO.todense)(ref))
    for axes in [(0,), (1, 2)]:
        assert_close(hs.bcoo_reduce_sum(ours, axes=axes).todense(), x.sum(axes))


def test_reduce_sum_marks_padding_in_the_kept_indices():
    """An entry out of range in a summed sparse dim becomes padding in the kept dims (index = size)
    and keeps its data; summing every sparse dim zeroes its data instead (JAX's representation)."""
    data = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    indices = np.array([[0, 1], [2, 5], [-1, 0], [1, 4]], np.int32)  # (2, 5): padding in dim 1 only
    ours, ref = pair((data, indices), (3, 5))
    out = hs.bcoo_reduce_sum(ours, axes=(1,))
    np.testing.assert_array_equal(out.indices, [[0], [3], [-1], [1]])  # -1: padding already
    np.testing.assert_array_equal(out.data, data)
    assert_close(out.todense(), np.array([1.0, 4.0, 0.0], np.float32))
    rows = hs.bcoo_reduce_sum(ours, axes=(0,))
    np.testing.assert_array_equal(rows.indices, [[1], [5], [5], [4]])
    assert_close(rows.todense(), np.array([0.0, 1.0, 0.0, 0.0, 4.0], np.float32))
    everything = hs.bcoo_reduce_sum(ours, axes=(0, 1))
    np.testing.assert_array_equal(everything.data, [1.0, 0.0, 0.0, 4.0])
    assert_close(everything.todense(), jax.jit(lambda r: js.bcoo_reduce_sum(r, axes=(0, 1)).todense())(
        js.BCOO((data, np.where(indices < 0, 3, indices)), shape=(3, 5))))  # JAX wraps negative indices


@pytest.mark.parametrize("axes", [(1,), (0,), (0, 1)])
def test_reduce_sum_data_jacobians_agree(axes):
    """jacfwd (the op on the tangent) and jacrev (the transpose rule) of the output data agree: the
    transpose masks exactly where the lowering zeroes data."""
    data = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    indices = np.array([[0, 1], [2, 5], [-1, 0], [1, 4]], np.int32)
    f = lambda d: hs.bcoo_reduce_sum(hs.BCOO((d, indices), shape=(3, 5)), axes=axes).data  # noqa: E731
    fwd, rev = jax.jacfwd(f)(data), jax.jacrev(f)(data)
    assert_close(fwd, rev)
    keep = np.ones(4, np.float32) if axes != (0, 1) else np.array([1, 0, 0, 1], np.float32)
    assert_close(fwd, np.diag(keep))


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_update_layout(n_batch, n_dense):
    ours, ref = pair(buffers(rng(18), n_batch=n_batch, n_dense=n_dense, nse=5), SHAPE)
    targets = [(0, 0), (2, 1), (1, 0), (0, 2)]
    refs = jax.jit(lambda r: [parts(js.bcoo_update_layout(r, n_batch=nb, n_dense=nd, on_inefficient=None))
                              for nb, nd in targets])(ref)
    for target, (want_dense, want_data, want_indices) in zip(targets, refs, strict=True):
        out = hs.bcoo_update_layout(ours, n_batch=target[0], n_dense=target[1], on_inefficient=None)
        assert (out.n_batch, out.n_dense) == target
        assert out.data.shape == want_data.shape and out.indices.shape == want_indices.shape
        assert_close(out.todense(), want_dense)


def test_update_layout_inefficient_raises_or_warns():
    mat = hs.BCOO(buffers(rng(19), nse=3), shape=SHAPE)
    with pytest.raises(hs.SparseEfficiencyError, match="on_inefficient"):
        hs.bcoo_update_layout(mat, n_batch=1)
    with pytest.warns(hs.SparseEfficiencyWarning, match="increasing n_dense"):
        hs.bcoo_update_layout(mat, n_dense=1, on_inefficient="warn")
    with pytest.raises(ValueError, match="cannot be larger"):
        hs.bcoo_update_layout(mat, n_batch=3, n_dense=2)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_multiply_dense(n_batch, n_dense):
    ours, ref = pair(buffers(rng(20), n_batch=n_batch, n_dense=n_dense), SHAPE)
    r = rng(21)
    vs = [random_data(r, vshape, "float32") for vshape in [SHAPE, (3, 1, 2), (1, 4, 1), ()]]

    def reference(ref, vs):
        with jax.numpy_rank_promotion("allow"):  # JAX's own multiply_dense promotes ranks when traced
            products = [js.bcoo_multiply_dense(ref, v) for v in vs]
        return [(p, js.BCOO((p, ref.indices), shape=SHAPE).todense()) for p in products]

    for v, (want, want_dense) in zip(vs, jax.jit(reference)(ref, vs), strict=True):
        got = hs.bcoo_multiply_dense(ours, v)
        assert got.shape == want.shape
        assert_close(hs.BCOO((got, ours.indices), shape=SHAPE).todense(), want_dense)
        assert_close((ours * v).todense(), want_dense)


@pytest.mark.parametrize("dtype", DTYPES)
def test_multiply_dense_dtypes(dtype):
    with x64(dtype):
        ours, ref = pair(buffers(rng(22), n_batch=1, dtype=dtype), SHAPE)
        v = random_data(rng(23), SHAPE, dtype)
        assert_close((ours * v).todense(), jax.jit(lambda r, v: (r * v).todense())(ref, v), dtype)


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_multiply_sparse(n_batch, n_dense):
    lhs, lref = pair(buffers(rng(24), n_batch=n_batch, n_dense=n_dense, nse=8), SHAPE)
    rhs, rref = pair(buffers(rng(25), n_batch=n_batch, n_dense=n_dense, nse=5), SHAPE)
    out = hs.bcoo_multiply_sparse(lhs, rhs)
    want = jax.jit(lambda a, b: js.bcoo_multiply_sparse(a, b).todense())(lref, rref)
    assert out.shape == want.shape and out.nse <= min(lhs.nse, rhs.nse)
    assert_close(out.todense(), want)
    assert_close((rhs * lhs).todense(), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_multiply_sparse_dtypes(dtype):
    with x64(dtype):
        lhs, lref = pair(buffers(rng(26), n_batch=1, nse=8, dtype=dtype), SHAPE)
        rhs, rref = pair(buffers(rng(27), n_batch=1, nse=8, dtype=dtype), SHAPE)
        want = jax.jit(lambda a, b: js.bcoo_multiply_sparse(a, b).todense())(lref, rref)
        assert_close(hs.bcoo_multiply_sparse(lhs, rhs).todense(), want, dtype)


@pytest.mark.parametrize(
    "lshape,rshape,lnb,rnb",
    [
        ((3, 4), (1, 4), 0, 0),  # rhs broadcasts: output stores lhs.nse entries
        ((3, 1), (1, 4), 0, 0),  # both broadcast: every pair
        ((2, 3, 4), (2, 3, 4), 1, 0),  # differing n_batch
        ((2, 3, 4), (1, 3, 4), 1, 1),  # broadcast batch dim
        ((4, 5), (4, 5), 0, 0),
    ],
)
def test_multiply_sparse_broadcasting(lshape, rshape, lnb, rnb):
    lhs, lref = pair(buffers(rng(28), shape=lshape, n_batch=lnb, nse=6), lshape)
    rhs, rref = pair(buffers(rng(29), shape=rshape, n_batch=rnb, nse=5), rshape)
    out = hs.bcoo_multiply_sparse(lhs, rhs)
    jax_nse = []

    def reference(a, b):
        jax_nse.append(js.bcoo_multiply_sparse(a, b).nse)  # static: read while tracing
        return a.todense() * b.todense()

    want = jax.jit(reference)(lref, rref)
    assert out.shape == want.shape
    assert out.nse <= jax_nse[0]
    # JAX lets an entry that is padding in a size-1 dim become valid after broadcasting;
    # hlopt keeps it padding, so the product of the dense arrays is the reference.
    assert_close(out.todense(), want)


def test_multiply_sparse_nse_zero_and_errors():
    lhs, lref = pair(buffers(rng(30), shape=(3, 4), nse=0), (3, 4))
    rhs, rref = pair(buffers(rng(31), shape=(3, 4), nse=4), (3, 4))
    want = jax.jit(lambda a, b: js.bcoo_multiply_sparse(a, b).todense())(lref, rref)
    assert_close(hs.bcoo_multiply_sparse(lhs, rhs).todense(), want)
    dense = hs.BCOO(buffers(rng(32), shape=(3, 4), n_dense=1), shape=(3, 4))
    with pytest.raises(NotImplementedError, match="dense dimensions"):
        hs.bcoo_multiply_sparse(rhs, dense)
    with pytest.raises(TypeError, match="same number of dimensions"):
        hs.bcoo_multiply_sparse(rhs, hs.BCOO(buffers(rng(33), shape=(4,)), shape=(4,)))


def test_bcoo_methods():
    r = rng(34)
    x = np.asarray(random_data(r, (3, 4), "float32")) * (r.rand(3, 4) < 0.6)
    nse = np.count_nonzero(x) + 2
    ours = hs.BCOO.fromdense(x, nse=nse)
    assert (ours.nse, ours.n_batch, ours.n_sparse, ours.n_dense, ours.ndim) == (nse, 0, 2, 0, 2)
    assert repr(ours) == f"BCOO(float32[3, 4], nse={nse})"
    assert_close(ours.sum(1).todense(), x.sum(1))
    assert_close(ours.sum(), x.sum())  # a full sum is a dense scalar, as in JAX
    assert_close((-ours).todense(), -x)
    assert_close((ours * ours).todense(), x * x)
    assert_close((2 * ours).todense(), 2 * x)
    assert_close(ours.update_layout(n_batch=1, on_inefficient=None).todense(), x)
    assert_close(ours.transpose((1, 0)).todense(), x.T)
    # sum_duplicates drops explicit zeros by default: nse is the number of nonzeros.
    padded = hs.BCOO((np.concatenate([ours.data, np.zeros(2, np.float32)]),
                      np.concatenate([ours.indices, np.zeros((2, 2), np.int32)])), shape=(3, 4))
    summed = padded.sum_duplicates()
    assert summed.nse == np.count_nonzero(x) and summed.indices_sorted and summed.unique_indices
    assert_close(summed.todense(), x)
    assert padded.sum_duplicates(remove_zeros=False).nse == np.count_nonzero(x) + (x[0, 0] == 0)


def test_validation_errors():
    mat = hs.BCOO(buffers(rng(35), nse=3), shape=SHAPE)
    with pytest.raises(ValueError, match="does not fit"):
        hs.BCOO(buffers(rng(35), nse=3), shape=(2, 3))
    with pytest.raises(TypeError, match="not a permutation"):
        hs.bcoo_transpose(mat, permutation=(0, 1))
    with pytest.raises(ValueError, match="invalid indices"):
        hs.bcoo_slice(mat, start_indices=(0, 0, 0, 0), limit_indices=(3, 3, 4, 2))
    with pytest.raises(ValueError, match="size not equal to one"):
        hs.bcoo_squeeze(mat, dimensions=(0,))
    with pytest.raises(ValueError, match="cannot mix batch and sparse"):
        hs.bcoo_reshape(hs.BCOO(buffers(rng(36), n_batch=1), shape=SHAPE), new_sizes=(6, 4, 2))
    with pytest.raises(NotImplementedError, match="output shape matches"):
        hs.bcoo_multiply_dense(mat, np.ones((5,), np.float32))


def test_random_entries_against_numpy():
    """Many random buffers (duplicates, padding, negative indices) at fixed shapes: one compile per op."""
    shape = (2, 5, 4)
    ops = {
        "todense": lambda m: m.todense(),
        "sum_duplicates": lambda m: hs.bcoo_sum_duplicates(m, nse=12).todense(),
        "sort_indices": lambda m: m.sort_indices().todense(),
        "slice": lambda m: m[:, 1:4, ::2].todense(),
        "reduce_sum": lambda m: hs.bcoo_reduce_sum(m, axes=(0, 2)).todense(),
        "multiply_sparse": lambda m: hs.bcoo_multiply_sparse(m, m.sort_indices()).todense(),
        "multiply_dense": lambda m: (m * np.arange(20, dtype=np.float32).reshape(5, 4)).todense(),
    }
    dense_ops = {
        "todense": lambda x: x,
        "sum_duplicates": lambda x: x,
        "sort_indices": lambda x: x,
        "slice": lambda x: x[:, 1:4, ::2],
        "reduce_sum": lambda x: x.sum((0, 2)),
        "multiply_sparse": lambda x: x * x,
        "multiply_dense": lambda x: x * np.arange(20, dtype=np.float32).reshape(5, 4),
    }
    compiled = {name: hlopt.jit(lambda d, i, op=op: op(hs.BCOO((d, i), shape=shape))) for name, op in ops.items()}
    r = rng(37)
    for _ in range(8):
        indices = r.randint(-1, 6, size=(2, 12, 2)).astype(np.int32)
        data = r.randint(-3, 4, size=(2, 12)).astype(np.float32)
        x = dense(data, indices, shape)
        for name, fn in compiled.items():
            assert_close(fn(data, indices), dense_ops[name](x))


def test_extreme_indices_are_padding():
    """Indices near the int32 limits: the range tests (unsigned compares, with wrap-around after
    subtracting a slice start) must still call every out-of-range entry padding."""
    shape = (5, 1, 6)
    big, small = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    values = np.array([small, small + 1, -2, -1, 0, 1, 2, 4, 5, 6, big - 1, big], np.int32)
    r = rng(42)
    ops = {
        "todense": (lambda m: m.todense(), lambda x: x),
        "slice": (lambda m: m[1:5, :, 1::2].todense(), lambda x: x[1:5, :, 1::2]),
        "squeeze": (lambda m: hs.bcoo_squeeze(m, dimensions=(1,)).todense(), lambda x: x[:, 0]),
        "reshape": (lambda m: hs.bcoo_reshape(m, new_sizes=(3, 10)).todense(), lambda x: x.reshape(3, 10)),
        "reduce_sum": (lambda m: hs.bcoo_reduce_sum(m, axes=(1,)).todense(), lambda x: x.sum(1)),
        "sort_indices": (lambda m: m.sort_indices().todense(), lambda x: x),
        "sum_duplicates": (lambda m: hs.bcoo_sum_duplicates(m, nse=20).todense(), lambda x: x),
    }
    compiled = {name: hlopt.jit(lambda d, i, op=op: op(hs.BCOO((d, i), shape=shape))) for name, (op, _) in ops.items()}
    for _ in range(4):
        indices = np.stack([r.randint(0, s, size=20) for s in shape], -1).astype(np.int32)
        extreme = r.rand(*indices.shape) < 0.3
        indices = np.where(extreme, r.choice(values, size=indices.shape), indices).astype(np.int32)
        data = r.randint(1, 5, size=20).astype(np.float32)
        x = dense(data, indices, shape)
        for name, fn in compiled.items():
            assert_close(fn(data, indices), ops[name][1](x))


@pytest.mark.parametrize("shape,n_batch,n_dense,nse", [((3, 4), 0, 0, 0), ((2, 3), 1, 1, 4), ((2, 3, 4), 1, 0, 0)])
def test_empty_and_no_sparse_dims(shape, n_batch, n_dense, nse):
    """nse = 0 and n_sparse = 0 through every op, against the dense computation."""
    bufs = buffers(rng(38), shape=shape, n_batch=n_batch, n_dense=n_dense, nse=nse)
    m = hs.BCOO(bufs, shape=shape)
    x = np.asarray(jax.jit(lambda d, i: js.BCOO((d, i), shape=shape).todense())(*bufs))
    last = len(shape) - 1
    v = np.arange(shape[-1], dtype=np.float32)
    checks = [
        (m.todense(), x),
        (hs.bcoo_sum_duplicates(m, nse=2).todense(), x),
        (m.sort_indices().todense(), x),
        (hs.bcoo_slice(m, start_indices=(0,) * len(shape), limit_indices=shape[:-1] + (1,)).todense(), x[..., :1]),
        (hs.bcoo_reduce_sum(m, axes=(last,)).todense(), x.sum(last)),
        (hs.bcoo_multiply_sparse(m, m).todense(), x * x),
        ((m * v).todense(), x * v),
        (hs.bcoo_update_layout(m, n_batch=0, n_dense=0).todense(), x),
        (hs.bcoo_reshape(m, new_sizes=shape + (1,)).todense(), x.reshape(shape + (1,))),
    ]
    for got, want in checks:
        assert_close(got, want)


@pytest.mark.parametrize("indices_batch,data_batch", [((1, 3), (2, 3)), ((2, 3), (1, 1)), ((1, 1), (2, 1))])
def test_broadcast_batch_buffers_through_ops(indices_batch, data_batch):
    bufs = buffers(rng(39), n_batch=2, nse=5, indices_batch=indices_batch, data_batch=data_batch)
    m = hs.BCOO(bufs, shape=SHAPE)
    x = np.asarray(jax.jit(lambda d, i: js.BCOO((d, i), shape=SHAPE).todense())(*bufs))
    checks = [
        (m.sort_indices().todense(), x),
        (hs.bcoo_sum_duplicates(m, nse=5).todense(), x),
        (m[1:, :, 1:3].todense(), x[1:, :, 1:3]),
        (hs.bcoo_transpose(m, permutation=(1, 0, 3, 2)).todense(), x.transpose(1, 0, 3, 2)),
        (hs.bcoo_reduce_sum(m, axes=(1, 3)).todense(), x.sum((1, 3))),
        (hs.bcoo_update_layout(m, n_batch=1).todense(), x),
        (m.sum((1, 3)).todense(), x.sum((1, 3))),
        (hs.bcoo_multiply_sparse(m, m.sort_indices()).todense(), x * x),
        ((m * x).todense(), x * x),
    ]
    for got, want in checks:
        assert_close(got, want)


@pytest.mark.parametrize("indices_batch,data_batch", [((1, 3), (2, 3)), ((2, 3), (1, 1)), ((2, 1), (2, 3))])
def test_reshape_refuses_broadcast_batch_buffers_as_jax(indices_batch, data_batch):
    """JAX's bcoo_reshape raises NotImplementedError for broadcast batch buffers (its check catches
    broadcast data; broadcast indices fail later in its lowering): hlopt raises JAX's message for both,
    and reshapes the same array once its buffers are broadcast to the batch shape."""
    bufs = buffers(rng(40), n_batch=2, nse=5, indices_batch=indices_batch, data_batch=data_batch)
    ours, ref = pair(bufs, SHAPE)
    for reshape in (lambda m: m.reshape(6, 4, 2), lambda m: hs.bcoo_reshape(m, new_sizes=(6, 4, 2))):
        with pytest.raises(NotImplementedError, match=r"^reshape of arrays with broadcasted batch dimensions\. "):
            reshape(ours)
    with pytest.raises(Exception):  # noqa: B017 - JAX's NotImplementedError or its lowering's ValueError
        js.bcoo_reshape(ref, new_sizes=(6, 4, 2))
    full = [jnp.broadcast_to(b, (*SHAPE[:2], *b.shape[2:])) for b in bufs]
    ours, ref = pair(full, SHAPE)
    assert_close(ours.reshape(6, 4, 2).todense(), js.bcoo_reshape(ref, new_sizes=(6, 4, 2)).todense())


def test_multiply_sparse_broadcast_dense_dims():
    lhs, lref = pair(buffers(rng(40), shape=(3, 4, 2), n_dense=1, nse=5), (3, 4, 2))
    rhs, rref = pair(buffers(rng(41), shape=(3, 4, 1), n_dense=1, nse=4), (3, 4, 1))
    out = hs.bcoo_multiply_sparse(lhs, rhs)
    assert out.shape == (3, 4, 2) and out.n_dense == 1
    assert_close(out.todense(), jax.jit(lambda a, b: a.todense() * b.todense())(lref, rref))


@pytest.mark.parametrize(
    "shape,n_batch,n_dense,nse",
    [((0, 3), 1, 0, 2), ((2, 0), 0, 0, 3), ((2, 0, 3), 1, 0, 2), ((3, 0), 0, 1, 2), ((2, 3, 0), 1, 1, 2),
     ((0,), 0, 0, 2), ((0, 0), 1, 0, 0), ((2, 3), 0, 0, 0), ((2, 3, 4), 1, 1, 0)],
)
def test_size_zero_dims(shape, n_batch, n_dense, nse):
    """Size-0 batch, sparse and dense dims and nse = 0 through every op, its vjp and fromdense."""
    r = rng(43)
    n_sparse = len(shape) - n_batch - n_dense
    data = r.rand(*shape[:n_batch], nse, *shape[n_batch + n_sparse :]).astype(np.float32)
    sizes = shape[n_batch : n_batch + n_sparse]
    indices = np.stack([r.randint(0, max(s, 1), size=(*shape[:n_batch], nse)) for s in sizes], -1).astype(np.int32)
    x = dense(data, indices, shape)
    last = len(shape) - 1
    window = tuple(slice(0, max(s - 1, 0)) for s in shape)
    cases = {
        "todense": (lambda m: m.todense(), x),
        "sort_indices": (lambda m: m.sort_indices().todense(), x),
        "sum_duplicates": (lambda m: hs.bcoo_sum_duplicates(m, nse=3).todense(), x),
        "slice": (lambda m: m[window].todense(), x[window]),
        "reduce_sum": (lambda m: hs.bcoo_reduce_sum(m, axes=(last,)).todense(), x.sum(last)),
        "multiply_sparse": (lambda m: hs.bcoo_multiply_sparse(m, m).todense(), x * x),
        "multiply_dense": (lambda m: (m * np.ones(shape[-1:], np.float32)).todense(), x),
        "reshape": (lambda m: hs.bcoo_reshape(m, new_sizes=shape + (1,)).todense(), x.reshape(shape + (1,))),
        "update_layout": (lambda m: hs.bcoo_update_layout(m, n_batch=0, n_dense=0).todense(), x),
        "fromdense": (lambda m: hs.BCOO.fromdense(m.todense(), nse=3, n_batch=n_batch, n_dense=n_dense).todense(), x),
        "rev": (lambda m: hs.bcoo_rev(m, [0]).todense(), x[::-1]),
        "gather": (lambda m: m[np.array([0, 0])].todense() if shape[0] else m.todense(), x[[0, 0]] if shape[0] else x),
    }

    def run(d, i):
        outs = {name: fn(hs.BCOO((d, i), shape=shape)) for name, (fn, _) in cases.items()}
        outs["vjp"] = jax.vjp(lambda d: hs.BCOO((d, i), shape=shape).todense(), d)[1](jnp.ones(shape, d.dtype))[0]
        return outs

    got = hlopt.jit(run)(data, indices)
    for name, (_, want) in cases.items():
        assert_close(got[name], want)
    want_vjp = jax.jit(lambda d: jax.vjp(lambda d: js.BCOO((d, indices), shape=shape).todense(), d)[1](jnp.ones(shape))[0])
    assert_close(got["vjp"], want_vjp(data) if 0 not in sizes else np.zeros_like(data))
