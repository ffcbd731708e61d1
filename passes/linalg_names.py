"""Which ops are linear algebra: the LAPACK custom calls JAX emits on CPU and the StableHLO ops.

Kept outside `linalg_rules` (whose import builds every operation's record), so the rule tables
and xla-cpu-triangular-inverse can tell a linear-algebra op without that cost when a module has
none; they import `linalg_rules` when they meet one.
"""

from __future__ import annotations

import re

from hlopt.passes.mlir import ir
from hlopt.passes.walk import call_target

LAPACK = re.compile(r"lapack_[sdcz](potrf|trsm|getrf|syevd|heevd|geqrf|orgqr|ungqr|gesdd|gesvd)_ffi")
OP_NAMES = ("stablehlo.cholesky", "stablehlo.triangular_solve")


def is_linalg(op: ir.Operation) -> bool:
    """Whether `op` is one of the operations of `linalg_rules` (in either spelling)."""
    return op.name in OP_NAMES or bool(LAPACK.fullmatch(call_target(op) or ""))
