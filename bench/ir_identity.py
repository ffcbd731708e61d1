"""Whether two trees of hlopt compile the benchmarks' programs to the same IR, for each platform.

The programs: every hlopt program of the CPU and TPU benchmarks at their default sizes
(bench/xla_cpu_tuning.py's workloads; the Taylor programs of wavefunction.py, pinn_grad.py,
pde_operators.py and taylor_tpu.py; sparse.py's programs; the products sparse_scipy.py and
sparse_tpu.py time, built here on their shapes with nominal entry counts). Each tree, in a process
of its own with its `python/` first on the path (this folder's scripts build the programs), lowers
each program as `hlopt.jit` does, by JAX for each of `--platforms` (on this machine, whatever its
devices), and prints it after its pipeline for that platform (`Lowered.apply(platform=)`); the texts
are compared program by program. `--without PASS` also compares each program compiled without those
passes, and `--without-product-kernel` with the Pallas TPU product kernel unregistered where a tree
has one: how to set aside a change meant to alter some programs and check that nothing else moved.

    python bench/ir_identity.py /tmp/before . --platforms cpu tpu \\
        --without tpu-folded-solves --without-product-kernel [--only sparse] [--diffs /tmp/diffs]

Prints the start of the diff of each program that differs and one line per benchmark and target;
the record under `bench/results/ir_identity/` holds per benchmark and target the programs compared,
how many are identical and the names of the others.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

PER_ROW = 10  # entries a row of sparse_scipy.py's and sparse_tpu.py's matrices (their default)


def programs() -> Iterator[tuple[str, str, Callable, tuple]]:
    """(benchmark, case, function, arguments) of every hlopt program of the benchmarks."""
    from types import SimpleNamespace as Args

    import jax
    import jax.numpy as jnp
    import numpy as np

    import hlopt
    import pde_operators
    import pinn_grad
    import sparse
    import taylor_tpu
    import wavefunction
    import xla_cpu_tuning

    tuning = Args(dim=50, bi_dim=5, width=768, batch=16, n=1_000_000, sparse_n=1024, electrons=4, walkers=128,
                  workloads=xla_cpu_tuning.WORKLOADS)
    for name, cases in xla_cpu_tuning.workloads(tuning).items():
        for case, fn, args in cases:
            yield "xla_cpu_tuning", f"{name}: {case}", fn, args
    for n in (4, 6, 8):
        for workload, fn in wavefunction.programs("hlopt").items():
            yield "wavefunction", f"{workload}, n = {n}", fn, wavefunction.inputs(n, 128, jnp.float32)
    for dim, args in pinn_grad.problems(Args(batch=8, dims=[50, 5])):
        yield "pinn_grad", f"D = {dim}", pinn_grad.methods()["hlopt"], args
    for title, methods, args in pde_operators.workloads(Args(dim=50, bi_dim=5, batch=16,
                                                             workloads=pde_operators.WORKLOADS)):
        for method, fn in methods.items():
            if isinstance(fn, hlopt.JitFunction):
                yield "pde_operators", f"{title}: {method}", fn, args
    for title, _, found, args in taylor_tpu.cases(Args(electrons=[8, 16, 32], walkers=1024, pinn_batch=512,
                                                       laplacian_batch=2048, workloads=taylor_tpu.WORKLOADS)):
        yield "taylor_tpu", title, found["hlopt"], args
    rng = np.random.RandomState(0)
    for table, cases in (("unbatched", sparse.unbatched_cases(4096, 40_000, 10_000, 100_000, rng)),
                         ("batched", sparse.batched_cases(16, 1024, 4000, rng)),
                         ("products", sparse.product_cases(10_000, 100_000, 64, 8, 2048, 12_500, rng))):
        for name, ours, _, args, *_ in cases:
            yield "sparse", f"{table}: {name}", ours, args
    yield from _spspmm(10_000, (3000, 10_000, 100_000))
    yield from _products(jax)


def _spspmm(n: int, counts: tuple[int, ...]) -> Iterator[tuple[str, str, Callable, tuple]]:
    """bench/sparse.py's sparse x sparse products, the output's entries counted as it counts them."""
    import numpy as np
    import scipy.sparse as sp

    import sparse
    from hlopt import sparse as hs

    H, _ = sparse.both((n, n))
    mm = (((1,), (0,)), ((), ()))
    for nse in counts:
        rng = np.random.RandomState(0)
        left, right = sparse.random_bcoo(rng, (n, n), nse), sparse.random_bcoo(rng, (n, n), nse)
        pattern = [sp.coo_matrix((np.ones(nse), tuple(np.asarray(i).T)), shape=(n, n)).tocsr() for _, i in (left, right)]
        out_nse = max((pattern[0] @ pattern[1]).nnz, 1)
        yield ("sparse", f"sparse x sparse, nse {nse}",
               lambda a, b, c, e, k=out_nse: sparse._bufs(hs.bcoo_spdot_general(H(a, b), H(c, e), dimension_numbers=mm,
                                                                               nse=k)), (*left, *right))


def _products(jax) -> Iterator[tuple[str, str, Callable, tuple]]:
    """sparse_scipy.py's products (row-sorted unique BCOO, BCSR) and sparse_tpu.py's (BCOO, sorted or not,
    and BCSR), on shapes: `PER_ROW` entries a row (scipy's matrices drop a few duplicates), SpGEMM's
    operands 5 entries a row and its output 25."""
    from hlopt import sparse as hs

    f32 = lambda *shape: jax.ShapeDtypeStruct(shape, "float32")  # noqa: E731
    i32 = lambda *shape: jax.ShapeDtypeStruct(shape, "int32")  # noqa: E731
    mm = (((1,), (0,)), ((), ()))

    def matrix(layout: str, rows: int, nse: int) -> tuple[Callable, tuple]:
        """A function building the layout's matrix from its buffers, and the buffers' shapes."""
        shape = (rows, rows)
        if layout == "BCSR":
            return (lambda d, i, p: hs.BCSR((d, i, p), shape=shape)), (f32(nse), i32(nse), i32(rows + 1))
        sort, unique = layout != "BCOO", layout == "BCOO sorted unique"
        return (lambda d, i: hs.BCOO((d, i), shape=shape, indices_sorted=sort, unique_indices=unique)), (f32(nse), i32(nse, 2))

    def product(layout: str, rows: int, k: int | None, nse: int) -> tuple[Callable, tuple]:
        """`A @ x`, x a vector (k None) or k columns."""
        build, bufs = matrix(layout, rows, nse)
        return (lambda *a: build(*a[:-1]) @ a[-1]), (*bufs, f32(rows) if k is None else f32(rows, k))

    def spgemm(layout: str, rows: int, nse: int, out: int) -> tuple[Callable, tuple]:
        """`A @ A` under jit with its output's entry count given, as buffers."""
        build, bufs = matrix(layout, rows, nse)

        def fn(*a):
            A = build(*a)
            m = (hs.bcsr_spdot_general(A, A, nse=out) if layout == "BCSR"
                 else hs.bcoo_spdot_general(A, A, dimension_numbers=mm, nse=out))
            return (m.data, m.indices, m.indptr) if layout == "BCSR" else (m.data, m.indices)
        return fn, bufs

    for rows in (10_000, 100_000, 1_000_000):
        for k in (None, 16, 64, 256):
            if k is None or 2 * rows * k * 4 / 2 ** 20 <= 600:  # sparse_scipy.py's --max-dense-mb
                for layout in ("BCOO sorted unique", "BCSR"):
                    yield ("sparse_scipy", f"{rows} rows, x {k or 'vector'}, {layout}",
                           *product(layout, rows, k, rows * PER_ROW))
        yield ("sparse_scipy", f"{rows} rows, SDDMM x 16",
               lambda p, q, i: hs.bcoo_dot_general_sampled(p, q, i, dimension_numbers=mm),
               (f32(rows, 16), f32(16, rows), i32(rows * PER_ROW, 2)))
        if rows <= 100_000:  # sparse_scipy.py's --traced-spgemm-max-rows
            for layout in ("BCOO sorted unique", "BCSR"):
                yield "sparse_scipy", f"{rows} rows, SpGEMM, jit, {layout}", *spgemm(layout, rows, rows * 5, rows * 25)
    for rows in (1_000, 10_000, 100_000, 1_000_000):
        for k in (None, 64, 256):
            for layout in ("BCOO", "BCOO sorted", "BCSR"):
                yield "sparse_tpu", f"{rows} rows, x {k or 'vector'}, {layout}", *product(layout, rows, k, rows * PER_ROW)


@contextlib.contextmanager
def lowering_for(platform: str) -> Iterator[None]:
    """JAX lowers every program for `platform` inside, whatever devices this machine has (jax's
    `Traced.lower(lowering_platforms=)`, which `jax.jit(f).lower` calls)."""
    import jax

    lower = jax.stages.Traced.lower
    jax.stages.Traced.lower = functools.partialmethod(lower, lowering_platforms=(platform,))
    try:
        yield
    finally:
        jax.stages.Traced.lower = lower


def dump(out: Path, platforms: list[str], without: list[str], without_kernel: bool, only: str) -> None:
    """Write each program's text after its pipeline for each target into `out` and an index of them."""
    import hlopt
    from hlopt.passes.registry import PIPELINES
    from hlopt.passes.tpu import sparse_products

    # the trees before the Pallas TPU products have no kernel to unregister
    register = getattr(sparse_products, "register_product_kernel", None)
    index = {"pipeline": PIPELINES["hlopt-default"], "programs": {}}
    for number, (benchmark, case, fn, args) in enumerate(programs()):
        if only not in f"{benchmark}: {case}":
            continue
        print(f"{benchmark}: {case}", file=sys.stderr, flush=True)
        jitted = fn if isinstance(fn, hlopt.JitFunction) else hlopt.jit(fn)
        pipeline = PIPELINES.get(jitted.pipeline, jitted.pipeline)
        kept = ",".join(name for name in pipeline.split(",") if name not in without)
        texts = {}
        for platform in platforms:
            with lowering_for(platform):
                lowered = jitted.lower(*args)
            targets = {platform: (pipeline, False)}
            if without or without_kernel:
                targets[f"{platform} without"] = (kept, without_kernel)
            for target, (text, no_kernel) in targets.items():
                kernel = register(None) if no_kernel and register else None
                start = time.perf_counter()
                try:
                    body = lowered.apply(text, platform=platform).as_text()
                finally:
                    if kernel is not None:
                        register(kernel)
                path = out / f"{number}-{target.replace(' ', '-')}.mlir"
                path.write_text(body)
                texts[target] = {"file": path.name, "seconds": time.perf_counter() - start}
        index["programs"][f"{benchmark}: {case}"] = {"benchmark": benchmark, "texts": texts}
    (out / "index.json").write_text(json.dumps(index))


def run_tree(tree: Path, out: Path, a: argparse.Namespace) -> dict:
    """Run `dump` with `tree`'s hlopt in a process of its own; its index."""
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree.resolve() / "python"), "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, __file__, "--dump", str(out), "--only", a.only, "--platforms", *a.platforms,
               *(["--without", *a.without] if a.without else []), *(["--without-product-kernel"] * a.without_product_kernel)]
    subprocess.run(command, env=env, check=True)
    return json.loads((out / "index.json").read_text())


def compare(old: Path, new: Path, a: argparse.Namespace) -> list[dict]:
    """One figure per benchmark and target: programs compared, identical, the names of the others, and
    the seconds each tree took to run the passes and print the texts (one run each, not interleaved: a
    rough guide)."""
    with tempfile.TemporaryDirectory() as scratch:
        sides = {side: (Path(scratch) / side, run_tree(tree, Path(scratch) / side, a))
                 for side, tree in (("old", old), ("new", new))}
        pipelines = {side: index["pipeline"] for side, (_, index) in sides.items()}
        if pipelines["old"] != pipelines["new"]:
            print(f"hlopt-default differs:\n  old {pipelines['old']}\n  new {pipelines['new']}")
        figures: dict[tuple[str, str], dict] = {}
        for name, entry in sides["new"][1]["programs"].items():
            for target in entry["texts"]:
                found = {side: index["programs"][name]["texts"][target] for side, (_, index) in sides.items()}
                texts = [(sides[side][0] / found[side]["file"]).read_text() for side in ("old", "new")]
                figure = figures.setdefault((entry["benchmark"], target), {
                    "benchmark": entry["benchmark"], "target": target, "programs": 0, "identical": 0,
                    "differing": [], "old_passes_s": 0.0, "new_passes_s": 0.0})
                figure["programs"] += 1
                figure["old_passes_s"] += found["old"]["seconds"]
                figure["new_passes_s"] += found["new"]["seconds"]
                if texts[0] == texts[1]:
                    figure["identical"] += 1
                    continue
                figure["differing"].append(name.removeprefix(f"{entry['benchmark']}: "))
                diff = list(difflib.unified_diff(texts[0].splitlines(), texts[1].splitlines(), "old", "new", n=1,
                                                 lineterm=""))
                print(f"\n{name} [{target}] differs ({len(diff)} diff lines):\n" + "\n".join(diff[:a.diff_lines]))
                if a.diffs:
                    a.diffs.mkdir(parents=True, exist_ok=True)
                    stem = hashlib.sha1(f"{name} {target}".encode()).hexdigest()[:10]
                    (a.diffs / f"{stem}.diff").write_text(f"{name} [{target}]\n" + "\n".join(diff))
    return list(figures.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, nargs="?", help="the tree before the change")
    parser.add_argument("new", type=Path, nargs="?", help="the tree after it")
    parser.add_argument("--platforms", nargs="+", default=["cpu", "tpu"])
    parser.add_argument("--without", nargs="+", default=[], metavar="PASS",
                        help="also compare each program compiled without these passes (where the tree has them)")
    parser.add_argument("--without-product-kernel", action="store_true",
                        help="... and with the Pallas TPU product kernel unregistered (where the tree has one)")
    parser.add_argument("--only", default="", help="only the programs whose 'benchmark: case' holds this")
    parser.add_argument("--diff-lines", type=int, default=20, help="diff lines printed per differing program")
    parser.add_argument("--diffs", type=Path, help="write each differing program's whole diff here")
    parser.add_argument("--note", default="", help="recorded with the figures: which commit the old tree is, ...")
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)  # the child process of one tree
    a = parser.parse_args()
    if a.dump:
        dump(a.dump, a.platforms, a.without, a.without_product_kernel, a.only)
        return
    if a.old is None or a.new is None:
        parser.error("give the two trees: OLD NEW")
    from record import write_record

    load_before = os.getloadavg()
    figures = compare(a.old, a.new, a)
    print()
    for f in figures:
        print(f"{f['benchmark']:15s} {f['target']:12s} {f['identical']:3d}/{f['programs']:<3d} identical, passes "
              f"{f['old_passes_s']:6.1f} s old, {f['new_passes_s']:6.1f} s new")
    write_record("ir_identity", figures, load_before=load_before,
                 options={"old": str(a.old), "new": str(a.new), "platforms": a.platforms, "without": a.without,
                          "without_product_kernel": a.without_product_kernel, "only": a.only, "note": a.note})


if __name__ == "__main__":
    main()
