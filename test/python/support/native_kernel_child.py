"""Every hlopt CPU kernel (runtime/native/) on forged operands, checked against numpy, in a child process.

`python -m support.native_kernel_child [EXTENSION]` loads EXTENSION (an `_native*.so`, e.g. the
AddressSanitizer build of test_native_asan.py) as `hlopt.runtime._native`, else the built one,
registers its handlers and calls each kernel straight through `jax.ffi.ffi_call` with operands no
hlopt program would pass: negative, oversized and int extreme indices, rows out of order,
non-monotone and overlong indptr, attributes that disagree with the buffers, no entries, empty
dims, sizes whose products pass int64. Each call must give numpy's numbers or an error naming
what was wrong; "survived" is printed when every one did. `--control` instead reads past a heap
buffer (an AddressSanitizer report, to show a run sees one).
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

S = jax.ShapeDtypeStruct
BIG, SMALL = np.iinfo(np.int32).max, np.iinfo(np.int32).min
RNG = np.random.default_rng(0)


def load(path: str | None) -> None:
    """Register the handlers of the extension at `path` (None: hlopt's own) with XLA."""
    if path is not None:
        import hlopt.runtime

        spec = importlib.util.spec_from_file_location("hlopt.runtime._native", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["hlopt.runtime._native"] = module
        hlopt.runtime._native = module
    from hlopt.runtime import kernels

    kernels.register()


def call(target, out, *operands, **attrs):
    """The kernel's results (numpy) for these operands and attributes."""
    result = jax.jit(lambda *ops: jax.ffi.ffi_call(target, out)(*ops, **attrs))(*operands)
    return jax.tree.map(np.asarray, result)


def refused(name: str, match: str, target, out, *operands, **attrs) -> None:
    """The call is an error whose message holds `match`."""
    try:
        call(target, out, *operands, **attrs)
    except Exception as e:  # jax's runtime error type is private
        assert match in str(e), (name, str(e))
    else:
        raise AssertionError(f"{name}: the kernel ran")


def close(name: str, got, want) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)


def hostile_coo(nse: int, rows: int, cols: int, dtype=np.int32) -> np.ndarray:
    """indices[nse, 2] mostly in range, some negative, past the end and at the type's extremes."""
    info = np.iinfo(dtype)
    idx = np.stack([RNG.integers(0, rows, nse), RNG.integers(0, cols, nse)], 1).astype(dtype)
    odd = RNG.random(idx.shape) < 0.15
    idx[odd] = RNG.choice(np.array([-1, rows + cols, info.max, info.min, -7], dtype), int(odd.sum()))
    return idx


def coo_dense(data, idx, shape) -> np.ndarray:
    """The dense matrix of COO entries, those out of range dropped (JAX's BCOO rule)."""
    out = np.zeros(shape, data.dtype)
    for (r, c), v in zip(idx.astype(np.int64), data):
        if 0 <= r < shape[0] and 0 <= c < shape[1]:
            out[r, c] += v
    return out


def csr_dense(data, cols, indptr, shape) -> np.ndarray:
    """The dense matrix of a CSR one with a valid indptr, entries whose column is out of range dropped."""
    rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
    span = slice(int(indptr[0]), int(indptr[-1]))
    return coo_dense(data[span], np.stack([rows, cols[span]], 1), shape)


def bcoo_products() -> None:
    """hlopt_bcoo_spmm and hlopt_bcoo_sddmm."""
    m, k = 9, 7
    idx = hostile_coo(60, m, k)
    data = RNG.standard_normal(len(idx))
    a = coo_dense(data, idx, (m, k))
    for n in (None, 1, 4, 0):
        x = RNG.standard_normal((k,) if n is None else (k, n))
        for order in (np.arange(len(idx)), np.argsort(idx[:, 0], kind="stable")):
            close(f"spmm n={n}", call("hlopt_bcoo_spmm", S((a @ x).shape, np.float64), data[order], idx[order], x),
                  a @ x)
    # rows sorted, a parallel walk over blocks, negative rows first and padding last
    m = 300_000
    rows = np.sort(RNG.integers(-3, m + 3, 2 * m)).astype(np.int32)
    idx = np.stack([rows, RNG.integers(-1, k + 1, len(rows)).astype(np.int32)], 1)
    data, x = RNG.standard_normal(len(idx)), RNG.standard_normal(k)
    ok = (rows >= 0) & (rows < m) & (idx[:, 1] >= 0) & (idx[:, 1] < k)
    want = np.bincount(rows[ok], data[ok] * x[idx[ok, 1]], minlength=m)
    close("spmm blocks", call("hlopt_bcoo_spmm", S((m,), np.float64), data, idx, x), want)
    empty = np.zeros((0, 2), np.int32)
    close("spmm nse 0", call("hlopt_bcoo_spmm", S((4, 2), np.float64), np.zeros(0), empty, np.ones((3, 2))),
          np.zeros((4, 2)))
    close("spmm k 0", call("hlopt_bcoo_spmm", S((4,), np.float64), np.ones(3), np.zeros((3, 2), np.int32),
                           np.zeros(0)), np.zeros(4))
    close("spmm m 0", call("hlopt_bcoo_spmm", S((0, 2), np.float64), np.ones(3), np.zeros((3, 2), np.int32),
                           np.ones((3, 2))), np.zeros((0, 2)))
    m, n, kk = 6, 5, 3
    idx = hostile_coo(40, m, n)
    p, q = RNG.standard_normal((m, kk)), RNG.standard_normal((n, kk))
    ok = (idx >= 0).all(1) & (idx[:, 0] < m) & (idx[:, 1] < n)
    want = np.where(ok, np.einsum("ek,ek->e", p[np.where(ok, idx[:, 0], 0)], q[np.where(ok, idx[:, 1], 0)]), 0)
    close("sddmm", call("hlopt_bcoo_sddmm", S((40,), np.float64), p, q, idx), want)
    close("sddmm nse 0", call("hlopt_bcoo_sddmm", S((0,), np.float64), p, q, empty), np.zeros(0))
    close("sddmm k 0", call("hlopt_bcoo_sddmm", S((40,), np.float64), np.zeros((m, 0)), np.zeros((n, 0)), idx),
          np.zeros(40))
    refused("spmm data shorter", "hlopt_bcoo_spmm", "hlopt_bcoo_spmm", S((m,), np.float64), np.ones(3),
            np.zeros((4, 2), np.int32), np.ones(2))


def csr_products() -> None:
    """hlopt_csr_spmm: hostile columns, padding, and every way an indptr can be wrong."""
    m, k = 3000, 500
    counts = RNG.integers(0, 13, m)
    cols = RNG.integers(0, k, int(counts.sum()) + 5).astype(np.int32)
    odd = RNG.random(len(cols)) < 0.02
    cols[odd] = RNG.choice(np.array([-1, k, BIG, SMALL], np.int32), int(odd.sum()))
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    data = RNG.standard_normal(len(cols))
    a = csr_dense(data, cols, indptr, (m, k))
    for n in (None, 3):
        x = RNG.standard_normal((k,) if n is None else (k, n))
        close(f"csr n={n}", call("hlopt_csr_spmm", S((a @ x).shape, np.float64), data, cols, indptr, x), a @ x)
    close("csr nse 0", call("hlopt_csr_spmm", S((4,), np.float64), np.zeros(0), np.zeros(0, np.int32),
                            np.zeros(5, np.int32), np.ones(3)), np.zeros(4))
    x = np.ones(4)
    bad = "indptr must be non-decreasing"
    for name, ptr in {"decreasing": [0, 3, 1, 4], "negative start": [-1, 0, 2, 4], "past nse": [0, 1, 2, 9],
                      "past nse at the start": [BIG, BIG, BIG, BIG], "int32 min": [0, SMALL, 2, 4]}.items():
        for kx in (x, np.zeros(0)):
            refused(f"csr {name} k={len(kx)}", bad, "hlopt_csr_spmm", S((3,), np.float64), np.ones(4),
                    np.zeros(4, np.int32), np.asarray(ptr, np.int32), kx)
    # many rows with a huge last pointer: blocks of rows past the last, whose pointer is out of range
    for rows in (5000, 40_000):
        ptr = np.zeros(rows + 1, np.int32)
        ptr[-1] = BIG
        for n in (None, 2):
            kx = np.ones(3) if n is None else np.ones((3, n))
            refused(f"csr last pointer past nse, {rows} rows", bad, "hlopt_csr_spmm",
                    S((rows,) if n is None else (rows, n), np.float64), np.ones(10), np.zeros(10, np.int32), ptr, kx)
        ptr[rows // 2:] = BIG
        refused(f"csr second half past nse, {rows} rows", bad, "hlopt_csr_spmm", S((rows,), np.float64), np.ones(10),
                np.zeros(10, np.int32), ptr, np.ones(3))


def spgemm_dense(a: np.ndarray, b: np.ndarray):
    """The structural product's (row, column) pairs in row-major order and the product."""
    pattern = ((a != 0).astype(np.int64) @ (b != 0).astype(np.int64)) > 0
    return np.argwhere(pattern), a @ b


def spgemm_coo(sanitized: bool) -> None:
    """hlopt_spgemm_count / hlopt_spgemm_fill: hostile indices of both index types, forged attributes and
    counts (`sanitized`: under AddressSanitizer)."""
    rows, inner, cols = 11, 8, 9
    for itype in (np.int32, np.int64):
        li, ri = hostile_coo(50, rows, inner, itype), hostile_coo(40, inner, cols, itype)
        ld, rd = RNG.standard_normal(len(li)), RNG.standard_normal(len(ri))
        pairs, product = spgemm_dense(coo_dense(np.ones(len(li)), li, (rows, inner)),
                                      coo_dense(np.ones(len(ri)), ri, (inner, cols)))
        want = coo_dense(ld, li, (rows, inner)) @ coo_dense(rd, ri, (inner, cols))
        dims = dict(rows=np.int64(rows), inner=np.int64(inner), cols=np.int64(cols))
        for runs in (rows, 1, 4):
            counts = call("hlopt_spgemm_count", S((runs,), itype), li, ri, **dims)
            assert counts.sum() == len(pairs), (runs, counts, len(pairs))
            for nse in (len(pairs) + 3, len(pairs) // 2, 0):
                data, idx = call("hlopt_spgemm_fill", (S((nse,), np.float64), S((nse, 2), itype)), ld, li, rd, ri,
                                 counts, **dims)
                kept = min(nse, len(pairs))
                np.testing.assert_array_equal(idx[:kept], pairs[:kept])
                np.testing.assert_array_equal(idx[kept:], np.tile([rows, cols], (nse - kept, 1)))
                close("spgemm fill", data[:kept], want[tuple(pairs[:kept].T)])
        counts = call("hlopt_spgemm_count", S((rows,), itype), li, ri, **dims)
        fill = lambda name, match, counts, nse=4, **attrs: refused(  # noqa: E731
            name, match, "hlopt_spgemm_fill", (S((nse,), np.float64), S((nse, 2), itype)), ld, li, rd, ri,
            np.asarray(counts, itype), **{**dims, **{a: np.int64(v) for a, v in attrs.items()}})
        fill("negative count", "negative", np.r_[-1, counts[1:]])
        fill("moved count", "do not match", np.r_[counts[1:], counts[:1]] if counts[0] != counts[1] else counts + 1)
        fill("more counts than rows", "counts must be", np.zeros(rows + 1))
        fill("cols past 2^24", "at most 2^24", counts, cols=2**24 + 1)
        fill("negative rows", "rows, inner and cols", counts, rows=-1)
    # attributes past what row pointers can hold: refused, never a wrapped size; rows of 2^40 need
    # an allocation that fails (AddressSanitizer aborts there instead: not under it)
    li, ri = hostile_coo(8, 4, 4, np.int64), hostile_coo(8, 4, 4, np.int64)
    one = np.ones(8)
    for rows, inner in ((2**61, 4), (4, 2**61), (2**62 + 3, 4), *([] if sanitized else [(2**40, 4)])):
        attrs = dict(rows=np.int64(rows), inner=np.int64(inner), cols=np.int64(1))
        refused(f"count rows {rows} inner {inner}", "out of memory", "hlopt_spgemm_count", S((1,), np.int64), li, ri,
                **attrs)
        refused(f"fill rows {rows} inner {inner}", "out of memory", "hlopt_spgemm_fill",
                (S((2,), np.float64), S((2, 2), np.int64)), one, li, one, ri, np.zeros(1, np.int64), **attrs)
    # counts whose sums pass int64: refused before any row is read
    for rows, runs, count in ((2**40, 2, 0), (2**45, 128, 2**62)):
        refused(f"fill counts past int64, {runs} runs", "above cols", "hlopt_spgemm_fill",
                (S((2,), np.float64), S((2, 2), np.int64)), one, li, one, ri,
                np.full(runs, count if count else 2**62, np.int64),
                rows=np.int64(rows), inner=np.int64(4), cols=np.int64(2**24))


def control() -> None:
    """Read one byte past a 16-byte heap buffer (through libc's memmove, which AddressSanitizer checks)."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    src = libc.malloc(16)
    dst = ctypes.create_string_buffer(32)
    ctypes.memmove(dst, src, 17)
    print("read past the buffer unseen")


if __name__ == "__main__":
    if sys.argv[1:] == ["--control"]:
        control()
    else:
        load(sys.argv[1] if len(sys.argv) > 1 else None)
        bcoo_products()
        csr_products()
        spgemm_coo(sanitized=len(sys.argv) > 1)
        print("survived")
