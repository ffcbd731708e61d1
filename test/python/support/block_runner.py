"""Runs the docs' python blocks, each as a script in its own process forked from one that has imported jax.

`python -m support.block_runner` imports jax and numpy (no backend: nothing is initialized or
started) and then reads one JSON request a line from stdin, `{"cwd": FOLDER, "env": {...}}`. For
each it forks a child that takes `env` as its whole environment, enters FOLDER, sends its stdout
and stderr to FOLDER/stdout.txt and FOLDER/stderr.txt and runs FOLDER/example.py as `__main__`,
as `python example.py` would (its own globals, its folder first on sys.path, exit handlers run);
it answers each request with a JSON line, `{"returncode": N}` (negative: killed by that signal).
A block thus starts in a fresh process whose modules are as a fresh interpreter leaves them after
`import jax`, without paying for that import each time.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import traceback

import jax  # noqa: F401 - imported once here, inherited by every block's process
import numpy  # noqa: F401


def run_block(cwd: str, env: dict[str, str]) -> int:
    """The exit status of `cwd/example.py` run as `__main__` in this (forked) process."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv = ["example.py"]
    sys.path[0] = cwd
    try:
        runpy.run_path("example.py", run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported as python reports an uncaught exception
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os._exit(run_block(request["cwd"], request["env"]))
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
