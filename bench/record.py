"""One JSON record per benchmark run, under `bench/results/`.

Every script in `bench/` ends with `write_record(name, figures, ...)`: the
machine, its load before and after, the versions, the commit and every figure
it printed go into `bench/results/<name>/<UTC time>.json`, which the docs'
benchmark page renders. Prose never quotes a run; the records are the history.

A figure is a flat dictionary: the workload's name and parameters, the times of
each side (seconds), and the ratios the script printed, for example
`{"workload": "SpMV", "rows": 10000, "hlopt_s": 1.2e-4, "scipy_s": 1.1e-4,
"ratio": 0.92, "ratio_is": "scipy / hlopt"}`.
"""

from __future__ import annotations

import datetime
import time
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=RESULTS.parent, capture_output=True,
                             text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=RESULTS.parent,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("+dirty" if dirty else "")


_START = time.perf_counter()


def progress(message: str) -> None:
    """One line on stderr, at once, with the seconds since the script started: long runs show where they are."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    """What the figures depend on: processor, cores, memory, OS, Python."""
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {"processor": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "memory_bytes": mem, "system": platform.platform(), "python": sys.version.split()[0]}


def device() -> dict[str, Any] | None:
    """The platform and kind of the device JAX computes on, when the script imported JAX (None otherwise)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    first = jax.devices()[0]
    return {"platform": first.platform, "kind": first.device_kind, "count": jax.device_count()}


def write_record(name: str, figures: Sequence[Mapping[str, Any]], *, load_before: Sequence[float],
                 options: Mapping[str, Any] | None = None, packages: Sequence[str] = (), path: Path | None = None) -> Path:
    """Write one run's record and return its path; `load_before` is `os.getloadavg()` at the start; `path`: the
    record written before in this run, written again with the figures so far (a run stopped early keeps them)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    record = {
        "benchmark": name,
        "time_utc": now.isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": machine(),
        "device": device(),
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
        "versions": {p: _version(p) for p in ("hlopt", "jax", "jaxlib", "numpy", *packages)},
        "options": dict(options or {}),
        "figures": [dict(f) for f in figures],
    }
    if path is None:
        folder = RESULTS / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True, default=float) + "\n")
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    return path


def median_seconds(fn: Any, args: Sequence[Any], calls: int) -> float:
    """Median wall-clock seconds of `calls` calls of `fn(*args)`, each waited for."""
    import statistics

    import jax

    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def same_options(programs: Mapping[str, Any], args: Sequence[Any], ours: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The programs with the same XLA options, and those options: the ones hlopt's tuning passes
    record for the `hlopt.jit` program `programs[ours]` at `args` (`hlopt.compiler_options`, which
    `hlopt.jit` compiles with), given to every `jax.jit` program too (jitted again, not yet
    compiled), so that no side's speed comes from an option the other does not get."""
    import jax

    from hlopt.passes.xla_cpu.ynn_fusion import recorded_options

    platform = jax.devices()[0].platform
    lowered = programs[ours].lower(*args).apply("hlopt-default", platform=platform)
    options = dict(recorded_options(lowered.module.operation))
    same = {name: jax.jit(fn.__wrapped__, compiler_options=options)
            if options and not type(fn).__module__.startswith("hlopt") else fn for name, fn in programs.items()}
    return same, options
