"""Structure ops against jax.experimental.sparse and lax on the dense arrays: bcoo_concatenate,
bcoo_broadcast_in_dim, bcoo_dynamic_slice, bcoo_extract, bcoo_conv_general_dilated; eager and under
hlopt.jit, grad/jvp and vmap of each; bad input."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs

from support.sparse_util import assert_close, buffers, dense_of, pair, random_data, strict_promotion, x64  # noqa: F401

DTYPES = ["float32", "float64", "int32", "complex64"]
LAYOUTS = [(0, 0), (1, 0), (0, 1), (2, 0), (1, 1)]  # (n_batch, n_dense) over a rank-3 shape



def sparse_of(rng: np.random.RandomState, shape, n_batch: int, n_dense: int, dtype: str = "float32"):
    """An hlopt and a JAX BCOO of the same buffers, without padding entries (JAX's concatenate along a
    sparse dim would move a padding entry of one operand into the next one's range)."""
    return pair(buffers(rng, shape, n_batch, n_dense, nse=4, dtype=dtype, padding=False), shape)


def mk(shape, n_batch: int = 0, nse: int = 2) -> hs.BCOO:
    """A small random BCOO array of `shape` (no compile: built from buffers)."""
    return hs.BCOO(buffers(np.random.RandomState(len(shape)), shape, n_batch, 0, nse=nse, padding=False), shape=shape)


# ---------------------------------------------------------------------------
# Every op in every dtype against JAX's, one compiled program per dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_op_against_jax(dtype):
    with x64(dtype):
        rng = np.random.RandomState(DTYPES.index(dtype))
        m, jm = sparse_of(rng, (2, 3, 4), 1, 0, dtype)
        k, jk = sparse_of(rng, (2, 1, 4), 1, 0, dtype)
        lhs, jlhs = sparse_of(rng, (1, 1, 9), 0, 0, dtype)
        rhs, jrhs = sparse_of(rng, (1, 1, 4), 0, 0, dtype)
        arr = random_data(rng, (2, 3, 4), dtype)
        bd = dict(shape=(5, 2, 3, 4), broadcast_dimensions=(1, 2, 3))

        def ops(sp, m, k, lhs, rhs, arr):
            return (sp.bcoo_concatenate([m, k, m], dimension=1), sp.bcoo_concatenate([m, m], dimension=0),
                    sp.bcoo_broadcast_in_dim(m, **bd), sp.bcoo_dynamic_slice(m, [1, -2, 3], (1, 2, 2)),
                    sp.bcoo_extract(m, arr), sp.bcoo_extract(m, arr, assume_unique=False),
                    sp.bcoo_conv_general_dilated(lhs, rhs, window_strides=(1,), padding="SAME"),
                    sp.bcoo_conv_general_dilated(lhs, rhs.todense(), window_strides=(1,), padding=[(2, 1)]))

        got = hlopt.jit(functools.partial(ops, hs))(m, k, lhs, rhs, arr)
        want = jax.jit(functools.partial(ops, js))(jm, jk, jlhs, jrhs, arr)  # JAX's ops, one program too
        for g, w in zip(got, want, strict=True):
            assert (g.shape, g.nse, g.n_batch, g.n_dense) == (w.shape, w.nse, w.n_batch, w.n_dense)
            assert_close(g.todense(), w.todense(), dtype)


# ---------------------------------------------------------------------------
# concatenate


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_concatenate_layouts(n_batch, n_dense):
    """Every batch and sparse dimension, operands of different sizes and nse (padding and duplicates
    included), against lax.concatenate of the dense arrays; the layout against JAX's."""
    rng = np.random.RandomState(n_batch * 3 + n_dense)
    cases = []
    for dim in range(3 - n_dense):
        shapes = [tuple(s if d != dim else s + k for d, s in enumerate((2, 3, 2))) for k in (0, 2, 1)]
        cases.append([hs.BCOO(buffers(rng, s, n_batch, n_dense, nse=4 + k), shape=s) for k, s in enumerate(shapes)])
    outs = hlopt.jit(lambda cs: [hs.bcoo_concatenate(ms, dimension=d) for d, ms in enumerate(cs)])(cases)
    for dim, (mats, out) in enumerate(zip(cases, outs)):
        want = jax.eval_shape(lambda ms, d=dim: js.bcoo_concatenate(ms, dimension=d),
                              [js.BCOO((m.data, m.indices), shape=m.shape) for m in mats])
        assert (out.shape, out.n_batch, out.n_dense, out.nse) == (want.shape, want.n_batch, want.n_dense, want.nse)
        assert_close(out.todense(), lax.concatenate([dense_of(m) for m in mats], dim))


def test_concatenate_aligns_batch_and_broadcast_buffers():
    """n_batch 0 and 1 mixed with a leading dim of size 1 (JAX aligns them), and buffers whose batch
    dims broadcast (JAX refuses those; hlopt broadcasts them)."""
    rng = np.random.RandomState(0)
    a, ja = sparse_of(rng, (1, 4), 0, 0)
    b, jb = sparse_of(rng, (1, 4), 1, 0)
    assert_close(hs.bcoo_concatenate([a, b], dimension=0).todense(),
                 js.bcoo_concatenate([ja, jb], dimension=0).todense())
    data, idx = buffers(rng, (3, 4), 1, 0, nse=4, indices_batch=(1,))
    c = hs.BCOO((data, idx), shape=(3, 4))
    d = hs.BCOO(buffers(rng, (3, 2), 1, 0, nse=2, data_batch=(1,)), shape=(3, 2))
    for dim, (x, y) in ((0, (c, c)), (1, (c, d))):
        assert_close(hs.bcoo_concatenate([x, y], dimension=dim).todense(),
                     lax.concatenate([dense_of(x), dense_of(y)], dim))


def test_concatenate_errors():
    rng = np.random.RandomState(1)
    a, _ = sparse_of(rng, (3, 4), 0, 1)
    b, _ = sparse_of(rng, (3, 4), 0, 0)
    c, _ = sparse_of(rng, (3, 4), 1, 0)
    with pytest.raises(NotImplementedError, match="dense dimensions"):
        hs.bcoo_concatenate([a, a], dimension=1)
    with pytest.raises(ValueError, match="matching nse dimensions"):
        hs.bcoo_concatenate([a, b], dimension=0)
    with pytest.raises(ValueError, match="matching batch dimensions"):
        hs.bcoo_concatenate([b, c], dimension=0)
    with pytest.raises(TypeError, match="shapes"):
        hs.bcoo_concatenate([b, mk((3, 5))], dimension=0)
    with pytest.raises(TypeError, match="out of bounds"):
        hs.bcoo_concatenate([b, b], dimension=2)
    with pytest.raises(ValueError, match="sequence of BCOO"):
        hs.bcoo_concatenate([b, jnp.ones((3, 4))], dimension=0)
    with pytest.raises(TypeError):
        hs.bcoo_concatenate([b, b.astype("int32")], dimension=0)


# ---------------------------------------------------------------------------
# broadcast_in_dim

BROADCASTS = [  # (shape, n_batch, n_dense, new shape, broadcast_dimensions)
    ((3, 4), 0, 0, (2, 3, 4), (1, 2)),
    ((3, 4), 1, 0, (3, 2, 4), (0, 2)),
    ((3, 4), 1, 1, (3, 4, 2), (0, 1)),
    ((3, 4), 0, 0, (3, 1, 4), (0, 2)),
    ((1, 4), 1, 0, (5, 4), (0, 1)),
    ((3, 4), 1, 1, (2, 3, 4, 6), (1, 2)),
    ((2, 3, 4), 2, 0, (2, 3, 7, 4), (0, 1, 3)),
    ((0, 4), 1, 0, (0, 2, 4), (0, 2)),
]


def test_broadcast_in_dim_layouts():
    """New batch, sparse (size 1) and dense dims, broadcast batch dims, size 0: against
    lax.broadcast_in_dim of the dense array, the layout against JAX's."""
    rng = np.random.RandomState(2)
    mats = [hs.BCOO(buffers(rng, shape, nb, nd, nse=4), shape=shape) for shape, nb, nd, _, _ in BROADCASTS]
    outs = hlopt.jit(lambda ms: [hs.bcoo_broadcast_in_dim(m, shape=c[3], broadcast_dimensions=c[4])
                                 for m, c in zip(ms, BROADCASTS)])(mats)
    for m, out, (_, _, _, new, dims) in zip(mats, outs, BROADCASTS):
        want = jax.eval_shape(lambda x: js.bcoo_broadcast_in_dim(x, shape=new, broadcast_dimensions=dims),
                              js.BCOO((m.data, m.indices), shape=m.shape))
        assert (out.shape, out.n_batch, out.n_dense, out.nse) == (want.shape, want.n_batch, want.n_dense, want.nse)
        assert_close(out.todense(), lax.broadcast_in_dim(dense_of(m), new, dims))


def test_broadcast_in_dim_errors():
    m = mk((3, 3), 1)
    with pytest.raises(ValueError, match="same length"):
        hs.bcoo_broadcast_in_dim(m, shape=(3, 3), broadcast_dimensions=(0,))
    with pytest.raises(ValueError, match="mix batch and sparse"):
        hs.bcoo_broadcast_in_dim(m, shape=(3, 3), broadcast_dimensions=(1, 0))
    with pytest.raises(NotImplementedError, match="sparse dimensions with lengths != 1"):
        hs.bcoo_broadcast_in_dim(mk((3, 3)), shape=(3, 2, 3), broadcast_dimensions=(0, 2))
    with pytest.raises(TypeError, match="must either be 1, or be equal"):
        hs.bcoo_broadcast_in_dim(m, shape=(3, 4), broadcast_dimensions=(0, 1))


# ---------------------------------------------------------------------------
# dynamic_slice


@st.composite
def slice_cases(draw):
    nb = draw(st.integers(0, 2))
    nd = draw(st.integers(0, 3 - nb - 1))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=3, max_size=3)))
    sizes = tuple(draw(st.integers(0, s)) for s in shape)
    starts = [tuple(draw(st.integers(-6, 6)) for _ in shape) for _ in range(3)]
    return shape, nb, nd, sizes, starts, draw(st.integers(0, 2**31 - 1))


@settings(derandomize=True, max_examples=8, deadline=None)
@given(slice_cases())
def test_dynamic_slice_random_layouts(case):
    """Traced starts (negative, past the end: wrapped and clamped as lax does) against lax.dynamic_slice
    of the dense array; one compiled program serves every start."""
    shape, nb, nd, sizes, starts, seed = case
    rng = np.random.RandomState(seed % 2**32)
    m = hs.BCOO(buffers(rng, shape, nb, nd, nse=5), shape=shape)
    f = hlopt.jit(lambda m, s: hs.bcoo_dynamic_slice(m, list(s), sizes).todense())
    for start in starts:
        want = lax.dynamic_slice(dense_of(m), start, sizes)
        assert_close(f(m, jnp.asarray(start, jnp.int32)), want)
    out = jax.eval_shape(lambda m: hs.bcoo_dynamic_slice(m, [0] * 3, sizes), m)
    want = jax.eval_shape(lambda m: js.bcoo_dynamic_slice(m, [0] * 3, sizes), js.BCOO((m.data, m.indices), shape=shape))
    assert (out.shape, out.n_batch, out.n_dense, out.nse) == (want.shape, want.n_batch, want.n_dense, want.nse)


def test_dynamic_slice_errors():
    m = mk((3, 3))
    with pytest.raises(TypeError, match="slice_sizes must be less than or equal"):
        hs.bcoo_dynamic_slice(m, [0, 0], (4, 1))
    with pytest.raises(ValueError, match="Length of slice indices"):
        hs.bcoo_dynamic_slice(m, [0], (1, 1))
    with pytest.raises(TypeError):
        hs.bcoo_dynamic_slice(m, [0.5, 0], (1, 1))
    with pytest.raises(TypeError, match="input should be BCOO"):
        hs.bcoo_dynamic_slice(jnp.eye(3), [0, 0], (1, 1))


# ---------------------------------------------------------------------------
# extract


def test_extract_layouts():
    """Buffers with duplicates and padding in every layout: every index read (assume_unique), or
    only its first entry, against JAX's bcoo_extract."""
    rng = np.random.RandomState(5)
    shape = (2, 3, 4)
    layouts = [*LAYOUTS, (3, 0), (2, 1)]
    mats = [hs.BCOO(buffers(rng, shape, nb, nd, nse=5), shape=shape) for nb, nd in layouts]
    arr = random_data(rng, shape, "float32")
    outs = hlopt.jit(lambda ms, a: [[hs.bcoo_extract(m, a, assume_unique=u).data for u in (True, False)]
                                    for m in ms])(mats, arr)
    for m, out in zip(mats, outs):
        jm = js.BCOO((m.data, m.indices), shape=shape)
        for got, unique in zip(out, (True, False)):
            assert_close(got, js.bcoo_extract(jm, arr, assume_unique=unique).data)


def test_extract_first_occurrence_and_errors():
    """JAX's documented cases: duplicates read once at their first entry (also with n_sparse 0)."""
    idx = jnp.array([[0], [5], [0], [3], [2], [3]])
    arr = hs.BCOO((jnp.array([1, 3, 9, 27, 81, 243]), idx), shape=(6,)).todense()
    m = hs.BCOO((jnp.zeros(6, arr.dtype), idx), shape=(6,))
    np.testing.assert_array_equal(hs.bcoo_extract(m, arr, assume_unique=True).data, [10, 3, 10, 270, 81, 270])
    np.testing.assert_array_equal(hs.bcoo_extract(m, arr, assume_unique=False).data, [10, 3, 0, 270, 81, 0])
    np.testing.assert_array_equal(hs.bcoo_extract(m, arr).data, [10, 3, 0, 270, 81, 0])  # not unique_indices
    m0 = hs.BCOO((jnp.zeros((3, 2), jnp.int32), jnp.zeros((3, 2, 0), jnp.int32)), shape=(3,))
    arr0 = jnp.array([1, 5, 9], jnp.int32)
    np.testing.assert_array_equal(hs.bcoo_extract(m0, arr0, assume_unique=False).data, [[1, 0], [5, 0], [9, 0]])
    np.testing.assert_array_equal(hs.bcoo_extract(m0, arr0, assume_unique=True).data, [[1, 1], [5, 5], [9, 9]])
    with pytest.raises(ValueError, match="shape mismatch"):
        hs.bcoo_extract(m, jnp.ones(5))
    with pytest.raises(TypeError, match="should be a BCOO"):
        hs.bcoo_extract(jnp.ones(6), jnp.ones(6))


# ---------------------------------------------------------------------------
# conv_general_dilated

CONV_PADDINGS = ["VALID", "SAME", [(2, 1)], [(0, 3)]]


def test_conv_paddings():
    """Sparse x sparse, sparse x dense, dense x sparse with every padding, against
    lax.conv_general_dilated of the dense arrays (one program)."""
    rng = np.random.RandomState(6)
    lhs, _ = sparse_of(rng, (1, 1, 9), 0, 0)
    rhs, _ = sparse_of(rng, (1, 1, 4), 0, 0)
    pairs = ((lhs, rhs), (lhs, rhs.todense()), (lhs.todense(), rhs))
    outs = hlopt.jit(lambda ps: [[hs.bcoo_conv_general_dilated(a, b, window_strides=(1,), padding=pad)
                                  for a, b in ps] for pad in CONV_PADDINGS])(pairs)
    for pad, row in zip(CONV_PADDINGS, outs):
        want = lax.conv_general_dilated(lhs.todense(), rhs.todense(), window_strides=(1,), padding=pad)
        for out in row:
            assert out.shape == want.shape
            assert_close(out.todense(), want)


def test_conv_padding_entries_and_layouts():
    """Padding entries contribute nothing; operands of any layout are brought to n_batch 2."""
    rng = np.random.RandomState(7)
    m = hs.BCOO(buffers(rng, (1, 1, 6), 0, 0, nse=5), shape=(1, 1, 6))
    k = mk((1, 1, 3), 1, nse=3)
    out = hs.bcoo_conv_general_dilated(m, k, window_strides=(1,), padding=[(1, 1)])
    want = lax.conv_general_dilated(dense_of(m), k.todense(), window_strides=(1,), padding=[(1, 1)])
    assert_close(out.todense(), want)


def test_conv_errors():
    x = mk((1, 1, 5))
    k = jnp.ones((1, 1, 2))
    conv = functools.partial(hs.bcoo_conv_general_dilated, padding=[(0, 0)])
    with pytest.raises(NotImplementedError, match="window_strides"):
        conv(x, k, window_strides=(2,))
    with pytest.raises(NotImplementedError, match="lhs_dilation"):
        conv(x, k, window_strides=(1,), lhs_dilation=(2,))
    with pytest.raises(NotImplementedError, match="rhs_dilation"):
        conv(x, k, window_strides=(1,), rhs_dilation=(2,))
    with pytest.raises(NotImplementedError, match="leading dimensions"):
        conv(mk((2, 1, 5)), k, window_strides=(1,))
    with pytest.raises(NotImplementedError, match="leading dimensions"):
        conv(mk((1, 1, 5, 5)), jnp.ones((1, 1, 2, 2)), window_strides=(1, 1), padding="VALID")
    with pytest.raises(TypeError):
        conv(x, jnp.ones((1, 1, 2), jnp.int32), window_strides=(1,))
    with pytest.raises(TypeError, match="not recognized"):
        conv(x, [[[1.0, 2.0]]], window_strides=(1,))


# ---------------------------------------------------------------------------
# grad, jvp and vmap of each, against JAX's (or the dense function's)


def _data_grad(fn, m: hs.BCOO, dense_fn):
    """d/d(data) of sum(fn(m).todense()^2) against the same through JAX's todense and the lax op
    (the ground truth: padding entries get 0)."""
    def loss(d):
        return jnp.sum(fn(hs.BCOO((d, m.indices), shape=m.shape)).todense() ** 2)

    def dense_loss(d):
        return jnp.sum(dense_fn(js.BCOO((d, m.indices), shape=m.shape).todense()) ** 2)

    assert_close(hlopt.jit(jax.grad(loss))(m.data), jax.grad(dense_loss)(m.data))


def test_grad_of_each():
    rng = np.random.RandomState(8)
    m, jm = pair(buffers(rng, (2, 3, 4), 1, 0, nse=5), (2, 3, 4))
    for dim in (0, 1):
        _data_grad(lambda x, d=dim: hs.bcoo_concatenate([x, x], dimension=d), m,
                   lambda x, d=dim: lax.concatenate([x, x], d))
    bd = dict(shape=(5, 2, 3, 4), broadcast_dimensions=(1, 2, 3))
    _data_grad(lambda x: hs.bcoo_broadcast_in_dim(x, **bd), m, lambda x: lax.broadcast_in_dim(x, **bd))
    _data_grad(lambda x: hs.bcoo_dynamic_slice(x, [1, 1, 1], (1, 2, 2)), m,
               lambda x: lax.dynamic_slice(x, [1, 1, 1], (1, 2, 2)))
    arr, tangent = (random_data(rng, (2, 3, 4), "float32") for _ in range(2))
    for unique in (True, False):
        def extracted(a, u=unique):
            return hs.bcoo_extract(m, a, assume_unique=u).data
        got = hlopt.jit(jax.grad(lambda a: jnp.sum(extracted(a) ** 2)))(arr)
        # each stored index that is read (every entry, or only the first with that index) adds 2 * arr there
        reads = js.BCOO((js.bcoo_extract(jm, jnp.ones_like(arr), assume_unique=unique).data, m.indices), shape=m.shape)
        assert_close(got, 2 * arr * reads.todense())
        if unique:  # JAX has no transpose for assume_unique=False
            assert_close(got, jax.grad(lambda a: jnp.sum(js.bcoo_extract(jm, a, assume_unique=True).data ** 2))(arr))
        jv = hlopt.jit(lambda a, t: jax.jvp(extracted, (a,), (t,))[1])(arr, tangent)
        assert_close(jv, js.bcoo_extract(jm, tangent, assume_unique=unique).data)


def test_conv_grad_and_jvp():
    """Both operands' gradients against lax.conv_general_dilated's through the dense arrays."""
    rng = np.random.RandomState(9)
    lhs = hs.BCOO(buffers(rng, (1, 1, 7), 2, 0, nse=4, duplicates=True), shape=(1, 1, 7))
    rhs = hs.BCOO(buffers(rng, (1, 1, 3), 2, 0, nse=3), shape=(1, 1, 3))

    def loss(ld, rd):
        out = hs.bcoo_conv_general_dilated(hs.BCOO((ld, lhs.indices), shape=lhs.shape),
                                           hs.BCOO((rd, rhs.indices), shape=rhs.shape), window_strides=(1,),
                                           padding=[(2, 1)])
        return jnp.sum(out.todense() ** 2)

    def dense_loss(ld, rd):
        a = js.BCOO((ld, lhs.indices), shape=lhs.shape).todense()
        b = js.BCOO((rd, rhs.indices), shape=rhs.shape).todense()
        return jnp.sum(lax.conv_general_dilated(a, b, window_strides=(1,), padding=[(2, 1)]) ** 2)

    got = hlopt.jit(jax.grad(loss, argnums=(0, 1)))(lhs.data, rhs.data)
    want = jax.jit(jax.grad(dense_loss, argnums=(0, 1)))(lhs.data, rhs.data)
    for g, w in zip(got, want):
        assert_close(g, w)
    tangents = (random_data(rng, lhs.data.shape, "float32"), random_data(rng, rhs.data.shape, "float32"))
    got_t = hlopt.jit(lambda p, t: jax.jvp(loss, p, t)[1])((lhs.data, rhs.data), tangents)
    np.testing.assert_allclose(got_t, jax.jvp(dense_loss, (lhs.data, rhs.data), tangents)[1], rtol=1e-5)


def test_vmap_of_each():
    """vmap over a batch dim of the BCOO (and over dynamic_slice's starts) against a loop."""
    rng = np.random.RandomState(10)
    m = hs.BCOO(buffers(rng, (3, 4, 5), 1, 0, nse=5), shape=(3, 4, 5))
    rows = [hs.BCOO((m.data[i], m.indices[i]), shape=m.shape[1:]) for i in range(3)]
    arr = random_data(rng, (3, 4, 5), "float32")
    starts = jnp.asarray([[0, 1], [-1, 3], [2, 9]], jnp.int32)
    fns = {
        "concatenate": (lambda x: hs.bcoo_concatenate([x, x], dimension=1), (0,)),
        "broadcast_in_dim": (lambda x: hs.bcoo_broadcast_in_dim(x, shape=(2, 4, 5), broadcast_dimensions=(1, 2)), (0,)),
        "dynamic_slice": (lambda x: hs.bcoo_dynamic_slice(x, [1, 2], (2, 3)), (0,)),
        "dynamic_slice_starts": (lambda x, s: hs.bcoo_dynamic_slice(x, [s[0], s[1]], (2, 3)), (0, 0)),
        "extract": (lambda x, a: hs.bcoo_extract(x, a, assume_unique=False), (0, 0)),
    }
    args = {"dynamic_slice_starts": (starts,), "extract": (arr,)}
    for name, (fn, axes) in fns.items():
        extra = args.get(name, ())
        out = hlopt.jit(jax.vmap(fn, in_axes=axes))(m, *extra)
        for i in range(3):
            want = fn(rows[i], *(e[i] for e in extra))
            np.testing.assert_allclose(out.todense()[i], dense_of(want), rtol=1e-5, atol=1e-6, err_msg=name)
    lhs = mk((3, 1, 1, 6), 3, nse=4)
    rhs = mk((1, 1, 2), 2)
    conv = functools.partial(hs.bcoo_conv_general_dilated, window_strides=(1,), padding="SAME")
    out = hlopt.jit(jax.vmap(conv, in_axes=(0, None)))(lhs, rhs)
    for i in range(3):
        want = lax.conv_general_dilated(lhs.todense()[i], rhs.todense(), window_strides=(1,), padding="SAME")
        np.testing.assert_allclose(out.todense()[i], want, rtol=1e-5, atol=1e-6)
