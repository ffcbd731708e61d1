"""hlopt's CPU kernels (runtime/native/, built as `hlopt.runtime._native`) and their registration with XLA.

Each kernel is an XLA FFI handler named `hlopt_...`; the passes of `passes/xla_cpu/`
emit custom calls to them for CPU targets. XLA must know a handler before it
compiles or loads a program that calls it: `register()` does that, once per
process, and `runtime.pjrt.prepare_runtimes` calls it for every program that
names one of them (`passes/xla_cpu/sparse_kernels.KERNELS`), so saved files and cache hits run in a fresh process.

The kernels are optional (hlopt installs without a C++ compiler): `available()`
is the one answer to whether they are built, which decides both whether the
passes may emit their calls and whether sparse x sparse products use them.
"""

from __future__ import annotations

import functools
import threading

import jax

_lock = threading.Lock()
_registered = False


def register() -> None:
    """Register every handler of `hlopt.runtime._native` with XLA for the cpu platform (once per process)."""
    global _registered
    with _lock:
        if _registered:
            return
        for name, capsule in handlers().items():
            jax.ffi.register_ffi_target(name, capsule, platform="cpu", api_version=1)
        _registered = True


@functools.cache
def available() -> bool:
    """Whether hlopt's CPU kernels (`hlopt.runtime._native`) are built and load in this process."""
    try:
        handlers()
    except ImportError:
        return False
    return True


def handlers() -> dict[str, object]:
    """Target name -> PyCapsule of its handler; an ImportError saying how to build them if they are not built."""
    try:
        from hlopt.runtime import _native
    except ImportError as e:
        raise ImportError(f"hlopt's CPU kernels (hlopt.runtime._native) are not built: {e}. Reinstall hlopt "
                          "(`pip install -e .` in a clone builds them from runtime/native/ with a C++17 compiler)"
                          ) from e
    return dict(_native.handlers)
