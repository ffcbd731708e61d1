"""Programs that call every allowlisted custom-call target, saved in one process and run in fresh ones.

`python -m support.fresh_worker save DIR` compiles the programs of PROGRAMS (every
LAPACK kernel of runtime/portable.py's allowlist, in the four element types,
hlopt's own CPU kernels (SpMV, SpMM, SDDMM) in two, the GSPMD
partitioner's markers and hlopt's SpGEMM kernels), saves each as DIR/NAME.hlx with its
inputs (DIR/NAME.in.npz, in argument order), jax.jit's outputs
(DIR/NAME.want.npz) and the custom-call targets of its module
(DIR/targets.json); it also fills the cache at $HLOPT_CACHE_DIR.
`python -m support.fresh_worker load DIR MODE` runs each program in this fresh
process, loaded by MODE (`signed`: hlopt.load; `bytes`: hlopt.deserialize;
`portable`: trust="portable"; `cache`: compiled again, a cache hit) and writes
DIR/NAME.MODE.npz. Run with JAX_ENABLE_X64=1 and eight host devices.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax
from jax.experimental import sparse as jsparse
from jax.sharding import NamedSharding, PartitionSpec as P

import hlopt
from hlopt import sparse as hs

GSPMD = "jet-expand,lower-bcoo,lower-custom-partitioning{target=gspmd},inline,canonicalize,cse,symbol-dce"


def linalg(spd, tall, wide, lower, rhs, upper, rhs_t):
    """Every LAPACK kernel jax calls on CPU: potrf, getrf, geqrf, orgqr/ungqr, syevd/heevd, trsm, gesdd, gesvd."""
    q, r = jnp.linalg.qr(tall, mode="complete")
    return {"cholesky": jnp.linalg.cholesky(spd), "lu": tuple(jsl.lu_factor(tall)), "qr": (q, r),
            "qr_wide": tuple(jnp.linalg.qr(wide)), "eigh": tuple(jnp.linalg.eigh(spd)),
            "solve_left": jsl.solve_triangular(lower, rhs, lower=True),
            "solve_right": jsl.solve_triangular(upper, rhs_t.T, lower=False, trans=1).T,
            "svd": tuple(jnp.linalg.svd(tall, full_matrices=False)),
            "svd_qr": tuple(lax.linalg.svd(wide, full_matrices=False, algorithm=lax.linalg.SvdAlgorithm.QR))}


def linalg_inputs(dtype, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)

    def draw(*shape):
        a = rng.standard_normal(shape)
        return (a + 1j * rng.standard_normal(shape) if np.issubdtype(dtype, np.complexfloating) else a).astype(dtype)

    a = draw(2, 4, 4)
    spd = (a @ np.conj(np.swapaxes(a, -1, -2)) + 4 * np.eye(4)).astype(dtype)
    return spd, draw(5, 3), draw(2, 3, 5), np.tril(spd[0]), draw(4, 3), np.triu(spd[1]), draw(3, 4)


SPARSE_SHAPE = (6, 5)
MATMUL = (((1,), (0,)), ((), ()))


def sparse_products(module):
    """SpMV and SpMM of a row-sorted BCOO matrix and SDDMM at its entries, with `module`'s BCOO
    (hlopt.sparse: hlopt's kernels on CPU; jax.experimental.sparse: the reference)."""

    def products(data, indices, x, xm, p, q):
        a = module.BCOO((data, indices), shape=SPARSE_SHAPE, indices_sorted=True)
        return a @ x, a @ xm, module.bcoo_dot_general_sampled(p, q, indices, dimension_numbers=MATMUL)

    return products


def sparse_inputs(dtype, seed: int) -> tuple[np.ndarray, ...]:
    """Rows sorted, an empty row, a duplicate, and a padding entry (row 6) at the end."""
    rng = np.random.default_rng(seed)
    indices = np.array([[0, 1], [0, 4], [2, 0], [2, 0], [3, 3], [5, 2], [6, 0]], np.int32)
    draw = lambda *shape: rng.standard_normal(shape).astype(dtype)  # noqa: E731
    return draw(7), indices, draw(5), draw(5, 3), draw(6, 4), draw(4, 5)


def _double_partitioned():
    @hlopt.custom_partitioning
    def double(x):
        return x * 2

    def partition(mesh, arg_shapes, result_shape):
        s = NamedSharding(mesh, P("x"))
        return mesh, lambda x: x * 2, s, (s,)

    double.def_partition(partition=partition, sharding_rule="i j -> i j",
                         infer_sharding_from_operands=lambda mesh, shapes, result: NamedSharding(mesh, P("x")))
    return double


SPGEMM_DIMS = (((1,), (0,)), ((), ()))


def spgemm(ld, li, rd, ri):
    """A sparse x sparse product with traced indices and nse given (hlopt_spgemm_count and _fill), densified."""
    from hlopt import sparse as hs

    out = hs.bcoo_spdot_general(hs.BCOO((ld, li), shape=(6, 7)), hs.BCOO((rd, ri), shape=(7, 5)),
                                dimension_numbers=SPGEMM_DIMS, nse=30)
    return out.todense()


def spgemm_reference(ld, li, rd, ri):
    dense = lambda d, i, shape: jnp.zeros(shape, d.dtype).at[i[:, 0], i[:, 1]].add(d, mode="drop")  # noqa: E731
    return dense(ld, li, (6, 7)) @ dense(rd, ri, (7, 5))


def spgemm_inputs() -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(5)
    li = np.stack([rng.integers(0, 6, 12), rng.integers(0, 7, 12)], 1).astype(np.int32)
    ri = np.stack([rng.integers(0, 7, 10), rng.integers(0, 5, 10)], 1).astype(np.int32)
    return rng.standard_normal(12), li, rng.standard_normal(10), ri


def csr_products(ad, ai, ap, bd, bi, bp, x, xm):
    """BCSR SpMV and SpMM (hlopt_csr_spmm) and BCSR @ BCSR with nse given (the BCOO product:
    hlopt_spgemm_count and _fill), densified."""
    from hlopt import sparse as hs

    a, b = hs.BCSR((ad, ai, ap), shape=(6, 7)), hs.BCSR((bd, bi, bp), shape=(7, 5))
    return a @ x, a @ xm, hs.bcsr_spdot_general(a, b, nse=30).todense()


def csr_reference(ad, ai, ap, bd, bi, bp, x, xm):
    def dense(d, i, p, shape):
        rows = jnp.searchsorted(p, jnp.arange(d.shape[0]), side="right") - 1
        return jnp.zeros(shape, d.dtype).at[rows, i].add(d, mode="drop")

    a, b = dense(ad, ai, ap, (6, 7)), dense(bd, bi, bp, (7, 5))
    return a @ x, a @ xm, a @ b


def csr_inputs() -> tuple[np.ndarray, ...]:
    """Two CSR matrices (an empty row in each, a duplicate column in the first) and dense operands."""
    rng = np.random.default_rng(6)
    ai = np.array([1, 4, 4, 0, 2, 6, 3, 5], np.int32)
    ap = np.array([0, 3, 3, 5, 6, 8, 8], np.int32)
    bi = np.array([0, 2, 4, 1, 3, 0, 2, 4], np.int32)
    bp = np.array([0, 2, 3, 3, 5, 6, 7, 8], np.int32)
    draw = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return draw(8), ai, ap, draw(8), bi, bp, draw(7), draw(7, 3)


def program(name: str):
    """(function, jax's reference of it, inputs, lower keywords, pipeline) of the program `name`."""
    if name == "markers":
        double = _double_partitioned()
        mesh = jax.make_mesh((8,), ("x",))
        x = np.random.default_rng(3).standard_normal((16, 4)).astype(np.float32)
        return (lambda x: double(jnp.sin(x))), (lambda x: jnp.sin(x) * 2), (x,), {
            "mesh": mesh, "in_shardings": (P("x"),)}, GSPMD
    if name.startswith("sparse_"):
        dtype = np.dtype(name.removeprefix("sparse_"))
        return sparse_products(hs), sparse_products(jsparse), sparse_inputs(dtype, seed=len(name)), {}, "hlopt-default"
    if name == "spgemm":
        return spgemm, spgemm_reference, spgemm_inputs(), {}, "hlopt-default"
    if name == "csr":
        return csr_products, csr_reference, csr_inputs(), {}, "hlopt-default"
    dtype = np.dtype(name.removeprefix("linalg_"))
    return linalg, linalg, linalg_inputs(dtype, seed=len(name)), {}, "hlopt-default"


PROGRAMS = ["linalg_float32", "linalg_float64", "linalg_complex64", "linalg_complex128", "sparse_float32",
            "sparse_float64", "markers", "spgemm", "csr"]


def flat(tree) -> dict[str, np.ndarray]:
    return {f"{i:02d}": np.asarray(x) for i, x in enumerate(jax.tree_util.tree_leaves(tree))}


def save(folder: Path) -> None:
    targets = {}
    for name in PROGRAMS:
        fun, reference, args, kwargs, pipeline = program(name)
        compiled = hlopt.lower(fun, *args, **kwargs).compile(pipeline)
        compiled.save(folder / f"{name}.hlx")
        np.savez(folder / f"{name}.in.npz", *args)
        np.savez(folder / f"{name}.want.npz", **flat(jax.jit(reference)(*args)))
        targets[name] = sorted(set(re.findall(r"custom_call @([A-Za-z0-9_]+)", str(compiled.module))))
    (folder / "targets.json").write_text(json.dumps(targets))


def load(folder: Path, mode: str) -> None:
    for name in PROGRAMS:
        path = folder / f"{name}.hlx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hlopt.RecompileWarning)
            if mode == "signed":
                compiled = hlopt.load(path)
            elif mode == "bytes":
                compiled = hlopt.deserialize(path.read_bytes())
            elif mode == "portable":
                compiled = hlopt.load(path, trust="portable")
            else:
                fun, _, args, kwargs, pipeline = program(name)
                compiled = hlopt.lower(fun, *args, **kwargs).compile(pipeline)
        with np.load(folder / f"{name}.in.npz") as inputs:
            args = [inputs[k] for k in inputs.files]
        np.savez(folder / f"{name}.{mode}.npz", **flat(compiled(*args)))
    if mode == "cache":
        info = hlopt.cache_info()
        assert (info.hits, info.misses) == (len(PROGRAMS), 0), info


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(Path(sys.argv[2]))
    else:
        load(Path(sys.argv[2]), sys.argv[3])
