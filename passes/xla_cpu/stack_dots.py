"""`xla-cpu-stack-dots`: dot_generals of one block that share an operand become one.

A jet multiplies each Taylor coefficient of a layer's input by the same weights
(the primal, each direction, the collapsed coefficient: K + 1 dots of one matrix),
and reverse mode multiplies each of their cotangents by it again. XLA:CPU
runs each dot_general as its own matmul, reading the shared
operand once per dot; a small batch of points is bound by reading the weights
(bench/pinn_grad.py, `bench/xla_cpu_tuning.py`). Concatenated along a free dimension of the other
side, they are one matmul whose result is sliced apart. Where the other operands' free
shapes differ (a layer's primal rows beside its directions' and collapsed
coefficients', 16, 1x16, 8x5x16, 7x1x16 rows in bench/pde_operators.py's
bi-Laplacian), each is flattened to one row dimension first, so the weights are
read once per layer rather than once per shape.

Stacking copies the other operands into the concatenation; XLA:CPU writes an operand
used by its dot alone straight into it, but one used elsewhere too (an activation the
reverse pass reads again, a hidden state the next layer adds) is written twice. And the
stacked result is one buffer, which holds every coefficient's rows for as long as any of
its slices is read. So dots stack only where the weights' reads saved are at least
`STACKED_READS` (1/4) of the operands' elements: the wide layers of
bench/pde_operators.py and bench/pinn_grad.py stack, and bench/wavefunction.py's narrow
weights over many walkers (reads saved a tiny fraction of the operands) stay separate:
stacked, its kinetic energy would hold the primal's and the collapsed coefficient's rows
beside the directions' in its largest buffers at its peak, for no saving in reads.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import walk_ops
from hlopt.passes.rewrite.patterns import ERASE, Pattern, PatternPass, PatternSet, Plan
from hlopt.passes.rewrite.matching import DOT_ATTRIBUTES, dot_dims, free_dims, owner_op


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
        return free_dims(self.x, self.batch, self.contract)


def _view(op: ir.Operation, side: int) -> _Dot:
    lb, rb, lc, rc = dot_dims(op)
    batch, contract = [lb, rb], [lc, rc]
    return _Dot(op, side, op.operands[side], op.operands[1 - side], batch[side], contract[side])


def _key(dot: _Dot) -> tuple:
    """What the dots of one group share: the block, the shared operand and its side and
    dimensions, the precision and the result's element type."""
    lb, rb, lc, rc = dot_dims(dot.op)
    w_dims = (rb, rc) if dot.side == 0 else (lb, lc)
    return (dot.op.block, dot.w, dot.side, str(w_dims), str(builders.precision_of(dot.op)),
            str(builders.elem_of(dot.op.result)))


def _plan(dots: Sequence[_Dot]) -> tuple[Callable[[list[_Dot]], None], list[_Dot]] | None:
    """How to stack the most of `dots` and which: along one free dimension (`_along`), or,
    where that takes fewer, all operands flattened to rows (`_flat_plan`); None if fewer
    than two stack."""
    along = _along(dots)
    flat = _flat_plan(dots)
    if flat is not None and (along is None or len(flat[1]) > len(along[1])):
        return functools.partial(_stack_flat, layout=flat[0]), flat[1]
    if along is not None:
        return functools.partial(_stack, dim=along[0]), along[1]
    return None


def _along(dots: Sequence[_Dot]) -> tuple[int, list[_Dot]] | None:
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


def _layout(dot: _Dot) -> str | None:
    """"trailing" when the varying operand has no batch dimensions and contracts its last
    dimensions in order (its free ones flatten to leading rows), "leading" when it contracts
    its first ones, None otherwise."""
    rank, k = len(dot.shape), len(dot.contract)
    if dot.batch:
        return None
    if dot.contract == list(range(rank - k, rank)):
        return "trailing"
    if dot.contract == list(range(k)):
        return "leading"
    return None


def _flat_plan(dots: Sequence[_Dot]) -> tuple[str, list[_Dot]] | None:
    """The layout (`_layout`) that the most of `dots` share, and those dots; they stack
    whatever the shapes of their free dimensions (the weights of a layer times the primal's
    rows, the directions' and the collapsed coefficients'). None if fewer than two."""
    by_layout: dict[str, list[_Dot]] = {}
    for dot in dots:
        layout = _layout(dot)
        if layout is not None:
            by_layout.setdefault(layout, []).append(dot)
    if not by_layout:
        return None
    layout, kept = max(by_layout.items(), key=lambda item: len(item[1]))
    return (layout, kept) if len(kept) > 1 else None


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
        owner = _ancestor_in(owner_op(use), block)
        if owner is None or where[owner] <= at:
            return False
    return True


def _stack(dots: list[_Dot], dim: int) -> None:
    """Replace `dots` (stacking along `dim`, see `_along`) by one dot_general at the last of them."""
    rank = max(len(d.shape) for d in dots)
    first = next(d for d in dots if len(d.shape) == rank)
    pieces = [d.x if len(d.shape) == rank else builders.reshape(d.x, [1, *d.shape]) for d in dots]
    sizes = [builders.shape_of(p)[dim] for p in pieces]
    stacked = builders.concat(pieces, dim)
    lb, rb, lc, rc = dot_dims(first.op)
    if first.side == 0:
        lhs, rhs = stacked, first.w
        w_free = []
    else:
        lhs, rhs = first.w, stacked
        w_free = free_dims(first.w, lb, lc)
    out = builders.dot_general(lhs, rhs, lhs_batch=lb, rhs_batch=rb, lhs_contract=lc, rhs_contract=rc,
                               elem=builders.elem_of(first.op.result), precision_config=builders.precision_of(first.op))
    at = len(first.batch) + len(w_free) + first.free().index(dim)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    slices = [builders.slice_dim(out, at, start, start + size) for start, size in zip(starts, sizes)]
    for dot, piece in zip(dots, slices):
        if len(dot.shape) != rank:
            piece = builders.reshape(piece, builders.shape_of(dot.op.result))
        dot.op.result.replace_all_uses_with(piece)


def _stack_flat(dots: list[_Dot], layout: str) -> None:
    """Replace `dots` (of one `layout`, see `_flat_plan`) by one dot_general at the last of
    them: each varying operand reshaped to one row dimension beside its contracting ones,
    the rows concatenated, the result sliced apart and reshaped back."""
    first = dots[0]
    k = len(first.contract)
    rows = [math.prod(builders.shape_of(d.x)[i] for i in d.free()) for d in dots]
    if layout == "trailing":
        contract_sizes = first.shape[len(first.shape) - k:]
        pieces = [builders.reshape(d.x, [n, *contract_sizes]) for d, n in zip(dots, rows)]
        row_dim, x_contract = 0, list(range(1, k + 1))
    else:
        contract_sizes = first.shape[:k]
        pieces = [builders.reshape(d.x, [*contract_sizes, n]) for d, n in zip(dots, rows)]
        row_dim, x_contract = k, list(range(k))
    stacked = builders.concat(pieces, row_dim)
    _, _, w_lc, w_rc = dot_dims(first.op)
    if first.side == 0:
        lhs, rhs, lc, rc = stacked, first.w, x_contract, w_rc
        at = 0
    else:
        lhs, rhs, lc, rc = first.w, stacked, w_lc, x_contract
        at = len(builders.shape_of(first.w)) - k
    out = builders.dot_general(lhs, rhs, lhs_batch=[], rhs_batch=[], lhs_contract=lc, rhs_contract=rc,
                               elem=builders.elem_of(first.op.result), precision_config=builders.precision_of(first.op))
    starts = [sum(rows[:i]) for i in range(len(rows))]
    for dot, start, n in zip(dots, starts, rows):
        piece = builders.slice_dim(out, at, start, start + n)
        dot.op.result.replace_all_uses_with(builders.reshape(piece, builders.shape_of(dot.op.result)))


# Stacking saves reading the shared operand once per dot but the first; it copies the
# others into the concatenation unless each is used by its dot alone (XLA:CPU then
# writes its producer's loop into the concatenation), and its result holds all their rows
# while any slice is read. The dots stack only if the reads saved are at least
# STACKED_READS of the other operands' elements.
STACKED_READS = 0.25


def _pays(dots: Sequence[_Dot]) -> bool:
    """Whether stacking `dots` saves reading the shared operand at least `STACKED_READS` of the
    other operands' elements."""
    saved = (len(dots) - 1) * math.prod(builders.shape_of(dots[0].w))
    return saved >= STACKED_READS * sum(math.prod(d.shape) for d in dots)


class StackDots(PatternPass):
    """Stack dot_generals that share an operand into one (opt-in: not in `hlopt-default`, see
    `hlopt.passes.registry.WITH_OPT_IN_TUNING`).

    Accuracy: on a float32 determinant wavefunction's weight gradient, XLA:CPU's program with the
    stacked dots erred 5.4e-3 against float64 where the program without them erred 4.6e-5
    (test_xla_cpu_tuning); with YNNPACK's fusions off the two agree exactly.

    Backend: XLA:CPU runs each dot_general as its own matmul, reading a shared operand once per
    dot; benchmark: `bench/xla_cpu_tuning.py` (pde_operators, pinn_grad).

    dot_generals of one block that share one operand (same side, dimensions and precision)
    and whose other operands differ along one free dimension (or lack a leading one) become
    one dot_general of those operands concatenated, its result sliced apart. Where their
    free shapes differ otherwise, operands without batch dimensions that contract their
    last (or first) dimensions are reshaped to one row dimension each and stacked so, and
    the slices reshaped back. Dots stack only where the shared operand's reads saved are at
    least `STACKED_READS` (1/4) of the other operands' elements.

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
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)

    FIXPOINT: ClassVar[bool] = True  # a stack may stack again with others (nested directions axes)

    def patterns(self, module: ir.Operation) -> PatternSet:
        """The stacks of this walk, planned before it: each group of dots sharing an operand (the largest
        groups first, a dot in one stack at most), cut into runs that one dot can stand for, stacked where
        that pays; each stack is built at its last dot, and its other dots go with it."""
        groups: dict[tuple, list[_Dot]] = {}
        for op in walk_ops(module, "stablehlo.dot_general"):
            if set(op.attributes) - DOT_ATTRIBUTES:
                continue
            for side in (0, 1):
                view = _view(op, side)
                groups.setdefault(_key(view), []).append(view)
        taken: set[ir.Operation] = set()
        plan: Plan[Callable[[], None] | None] = Plan()  # a stack's last dot -> its build; its other dots -> None
        for group in sorted(groups.values(), key=len, reverse=True):
            group = [d for d in group if d.op not in taken]
            if len(group) < 2:
                continue
            where = _position(group[0].op.block)
            group.sort(key=lambda d: where[d.op])
            for run in _clusters(group, where):
                stack = _plan(run) if len(run) > 1 else None
                if stack is None or not _pays(stack[1]):
                    continue
                build, dots = stack
                dots.sort(key=lambda d: where[d.op])
                taken.update(d.op for d in dots)
                for dot in dots[:-1]:
                    plan[dot.op] = None
                plan[dots[-1].op] = functools.partial(build, dots)
        return PatternSet(Pattern("stablehlo.dot_general", functools.partial(_stacked, plan=plan)))


def _stacked(op: ir.Operation, plan: Plan[Callable[[], None] | None]) -> Sequence[ir.Value] | None:
    """`ERASE` for a dot of a planned stack, the stack built (it replaces every dot of it) at its last dot;
    None for any other dot."""
    if op not in plan:
        return None
    build = plan.get(op)
    if build is not None:
        build()
    return ERASE
