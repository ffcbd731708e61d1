"""hlopt: ahead-of-time compilation of JAX programs with StableHLO passes in Python."""

from hlopt.compiler.pipeline import PipelineError
from hlopt.compiler.stages import AnnotationError, Lowered
from hlopt.custom_partitioning import custom_partitioning
from hlopt.jet import jet
from hlopt.jit import JitFunction, jit, lower
from hlopt.pde import bilaplacian, laplacian
from hlopt.passes.check_key_reuse import KeyReuseError
from hlopt.runtime.cache import CacheInfo, cache_info, set_cache_dir
from hlopt.runtime.container import ExecutableFileError
from hlopt.runtime.executable import Compiled
from hlopt.runtime.files import RecompileWarning, deserialize, load
from hlopt import sparse

__all__ = [
    "AnnotationError",
    "CacheInfo",
    "Compiled",
    "ExecutableFileError",
    "JitFunction",
    "KeyReuseError",
    "Lowered",
    "PipelineError",
    "RecompileWarning",
    "bilaplacian",
    "cache_info",
    "custom_partitioning",
    "deserialize",
    "jet",
    "jit",
    "laplacian",
    "load",
    "lower",
    "set_cache_dir",
    "sparse",
]
