"""Runs every example of the README and the docs on the platform JAX picks here: a TPU, where there
is one (`bash test/run_tpu.sh --docs`), where test/python/test_docs.py runs them on the CPU.

The shell examples, and Python ones that set an option JAX reads as it starts (the number of host
CPU devices they shard over: these run on the CPU), run first, each in a process of its own in an
empty folder holding a copy of examples/, while this process holds no device. Then, since one program at a time holds a TPU, the Python examples,
the tutorials (each one's code cells in order) and the examples of the public docstrings run one
after another in this process, each in a fresh namespace and an empty folder, with float64 off
again after each; processes they start run on the CPU. Prints a line per example and exits 1 if
any failed; `--outcomes PATH` appends a JSON line per example, as the pytest suite's `--outcomes`
does.

    python3 test/docs_examples.py [--outcomes PATH] [-k TEXT] [--skip TEXT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "python"))
from test_docs import PAGES, ROOT, TIMEOUT_S, blocks, public_names, test_public_docstring_example_runs  # noqa: E402


def shell_environment(home: Path) -> dict[str, str]:
    """A user's shell on this machine: hlopt's tools on PATH, a key of their own in a fresh config
    folder, JAX's platforms as set here, XLA_FLAGS without a forced device count."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HLOPT_")}
    env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    return env


def run_shell(script: str, folder: Path, **env: str) -> None:
    """`script` run by bash in `folder` with a copy of examples/ (and the variables `env` set)."""
    shutil.copytree(ROOT / "examples", folder / "examples")
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=folder,
                          env={**shell_environment(folder), **env}, capture_output=True, text=True, timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"exit status {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def run_script(code: str, folder: Path) -> None:
    """`code` as a script of its own process, on the CPU devices it asks for (`STARTUP_OPTION`)."""
    (folder / "example.py").write_text(code, encoding="utf-8")
    run_shell(f"{sys.executable} example.py", folder, JAX_PLATFORMS="cpu")


def run_python(code: str, folder: Path) -> None:
    """`code` as a script run from `folder` (its folder first on sys.path), in this process."""
    import jax

    x64, cwd = jax.config.jax_enable_x64, os.getcwd()
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        exec(compile(code, str(folder / "example.py"), "exec"), {"__name__": "__main__"})
    finally:
        sys.path.remove(str(folder))
        os.chdir(cwd)
        jax.config.update("jax_enable_x64", x64)


def tutorial_code(page: Path) -> str:
    """A tutorial's code cells, in order, as one script."""
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", page.read_text(encoding="utf-8"), re.S | re.M)
    return "\n".join(cells)


Example = tuple[str, str, Callable[[Path], None]]
# a JAX option read as a process starts: a Python example setting it (examples of sharding over
# several host CPU devices) runs in a process of its own, on the CPU
STARTUP_OPTION = re.compile(r"jax_num_cpu_devices")


def examples() -> tuple[list[Example], list[Example]]:
    """(file, name, run in an empty folder) of every example: those run in a process of their own
    (the shell ones, and Python ones that set a JAX option read as JAX starts), then those run in
    this process."""
    found = [(page, f"{page}:{line}", kind, text) for page, line, kind, text in blocks() if kind in ("sh", "python")]
    own_process = [(page, name, lambda folder, t=text: run_shell(t, folder))
                   for page, name, kind, text in found if kind == "sh"]
    own_process += [(page, name, lambda folder, t=text: run_script(t, folder))
                    for page, name, kind, text in found if kind == "python" and STARTUP_OPTION.search(text)]
    python = [(page, name, lambda folder, t=text: run_python(t, folder))
              for page, name, kind, text in found if kind == "python" and not STARTUP_OPTION.search(text)]
    tutorials = [(rel, rel, lambda folder, p=page: run_python(tutorial_code(p), folder))
                 for page in PAGES if "{code-cell}" in page.read_text(encoding="utf-8")
                 for rel in [page.relative_to(ROOT).as_posix()]]
    docstrings = [("docstrings", name, lambda folder, n=name, o=obj: test_public_docstring_example_runs(n, o))
                  for name, obj in public_names()]
    return own_process, [*python, *tutorials, *docstrings]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outcomes", type=Path, help="append a JSON line per example to this file")
    parser.add_argument("-k", default="", help="run only the examples whose name contains this text")
    parser.add_argument("--skip", action="append", default=[], metavar="TEXT",
                        help="leave out the examples whose name contains this text (repeatable)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hlopt-docs-"))
    os.environ.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"))
    own_process, in_process = ([e for e in group if args.k in e[1] and not any(s in e[1] for s in args.skip)]
                         for group in examples())
    failed = 0
    try:
        for i, (file, name, run) in enumerate([*own_process, *in_process]):
            if i == len(own_process):
                import jax

                device = jax.devices()[0]  # this process holds it from here on: processes it starts get the CPU
                os.environ["JAX_PLATFORMS"] = "cpu"
                if args.outcomes:
                    with args.outcomes.open("a", encoding="utf-8") as out:
                        out.write(json.dumps({"device": {"platform": device.platform, "kind": device.device_kind,
                                                         "count": jax.device_count()}, "jax": jax.__version__,
                                              "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
            start, folder = time.perf_counter(), Path(tempfile.mkdtemp(dir=home))
            try:
                run(folder)
                outcome, detail = "passed", None
            except Exception as error:  # an example's assertion or error is its failure
                outcome, detail = "failed", " ".join(f"{type(error).__name__}: {error}".split())[:800]
                traceback.print_exc()
                failed += 1
            seconds = time.perf_counter() - start
            print(f"{outcome.upper():6} {name} ({seconds:.1f} s)", flush=True)
            if args.outcomes:
                with args.outcomes.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"test": name, "file": file, "outcome": outcome,
                                          "seconds": round(seconds, 3), "detail": detail}) + "\n")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
