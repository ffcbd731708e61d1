"""One benchmark of two trees of hlopt side by side on one machine: the old tree against this one.

Runs `bench/<script>` of each tree in its own subprocess with that tree's interpreter
(a virtual environment with the tree installed), in alternating order (old, new, old,
new, ... for `--rounds` rounds), each run's record (bench/record.py's `write_record`)
redirected into a temporary folder. It then reads the records of both trees and, for
every figure both have and every number in it, prints and records (through this
tree's bench/record.py, as a `compare_trees` record whose figures name the script) the median of the old runs, the
median of the new runs, new / old of those medians, and the median and range of the
per-round ratios (each new run over the old run just before it, which the machine's
load moves least). Times below 1 are faster in the new tree.

    python bench/compare_trees.py --old-tree /tmp/old --old-python /tmp/venv-old/bin/python \\
        --rounds 5 pde_operators -- --repeat 3 --dim 20

A figure is named by its text fields and its integer parameters (`workload`, `method`,
`order`, `rows`, ...); counts a benchmark measures (`ops`, `jaxpr_eqns`) are compared as
numbers. Figures only one tree has are listed, not compared. Reference methods the two
trees share (folx, JAX's nested jvp, scipy) measure the machine, not hlopt: their
ratios show how much of a difference the load alone makes.

Trees whose scripts predate records: `--old-bench-commit C` runs the scripts of commit
C of the old tree's repository (only their bench/ folder; the library is still the old
tree's install), for a commit that adds the record plumbing and nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import progress, write_record

NEW_TREE = Path(__file__).resolve().parent.parent

# Integer fields that are measurements, not parameters naming a figure.
MEASURED_INTS = frozenset({"ops", "jaxpr_eqns", "instructions", "nse", "bytes", "rounds"})

# Runs a benchmark script with bench/record.py's results folder replaced by argv[1].
RUNNER = """
import runpy, sys
from pathlib import Path
bench, results, script = sys.argv[1:4]
sys.path.insert(0, bench)
import record
record.RESULTS = Path(results)
sys.argv = [script, *sys.argv[4:]]
runpy.run_path(script, run_name="__main__")
"""


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=True).stdout.strip()


def bench_folder(tree: Path, commit: str | None, scratch: Path) -> Path:
    """The bench/ folder to run: the tree's own, or commit's (extracted from the tree's repository)."""
    if commit is None:
        return tree / "bench"
    out = scratch / f"bench-{commit}"
    if not out.exists():
        archive = subprocess.run(["git", "-C", str(tree), "archive", commit, "bench"], capture_output=True,
                                 check=True).stdout
        out.mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(out), "--strip-components=1"], input=archive, check=True)
    return out


def run_once(python: str, bench: Path, script: str, args: list[str], results: Path) -> tuple[dict, float, float]:
    """Run one script once; its record, wall seconds, and CPU seconds of the process and its children."""
    results.mkdir(parents=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([python, "-c", RUNNER, str(bench), str(results), str(bench / f"{script}.py"), *args],
                          cwd=bench, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{python} {bench / script}.py {shlex.join(args)} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    records = sorted(results.rglob("*.json"))
    if len(records) != 1:
        raise SystemExit(f"{bench / script}.py wrote {len(records)} records (expected one): does it call write_record?")
    return json.loads(records[0].read_text()), wall, cpu


def figure_key(figure: dict) -> tuple:
    """What names a figure: its text fields and its integer parameters."""
    return tuple(sorted((k, v if not isinstance(v, list) else tuple(v)) for k, v in figure.items()
                        if isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)
                                                  and k not in MEASURED_INTS)))


def numbers(figure: dict) -> dict[str, float]:
    return {k: float(v) for k, v in figure.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and (isinstance(v, float) or k in MEASURED_INTS)}


def label(key: tuple) -> str:
    return ", ".join(f"{v}" if k in ("workload", "method", "measure", "path", "reference") else f"{k}={v}"
                     for k, v in key if k != "ratio_is")


def compare(old_runs: list[dict], new_runs: list[dict]) -> tuple[list[dict], list[str]]:
    """Per figure both trees have and per number in it: old and new medians, their ratio, per-round ratios."""
    def by_key(run):
        return {figure_key(f): numbers(f) for f in run["figures"]}
    olds, news = [by_key(r) for r in old_runs], [by_key(r) for r in new_runs]
    only = [f"only old: {label(k)}" for k in olds[0] if k not in news[0]]
    only += [f"only new: {label(k)}" for k in news[0] if k not in olds[0]]
    out = []
    for key in (k for k in news[0] if k in olds[0]):
        for field in sorted(set(olds[0][key]) & set(news[0][key])):
            old = [r[key][field] for r in olds if key in r and field in r[key]]
            new = [r[key][field] for r in news if key in r and field in r[key]]
            paired = [n / o for o, n in zip(old, new) if o]
            old_m, new_m = statistics.median(old), statistics.median(new)
            ratios = {"ratio": new_m / old_m} if old_m else {}  # none of a zero (an exact result's error)
            if paired:
                ratios.update(round_ratio=statistics.median(paired), round_ratio_min=min(paired),
                              round_ratio_max=max(paired))
            out.append({**dict(key), "field": field, "old": old_m, "new": new_m, **ratios,
                        "old_runs": old, "new_runs": new, "ratio_is": "new / old"})
    return out, only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", help="benchmark in bench/ without .py (pde_operators, jet, ...)")
    parser.add_argument("args", nargs="*", help="the script's arguments (after --), the same for both trees")
    parser.add_argument("--old-tree", type=Path, required=True)
    parser.add_argument("--old-python", required=True, help="interpreter with the old tree installed")
    parser.add_argument("--new-python", default=sys.executable)
    parser.add_argument("--old-bench-commit", help="run the scripts of this commit of the old tree's repository")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--note", default="", help="recorded with the figures: what else ran on the machine, ...")
    a = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="compare_trees.") as tmp:
        scratch = Path(tmp)
        trees = {"old": (a.old_python, bench_folder(a.old_tree.resolve(), a.old_bench_commit, scratch)),
                 "new": (a.new_python, NEW_TREE / "bench")}
        for name, (_, bench) in trees.items():
            if not (bench / f"{a.script}.py").exists():
                raise SystemExit(f"the {name} tree has no bench/{a.script}.py")
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        whole: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
        for r in range(a.rounds):
            for name in ("old", "new"):
                python, bench = trees[name]
                progress(f"round {r + 1}/{a.rounds}: {name} tree, load {os.getloadavg()[0]:.1f}")
                record, wall, cpu = run_once(python, bench, a.script, a.args, scratch / f"{name}-{r}")
                runs[name].append(record)
                whole[name].append((wall, cpu))
    figures, only = compare(runs["old"], runs["new"])
    for name in ("wall", "cpu"):
        i = 0 if name == "wall" else 1
        old, new = [w[i] for w in whole["old"]], [w[i] for w in whole["new"]]
        paired = [n / o for o, n in zip(old, new)]
        figures.append({"workload": f"whole script ({name} seconds of the process)", "field": f"script_{name}_s",
                        "old": statistics.median(old), "new": statistics.median(new),
                        "ratio": statistics.median(new) / statistics.median(old),
                        "round_ratio": statistics.median(paired), "round_ratio_min": min(paired),
                        "round_ratio_max": max(paired), "old_runs": old, "new_runs": new, "ratio_is": "new / old"})
    print(f"bench/{a.script}.py {shlex.join(a.args)}: {a.rounds} rounds, old {a.old_tree} "
          f"({runs['old'][0].get('commit') or _git(a.old_tree, 'rev-parse', 'HEAD')}), new {NEW_TREE}; "
          f"load average before {' '.join(f'{x:.1f}' for x in load_before)}")
    print("| figure | number | old | new | new / old | per-round new / old: median (min-max) |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for f in figures:
        key = label(figure_key({k: v for k, v in f.items() if k not in ("field", "old_runs", "new_runs")}))
        ratio = f"{f['ratio']:.3f}" if "ratio" in f else "-"
        rr = f"{f['round_ratio']:.3f} ({f['round_ratio_min']:.3f}-{f['round_ratio_max']:.3f})" \
            if "round_ratio" in f else "-"
        print(f"| {key} | {f['field']} | {f['old']:.4g} | {f['new']:.4g} | {ratio} | {rr} |")
    for line in only:
        print(line)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    options = {"script": a.script, "args": a.args, "rounds": a.rounds, "note": a.note,
               "old_tree": str(a.old_tree), "old_commit": _git(a.old_tree, "rev-parse", "HEAD"),
               "old_bench_commit": a.old_bench_commit, "new_commit": _git(NEW_TREE, "rev-parse", "HEAD"),
               "only_in_one_tree": only,
               "old_load": [r["load_before"] + r["load_after"] for r in runs["old"]],
               "new_load": [r["load_before"] + r["load_after"] for r in runs["new"]]}
    figures = [{"benchmark": a.script, **f} for f in figures]
    write_record("compare_trees", figures, load_before=load_before, options=options)


if __name__ == "__main__":
    main()
