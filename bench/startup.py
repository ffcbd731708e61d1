"""Start-up of `hlopt-opt --list-passes` against its floor, `import jaxlib.mlir.ir`, whole fresh processes.

    python bench/startup.py [--rounds 15]

hlopt-opt needs the MLIR bindings that ship in jaxlib, so a fresh process that only
imports `jaxlib.mlir.ir` is the floor no hlopt command can beat. Each round starts one
process of each side, in an order that flips every round, and times it from outside
(start to exit); the figure is the median over rounds of hlopt's time minus the floor's
in the same round, with the minimum and maximum. `hlopt-opt --list-passes` must not
import jax (a test checks that), so the gap is hlopt's own import and registry.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from record import progress, write_record

SIDES = {
    "hlopt-opt --list-passes": [sys.executable, "-c",
                                "import sys; from hlopt.cli.opt import main; sys.exit(main(['--list-passes']))"],
    "import jaxlib.mlir.ir": [sys.executable, "-c", "import jaxlib.mlir.ir"],
}


def wall(argv: list[str]) -> float:
    """Seconds from start to exit of one fresh process; its output is discarded."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    load_before = os.getloadavg()
    names = list(SIDES)
    for name in names:  # warm the page cache and Python's bytecode caches once
        wall(SIDES[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            times[name].append(wall(SIDES[name]))
        progress(f"round {round_ + 1}/{args.rounds}")
    hlopt, floor = (times[name] for name in names)
    gaps = [a - b for a, b in zip(hlopt, floor)]
    ratios = [a / b for a, b in zip(hlopt, floor)]
    figure = {
        "workload": "hlopt-opt --list-passes", "rounds": args.rounds,
        "hlopt_s": statistics.median(hlopt), "floor_s": statistics.median(floor),
        "gap_s": statistics.median(gaps), "gap_min_s": min(gaps), "gap_max_s": max(gaps),
        "ratio": statistics.median(ratios), "ratio_is": "hlopt-opt / import jaxlib.mlir.ir",
    }
    print(f"hlopt-opt --list-passes {figure['hlopt_s']:.3f} s, import jaxlib.mlir.ir {figure['floor_s']:.3f} s: "
          f"gap {figure['gap_s']:.3f} s (per round {figure['gap_min_s']:.3f} to {figure['gap_max_s']:.3f}), "
          f"ratio {figure['ratio']:.2f}")
    path = write_record("startup", [figure], load_before=load_before, options={"rounds": args.rounds})
    print(f"record: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
