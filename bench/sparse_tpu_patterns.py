"""hlopt's sampled products (SDDMM), sparse x sparse products and a GCN step against jax.experimental.sparse on the device JAX computes on (a TPU).

Random square matrices with `--per-row` random entries a row, float32, `--features` columns of the
dense operands:

- SDDMM: `(A @ B)` at the matrix's indices, A `[rows, features]`, B `[features, rows]`
  (hlopt: `tpu-sparse-products`' two row gathers and a reduce; JAX forms the dense product).
  `gather_s` times one XLA gather of as many rows of A alone; `share_of_gather` = two such
  gathers' time over hlopt's (the formulation's floor).
- sparse x sparse: `A @ A` of two BCOO matrices, hlopt with the exact `nse=` (`bcoo_spdot_nse`),
  JAX's `bcoo_spdot_general` (every pair of entries).
- GCN: loss and gradient in both weight matrices of a two-layer GCN,
  `mean((A @ (relu(A @ (X W1)) W2))^2)`, entries sorted by row: two products and two
  transposed ones `A^T @ G`.

Each workload runs hlopt.jit and jax.jit on the same buffers in one process: `--rounds` rounds,
each timing both sides (the order flipped every round), the ratio JAX / hlopt per round and its
median (3 rounds of one call where a side takes over `SLOW_S`). A side that fails (JAX's dense intermediate past the chip's memory) is recorded with its
error instead of a time. Results are checked against each other (or numpy) first.

Usage: python bench/sparse_tpu_patterns.py [--rows 1000 10000 100000] [--workloads sddmm spspmm gcn]
Every row goes into a record under `bench/results/sparse_tpu_patterns/` with the device's kind,
written again after each row.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as js

import hlopt
from hlopt import sparse as hs
from record import median_seconds, progress, write_record

MATMUL = (((1,), (0,)), ((), ()))
# A side slower than this a call is timed in at most 3 rounds of one call.
SLOW_S = 0.2


def entries(rng: np.random.Generator, rows: int, per_row: int) -> tuple[jax.Array, jax.Array]:
    """`per_row` random entries a row, sorted by row: data, indices."""
    nse = rows * per_row
    idx = np.stack([np.repeat(np.arange(rows), per_row), rng.integers(0, rows, nse)], 1).astype(np.int32)
    idx = idx[np.lexsort(idx.T[::-1])]
    return jnp.asarray(rng.standard_normal(nse, dtype=np.float32)), jnp.asarray(idx)


def sddmm(rng, rows, per_row, features):
    data, idx = entries(rng, rows, per_row)
    a = jnp.asarray(rng.standard_normal((rows, features), dtype=np.float32))
    bm = jnp.asarray(rng.standard_normal((features, rows), dtype=np.float32))
    ours = hlopt.jit(lambda x, y, i: hs.bcoo_dot_general_sampled(x, y, i, dimension_numbers=MATMUL))
    ref = jax.jit(lambda x, y, i: js.bcoo_dot_general_sampled(x, y, i, dimension_numbers=MATMUL))
    rows_of = jax.jit(lambda x, i: jnp.take(x, i[:, 0], axis=0))
    gather_s = median_seconds(rows_of, (a, idx), 5)
    want = np.einsum("ek,ek->e", np.asarray(a, np.float64)[np.asarray(idx[:, 0])],
                     np.asarray(bm, np.float64).T[np.asarray(idx[:, 1])])
    return ours, ref, (a, bm, idx), want, {"gather_s": gather_s}


def spspmm(rng, rows, per_row, features):
    data, idx = entries(rng, rows, per_row)
    shape = (rows, rows)
    m = hs.BCOO((data, idx), shape=shape, indices_sorted=True)
    nse = hs.bcoo_spdot_nse(m, m, dimension_numbers=MATMUL)

    def ours(d, i):
        a = hs.BCOO((d, i), shape=shape, indices_sorted=True)
        out = hs.bcoo_spdot_general(a, a, dimension_numbers=MATMUL, nse=nse)
        return out.data, out.indices

    def ref(d, i):
        a = js.BCOO((d, i), shape=shape, indices_sorted=True)
        out = js.bcoo_dot_general(a, a, dimension_numbers=MATMUL)
        return out.data, out.indices

    dense = np.zeros(shape)
    np.add.at(dense, (np.asarray(idx[:, 0]), np.asarray(idx[:, 1])), np.asarray(data, np.float64))
    return hlopt.jit(ours), jax.jit(ref), (data, idx), dense @ dense, {"nse_out": nse}


def gcn_loss(w1, w2, x, a):
    h = jax.nn.relu(a @ (x @ w1))
    return jnp.mean((a @ (h @ w2)) ** 2)


def gcn(rng, rows, per_row, features):
    data, idx = entries(rng, rows, per_row)
    data = data / per_row
    x = jnp.asarray(rng.standard_normal((rows, features), dtype=np.float32))
    w1, w2 = (jnp.asarray(rng.standard_normal((features, features), dtype=np.float32) / features ** 0.5)
              for _ in range(2))
    shape = (rows, rows)

    def step(kind):
        def f(w1, w2, d, i):
            a = kind((d, i), shape=shape, indices_sorted=True)
            loss, grads = jax.value_and_grad(gcn_loss, argnums=(0, 1))(w1, w2, x, a)
            return jnp.concatenate([loss.reshape(1), grads[0].ravel(), grads[1].ravel()])
        return f

    return hlopt.jit(step(hs.BCOO)), jax.jit(step(js.BCOO)), (w1, w2, data, idx), None, {}


WORKLOADS: dict[str, Callable] = {"sddmm": sddmm, "spspmm": spspmm, "gcn": gcn}


def _dense(result, rows: int) -> np.ndarray:
    """A workload's result as a numpy array: a sparse product's `(data, indices)` as its dense `[rows, rows]` matrix."""
    if not isinstance(result, tuple):
        return np.asarray(result, np.float64)
    data, idx = (np.asarray(v) for v in result)
    dense = np.zeros((rows, rows))
    ok = (idx < rows).all(1)
    np.add.at(dense, (idx[ok, 0], idx[ok, 1]), data[ok].astype(np.float64))
    return dense


def compare(name: str, rows: int, per_row: int, features: int, rounds: int, calls: int) -> dict:
    rng = np.random.default_rng(rows)
    ours, ref, args, want, extra = WORKLOADS[name](rng, rows, per_row, features)
    figure = {"workload": name, "rows": rows, "per_row": per_row, "features": features, **extra}
    got = _dense(ours(*args), rows)
    try:
        theirs = jax.block_until_ready(ref(*args))
    except jax.errors.JaxRuntimeError as e:  # JAX's side failing (out of memory) is a result to record
        theirs, figure["jax_error"] = None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    expected = want if want is not None or theirs is None else _dense(theirs, rows)
    if expected is not None:
        np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2 * (1 + np.abs(expected).max()))
    sides = {"hlopt": ours} if theirs is None else {"hlopt": ours, "jax": ref}
    if max(median_seconds(f, args, 1) for f in sides.values()) > SLOW_S:
        rounds, calls = min(rounds, 3), 1
    times: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(rounds):
        for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            times[side].append(median_seconds(sides[side], args, calls))
    figure["hlopt_s"] = statistics.median(times["hlopt"])
    if "jax" in times:
        figure |= {"jax_s": statistics.median(times["jax"]),
                   "ratio": statistics.median(j / h for j, h in zip(times["jax"], times["hlopt"], strict=True)),
                   "ratio_is": "median over rounds of jax / hlopt"}
    if "gather_s" in figure:
        figure["share_of_gather"] = 2 * figure["gather_s"] / figure["hlopt_s"]
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--spspmm-max-rows", type=int, default=1_000, help="largest sparse x sparse product run")
    parser.add_argument("--per-row", type=int, default=10)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3, help="calls timed a side a round")
    args = parser.parse_args()
    load_before = os.getloadavg()
    print(f"{jax.devices()[0].device_kind}\n")
    print("| workload | rows | hlopt ms | jax ms | jax / hlopt | note |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    figures, path = [], None
    for name in args.workloads:
        for rows in args.rows:
            if name == "spspmm" and rows > args.spspmm_max_rows:
                continue
            progress(f"{name}, {rows} rows")
            f = compare(name, rows, args.per_row, args.features, args.rounds, args.calls)
            figures.append(f)
            jax_ms = f"{1e3 * f['jax_s']:.3f}" if "jax_s" in f else "-"
            ratio = f"{f['ratio']:.2f}" if "ratio" in f else "-"
            note = f.get("jax_error", "") or (f"share of gather {f['share_of_gather']:.2f}" if "share_of_gather" in f
                                              else "")
            print(f"| {name} | {rows} | {1e3 * f['hlopt_s']:.3f} | {jax_ms} | {ratio} | {note} |", flush=True)
            path = write_record("sparse_tpu_patterns", figures, load_before=load_before, options=vars(args), path=path)


if __name__ == "__main__":
    main()
