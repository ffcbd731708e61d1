"""Turns the outcome lines of a run on a TPU (`bash test/run_tpu.sh ... --outcomes PATH`, and
`--docs --outcomes PATH`) into a record, bench/results/tpu_tests/<time of the run>.json: the device,
the commit, passed/failed/skipped/error counts and seconds per file, each failure's line, and the
skip reasons with their counts. The suite's `--shard` balances its groups by the newest record.

    python3 test/tpu_record.py OUTCOMES.jsonl [...] [--commit HASH] [--command TEXT]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "bench" / "results" / "tpu_tests"
OUTCOMES = ("passed", "failed", "error", "skipped")


def record(lines: list[dict], commit: str, command: str) -> dict:
    """The record of a run from its outcome lines (a line with `device` heads each process's lines)."""
    heads = [line for line in lines if "device" in line]
    tests = [line for line in lines if "device" not in line]
    if not heads:
        raise SystemExit("no device line among the outcomes: they come from pytest's or "
                         "test/docs_examples.py's --outcomes")
    files: dict[str, dict] = {}
    for test in tests:
        entry = files.setdefault(test["file"], {**dict.fromkeys(OUTCOMES, 0), "seconds": 0.0})
        entry[test["outcome"]] += 1
        entry["seconds"] = round(entry["seconds"] + test["seconds"], 3)
    skips = collections.Counter(test["detail"] for test in tests if test["outcome"] == "skipped")
    return {
        "record": "tpu_tests", "commit": commit, "command": command, "time_utc": heads[0]["time_utc"],
        "device": heads[0]["device"], "versions": {"jax": heads[0]["jax"]},
        "counts": {outcome: sum(entry[outcome] for entry in files.values()) for outcome in OUTCOMES},
        "seconds": round(sum(entry["seconds"] for entry in files.values()), 1),
        "files": dict(sorted(files.items())),
        "failures": [{"test": t["test"], "outcome": t["outcome"], "detail": t["detail"]}
                     for t in tests if t["outcome"] in ("failed", "error")],
        "skip_reasons": dict(skips.most_common()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outcomes", nargs="+", type=Path)
    parser.add_argument("--commit", help="the commit that ran (default: this checkout's HEAD)")
    parser.add_argument("--command", default="bash test/run_tpu.sh", help="what ran, as the record names it")
    args = parser.parse_args()
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True, check=True).stdout.strip()
    lines = [json.loads(line) for path in args.outcomes for line in path.read_text(encoding="utf-8").splitlines()]
    result = record(lines, commit, args.command)
    RECORDS.mkdir(parents=True, exist_ok=True)
    path = RECORDS / (result["time_utc"].replace("-", "").replace(":", "") + ".json")
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{path.relative_to(ROOT)}: {result['counts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
