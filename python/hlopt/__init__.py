"""hlopt: ahead-of-time compilation of JAX programs with StableHLO passes in Python.

Public names are imported when first used (PEP 562), so `import hlopt` and the
`hlopt-opt` tool do not load jax: a name's module is imported by `__getattr__`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"  # the one source of the version: pyproject.toml reads it from here

# public name -> the module that defines it (the name itself when it is a module); no
# module is named like a public function, so importing one never rebinds the name
_LAZY: dict[str, str] = {
    "AnnotationError": "hlopt.compiler.stages",
    "CacheInfo": "hlopt.runtime.cache",
    "Compiled": "hlopt.runtime.executable",
    "ExecutableFileError": "hlopt.runtime.errors",
    "HostCallbackError": "hlopt.runtime.host",
    "JitFunction": "hlopt.staging",
    "KeyFileError": "hlopt.runtime.keys",
    "KeyReuseError": "hlopt.passes.analyses.check_key_reuse",
    "Lowered": "hlopt.compiler.stages",
    "PipelineError": "hlopt.compiler.pipeline",
    "RecompileWarning": "hlopt.runtime.files",
    "bilaplacian": "hlopt.pde",
    "cache_info": "hlopt.runtime.cache",
    "custom_partitioning": "hlopt.partitioning",
    "deserialize": "hlopt.saved",
    "jet": "hlopt.taylor",
    "jit": "hlopt.staging",
    "laplacian": "hlopt.pde",
    "laplacian_and_gradient": "hlopt.pde",
    "load": "hlopt.saved",
    "lower": "hlopt.staging",
    "set_cache_dir": "hlopt.runtime.cache",
    "sparse": "hlopt.sparse",
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hlopt' has no attribute '{name}'")
    module = importlib.import_module(module_name)
    value = getattr(module, name) if hasattr(module, name) else module  # `sparse` is a module
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})

