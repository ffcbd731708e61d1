"""jvp, grad and vmap of hlopt.sparse ops, against the same computation on dense arrays.

Each test computes every reference of its case in one `jax.jit` (JAX's eager
sparse ops compile one program per primitive, which was most of the time).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs

from support.references import assert_jvp_and_grad_match
from support.sparse_util import SHAPE, assert_close, buffers, random_data, strict_promotion  # noqa: F401

LAYOUTS = [(0, 0), (1, 1), (2, 0)]


def dense(data, indices, shape=SHAPE):
    return js.BCOO((data, indices), shape=shape).todense()


# op name -> (hlopt op on a BCOO, the same op on the dense array)
LINEAR_OPS = {
    "todense": (lambda m: m.todense(), lambda x: x),
    "transpose": (lambda m: hs.bcoo_transpose(m, permutation=_perm(m)).todense(), None),
    "reduce_sum": (lambda m: hs.bcoo_reduce_sum(m, axes=(1, 3)).todense(), lambda x: x.sum((1, 3))),
    "slice": (
        lambda m: hs.bcoo_slice(m, start_indices=(0, 1, 1, 0), limit_indices=(2, 3, 4, 2), strides=(1, 1, 2, 1)).todense(),
        lambda x: x[:, 1:3, 1:4:2, :],
    ),
    "reshape": (lambda m: m.reshape(_merged(m)).todense(), lambda x: x.reshape(_merged_dense(x))),
    "sort_indices": (lambda m: m.sort_indices().todense(), lambda x: x),
    "sum_duplicates": (lambda m: hs.bcoo_sum_duplicates(m, nse=4).todense(), None),
    "update_layout": (lambda m: hs.bcoo_update_layout(m, n_batch=0, n_dense=0).todense(), lambda x: x),
    "squeeze": (lambda m: hs.bcoo_squeeze(hs.bcoo_reshape(m, new_sizes=(*m.shape, 1)), dimensions=(4,)).todense(), lambda x: x),
}


def _perm(m):
    nb, ns = m.n_batch, m.n_sparse
    return (*range(nb), *reversed(range(nb, nb + ns)), *range(nb + ns, m.ndim))


def _merged(m):
    nb, ns = m.n_batch, m.n_sparse
    return (*m.shape[:nb], int(np.prod(m.shape[nb : nb + ns])), *m.shape[nb + ns :])


_LAYOUT = {}


def _merged_dense(x):
    return _merged(_LAYOUT["mat"])


def _transpose_dense(x, m):
    return jnp.transpose(x, _perm(m))


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_jvp_of_data_linear_ops(n_batch, n_dense):
    data, indices = buffers(np.random.RandomState(0), n_batch=n_batch, n_dense=n_dense, nse=6)
    tangent = random_data(np.random.RandomState(1), data.shape, "float32")
    mat = hs.BCOO((data, indices), shape=SHAPE)
    _LAYOUT["mat"] = mat

    def ours(d, t):
        outs = {}
        for name, (op, _) in LINEAR_OPS.items():
            outs[name] = jax.jvp(lambda d: op(hs.BCOO((d, indices), shape=SHAPE)), (d,), (t,))
        return outs

    def reference(data, tangent):
        x, tx = dense(data, indices), dense(tangent, indices)
        wants = {}
        for name, (_, ref) in LINEAR_OPS.items():
            if name == "transpose":
                wants[name] = (_transpose_dense(x, mat), _transpose_dense(tx, mat))
            elif name == "sum_duplicates":
                wants[name] = tuple(dense(*js.bcoo_sum_duplicates(js.BCOO((d, indices), shape=SHAPE), nse=4)._bufs)
                                    for d in (data, tangent))
            else:
                wants[name] = (ref(x), ref(tx))
        return wants

    got = hlopt.jit(ours)(data, tangent)
    wants = jax.jit(reference)(data, tangent)
    for name in LINEAR_OPS:
        assert_close(got[name][0], wants[name][0])
        assert_close(got[name][1], wants[name][1])


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_grad_of_linear_ops(n_batch, n_dense):
    data, indices = buffers(np.random.RandomState(2), n_batch=n_batch, n_dense=n_dense, nse=6)
    mat = hs.BCOO((data, indices), shape=SHAPE)
    _LAYOUT["mat"] = mat
    names = ["todense", "reduce_sum", "slice", "reshape", "transpose", "sum_duplicates"]
    weights = {n: random_data(np.random.RandomState(3 + i), jax.eval_shape(lambda: LINEAR_OPS[n][0](mat)).shape, "float32")
               for i, n in enumerate(names)}

    def ours(d):
        return {n: jax.grad(lambda d: (LINEAR_OPS[n][0](hs.BCOO((d, indices), shape=SHAPE)) * weights[n]).sum())(d)
                for n in names}

    kept = hs.bcoo_sum_duplicates(mat, nse=4)
    keep_mask = hs.BCOO((jnp.ones_like(kept.data), kept.indices), shape=SHAPE).todense() != 0

    def reference(data, keep_mask):
        refs = {n: LINEAR_OPS[n][1] for n in names}
        refs["transpose"] = lambda x: _transpose_dense(x, mat)
        # padding and entries dropped for nse=4 aside, summing duplicates keeps the array
        refs["sum_duplicates"] = lambda x: x * keep_mask.astype(x.dtype)
        return {n: jax.grad(lambda d: (refs[n](dense(d, indices)) * weights[n]).sum())(data) for n in names}

    got = hlopt.jit(ours)(data)
    wants = jax.jit(reference)(data, keep_mask)
    for n in names:
        assert_close(got[n], wants[n])


@pytest.mark.parametrize("n_batch,n_dense", LAYOUTS)
def test_fromdense_jvp_and_grad(n_batch, n_dense):
    r = np.random.RandomState(4)
    x = random_data(r, SHAPE, "float32") * (r.rand(*SHAPE) < 0.5).astype(np.float32)
    t = random_data(r, SHAPE, "float32")
    w = random_data(r, SHAPE, "float32")

    def ours(x, t):
        f = lambda x: hs.BCOO.fromdense(x, nse=10, n_batch=n_batch, n_dense=n_dense).todense()  # noqa: E731
        return jax.jvp(f, (x,), (t,)), jax.grad(lambda x: (f(x) * w).sum())(x)

    def reference(x, t):
        ref = lambda x: js.BCOO.fromdense(x, nse=10, n_batch=n_batch, n_dense=n_dense).todense()  # noqa: E731
        return jax.jvp(ref, (x,), (t,)), jax.grad(lambda x: (ref(x) * w).sum())(x)

    (primal, tangent), grad = hlopt.jit(ours)(x, t)
    (want_p, want_t), want_g = jax.jit(reference)(x, t)
    assert_close(primal, want_p)
    assert_close(tangent, want_t)
    assert_close(grad, want_g)


@pytest.mark.parametrize("vshape", [SHAPE, (3, 1, 2), ()])
def test_multiply_dense_jvp_and_grad(vshape):
    data, indices = buffers(np.random.RandomState(5), n_batch=1, nse=6)
    r = np.random.RandomState(6)
    v, tv, td = random_data(r, vshape, "float32"), random_data(r, vshape, "float32"), random_data(r, data.shape, "float32")
    w = random_data(r, SHAPE, "float32")

    def f(d, v):
        return (hs.BCOO((d, indices), shape=SHAPE) * v).todense()

    def ref(d, v):
        return dense(d, indices) * jnp.broadcast_to(v, SHAPE)  # explicit: the tests run with rank promotion off

    assert_jvp_and_grad_match(f, ref, (data, v), (td, tv), w, assert_close)


@pytest.mark.parametrize(
    "lshape,rshape,lnb,rnb",
    [((2, 3, 4), (2, 3, 4), 1, 1), ((3, 4), (1, 4), 0, 0), ((3, 1), (1, 4), 0, 0), ((2, 3, 4), (2, 3, 4), 1, 0)],
)
def test_multiply_sparse_jvp_and_grad(lshape, rshape, lnb, rnb):
    r = np.random.RandomState(7)
    ld, li = buffers(r, shape=lshape, n_batch=lnb, nse=6)
    rd, ri = buffers(r, shape=rshape, n_batch=rnb, nse=5)
    tl, tr = random_data(r, ld.shape, "float32"), random_data(r, rd.shape, "float32")
    out_shape = np.broadcast_shapes(lshape, rshape)
    w = random_data(r, out_shape, "float32")

    def f(ld, rd):
        return hs.bcoo_multiply_sparse(hs.BCOO((ld, li), shape=lshape), hs.BCOO((rd, ri), shape=rshape)).todense()

    def ref(ld, rd):
        return dense(ld, li, lshape) * dense(rd, ri, rshape)

    assert_jvp_and_grad_match(f, ref, (ld, rd), (tl, tr), w, assert_close)


# Every op linear in data, with the same op on the dense array: (hlopt op on a BCOO, dense op).
JACOBIAN_OPS = {
    "todense": (lambda m: m, lambda x: x),
    "sort_indices": (lambda m: m.sort_indices(), lambda x: x),
    "sum_duplicates": (lambda m: hs.bcoo_sum_duplicates(m, nse=m.nse), lambda x: x),
    "sum_duplicates_inferred_nse": (lambda m: m.sum_duplicates(remove_zeros=False), lambda x: x),
    "squeeze": (lambda m: hs.bcoo_squeeze(hs.bcoo_reshape(m, new_sizes=(*m.shape[:2], 1, *m.shape[2:])),
                                          dimensions=(2,)), lambda x: x),
    "update_layout": (lambda m: hs.bcoo_update_layout(m, n_batch=0, n_dense=0), lambda x: x),
    "update_layout_up": (lambda m: hs.bcoo_update_layout(m, n_batch=2, n_dense=1, on_inefficient=None), lambda x: x),
    "reduce_sum": (lambda m: hs.bcoo_reduce_sum(m, axes=(0, 2)), lambda x: x.sum((0, 2))),
    "slice": (lambda m: m[:, 1:, ::2], lambda x: x[:, 1:, ::2]),
    "transpose": (lambda m: hs.bcoo_transpose(m, permutation=_perm(m)), None),
    "reshape": (lambda m: m.reshape(_merged(m)), None),
    "getitem_array": (lambda m: m[np.array([1, 0, 1]), :, np.array([3, 0, 3])], lambda x: x[np.array([1, 0, 1]), :, np.array([3, 0, 3])]),
    "getitem_mask": (lambda m: m[:, np.array([True, False, True])], lambda x: x[:, np.array([True, False, True])]),
    "rev": (lambda m: hs.bcoo_rev(m, (1, 2, 3)), lambda x: jnp.flip(x, (1, 2, 3))),
    "multiply_dense": (lambda m: m * np.arange(8, dtype=np.float32).reshape(4, 2), lambda x: x * np.broadcast_to(np.arange(8, dtype=np.float32).reshape(4, 2), SHAPE)),
}


@pytest.mark.parametrize("name", JACOBIAN_OPS)
@pytest.mark.parametrize("n_batch,n_dense", [(0, 0), (1, 1), (2, 0)])
def test_jacobians_of_every_data_linear_op(name, n_batch, n_dense):
    """jacrev and jacfwd of todense(op(BCOO(data))) equal those of the dense op, under JAX's test
    settings (no implicit rank promotion); this is JAX's _CheckGradsSparse for every op."""
    data, indices = buffers(np.random.RandomState(20), n_batch=n_batch, n_dense=n_dense, nse=5)
    mat = hs.BCOO((data, indices), shape=SHAPE)
    op, dense_op = JACOBIAN_OPS[name]
    if dense_op is None:
        dense_op = {"transpose": lambda x: jnp.transpose(x, _perm(mat)), "reshape": lambda x: x.reshape(_merged(mat))}[name]

    def f(d):
        return op(hs.BCOO((d, indices), shape=SHAPE)).todense()

    got_rev, got_fwd = hlopt.jit(lambda d: (jax.jacrev(f)(d), jax.jacfwd(f)(d)))(data)
    want = jax.jacfwd(lambda d: dense_op(dense(d, indices)))(data)
    assert_close(got_rev, want)
    assert_close(got_fwd, want)


def test_sum_duplicates_inferred_nse_under_jacobians_eagerly():
    """nse=None needs concrete indices only: jacfwd/jacrev of sum_duplicates() work eagerly, with
    explicit zeros removed (the default), as in JAX."""
    data, indices = buffers(np.random.RandomState(21), nse=6)
    f = lambda d: hs.BCOO((d, indices), shape=SHAPE).sum_duplicates().todense()  # noqa: E731
    want = jax.jacfwd(lambda d: dense(d, indices))(data)
    assert_close(jax.jacrev(f)(data), want)
    assert_close(jax.jacfwd(f)(data), want)


def test_plain_jax_jit_gives_hlopt_jits_numbers():
    data, indices = buffers(np.random.RandomState(9))
    f = lambda d: hs.BCOO((d, indices), shape=SHAPE).todense()  # noqa: E731
    assert_close(jax.jit(f)(data), dense(data, indices))
    np.testing.assert_array_equal(jax.jit(f)(data), hlopt.jit(f)(data))


def test_sum_duplicates_needs_nse_when_traced():
    data, indices = buffers(np.random.RandomState(10))
    with pytest.raises(ValueError, match="nse must be specified"):
        hlopt.jit(lambda d, i: hs.bcoo_sum_duplicates(hs.BCOO((d, i), shape=SHAPE)).data)(data, indices)
    with pytest.raises(jax.errors.ConcretizationTypeError, match="nse"):
        hlopt.jit(lambda x: hs.BCOO.fromdense(x).data)(dense(data, indices))


def test_grad_with_broadcast_batch_buffers():
    data, indices = buffers(np.random.RandomState(11), n_batch=2, nse=5, indices_batch=(2, 3), data_batch=(1, 3))
    mat = hs.BCOO((data, indices), shape=SHAPE)
    _LAYOUT["mat"] = mat
    w = random_data(np.random.RandomState(12), SHAPE, "float32")
    v = random_data(np.random.RandomState(13), (1, 3, 4, 2), "float32")
    # bcoo_reshape refuses broadcast batch buffers (as JAX's); indexing with None still reshapes them
    ops = {**{n: LINEAR_OPS[n] for n in ["todense", "reduce_sum", "slice"]},
           "new_axis": (lambda m: m[:, None].todense(), lambda x: x[:, None])}
    names = list(ops)
    with pytest.raises(NotImplementedError, match="broadcasted batch dimensions"):
        LINEAR_OPS["reshape"][0](mat)

    def loss(op, d):
        return (ops[op][0](hs.BCOO((d, indices), shape=SHAPE)) * _weights[op]).sum()

    _weights = {n: random_data(np.random.RandomState(14 + i), jax.eval_shape(lambda: ops[n][0](mat)).shape, "float32")
                for i, n in enumerate(names)}
    def full(d):  # JAX's own todense transpose cannot unbroadcast data: broadcast first
        return dense(jnp.broadcast_to(d, (2, 3, 5)), indices)

    def reference(data):
        wants = {n: jax.grad(lambda d: (ops[n][1](full(d)) * _weights[n]).sum())(data) for n in names}
        return wants, jax.grad(lambda d: (full(d) * v * w).sum())(data)

    got = hlopt.jit(lambda d: {n: jax.grad(lambda d: loss(n, d))(d) for n in names})(data)
    wants, want_mul = jax.jit(reference)(data)
    for n in names:
        assert_close(got[n], wants[n])
    got_mul = hlopt.jit(jax.grad(lambda d: ((hs.BCOO((d, indices), shape=SHAPE) * v).todense() * w).sum()))(data)
    assert_close(got_mul, want_mul)


def test_vmap_over_examples():
    """vmap maps over a new leading batch dim; results equal per-example calls."""
    r = np.random.RandomState(15)
    xs = random_data(r, (3, 4, 5), "float32") * (r.rand(3, 4, 5) < 0.5).astype(np.float32)
    v = random_data(r, (3, 5), "float32")
    s = np.asarray(random_data(r, (4, 5), "float32")) * (r.rand(4, 5) < 0.5)
    shared = hs.BCOO.fromdense(s, nse=12)  # closed over: not mapped

    def per_example(x, v):
        m = hs.BCOO.fromdense(x, nse=12)
        return {
            "todense": m.todense(),
            "transpose": m.T.todense(),
            "slice": m[1:3, ::2].todense(),
            "reduce_sum": m.sum(0).todense(),
            "reshape": m.reshape(2, 10).todense(),
            "sort_indices": m.sort_indices().todense(),
            "sum_duplicates": hs.bcoo_sum_duplicates(m, nse=12).todense(),
            "update_layout": hs.bcoo_update_layout(m, n_batch=1, on_inefficient=None).todense(),
            "multiply_dense": (m * v).todense(),
            "scalar": (m * v[0]).todense(),
            "multiply_sparse": hs.bcoo_multiply_sparse(m, m.sort_indices()).todense(),
            "broadcast_sparse": hs.bcoo_multiply_sparse(m, shared).todense(),
            "grad": jax.grad(lambda d: (hs.BCOO((d, m.indices), shape=m.shape).todense() ** 2).sum())(m.data),
            "data": m.data,
        }

    got = hlopt.jit(jax.vmap(per_example))(xs, v)
    x, vv = np.asarray(xs), np.asarray(v)
    want = {
        "todense": x, "transpose": x.transpose(0, 2, 1), "slice": x[:, 1:3, ::2], "reduce_sum": x.sum(1),
        "reshape": x.reshape(3, 2, 10), "sort_indices": x, "sum_duplicates": x, "update_layout": x,
        "multiply_dense": x * vv[:, None, :], "scalar": x * vv[:, :1, None],
        "multiply_sparse": x * x, "broadcast_sparse": x * s,
    }
    for name in want:
        assert_close(got[name], want[name])
    assert_close(got["grad"], 2 * got["data"])  # entries are unique: d/dx sum(x^2) = 2x



@pytest.mark.parametrize("n_batch,axis", [(1, 0), (2, 0), (2, 1)])
def test_vmap_over_a_bcoo_argument(n_batch, axis):
    """vmap maps a BCOO argument itself along a batch dim, as JAX's BCOO does; a BCOO result gets
    the mapped axis back as a leading batch dim; an unmapped BCOO (in_axes=None) passes through."""
    bufs = buffers(np.random.RandomState(16), n_batch=n_batch, nse=5)
    m, ref = hs.BCOO(bufs, shape=SHAPE), js.BCOO(bufs, shape=SHAPE)
    to_dense = jax.vmap(lambda a: a.todense(), in_axes=axis)
    want_mapped, ref_dense = jax.jit(lambda r: (to_dense(r), r.todense()))(ref)
    assert_close(to_dense(m), want_mapped)  # JAX's BCOO maps the same way
    ref_dense = np.asarray(ref_dense)
    elt_shape = SHAPE[:axis] + SHAPE[axis + 1 :]
    w = np.asarray(random_data(np.random.RandomState(17), elt_shape, "float32"))
    xs = np.asarray(random_data(np.random.RandomState(18), (SHAPE[axis], *elt_shape), "float32"))

    def per_element(mat, x):
        nb = mat.n_batch
        flipped = hs.bcoo_transpose(mat, permutation=(*range(nb), *reversed(range(nb, mat.ndim))))
        return (mat * w).sum(mat.ndim - 1).todense(), flipped, x + mat.todense()

    got = hlopt.jit(jax.vmap(per_element, in_axes=(axis, 0)))(m, xs)
    elts = np.moveaxis(ref_dense, axis, 0)  # JAX's vmap of `mat * w` fails (jax 0.10.2)
    flip = (*range(n_batch - 1), *reversed(range(n_batch - 1, len(elt_shape))))
    assert_close(got[0], (elts * w).sum(-1))
    assert isinstance(got[1], hs.BCOO) and got[1].n_batch == n_batch
    assert_close(got[1].todense(), np.stack([e.transpose(flip) for e in elts]))
    assert_close(got[2], xs + elts)
    unmapped = jax.vmap(lambda a, x: x + a.todense().sum(axis), in_axes=(None, 0))(m, xs)
    assert_close(unmapped, xs + ref_dense.sum(axis))


def test_vmap_over_a_bcoo_argument_errors():
    """Mapping a non-batch dim of a BCOO (JAX refuses it too) says what to do instead."""
    m = hs.BCOO(buffers(np.random.RandomState(19), n_batch=1, nse=5), shape=SHAPE)
    with pytest.raises(ValueError, match=r"cannot map axis 1 of a BCOO with n_batch=1.*bcoo_update_layout"):
        jax.vmap(lambda a: a.todense(), in_axes=1)(m)
    with pytest.raises(ValueError, match="out_axes must be at most 0"):
        jax.vmap(lambda x: hs.BCOO.fromdense(x, nse=5), out_axes=1)(np.ones((2, 3, 4), np.float32))
