"""Render docs/benchmarks.md from the latest record of each benchmark in bench/results/.

    python bench/render.py          # write the page and, with matplotlib (the bench extra), the plots
    python bench/render.py --check  # exit 1 if the page differs from what the records give

Per benchmark (one script `bench/<name>.py`, records in `bench/results/<name>/*.json`,
written by `record.write_record`): what the script measures (its docstring's first line),
the machine (and the device JAX computed on), load, versions and options of the latest record, a table of its figures,
and a bar plot of every ratio in them (`docs/benchmarks/<name>-<record>.png`). The page
reads only the JSON records, so it renders the same with or without matplotlib; the plots
are committed files.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
DOCS = BENCH.parent / "docs"
PAGE = DOCS / "benchmarks.md"
PLOTS = DOCS / "benchmarks"
NOT_BENCHMARKS = {"record", "render"}


def scripts() -> dict[str, str]:
    """name -> the first line of the docstring of each benchmark script."""
    found = {}
    for path in sorted(BENCH.glob("*.py")):
        if path.stem not in NOT_BENCHMARKS:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            found[path.stem] = doc.splitlines()[0] if doc else ""
    return found


def latest_record(name: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest record of benchmark `name` (file names are UTC times), or None."""
    records = sorted((RESULTS / name).glob("*.json"))
    return (records[-1], json.loads(records[-1].read_text(encoding="utf-8"))) if records else None


def is_ratio(key: str, value: Any) -> bool:
    return "ratio" in key and isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def _column_rank(key: str, value: Any) -> int:
    """Text fields first, then integers (parameters), then measured numbers, then what ratios mean."""
    if key.endswith("_is"):
        return 3
    if isinstance(value, str):
        return 0
    return 1 if isinstance(value, int) and not isinstance(value, bool) else 2


def table(figures: list[dict[str, Any]]) -> str:
    """A Markdown table of the figures: one row each, one column per key."""
    keys: list[str] = []
    for figure in figures:
        keys += [k for k in figure if k not in keys]
    rank = {k: min(_column_rank(k, f[k]) for f in figures if k in f) for k in keys}
    keys.sort(key=lambda k: rank[k])
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join(_cell(f.get(k, "")) for k in keys) + " |" for f in figures]
    return "\n".join(lines)


def row_label(figure: dict[str, Any]) -> str:
    """What names a figure's row in a plot: its text fields, then its integer parameters."""
    text = [str(v) for k, v in figure.items() if isinstance(v, str) and not k.endswith("_is")]
    ints = [f"{k}={v}" for k, v in figure.items()
            if isinstance(v, int) and not isinstance(v, bool) and not is_ratio(k, v)]
    return ", ".join(text + ints)


def plot_path(name: str, record_path: Path) -> Path:
    return PLOTS / f"{name}-{record_path.stem}.png"


def has_ratios(figures: list[dict[str, Any]]) -> bool:
    return any(is_ratio(k, v) for f in figures for k, v in f.items())


def plot(name: str, record: dict[str, Any], path: Path) -> None:
    """A horizontal bar chart of every ratio of every figure, with a line at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = record["figures"]
    ratio_keys: list[str] = []
    for f in figures:
        ratio_keys += [k for k, v in f.items() if is_ratio(k, v) and k not in ratio_keys]
    labels = [row_label(f) for f in figures]
    height = 0.8 / len(ratio_keys)
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.35 * len(figures) * max(1, len(ratio_keys) / 2)))
    for i, key in enumerate(ratio_keys):
        values = [f.get(key, float("nan")) for f in figures]
        ax.barh([r + i * height for r in range(len(figures))], values, height=height, label=key)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks([r + 0.4 - height / 2 for r in range(len(figures))], labels, fontsize=7)
    ax.invert_yaxis()
    meanings = sorted({str(f[k]) for f in figures for k in f if k.endswith("_is")})
    ax.set_xlabel("; ".join(meanings) or "ratio")
    ax.set_title(f"{name} ({record['time_utc']})", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def render() -> tuple[str, list[tuple[str, dict[str, Any], Path]]]:
    """The page, and the plots it shows: (benchmark, record, PNG path) each."""
    parts = [
        "# Benchmarks",
        "This page is generated by `bench/render.py` from the latest JSON record of each benchmark in "
        "`bench/results/`; a test fails when it is stale. Every script runs hlopt and its reference side by "
        "side in one process, interleaved, and writes a record of every figure it prints, with the machine, "
        "its load, the versions and the commit. Figures from a shared or loaded machine are noisy: read the "
        "load averages and the options (round counts) with them, and rerun on your machine to compare. "
        "The benchmark-only dependencies install with `pip install -e '.[bench]'`.",
    ]
    plots = []
    for name, summary in scripts().items():
        parts += [f"## {name}", f"`python bench/{name}.py`: {summary}"]
        found = latest_record(name)
        if found is None:
            parts.append(f"No record yet: run `python bench/{name}.py` to write one under `bench/results/{name}/`.")
            continue
        path, record = found
        machine = record["machine"]
        versions = ", ".join(f"{k} {v}" for k, v in sorted(record["versions"].items()) if v)
        options = ", ".join(f"`{k}={v}`" for k, v in sorted(record["options"].items())) or "defaults"
        count = len(list((RESULTS / name).glob("*.json")))
        parts.append("\n".join([
            f"- record: `bench/results/{name}/{path.name}` ({count} in all), commit `{record['commit']}`",
            f"- machine: {machine['processor']}, {machine['cores']} cores, "
            f"{(machine['memory_bytes'] or 0) / 2 ** 30:.0f} GiB, {machine['system']}, Python {machine['python']}",
            *([f"- device: {record['device']['kind']} ({record['device']['platform']}), {record['device']['count']} in all"]
              if record.get("device") else []),
            f"- load average (1, 5, 15 min) before: {' '.join(f'{x:.1f}' for x in record['load_before'])}; "
            f"after: {' '.join(f'{x:.1f}' for x in record['load_after'])}",
            f"- versions: {versions}",
            f"- options: {options}",
        ]))
        parts.append(table(record["figures"]))
        if has_ratios(record["figures"]):
            png = plot_path(name, path)
            parts.append(f"![{name}: ratios]({png.relative_to(DOCS).as_posix()})")
            plots.append((name, record, png))
    return "\n\n".join(parts) + "\n", plots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md or a plot is missing or stale")
    args = parser.parse_args()
    page, plots = render()
    if args.check:
        stale = PAGE.read_text(encoding="utf-8") != page if PAGE.exists() else True
        missing = [str(png) for _, _, png in plots if not png.exists()]
        if stale or missing:
            print(f"{PAGE} is stale or plots are missing ({', '.join(missing) or 'page text'}): "
                  "run python bench/render.py", file=sys.stderr)
            return 1
        return 0
    for name, record, png in plots:
        plot(name, record, png)
    for old in set(PLOTS.glob("*.png")) - {png for _, _, png in plots}:
        old.unlink()  # a plot of a record that is no longer the latest
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE} and {len(plots)} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
