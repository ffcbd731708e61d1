"""Python processes forked from one that has imported jax, instead of fresh interpreters that import it again.

`python -m support.zygote` (the server) imports jax and numpy, nothing more: no backend is
initialized, no thread started, no hlopt module loaded. It then reads one JSON request a line,
`{"argv": [...], "cwd": FOLDER, "env": {...}, "out": FOLDER, "timeout": SECONDS}`,
and for each forks a child that takes `env` as its whole environment, enters `cwd`, reads
/dev/null, writes OUT/stdout.txt and OUT/stderr.txt, and runs
`argv` as `python ARGV` would (`-c CODE ...`, `-m MODULE ...` or `SCRIPT ...`, a console script
included; `-u` is accepted; sys.path from the child's PYTHONPATH): its own `__main__` globals, exit handlers run, an uncaught
exception printed and exit status 1. It answers `{"returncode": N, "timed_out": false}` (negative N:
killed by that signal), or kills a child that runs past its timeout and answers `{"returncode":
null, "timed_out": true}`. Each child is a process of its own with the server's rlimits (sandbox.py
sets them on the server), in the state a fresh interpreter is in after `import jax`.

`Zygote` is the client: it starts a server with a given environment and restarts it if it died.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path


def _run_python(argv: list[str]) -> int:
    """The exit status of `python ARGV` run in this forked process."""
    while argv and argv[0] == "-u":
        argv = argv[1:]
    try:
        if argv[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        elif argv[0] == "-m":
            sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv, sys.path[0] = list(argv), str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported as python reports an uncaught exception
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return code


def _python_path(env: dict[str, str] | os._Environ) -> list[str]:
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _child(request: dict) -> int:
    """Run one request in this forked process (see the module docstring); its exit status."""
    ours, theirs = _python_path(os.environ), _python_path(request["env"])
    if ours != theirs:  # sys.path as python builds it from the child's PYTHONPATH: after the script's folder
        assert [os.path.abspath(p) for p in sys.path[1 : 1 + len(ours)]] == ours, sys.path
        sys.path[1 : 1 + len(ours)] = theirs
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        os.dup2(os.open(Path(request["out"], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    return _run_python(request["argv"])


def _wait(pid: int, timeout: float) -> int | None:
    """The child's exit code (negative: its signal), or None after killing it at `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


def serve() -> None:
    """Answer requests from stdin until it closes."""
    del sys.path[0]  # script()'s test/python: sys.path is now what `python -c` starts with
    import jax  # noqa: F401 - imported once here, inherited by every child
    import numpy  # noqa: F401

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os._exit(_child(request))
        code = _wait(pid, request["timeout"])
        print(json.dumps({"returncode": code, "timed_out": code is None}), flush=True)


class Zygote:
    """A server started by `launch` (an argv prefix, e.g. sandbox.py's caps) with environment `env`."""

    def __init__(self, env: dict[str, str], launch: Sequence[str] = ()) -> None:
        from support import script

        self.command, self.env, self.proc = [*launch, *script("zygote")], dict(env), None
        self.lock = threading.Lock()  # one request at a time: the server answers them in order
        atexit.register(self.close)

    def run(self, argv: Sequence[str], out: Path, *, cwd: str | os.PathLike, env: dict[str, str] | None = None,
            timeout: float) -> tuple[int | None, bool]:
        """(exit code or None, timed out) of `python ARGV` in a child; its output is in out/stdout.txt, stderr.txt."""
        with self.lock:
            return self._run(argv, out, cwd=cwd, env=env, timeout=timeout)

    def _run(self, argv: Sequence[str], out: Path, *, cwd: str | os.PathLike, env: dict[str, str] | None,
             timeout: float) -> tuple[int | None, bool]:
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.proc = subprocess.Popen(self.command, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True, start_new_session=True)
        request = {"argv": list(argv), "cwd": str(cwd), "env": dict(env or self.env), "out": str(out),
                   "timeout": timeout}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, "the zygote server died"
        result = json.loads(answer)
        return result["returncode"], result["timed_out"]

    def close(self) -> None:
        """Kill the server and any child it runs."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc = None


if __name__ == "__main__":
    serve()
