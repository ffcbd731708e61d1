"""hlopt: ahead-of-time compilation of JAX programs with StableHLO passes in Python."""

from hlopt.compiler.pipeline import PipelineError
from hlopt.compiler.stages import AnnotationError, Lowered
from hlopt.jit import JitFunction, jit, lower
from hlopt.runtime.executable import Compiled

__all__ = [
    "AnnotationError",
    "Compiled",
    "JitFunction",
    "Lowered",
    "PipelineError",
    "jit",
    "lower",
]
