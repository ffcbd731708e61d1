"""The `lower-bcoo` pass: every `hlopt.bcoo.*` custom_call becomes plain StableHLO.

Each op's lowering is in its record (`hlopt.passes.sparse.bcoo`, one module per op under
`hlopt.passes.sparse.bcoo.ops`), found by the op name after `hlopt.bcoo.`. Rules see a `BcooOp`
(operands, result types, decoded `backend_config`) and return the replacement values. Most
rules first bring the buffers to a canonical form with one batch dimension,
`data[B, nse, *dense]` and `indices[B, nse, n_sparse]`, so each algorithm is written once for
every `n_batch`. An index outside `[0, size)` in any sparse dim marks padding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from hlopt.passes.ir import builders as b
from hlopt.passes.base import PassError
from hlopt.passes.sparse.names import PREFIX, is_bcoo_op
from hlopt.passes.mlir import ir
from hlopt.passes.target import PORTABLE
from hlopt.passes.ir.walk import walk_ops
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet

if TYPE_CHECKING:
    from hlopt.passes.sparse.bcoo import BcooOp


class LowerBcoo(PatternPass):
    """Lower every `hlopt.bcoo.*` custom_call to StableHLO gathers, scatters, sorts and reductions.

    Every op is checked first (`hlopt.passes.sparse.bcoo.read`: a malformed one is an error at its location
    and nothing is rewritten). `todense` with n_batch = 0, for example:

    Before:
      %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32,
             backend_config = {shape = array<i64: 4, 5>, n_batch = 0 : i64, n_dense = 0 : i64, ...}}
             : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
    After (reshapes to and from the one-batch canonical form left out):
      %zeros = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x5xf32>
      %0 = "stablehlo.scatter"(%zeros, %indices, %data) <{scatter_dimension_numbers = #stablehlo.scatter<
             inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1>}>
             ({ stablehlo.add }) : (tensor<4x5xf32>, tensor<3x2xi32>, tensor<3xf32>) -> tensor<4x5xf32>
    (no mask: the scatter drops padding, whose indices lie outside the array).
    """

    name: ClassVar[str] = "lower-bcoo"
    platforms: ClassVar[tuple[str, ...]] = PORTABLE

    def patterns(self, module: ir.Operation) -> tuple[PatternSet, ...]:
        """The lowering of every sparse op, each checked before any is rewritten; no set for a module
        without sparse ops."""
        found = [op for op in walk_ops(module, "stablehlo.custom_call") if is_bcoo_op(op)]
        if not found:
            return ()
        from hlopt.passes.sparse import bcoo  # the op records: imported only for a module that has sparse ops

        for op in found:
            bcoo.read(op)
        return (PatternSet(Pattern("stablehlo.custom_call",
                                   lambda op: _lowered(bcoo.read(op)) if is_bcoo_op(op) else None),
                           erase_feeders=False),)


def _lowered(view: BcooOp) -> list[ir.Value]:
    """The StableHLO values of the checked `hlopt.bcoo.*` op `view`, built at it."""
    from hlopt.passes.sparse.bcoo import REGISTRY

    if all(0 in t.shape for t in view.result_types):  # empty buffers: nothing to compute
        values = [b.full(t.shape, 0, t.element_type) for t in view.result_types]
    else:
        values = REGISTRY[view.name].lower(view)
    for old, new in zip(view.op.results, values, strict=True):
        if old.type != new.type:
            raise PassError(f"lower-bcoo built {new.type} for a result of type {old.type} of @{PREFIX}{view.name}",
                            view.op.location)
    return values
