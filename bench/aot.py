"""Time to a runnable executable from a fresh process: hlopt next to JAX, on the same program.

For a function of about 2,000 StableHLO ops, each path runs in its own fresh
process (importing jax and all of hlopt, which imports its compiler and
runtime lazily, and starting the backend are left out: the same for all;
the whole-process path `process` times them too), rounds are interleaved (every path once per round, in an
order that rotates), and the median over rounds is reported, of wall-clock
seconds and of the process's CPU seconds (all threads; on a shared machine the
steadier measure of the work done):

  hlopt  (a) lower + hlopt-default + PJRT compile   JAX  jax.jit(f).lower().compile()
         (b) the same with a persistent-cache hit        the same with JAX's compilation-cache hit
         (c) hlopt.load of a signed executable file      serialize_executable.deserialize_and_load
  PJRT   (d) client.deserialize_executable of the file's executable section alone: the floor of any loader
  whole  (e) a fresh process, from its start to the first result: `python -c "import hlopt; hlopt.load(f)(x, w)"`
             next to the same with `import jax` and deserialize_and_load (imports, backend, load, first call:
             what a user waits for), timed from outside

After (c), each loaded program is also run (per call, after a warm-up): how
fast what was loaded runs, hlopt's executable (compiled without debug
locations) next to JAX's.

Ratios are JAX / hlopt (above 1: hlopt is faster): of the medians, and the
median, quartiles and range of each round's ratio, with the share of rounds in
which hlopt was at least as fast. The load average is printed before and after
each workload. The key that signs the files is made in a temporary folder
(XDG_CONFIG_HOME), never in ~/.config.

Each run ends with a JSON record in bench/results/aot/ (bench/record.py).

Usage: python bench/aot.py [--repeat 15] [--workload elementwise|layers] [--paths compile,cache,load,process]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = {
    "hlopt-compile": "hlopt: lower + passes + compile",
    "jax-compile": "JAX: jit(f).lower().compile()",
    "hlopt-cache": "hlopt: persistent cache hit",
    "jax-cache": "JAX: compilation cache hit",
    "hlopt-load": "hlopt: hlopt.load(file)",
    "jax-load": "JAX: deserialize_and_load",
    "pjrt-load": "PJRT: deserialize_executable",
    "hlopt-process": "hlopt: a process that runs hlopt.load(file)(x, w)",
    "jax-process": "JAX: a process that runs deserialize_and_load(...)(x, w)",
}
KINDS = ("compile", "cache", "load", "process")
_INPUTS = "x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8); w = np.eye(8, dtype=np.float32) * 0.3\n"
# (e): the whole script of each side, run as `python -c SCRIPT WORKDIR`; it prints the result's checksum
WHOLE_PROCESS = {
    "hlopt-process": ("import sys, numpy as np, hlopt\nrun = hlopt.load(sys.argv[1] + '/f.hlx')\n" + _INPUTS
                      + "print(float(np.asarray(run(x, w)[0])))"),
    "jax-process": ("import sys, pickle, numpy as np, jax\n"
                    "from jax.experimental.serialize_executable import deserialize_and_load\n"
                    "payload, in_tree, out_tree = pickle.loads(open(sys.argv[1] + '/f.jaxexe', 'rb').read())\n"
                    "run = deserialize_and_load(payload, in_tree, out_tree)\n" + _INPUTS
                    + "print(float(np.asarray(run(x, w)[0])))"),
}


def elementwise(iterations: int):
    """A long chain of elementwise ops that XLA fuses into few kernels (compile-heavy)."""
    import jax.numpy as jnp

    def f(x, w):
        for i in range(iterations):
            x = jnp.sin(x) * (1.0 + i % 5) + jnp.cos(x * w)
        return x.sum(), x

    return f


def layers(iterations: int):
    """Many small matmul layers: one kernel per layer (load-heavy)."""
    import jax.numpy as jnp

    def f(x, w):
        for i in range(iterations):
            x = jnp.tanh(x @ w) * 0.5 + jnp.sin(x) * (i % 7 + 1)
        return x.sum(), x

    return f


# workload -> (function builder, unrolled steps giving about 2,000 StableHLO ops)
WORKLOADS = {"elementwise": (elementwise, 400), "layers": (layers, 330)}


def inputs():
    import jax
    import numpy as np

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    w = np.eye(8, dtype=np.float32) * 0.3
    return (x, w), [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w)]


def worker(mode: str, workdir: Path, workload: str) -> dict:
    """Run one path in this (fresh) process; return its seconds and a checksum of the result."""
    import jax
    import numpy as np

    import hlopt

    jax.config.update("jax_enable_compilation_cache", mode == "jax-cache")
    preload()
    build, iterations = WORKLOADS[workload]
    f = build(iterations)
    client = jax.devices()[0].client  # start the backend outside the timed part: every path pays it alike
    args, specs = inputs()
    files = {"hlopt": workdir / "f.hlx", "jax": workdir / "f.jaxexe", "pjrt": workdir / "f.pjrt",
             "hcache": workdir / "hlopt-cache", "jcache": workdir / "jax-cache"}
    if mode == "jax-cache":
        jax.config.update("jax_compilation_cache_dir", str(files["jcache"]))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if mode == "hlopt-cache":
        hlopt.set_cache_dir(files["hcache"])
    if mode == "pjrt-load":
        from jaxlib import xla_client as xc

        serialized, devices = files["pjrt"].read_bytes(), xc.DeviceList(tuple(jax.devices()[:1]))
    pjrt_seconds: list[float] = []
    if mode == "hlopt-load":
        from hlopt.runtime import files as file_format

        pjrt_seconds = timed(file_format, "load_executable")

    start, cpu_start = time.perf_counter(), time.process_time()
    lowered_at = None
    if mode in ("hlopt-compile", "hlopt-cache"):
        lowered = hlopt.lower(f, *specs)
        lowered_at = time.perf_counter()
        run = lowered.compile()
    elif mode == "hlopt-load":
        run = hlopt.load(files["hlopt"])
    elif mode in ("jax-compile", "jax-cache"):
        lowered = jax.jit(f).lower(*specs)
        lowered_at = time.perf_counter()
        run = lowered.compile()
    elif mode == "jax-load":
        import pickle  # JAX's own format pickles the treedefs; the bench reads only files it wrote

        from jax.experimental.serialize_executable import deserialize_and_load  # imported by preload()

        payload, in_tree, out_tree = pickle.loads(files["jax"].read_bytes())
        run = deserialize_and_load(payload, in_tree, out_tree)
    elif mode == "pjrt-load":
        executable = client.deserialize_executable(serialized, devices)
    else:
        raise ValueError(mode)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start

    if mode == "pjrt-load":
        arrays = [jax.device_put(a) for a in args]
        out = executable.execute_sharded(arrays).disassemble_into_single_device_arrays()[0][0]
        return {"seconds": seconds, "cpu_seconds": cpu_seconds, "check": float(np.asarray(out))}
    result = {"seconds": seconds, "cpu_seconds": cpu_seconds, "check": float(np.asarray(run(*args)[0]))}
    if lowered_at is not None:
        result["compile_seconds"] = start + seconds - lowered_at
    if mode == "hlopt-load":
        result["pjrt_seconds"] = sum(pjrt_seconds)
    if mode in ("hlopt-load", "jax-load"):
        result["run_seconds"] = run_time(run, args)
    if mode == "hlopt-compile":  # also write what the load and cache paths read
        run.save(files["hlopt"])
        files["pjrt"].write_bytes(client.serialize_executable(run.executable))
        result["ops"] = count_ops(hlopt.lower(f, *specs).apply("hlopt-default").module)
        hlopt.set_cache_dir(files["hcache"])
        hlopt.lower(f, *specs).compile()
    if mode == "jax-compile":
        import pickle

        from jax.experimental.serialize_executable import serialize

        files["jax"].write_bytes(pickle.dumps(serialize(run)))
    if mode == "hlopt-cache":
        result["hits"] = hlopt.cache_info().hits
    return result


def run_time(run, args, calls: int = 100) -> float:
    """Seconds per call of the loaded program (after a warm-up), the median of five batches of `calls`."""
    for _ in range(10):
        run(*args)
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            out = run(*args)
        out[1].block_until_ready()
        batches.append((time.perf_counter() - start) / calls)
    return statistics.median(batches)


def preload() -> None:
    """Import what each path uses before the clock starts (hlopt imports its compiler and runtime lazily)."""
    import pickle  # noqa: F401

    import jax.experimental.serialize_executable  # noqa: F401

    import hlopt.staging  # noqa: F401 - hlopt.lower and the compiler, passes and runtime behind it
    import hlopt.runtime.files  # noqa: F401 - hlopt.load


def timed(module, name: str) -> list[float]:
    """Wrap `module.name` to record the seconds of each call (into the returned list)."""
    seconds, function = [], getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    setattr(module, name, wrapper)
    return seconds


def count_ops(module) -> int:
    from hlopt.passes.mlir import ir

    count = 0

    def visit(op):
        nonlocal count
        count += op.name.startswith("stablehlo.")
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return count


def fresh_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", XDG_CONFIG_HOME=str(workdir / "config"))
    for name in ("XLA_FLAGS", "HLOPT_CACHE_DIR", "HLOPT_KEY"):
        env.pop(name, None)
    return env


def whole_process(mode: str, workdir: Path) -> dict:
    """(e): wall and CPU seconds of a fresh process running WHOLE_PROCESS[mode], from outside."""
    cpu_before = os.times()
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WHOLE_PROCESS[mode], str(workdir)], env=fresh_env(workdir),
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    cpu_after = os.times()
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{proc.stderr[-3000:]}")
    cpu = (cpu_after.children_user - cpu_before.children_user) + (cpu_after.children_system - cpu_before.children_system)
    return {"seconds": seconds, "cpu_seconds": cpu, "check": float(proc.stdout.strip().splitlines()[-1])}


def fresh(mode: str, workdir: Path, workload: str) -> dict:
    if mode in WHOLE_PROCESS:
        return whole_process(mode, workdir)
    env = fresh_env(workdir)
    proc = subprocess.run([sys.executable, __file__, "--worker", mode, str(workdir), "--workload", workload],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--workload", choices=list(WORKLOADS), action="append",
                        help="which functions to time (default: all)")
    parser.add_argument("--paths", default=",".join(KINDS),
                        help=f"which of {', '.join(KINDS)} to time (default: all)")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], Path(args.worker[1]), args.workload[0])))
        return
    kinds = [k for k in KINDS if k in args.paths.split(",")]
    load_before = os.getloadavg()
    figures = []
    for workload in args.workload or list(WORKLOADS):
        figures += bench(workload, args.repeat, kinds)
    from record import write_record

    write_record("aot", figures, load_before=load_before, options={"repeat": args.repeat, "paths": kinds})


def bench(workload: str, repeat: int, kinds: list[str]) -> list[dict]:
    """Time every path of `kinds` on `workload`, print the table, and return its figures."""
    from record import progress

    modes = [m for m in PATHS if m.split("-")[1] in kinds]
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        setup = fresh("hlopt-compile", workdir, workload)  # writes the files and fills the cache
        fresh("jax-compile", workdir, workload)
        fresh("jax-cache", workdir, workload)  # fills JAX's cache
        print(f"\n{workload}: {setup['ops']} StableHLO ops after hlopt-default; "
              f"{repeat} rounds of fresh processes, every path once per round\n")
        runs: dict[str, list[dict]] = {mode: [] for mode in modes}
        for r in range(repeat):  # the order rotates, so that no path always follows another
            progress(f"{workload}: round {r + 1} of {repeat}")
            for mode in modes[r % len(modes):] + modes[: r % len(modes)]:
                runs[mode].append(fresh(mode, workdir, workload))
        checks = {round(x["check"], 2) for rs in runs.values() for x in rs} | {round(setup["check"], 2)}
        assert len(checks) == 1, f"paths disagree on the result: {checks}"
        assert all(x["hits"] == 1 for x in runs.get("hlopt-cache", [])), "the cache path did not hit"

    figures = report(runs, kinds)
    print(f"\nload average (1, 5, 15 min): {load_before} before, {load_average()} after")
    return [dict(f, workload=workload, ops=setup["ops"], rounds=repeat) for f in figures]


def load_average() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def spread(ratios: list[float]) -> str:
    """Median, quartiles, range and the share of rounds at or above 1 of per-round ratios."""
    q1, q2, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    at_least = sum(r >= 1 for r in ratios)
    return (f"{statistics.median(ratios):.2f}x (quartiles {q1:.2f}-{q3:.2f}, range {min(ratios):.2f}-{max(ratios):.2f}; "
            f">= 1 in {at_least}/{len(ratios)})")


def report(runs: dict[str, list[dict]], kinds: list[str]) -> list[dict]:
    """Print the table of medians and per-round ratios, wall-clock and CPU, and the load path's split;
    return one figure per path and measure."""
    print("| path | measure | hlopt (s) | JAX (s) | JAX / hlopt (medians) | per-round JAX / hlopt |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    labels = {"compile": "fresh lower + compile", "cache": "persistent cache hit", "load": "load a signed file",
              "process": "whole process to first result"}
    figures = []
    for kind in (k for k in KINDS if k in kinds):
        for measure, field in (("wall", "seconds"), ("CPU", "cpu_seconds")):
            h, j = ([x[field] for x in runs[f"{who}-{kind}"]] for who in ("hlopt", "jax"))
            per_round = [b / a for a, b in zip(h, j)]
            print(f"| {labels[kind]} | {measure} | {statistics.median(h):.3f} | {statistics.median(j):.3f} | "
                  f"{statistics.median(j) / statistics.median(h):.2f}x | {spread(per_round)} |")
            figures.append({"path": labels[kind], "measure": measure, "hlopt_s": statistics.median(h),
                            "jax_s": statistics.median(j), "ratio": statistics.median(j) / statistics.median(h),
                            "ratio_per_round_median": statistics.median(per_round),
                            "ratio_per_round_min": min(per_round), "ratio_per_round_max": max(per_round),
                            "ratio_is": "JAX / hlopt"})
    if "load" in kinds:
        for measure, field in (("wall", "seconds"), ("CPU", "cpu_seconds")):
            print(f"| PJRT deserialize_executable alone (the floor) | {measure} | "
                  f"{statistics.median(x[field] for x in runs['pjrt-load']):.3f} | | | |")
        h, j = ([x["run_seconds"] for x in runs[f"{who}-load"]] for who in ("hlopt", "jax"))
        print(f"| run the loaded program (per call) | wall | {statistics.median(h) * 1e6:.0f} us | "
              f"{statistics.median(j) * 1e6:.0f} us | {statistics.median(j) / statistics.median(h):.2f}x | "
              f"{spread([b / a for a, b in zip(h, j)])} |")
    for kind in ("compile", "cache"):
        if kind in kinds:
            h, j = (statistics.median(x["compile_seconds"] for x in runs[f"{who}-{kind}"]) for who in ("hlopt", "jax"))
            print(f"\n{kind}: of which after lowering (passes, cache lookup, PJRT): hlopt {h:.3f} s, JAX {j:.3f} s")
    if "load" not in kinds:
        return figures
    pjrt = statistics.median(x["pjrt_seconds"] for x in runs["hlopt-load"])
    own = statistics.median(x["seconds"] - x["pjrt_seconds"] for x in runs["hlopt-load"])
    floor = [h["seconds"] / p["seconds"] for h, p in zip(runs["hlopt-load"], runs["pjrt-load"])]
    print(f"\nhlopt.load = PJRT deserialize_executable {pjrt:.3f} s + hlopt's own work {own * 1e3:.1f} ms "
          f"(reading, MAC and checksums, manifest, checks of what PJRT loaded); per round, hlopt.load / "
          f"the floor: {statistics.median(floor):.2f}x")
    if "compile" in kinds:
        compile_, load = (statistics.median(x["seconds"] for x in runs[f"hlopt-{k}"]) for k in ("compile", "load"))
        print(f"fresh compile / hlopt.load: {compile_ / load:.1f}x")
    return figures


if __name__ == "__main__":
    main()
