"""Sparse products on every platform: portable exports, the portable lowering's values, and CPU
kernels only where they are built.

- `jax.export(..., platforms=["tpu"])` of BCOO x dense, BCOO x BCOO (with `nse=`) and BCOO * BCOO from this
  CPU machine holds no `hlopt_*` or `lapack_*` custom call and no loop of CPU blocks; the same
  export for `cpu` runs and matches jax.experimental.sparse.
- hlopt-default without its `xla-cpu-*` passes (lower-bcoo's portable StableHLO alone) matches
  jax.experimental.sparse on layouts with batch and dense dims, unsorted indices and duplicates,
  in several dtypes.
- Without hlopt's native extension the sparse x sparse product takes no kernel and still
  stores exactly the structural nonzeros.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs
from hlopt.passes.registry import PIPELINES
from hlopt.passes.target import Target
from hlopt.runtime import kernels
from hlopt.passes.xla_cpu import sparse_kernels

PORTABLE = ",".join(p for p in PIPELINES["hlopt-default"].split(",") if not p.startswith("xla-cpu-"))
MM = (((1,), (0,)), ((), ()))


def _custom_calls(text: str) -> set[str]:
    return set(re.findall(r"custom_call @([\w.]+)", text))


def _pair(rng: np.random.RandomState, shape, nse: int, dtype=np.float32, n_batch: int = 0, n_dense: int = 0,
          sort: bool = False, duplicates: bool = False):
    """The same random entries as an hlopt and a JAX BCOO array: unsorted unless `sort`, with
    repeated indices if `duplicates`."""
    batch, sparse, dense = shape[:n_batch], shape[n_batch:len(shape) - n_dense], shape[len(shape) - n_dense:]
    idx = np.stack([rng.randint(0, s, size=(*batch, nse)) for s in sparse], -1).astype(np.int32)
    if duplicates and nse >= 2:
        idx[..., 1, :] = idx[..., 0, :]
    if sort:
        keys = np.ravel_multi_index(np.moveaxis(idx, -1, 0), sparse)
        idx = np.take_along_axis(idx, np.argsort(keys, axis=-1)[..., None], axis=-2)
    data = rng.randn(*batch, nse, *dense)
    if np.issubdtype(dtype, np.complexfloating):
        data = data + 1j * rng.randn(*batch, nse, *dense)
    data, idx = jax.device_put(data.astype(dtype)), jax.device_put(idx)
    return (hs.BCOO((data, idx), shape=shape, indices_sorted=sort),
            js.BCOO((data, idx), shape=shape, indices_sorted=sort))


def _close(got, want, dtype):
    tol = 1e-12 if np.dtype(dtype) in (np.dtype(np.float64), np.dtype(np.complex128)) else 2e-5
    scale = max(1.0, float(np.max(np.abs(np.asarray(want)), initial=0.0)))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=tol * scale)


# ---------------------------------------------------------------------------
# Exports


def test_tpu_export_of_sparse_products_is_portable_and_the_cpu_export_runs():
    """Enough entries for two CPU blocks of gathered rows: the TPU export has no loop and no CPU
    custom call; the CPU export of the same functions runs and agrees with JAX."""
    rng = np.random.RandomState(0)
    (a, ja), x = _pair(rng, (3000, 3000), 12000), jax.device_put(rng.randn(3000, 64).astype(np.float32))
    (b, jb), (c, jc) = _pair(rng, (40, 30), 90), _pair(rng, (30, 50), 80)
    nse = hs.bcoo_spdot_nse(b, c, dimension_numbers=MM)
    cases = {
        "sparse x dense": (lambda d, i, x: hs.BCOO((d, i), shape=a.shape) @ x, (a.data, a.indices, x),
                           jax.jit(lambda j, x: j @ x)(ja, x)),
        "sparse x sparse": (lambda d, i, e, k: hs.bcoo_spdot_general(
            hs.BCOO((d, i), shape=b.shape), hs.BCOO((e, k), shape=c.shape), dimension_numbers=MM, nse=nse).todense(),
            (b.data, b.indices, c.data, c.indices), jax.jit(lambda b, c: (b @ c).todense())(jb, jc)),
        "sparse * sparse": (lambda d, i, e, k: hs.bcoo_multiply_sparse(
            hs.BCOO((d, i), shape=b.shape), hs.BCOO((e, k), shape=b.shape)).todense(),
            (b.data, b.indices, b.data[::-1], b.indices[::-1]),
            jax.jit(lambda b: js.bcoo_multiply_sparse(b, js.BCOO((b.data[::-1], b.indices[::-1]), shape=b.shape))
                    .todense())(jb)),
    }
    for name, (fun, args, want) in cases.items():
        tpu = jax.export.export(jax.jit(fun), platforms=["tpu"])(*args).mlir_module()
        calls = _custom_calls(tpu)
        assert not {t for t in calls if t.startswith(("hlopt", "lapack_"))}, (name, calls)
        if name == "sparse x dense":
            assert "stablehlo.while" not in tpu
        cpu = jax.export.export(jax.jit(fun), platforms=["cpu"])(*args)
        with jax.default_device(jax.devices("cpu")[0]):  # also beside a TPU
            _close(cpu.call(*args), want, np.float32)


def test_cpu_compiles_use_the_kernels_and_blocks_other_targets_do_not():
    """What hlopt.jit compiles for CPU substitutes the SpGEMM kernels and blocks the gathered rows;
    for any other target (or none) the program is the portable one."""
    rng = np.random.RandomState(1)
    (a, _), x = _pair(rng, (3000, 3000), 12000), jax.device_put(rng.randn(3000, 64).astype(np.float32))
    (b, _), (c, _) = _pair(rng, (40, 30), 90), _pair(rng, (30, 50), 80)
    spmm = hlopt.jit(lambda a, x: a @ x).lower(a, x)
    spgemm = hlopt.jit(lambda b, c: hs.bcoo_spdot_general(b, c, dimension_numbers=MM, nse=300)).lower(b, c)
    for platform in ("cpu", "tpu", "cuda"):
        dense = spmm.apply(PIPELINES["hlopt-default"], platform=platform).as_text()
        sparse = spgemm.apply(PIPELINES["hlopt-default"], platform=platform).as_text()
        assert ("stablehlo.while" in dense) == (platform == "cpu")
        assert ("hlopt_spgemm_fill" in _custom_calls(sparse)) == (platform == "cpu")
        assert not {t for t in _custom_calls(sparse) if t.startswith("hlopt.")}


# ---------------------------------------------------------------------------
# The portable lowering's values


LAYOUTS = st.fixed_dictionaries({
    "n_batch": st.integers(0, 1), "n_dense": st.integers(0, 1), "sort": st.booleans(), "duplicates": st.booleans(),
    "dtype": st.sampled_from([np.float32, np.float64, np.complex64]), "seed": st.integers(0, 2**16)})


@settings(max_examples=6, deadline=None)
@given(LAYOUTS)
def test_portable_sparse_x_dense_and_sampled_match_jax(layout):
    """`A @ x`, `x^T A` and the sampled product `(P Q)[A's entries]` through lower-bcoo alone (no
    xla-cpu pass) equal jax.experimental.sparse's."""
    nb, nd, dtype = layout["n_batch"], layout["n_dense"], layout["dtype"]
    rng = np.random.RandomState(layout["seed"])
    shape = (2,) * nb + (5, 4) + (3,) * nd
    with jax.enable_x64(dtype == np.float64):
        h, j = _pair(rng, shape, 7, dtype, nb, nd, layout["sort"], layout["duplicates"])
        x = jax.device_put(rng.randn(*(2,) * nb, 4, 6).astype(dtype))
        dims = (((nb + 1,), (nb,)), ((0,), (0,)) if nb else ((), ()))
        flipped = (dims[0][::-1], dims[1][::-1])
        products = hlopt.jit(lambda d, i, x: (hs.bcoo_dot_general(hs.BCOO((d, i), shape=shape), x,
                                                                  dimension_numbers=dims),
                                              hs.bcoo_dot_general(x, hs.BCOO((d, i), shape=shape),
                                                                  dimension_numbers=flipped)),
                             pipeline=PORTABLE)
        got = products(h.data, h.indices, x)
        want = jax.jit(lambda j, x: (js.bcoo_dot_general(j, x, dimension_numbers=dims),
                                     js.bcoo_dot_general(x, j, dimension_numbers=flipped)))(j, x)
        for g, w in zip(got, want):
            _close(g, w, dtype)
        if not nd:
            p = jax.device_put(rng.randn(*(2,) * nb, 5, 3).astype(dtype))
            q = jax.device_put(rng.randn(*(2,) * nb, 3, 4).astype(dtype))
            sdims = (((nb + 1,), (nb,)), ((0,), (0,)) if nb else ((), ()))
            sampled = hlopt.jit(lambda p, q, i: hs.bcoo_dot_general_sampled(p, q, i, dimension_numbers=sdims),
                                pipeline=PORTABLE)
            want = jax.jit(lambda p, q, i: js.bcoo_dot_general_sampled(p, q, i, dimension_numbers=sdims))
            _close(sampled(p, q, h.indices), want(p, q, j.indices), dtype)


@settings(max_examples=5, deadline=None)
@given(LAYOUTS.filter(lambda layout: layout["n_dense"] == 0))
def test_portable_sparse_x_sparse_matches_jax(layout):
    """`A @ B` of two BCOO arrays with the exact nse given, traced, through lower-bcoo alone: JAX's
    product's values, stored in exactly the structural nonzeros."""
    nb, dtype = layout["n_batch"], layout["dtype"]
    rng = np.random.RandomState(layout["seed"])
    with jax.enable_x64(dtype == np.float64):
        a, ja = _pair(rng, (2,) * nb + (6, 5), 8, dtype, nb, 0, layout["sort"], layout["duplicates"])
        b, jb = _pair(rng, (2,) * nb + (5, 7), 9, dtype, nb, 0, layout["sort"], False)
        dims = (((nb + 1,), (nb,)), ((0,), (0,)) if nb else ((), ()))
        nse = hs.bcoo_spdot_nse(a, b, dimension_numbers=dims)
        product = hlopt.jit(lambda a, b: (lambda c: (c.data, c.todense()))(
            hs.bcoo_spdot_general(a, b, dimension_numbers=dims, nse=nse)), pipeline=PORTABLE)
        data, dense = product(a, b)
        assert data.shape[-1] == nse
        want = jax.jit(lambda a, b: js.bcoo_dot_general(a, b, dimension_numbers=dims).todense())(ja, jb)
        _close(dense, want, dtype)


# ---------------------------------------------------------------------------
# Without the native extension


def test_without_native_kernels_products_are_portable_and_exact(monkeypatch):
    """No `hlopt.runtime._native`: eager `A @ B` counts in numpy (scipy's nse), hlopt.jit for CPU
    keeps lower-bcoo's lowering (no kernel call), and both match JAX."""
    monkeypatch.setattr(kernels, "available", lambda: False)
    rng = np.random.RandomState(2)
    (a, ja), (b, jb) = _pair(rng, (12, 9), 20), _pair(rng, (9, 11), 18)
    want = jax.jit(lambda a, b: (a @ b).todense())(ja, jb)
    eager = a @ b
    assert eager.nse == int(np.count_nonzero((np.abs(ja.todense()) > 0).astype(float)
                                             @ (np.abs(jb.todense()) > 0).astype(float)))
    _close(eager.todense(), want, np.float32)
    fun = hlopt.jit(lambda a, b: hs.bcoo_spdot_general(a, b, dimension_numbers=MM, nse=eager.nse).todense())
    text = fun.lower(a, b).apply(PIPELINES["hlopt-default"], platform=Target(("cpu",))).as_text()
    assert not {t for t in _custom_calls(text) if t.startswith("hlopt")}
    _close(fun(a, b), want, np.float32)


def test_spgemm_plan_refuses_what_the_kernels_do_not_take():
    """Batch dims, several contracting dims, other index types and too many output columns keep the
    portable lowering."""
    from hlopt.passes.sparse import shapes

    mat = lambda shape: shapes.layout(shape, (4,), (4, 2))  # noqa: E731
    assert sparse_kernels.spgemm_plan(mat((3, 4)), mat((4, 5)), MM, "i32") is not None
    assert sparse_kernels.spgemm_plan(mat((3, 4)), mat((4, 5)), MM, "i16") is None
    assert sparse_kernels.spgemm_plan(mat((3, 4)), mat((4, sparse_kernels.SPGEMM_MAX_COLS + 1)), MM, "i64") is None
    batched = shapes.layout((2, 3, 4), (2, 4), (2, 4, 2))
    assert sparse_kernels.spgemm_plan(batched, batched, (((2,), (1,)), ((0,), (0,))), "i32") is None
    assert sparse_kernels.spgemm_plan(mat((3, 4)), mat((3, 4)), (((0, 1), (0, 1)), ((), ())), "i32") is None
