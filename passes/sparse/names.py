"""The names of BCOO annotations: a `stablehlo.custom_call @hlopt.bcoo.<op>` is one sparse op.

Kept outside the `hlopt.passes.sparse.bcoo` package (whose import loads every op's record), so a pass
of `hlopt-default` can look for sparse ops in a module without that cost when it has none.
"""

from __future__ import annotations

from hlopt.passes.ir import annotation_names
from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import call_target

PREFIX = annotation_names.BCOO_PREFIX


def is_bcoo_op(op: ir.Operation) -> bool:
    """True for a `stablehlo.custom_call` whose target starts with `hlopt.bcoo.`."""
    return (call_target(op) or "").startswith(PREFIX)


def op_name(op: ir.Operation) -> str:
    """The op name of an `hlopt.bcoo.<name>` custom_call (the target after the prefix)."""
    return call_target(op)[len(PREFIX) :]
