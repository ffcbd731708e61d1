"""The one place hlopt imports the MLIR Python bindings that ship in jaxlib.

Every other module imports `ir`, `passmanager` and the dialects from
here, so a jaxlib upgrade that moves a private path is fixed in one file.
"""

from __future__ import annotations

import io
import os
import threading

# jaxlib's C++ logging reads its level once, when its shared library is loaded.
# jax/__init__.py sets this default before loading it; do the same, so that a
# process that loads the bindings before jax is as quiet as one that loads jax
# first (otherwise PJRT's client start-up logs INFO lines on stderr).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from jaxlib.mlir import ir, passmanager  # noqa: E402
from jaxlib.mlir._mlir_libs import _jax_mlir_ext, _mlirHlo, _stablehlo  # noqa: E402
from jaxlib.mlir.dialects import chlo, func, sdy, stablehlo  # noqa: E402

# The func dialect's inliner interface: without it the upstream `inline` pass
# leaves every func.call alone. jaxlib exposes it only through its Mosaic GPU
# extension, which a jaxlib build may lack; then `inline` is refused (see
# `inliner_unavailable`) and everything else works.
try:
    from jaxlib.mlir._mlir_libs._mosaic_gpu_ext import register_inliner_extensions as _register_inliner
except ImportError as e:
    _register_inliner = None
    _INLINER_ERROR = f"{type(e).__name__}: {e}"
else:
    _INLINER_ERROR = ""

__all__ = [
    "chlo",
    "func",
    "get_context",
    "ir",
    "make_context",
    "passmanager",
    "sdy",
    "stablehlo",
    "serialize_portable_artifact",
    "deserialize_portable_artifact",
    "current_stablehlo_version",
    "inliner_unavailable",
]


def __getattr__(name: str) -> object:
    # No pass builds mhlo ops and importing their Python classes adds to hlopt-opt's start-up
    # (bench/startup.py): `mhlo` is imported when first asked for (the dialect is registered without it).
    if name == "mhlo":
        from jaxlib.mlir.dialects import mhlo

        return mhlo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_registry_lock = threading.Lock()
_passes_registered = False
_context: ir.Context | None = None


def _register_upstream_passes() -> None:
    global _passes_registered
    with _registry_lock:
        if not _passes_registered:
            _stablehlo.register_stablehlo_passes()
            _mlirHlo.register_mhlo_passes()
            _passes_registered = True


def make_context() -> ir.Context:
    """A new context with every dialect and pass hlopt's pipelines may name."""
    _register_upstream_passes()
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx = ir.Context()
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    sdy.register_dialect(ctx)
    _mlirHlo.register_mhlo_dialect(ctx)
    if _register_inliner is not None:
        _register_inliner(ctx)
    return ctx


def inliner_unavailable() -> str:
    """Why the func dialect's inliner interface is missing (then `inline` cannot work), or ''."""
    return _INLINER_ERROR


def get_context() -> ir.Context:
    """The process-wide context that hlopt parses and rewrites modules in."""
    global _context
    if _context is None:
        _context = make_context()
    return _context


def serialize_portable_artifact(module: ir.Module, target: str | None = None) -> bytes:
    """`module` as a versioned StableHLO portable artifact (VHLO bytecode); `module` is unchanged."""
    version = target or _stablehlo.get_current_version()
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    with module.context:
        copy = ir.Module.parse(buf.getvalue())  # serializing converts the module it is given to VHLO
    return _stablehlo.serialize_portable_artifact(copy, version, allow_other_dialects=True)


def deserialize_portable_artifact(data: bytes) -> ir.Module:
    """Parse a StableHLO portable artifact into the hlopt context."""
    with get_context():
        return _stablehlo.deserialize_portable_artifact(get_context(), data)


def current_stablehlo_version() -> str:
    return _stablehlo.get_current_version()
