"""Builds hlopt's CPU kernels, the extension `hlopt.runtime._native`, from runtime/native/*.cc.

Everything else about the package is in pyproject.toml. The kernels are XLA FFI handlers: their
headers come from the jaxlib the build requires (pyproject.toml's [build-system]), the version
the package runs with. The code is compiled for any x86-64 (or the build machine's architecture
family), with AVX2 + FMA copies of the hot loops chosen when the library loads
(`target_clones` in the sources), so a built wheel moves between machines.
"""

from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path("runtime/native")


def ffi_include_dir() -> str:
    """jaxlib's folder of C headers (xla/ffi/api/ffi.h)."""
    import jaxlib

    include = Path(jaxlib.__file__).resolve().parent / "include"
    if not (include / "xla" / "ffi" / "api" / "ffi.h").is_file():
        raise RuntimeError(f"jaxlib at {include.parent} has no include/xla/ffi/api/ffi.h: install jaxlib==0.10.2")
    return str(include)


setup(
    ext_modules=[
        Extension(
            "hlopt.runtime._native",
            sources=sorted(p.as_posix() for p in NATIVE.glob("*.cc")),
            depends=sorted(p.as_posix() for p in NATIVE.glob("*.h")),
            include_dirs=[NATIVE.as_posix()],
            language="c++",
            # jaxlib's headers as system headers: their warnings are not ours
            extra_compile_args=["-std=c++17", "-O3", "-fvisibility=hidden", "-fno-math-errno",
                                "-isystem", ffi_include_dir()],
        )
    ],
)
