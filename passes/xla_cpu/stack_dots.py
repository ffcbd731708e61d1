"""`xla-cpu-stack-dots`: dot_generals of one block that share an operand become one.

A jet multiplies each Taylor coefficient of a layer's input by the same weights
(the primal, each direction, the collapsed coefficient: K + 1 dots of one matrix),
and reverse mode multiplies each of their cotangents by it again. XLA:CPU
(jaxlib 0.10.2) runs each dot_general as its own matmul, reading the shared
operand once per dot; a small batch of points is bound by reading the weights,
so K + 1 dots take about K + 1 times one (bench/pinn_grad.py,
`bench/xla_cpu_tuning.py`). Concatenated along a free dimension of the other
side, they are one matmul whose result is sliced apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

from hlopt.passes import builders
from hlopt.passes.base import Pass
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.walk import walk_ops
from hlopt.passes.xla_cpu.rewrite import erase_unused


@dataclasses.dataclass
class _Dot:
    """A dot_general seen from one side: `x` the operand that varies within a group
    (operand `side`), `w` the shared one, and x's batch and contracting dimensions."""

    op: ir.Operation
    side: int
    x: ir.Value
    w: ir.Value
    batch: list[int]
    contract: list[int]

    @property
    def shape(self) -> list[int]:
        return builders.shape_of(self.x)

    def free(self) -> list[int]:
        return [d for d in range(len(self.shape)) if d not in self.batch and d not in self.contract]


def _dims(op: ir.Operation) -> stablehlo.DotDimensionNumbers:
    return stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])


def _view(op: ir.Operation, side: int) -> _Dot:
    d = _dims(op)
    batch = [list(d.lhs_batching_dimensions), list(d.rhs_batching_dimensions)]
    contract = [list(d.lhs_contracting_dimensions), list(d.rhs_contracting_dimensions)]
    return _Dot(op, side, op.operands[side], op.operands[1 - side], batch[side], contract[side])


def _key(dot: _Dot) -> tuple:
    """What the dots of one group share: the block, the shared operand and its side and
    dimensions, the precision and the result's element type."""
    d = _dims(dot.op)
    w_dims = ((list(d.rhs_batching_dimensions), list(d.rhs_contracting_dimensions)) if dot.side == 0 else
              (list(d.lhs_batching_dimensions), list(d.lhs_contracting_dimensions)))
    precision = str(dot.op.attributes["precision_config"]) if "precision_config" in dot.op.attributes else ""
    return (dot.op.block, dot.w, dot.side, str(w_dims), precision, str(builders.elem_of(dot.op.result)))


def _plan(dots: Sequence[_Dot]) -> tuple[int, list[_Dot]] | None:
    """The dimension (of the highest-rank operands) to stack along and the dots that stack
    along it, the most there are: operands of the highest rank alike but along that free
    dimension, and, when it is the first, operands of one rank less shaped as the others
    without it (a primal beside its coefficients, which carry a leading directions axis);
    None if fewer than two stack."""
    rank = max(len(d.shape) for d in dots)
    best: tuple[int, list[_Dot]] | None = None
    for first in (d for d in dots if len(d.shape) == rank):
        for dim in first.free():
            kept = [d for d in dots if len(d.shape) == rank and (d.batch, d.contract) == (first.batch, first.contract)
                    and all(a == b for i, (a, b) in enumerate(zip(d.shape, first.shape)) if i != dim)]
            if dim == 0:
                kept += [d for d in dots if len(d.shape) == rank - 1 and [b + 1 for b in d.batch] == first.batch
                         and [c + 1 for c in d.contract] == first.contract and d.shape == first.shape[1:]]
            if len(kept) > 1 and (best is None or len(kept) > len(best[1])):
                best = (dim, kept)
    return best


def _position(block: ir.Block) -> dict[ir.Operation, int]:
    return {op.operation: i for i, op in enumerate(block.operations)}


def _ancestor_in(op: ir.Operation, block: ir.Block) -> ir.Operation | None:
    while op is not None and op.block != block:
        parent = op.parent
        op = parent.operation if parent is not None else None
    return op


def _clusters(dots: list[_Dot], where: dict[ir.Operation, int]) -> list[list[_Dot]]:
    """`dots` (in block order) cut into runs whose results are all used after the last of
    the run, where one dot of them all can stand."""
    runs: list[list[_Dot]] = []
    for dot in dots:
        if runs and all(_used_after(d, where[dot.op], where) for d in runs[-1]):
            runs[-1].append(dot)
        else:
            runs.append([dot])
    return runs


def _used_after(dot: _Dot, at: int, where: dict[ir.Operation, int]) -> bool:
    """Whether every use of `dot`'s result lies after position `at` of its block."""
    block = dot.op.block
    for use in dot.op.result.uses:
        owner = _ancestor_in(use.owner.operation if hasattr(use.owner, "operation") else use.owner, block)
        if owner is None or where[owner] <= at:
            return False
    return True


def _stack(dots: list[_Dot], dim: int) -> None:
    """Replace `dots` (stacking along `dim`, see `_plan`) by one dot_general at the last of them."""
    rank = max(len(d.shape) for d in dots)
    first = next(d for d in dots if len(d.shape) == rank)
    pieces = [d.x if len(d.shape) == rank else builders.reshape(d.x, [1, *d.shape]) for d in dots]
    sizes = [builders.shape_of(p)[dim] for p in pieces]
    stacked = builders.concat(pieces, dim)
    d = _dims(first.op)
    if first.side == 0:
        lhs, rhs = stacked, first.w
        lb, rb, lc, rc = first.batch, list(d.rhs_batching_dimensions), first.contract, list(d.rhs_contracting_dimensions)
        w_free = []
    else:
        lhs, rhs = first.w, stacked
        lb, rb, lc, rc = list(d.lhs_batching_dimensions), first.batch, list(d.lhs_contracting_dimensions), first.contract
        w_rank = len(builders.shape_of(first.w))
        w_free = [i for i in range(w_rank) if i not in lb and i not in lc]
    precision = first.op.attributes["precision_config"] if "precision_config" in first.op.attributes else None
    out = builders.dot_general(lhs, rhs, lhs_batch=lb, rhs_batch=rb, lhs_contract=lc, rhs_contract=rc,
                               elem=builders.elem_of(first.op.result), precision_config=precision)
    at = len(first.batch) + len(w_free) + first.free().index(dim)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    slices = [builders.slice_dim(out, at, start, start + size) for start, size in zip(starts, sizes)]
    for dot, piece in zip(dots, slices):
        if len(dot.shape) != rank:
            piece = builders.reshape(piece, builders.shape_of(dot.op.result))
        dot.op.result.replace_all_uses_with(piece)


@dataclasses.dataclass(frozen=True)
class StackDots(Pass):
    """dot_generals of one block that share one operand (same side, dimensions and precision)
    and whose other operands differ along one free dimension (or lack a leading one) become
    one dot_general of those operands concatenated, its result sliced apart.

        %a = stablehlo.dot_general %x1, %w, contracting_dims = [1] x [0]
             : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
        %b = stablehlo.dot_general %x2, %w, contracting_dims = [1] x [0]
             : (tensor<2x4xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>

    becomes

        %s = stablehlo.concatenate %x1, %x2, dim = 0 : (...) -> tensor<5x4xf32>
        %d = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0]
             : (tensor<5x4xf32>, tensor<4x5xf32>) -> tensor<5x5xf32>
        %a = stablehlo.slice %d [0:3, 0:5]
        %b = stablehlo.slice %d [3:5, 0:5]
    """

    name: ClassVar[str] = "xla-cpu-stack-dots"

    def apply(self, module: ir.Operation) -> None:
        while self._stack_once(module):  # a stack may stack again with others (nested directions axes)
            pass

    def _stack_once(self, module: ir.Operation) -> bool:
        """Stack each group of dots once; whether any were."""
        groups: dict[tuple, list[_Dot]] = {}
        for op in walk_ops(module, "stablehlo.dot_general"):
            if set(op.attributes) - {"dot_dimension_numbers", "precision_config"}:
                continue
            for side in (0, 1):
                view = _view(op, side)
                groups.setdefault(_key(view), []).append(view)
        taken: set[ir.Operation] = set()
        replaced: list[ir.Operation] = []
        for group in sorted(groups.values(), key=len, reverse=True):
            group = [d for d in group if d.op not in taken]
            if len(group) < 2:
                continue
            where = _position(group[0].op.block)
            group.sort(key=lambda d: where[d.op])
            for run in _clusters(group, where):
                plan = _plan(run) if len(run) > 1 else None
                if plan is None:
                    continue
                dim, dots = plan
                dots.sort(key=lambda d: where[d.op])
                anchor = max(dots, key=lambda d: where[d.op]).op
                with ir.InsertionPoint(anchor), anchor.location:
                    _stack(dots, dim)
                taken.update(d.op for d in dots)
                replaced.extend(d.op for d in dots)
        erase_unused(replaced)
        return bool(replaced)
