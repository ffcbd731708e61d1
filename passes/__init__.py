"""hlopt's passes: one module per pass, the registry, and IR-building helpers.

Depends on the MLIR bindings only (through `hlopt.passes.mlir`).
"""

from hlopt.passes.base import Pass, PassError, PassOptionError
from hlopt.passes.registry import PASSES, PIPELINES, all_passes, get_pass_class

__all__ = ["PASSES", "PIPELINES", "Pass", "PassError", "PassOptionError", "all_passes", "get_pass_class"]
