"""Substituting a platform's formulation for sparse-product annotations, before `lower-bcoo`.

The platform passes (`xla-cpu-sparse-kernels`, `tpu-sparse-products`) each hold a table from a
`hlopt.bcoo.*` op name to a rule that builds the op's result for their platform, or returns None
where the op is not one the rule handles (`lower-bcoo` then lowers it portably).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hlopt.passes.sparse.names import is_bcoo_op, op_name
from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import annotation_bodies, enclosing_function, walk_ops
from hlopt.passes.rewrite.patterns import Pattern, PatternSet

if TYPE_CHECKING:
    from hlopt.passes.sparse.bcoo import BcooOp

Rule = Callable[["BcooOp"], "ir.Value | list[ir.Value] | None"]

# `A @ x` and `P @ Q` as dot_general's dimension numbers: ((lhs_contracting, rhs_contracting), batch).
MATMUL = (((1,), (0,)), ((), ()))


def plain_matrix(c: BcooOp) -> bool:
    """The sparse operand is a matrix with one index column per dimension (no batch or dense dims)."""
    return c.config["n_batch"] == 0 and c.config["n_dense"] == 0 and len(c.config["shape"]) == 2


def product_patterns(module: ir.Operation, rules: Mapping[str, Rule]) -> tuple[PatternSet, ...]:
    """The pattern set that replaces each `hlopt.bcoo.<name>` op of `module` whose `rules[name]` builds its
    result (a value, or a list of them for an op with several results) by what it builds; no set for a
    module without such ops.

    Ops with an empty result (nothing to compute: `lower-bcoo` fills zeros) and ops inside functions
    another annotation calls (`hlopt.vjp`, `hlopt.custom_partitioning`: the passes that expand those
    read plain StableHLO) are left alone.
    """
    skipped = annotation_bodies(module)

    def substituted(op: ir.Operation) -> bool:
        return is_bcoo_op(op) and op_name(op) in rules and enclosing_function(op) not in skipped

    if not any(substituted(op) for op in walk_ops(module, "stablehlo.custom_call")):
        return ()
    from hlopt.passes.sparse.bcoo import read  # the op records: imported only for a module that has sparse products

    def substitute(op: ir.Operation) -> list[ir.Value] | None:
        c = read(op) if substituted(op) else None
        if c is None or any(0 in t.shape for t in c.result_types):
            return None
        value = rules[c.name](c)
        return [value] if isinstance(value, ir.Value) else value

    return (PatternSet(Pattern("stablehlo.custom_call", substitute), erase_feeders=False),)
