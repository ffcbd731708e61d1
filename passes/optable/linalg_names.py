"""Which ops are linear algebra: the LAPACK custom calls JAX emits on CPU and the StableHLO ops.

Kept outside `linalg_rules` (whose import builds every operation's record), so the rule tables
can tell a linear-algebra op without that cost when a module has none: `jet` and `vjp` here
import `linalg_rules` when a rule table first meets one.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import call_target

if TYPE_CHECKING:
    from hlopt.passes.autodiff.jet_rules import JetBuilder, Series
    from hlopt.passes.autodiff.vjp_rules import VjpBuilder

LAPACK = re.compile(r"lapack_[sdcz](potrf|trsm|getrf|syevd|heevd|geqrf|orgqr|ungqr|gesdd|gesvd)_ffi")
OP_NAMES = ("stablehlo.cholesky", "stablehlo.triangular_solve")


def is_linalg(op: ir.Operation) -> bool:
    """Whether `op` is one of the operations of `linalg_rules` (in either spelling)."""
    return op.name in OP_NAMES or bool(LAPACK.fullmatch(call_target(op) or ""))


def jet(b: "JetBuilder", op: ir.Operation, ins: list["Series"]) -> list[Optional["Series"]]:
    """`linalg_rules.jet`: the Taylor rule of the linear-algebra op `op`."""
    from hlopt.passes.autodiff import linalg_rules

    return linalg_rules.jet(b, op, ins)


def vjp(b: "VjpBuilder", op: ir.Operation, cts: list[Optional[ir.Value]],
        wants: list[bool]) -> list[Optional[ir.Value]]:
    """`linalg_rules.vjp`: the reverse-mode rule of the linear-algebra op `op`."""
    from hlopt.passes.autodiff import linalg_rules

    return linalg_rules.vjp(b, op, cts, wants)
