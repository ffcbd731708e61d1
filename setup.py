"""Builds hlopt's CPU kernels, the extension `hlopt.runtime._native`, from runtime/native/*.cc.

Everything else about the package is in pyproject.toml. The kernels are XLA FFI handlers: their
headers come from the jaxlib the build requires (pyproject.toml's [build-system]), the version
the package runs with. The code is compiled for any x86-64 (or the build machine's architecture
family), with AVX2 + FMA copies of the hot loops chosen when the library loads
(`target_clones` in the sources), so a built wheel moves between machines.

The kernels are optional: without a working C++17 compiler the build prints one warning and
installs hlopt without them; sparse products then run through plain StableHLO
(`hlopt.runtime.kernels.available`).

`HLOPT_SANITIZE=address` builds them under AddressSanitizer instead (a failed build is then an
error): python loads that library with its runtime preloaded, `LD_PRELOAD="$(c++
-print-file-name=libasan.so) $(c++ -print-file-name=libstdc++.so)"` and
`ASAN_OPTIONS=detect_leaks=0` (test/python/test_native_asan.py does).
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

NATIVE = Path("runtime/native")

# HLOPT_SANITIZE value -> extra compile and link flags.
SANITIZERS = {"address": ["-fsanitize=address", "-fno-omit-frame-pointer"]}


def ffi_include_dir() -> str:
    """jaxlib's folder of C headers (xla/ffi/api/ffi.h)."""
    import jaxlib

    include = Path(jaxlib.__file__).resolve().parent / "include"
    if not (include / "xla" / "ffi" / "api" / "ffi.h").is_file():
        raise RuntimeError(f"jaxlib at {include.parent} has no include/xla/ffi/api/ffi.h: install jaxlib==0.10.2")
    return str(include)


def sanitizer_flags() -> list[str]:
    """The flags HLOPT_SANITIZE asks for (none when unset)."""
    name = os.environ.get("HLOPT_SANITIZE", "")
    if name and name not in SANITIZERS:
        raise RuntimeError(f"HLOPT_SANITIZE={name!r} is not a sanitizer setup.py knows: use one of {sorted(SANITIZERS)}")
    return SANITIZERS.get(name, [])


class OptionalBuildExt(build_ext):
    """build_ext that installs hlopt without its CPU kernels, with one warning, when they do not build
    (a sanitized build must build)."""

    def run(self) -> None:
        try:
            super().run()
        except (CCompilerError, ExecError, PlatformError) as e:  # no compiler, or it failed
            if sanitizer_flags():
                raise
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"WARNING: hlopt's CPU kernels (hlopt.runtime._native) were not built, the C++ compiler is missing "
                  f"or failed ({reason[:200]}); hlopt works without them, with sparse products in plain StableHLO. "
                  "Install a C++17 compiler and reinstall hlopt for the kernels.", file=sys.stderr)


def native_extension() -> Extension:
    """hlopt.runtime._native from every runtime/native/*.cc."""
    sanitize = sanitizer_flags()
    return Extension(
        "hlopt.runtime._native",
        sources=sorted(p.as_posix() for p in NATIVE.glob("*.cc")),
        depends=sorted(p.as_posix() for p in NATIVE.glob("*.h")),
        include_dirs=[NATIVE.as_posix()],
        language="c++",
        # jaxlib's headers as system headers: their warnings are not ours; a sanitized build at -O1
        # (the sanitizers' advice: reports that name the right line, and a quicker build)
        extra_compile_args=["-std=c++17", "-O1" if sanitize else "-O3", "-fvisibility=hidden", "-fno-math-errno",
                            "-isystem", ffi_include_dir(), *sanitize],
        extra_link_args=sanitize,
    )


setup(ext_modules=[native_extension()], cmdclass={"build_ext": OptionalBuildExt})
