"""Running an attack or a fresh-process check in a child process with a timeout and a memory cap.

`run_capped` starts the child with its address space capped (`ulimit -v`) (so a blow-up dies as a
MemoryError or an abort instead of taking the machine) and reports how it
ended; `assert_survived` fails a test if the child was killed by a signal,
ran past its timeout or exited with a status other than the ones allowed.
`run_forked` is `run_capped` for `python ...` and `hlopt ...` children forked from a capped
server that imported jax once (support/zygote.py): each is still a process of its own, under the
same caps, in the state of a fresh interpreter after `import jax`.
The tests that use it also run a control (a child that segfaults, hangs or
allocates without bound) to show the harness sees each bad outcome.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from support import script
from support.zygote import Zygote

MEMORY_CAP = 4 << 30  # bytes of address space per child (a jax process needs about 1.5 GiB)
TIMEOUT_S = 240


@dataclasses.dataclass
class Outcome:
    """How a child ended: its exit status (negative: killed by that signal), output, and whether it hung."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def signal(self) -> str | None:
        """The signal that killed the child (e.g. 'SIGSEGV'), or None."""
        if self.returncode is None or self.returncode >= 0:
            return None
        return signal.Signals(-self.returncode).name

    def describe(self) -> str:
        how = ("ran past its timeout" if self.timed_out else f"was killed by {self.signal}" if self.signal
               else f"exited with status {self.returncode}")
        return f"the child {how}:\n{self.stderr[-3000:]}"


def run_capped(argv: Sequence[str], *, timeout: float = TIMEOUT_S, memory: int = MEMORY_CAP,
               env: dict[str, str | None] | None = None, cwd: str | os.PathLike | None = None,
               input: bytes | None = None) -> Outcome:
    """Run `argv` (a `python` argv when it starts with '-') under the caps, with this process's environment
    and `env` (variables to set, None to unset); never raises on how it ended."""
    if argv and argv[0].startswith("-"):
        argv = [sys.executable, *argv]
    capped = [*_caps(memory), *argv]
    try:
        proc = subprocess.run(capped, input=input, capture_output=True, timeout=timeout, cwd=cwd,
                              env=_environment(env))
    except subprocess.TimeoutExpired as e:
        text = lambda b: (b or b"").decode("utf-8", "backslashreplace")  # noqa: E731
        return Outcome(None, text(e.stdout), text(e.stderr), True)
    return Outcome(proc.returncode, proc.stdout.decode("utf-8", "backslashreplace"),
                   proc.stderr.decode("utf-8", "backslashreplace"), False)


def _environment(env: dict[str, str | None] | None) -> dict[str, str]:
    return {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}


def _caps(memory: int) -> list[str]:
    """The argv prefix that runs a command under the caps: a shell sets them, then execs it (no preexec_fn:
    fork in a threaded parent)."""
    return ["/bin/sh", "-c", f'ulimit -v {memory // 1024} && ulimit -c 0 && exec "$@"', "sh"]


_zygotes: dict[int, Zygote] = {}  # memory cap -> the server started under it


def run_forked(argv: Sequence[str], *, timeout: float = TIMEOUT_S, memory: int = MEMORY_CAP,
               env: dict[str, str | None] | None = None, cwd: str | os.PathLike | None = None) -> Outcome:
    """`run_capped(argv)` for a `python` argv (starting with '-') or `hlopt ARGS`, the child forked from the
    server capped at `memory`; a child whose JAX_ variables (read as jax is imported) differ from the
    server's is exec'd instead."""
    full_env = _environment(env)
    if memory not in _zygotes:
        _zygotes[memory] = Zygote(dict(os.environ), launch=_caps(memory))
    server = _zygotes[memory]
    jax_vars = lambda e: {k: v for k, v in e.items() if k.startswith("JAX_")}  # noqa: E731
    if jax_vars(full_env) != jax_vars(server.env):
        return run_capped(argv, timeout=timeout, memory=memory, env=env, cwd=cwd)
    if argv[0] == "hlopt":  # the console script next to this interpreter, run as its shebang's python runs it
        argv = [str(Path(sys.executable).parent / "hlopt"), *argv[1:]]
    elif argv[0] == sys.executable:
        argv = argv[1:]
    with tempfile.TemporaryDirectory() as out:
        returncode, timed_out = server.run(argv, Path(out), cwd=cwd or os.getcwd(), env=full_env, timeout=timeout)
        text = lambda name: Path(out, name).read_bytes().decode("utf-8", "backslashreplace")  # noqa: E731
        return Outcome(returncode, text("stdout.txt"), text("stderr.txt"), timed_out)


def assert_survived(outcome: Outcome, allowed: Sequence[int] = (0,)) -> None:
    """The child neither crashed, nor hung, nor exited with a status outside `allowed`."""
    assert not outcome.timed_out and outcome.signal is None and outcome.returncode in allowed, outcome.describe()


def attack(tmp_path: Path, cases: list[dict], env: dict | None = None) -> list[dict]:
    """Run `cases` in a new `attack_worker` process (run_forked) under the caps; it must exit normally, within the
    timeout, and no case may report an error. The cases' results."""
    spec = tmp_path / f"spec-{random.random()}.json"
    spec.write_text(json.dumps({"cases": cases}))
    proc = run_forked([*script("attack_worker"), str(spec)], env=env)
    assert_survived(proc)
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, result in zip(cases, results, strict=True):
        assert "error" not in result, (case, result)
    return results


def write(tmp_path: Path, name: str, data: bytes) -> str:
    """`data` written to `tmp_path/name`; the file's path."""
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# Prepended to a hostile-kernel child (`run_hostile_kernel_child`): float64 on and hlopt's kernels
# registered; `S`, the int32 extremes `big` and `small`; `expect_refused(call, wrong, *messages)` calls
# `call(*args)` for each named argument tuple of `wrong`, requires each call to raise an error naming one
# of `messages`, and prints "survived" when every one was refused.
_CHILD_PREAMBLE = '''
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
from hlopt.runtime import kernels
kernels.register()
S = jax.ShapeDtypeStruct
big, small = np.iinfo(np.int32).max, np.iinfo(np.int32).min


def expect_refused(call, wrong, *messages):
    for name, args in wrong.items():
        try:
            call(*args)
        except Exception as e:
            assert any(m in str(e) for m in messages), (name, str(e))
        else:
            raise AssertionError(f"{name}: the kernel ran")
    print("survived")
'''


def run_hostile_kernel_child(source: str) -> None:
    """Run `source` (hostile operands handed straight to hlopt's kernels, ending in `expect_refused`) in a
    capped CPU child: the child neither crashed nor hung, and every hostile call was refused."""
    outcome = run_capped(["-c", _CHILD_PREAMBLE + source], env={"JAX_PLATFORMS": "cpu"})
    assert_survived(outcome)
    assert "survived" in outcome.stdout, outcome.stdout
