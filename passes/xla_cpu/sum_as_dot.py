"""`xla-cpu-sum-as-dot`: a floating sum over one axis but the last, or over a short last one, becomes
a product with ones, the sum of its slices, or a sum within runs of its terms, whichever XLA:CPU
runs best.

XLA:CPU hands a `reduce` add, with the elementwise ops that feed it, to YNNPACK's reduce fusion,
which walks a sum over a leading axis in strided rows and runs short rows (a sum over a last
axis of a few terms) slowly; the same sum as a `dot_general` with a vector of ones goes to its
matmul emitter instead, and a sum of slices to XLA's own fused loops. The forms:

- a sum over dimension 0 (a collapsed jet's sum over its directions) is the product with ones,
  a weighted one (a product with a rank-1 constant broadcast along that axis) the product with
  the weights;
- a sum of at most `FEW_TERMS` terms over an inner or the last axis, or unweighted over
  dimension 0 of an operand of rank 4 or more (nested directions), is the sum of its slices,
  which XLA:CPU fuses with the ops that compute them: a dot needs its operand in memory (over an
  inner axis, copied transposed);
- a larger sum over an inner axis is the product with ones contracting that axis; one over a
  longer last axis stays a `reduce`.

These forms need no XLA option, so `hlopt.jit` and plain `jax.jit` (whose compile options a
lowering rule cannot set) run the same program. Opt-in (the options below, off by default), a
module whose reductions then let YNNPACK's reduce fusion be off (as `xla-cpu-ynn-fusion`
decides) keeps some sums as reduces and records that option on the module, which only
`hlopt.jit` and `Lowered.compile` apply (a `compiler_options` entry or `XLA_FLAGS` flag of the
user's naming the option wins): XLA:CPU's own loop computes the operand as it sums, where a
product with ones needs it in memory. Then:

- an unweighted sum of at most `KEPT_TERMS` leading terms (or `FEW_TERMS` inner ones) of an
  operand of at most `reduce-max-bytes` (a typical core's L2 cache, 1048576, is a fair value)
  stays a `reduce`;
- an unweighted float32 or float64 sum of squares (`y * y`: a collapsed jet's sum of squared
  first coefficients) of at most `reduce-max-square-terms` leading terms stays a `reduce`
  whatever its size: XLA:CPU fuses it into its consumer;
- with `split-large-sums`, a larger unweighted float32 or float64 sum over dimension 0 of
  D = m g terms (m >= 2 the fewest runs of g <= `KEPT_TERMS` consecutive terms) is a `reduce`
  within the runs, then the product of the m run sums with ones: only the run sums are in
  memory, and consecutive terms stay together as in the sum in order. A D without such a split
  (a prime above `KEPT_TERMS`, or 17 x 17) stays a product with ones; run again, the pass
  leaves its sums within runs as they are.

Narrower floats stay products with ones, which XLA:CPU accumulates in float32 (a reduce would
round each run sum). Sums annotated with attributes (a sharding, frontend attributes), over a
dynamically sized dimension or whose result's element type differs from the operand's are left
as they are. `bench/xla_cpu_tuning.py` (workloads `laplacian` to `bilaplacian`, `pinn_grad`,
`wavefunction`) compares the pass with hlopt-default without it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.base import option
from hlopt.passes.mlir import ir
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet, Plan
from hlopt.passes.ir.walk import walk_ops
from hlopt.passes.xla_cpu import ynn_fusion
from hlopt.passes.rewrite.matching import summed_dim, wide_float


# A sum of at most this many terms over a nested directions axis is added term by term.
FEW_TERMS = 8
# An unweighted leading-axis sum of at most this many terms (and reduce-max-bytes) may stay a reduce
# (an inner-axis one of at most FEW_TERMS).
KEPT_TERMS = 16


def _weights(v: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """(x, w) when `v` is `x * w` (either order) with `w` a rank-1 constant (possibly
    converted), broadcast along dimension 0 unless `v` is rank-1 itself; else None."""
    if not isinstance(v, ir.OpResult) or v.owner.operation.name != "stablehlo.multiply":
        return None
    a, c = v.owner.operation.operands
    for x, w in ((a, c), (c, a)):
        if isinstance(w, ir.OpResult) and w.owner.operation.name == "stablehlo.broadcast_in_dim" and \
                list(ir.DenseI64ArrayAttr(w.owner.operation.attributes["broadcast_dimensions"])) == [0]:
            w = w.owner.operation.operands[0]
        root = w
        while isinstance(root, ir.OpResult) and root.owner.operation.name == "stablehlo.convert":
            root = root.owner.operation.operands[0]
        if len(builders.shape_of(w)) == 1 and isinstance(root, ir.OpResult) and \
                root.owner.operation.name == "stablehlo.constant":
            return x, w
    return None


def _adds_terms(x: ir.Value, dim: int) -> bool:
    """Whether the sum of `x` over `dim` is its terms' sum: at most `FEW_TERMS` of them over an
    inner dimension, or unweighted over dimension 0 of an operand of rank 4 or more."""
    shape = builders.shape_of(x)
    return 0 < shape[dim] <= FEW_TERMS and (dim != 0 or (len(shape) >= 4 and _weights(x) is None))


def _squares(x: ir.Value) -> bool:
    """Whether `x` is `y * y`, one value squared."""
    if not isinstance(x, ir.OpResult) or x.owner.operation.name != "stablehlo.multiply":
        return False
    a, b = x.owner.operation.operands
    return a == b


def _terms_sum(x: ir.Value, dim: int) -> ir.Value:
    """The sum of `x` over `dim` as its slices along `dim` added in order."""
    shape = builders.shape_of(x)
    rest = shape[:dim] + shape[dim + 1:]
    terms = [builders.reshape(builders.slice_dim(x, dim, i, i + 1), rest) for i in range(shape[dim])]
    return functools.reduce(builders.add, terms)


def _runs(terms: int) -> int | None:
    """The fewest runs m >= 2 of a split of `terms` = m g into runs of g <= `KEPT_TERMS` consecutive
    terms (g >= 2), if any."""
    return next((m for m in range(2, terms // 2 + 1) if terms % m == 0 and terms // m <= KEPT_TERMS), None)


def _sums_runs(op: ir.Operation) -> bool:
    """Whether `op` is the sum within runs `_run_sum` builds (over dimension 1 of at most
    `KEPT_TERMS` terms of an operand reshaped from [m g, ...] to [m, g, ...]), which a second
    run of the pass leaves as it is."""
    if summed_dim(op) != 1:
        return False
    x = op.operands[0]
    if not isinstance(x, ir.OpResult) or x.owner.operation.name != "stablehlo.reshape":
        return False
    before, after = builders.shape_of(x.owner.operation.operands[0]), builders.shape_of(x)
    return len(after) >= 3 and after[1] <= KEPT_TERMS and before[1:] == after[2:] and \
        before[0] == after[0] * after[1]


def _run_sum(x: ir.Value, runs: int) -> ir.Value:
    """The sum of `x` over dimension 0, its D terms taken as `runs` runs of D / runs consecutive
    terms: a reduce within the runs (whose operand XLA:CPU computes as it sums), then the
    product of the run sums with ones."""
    shape = builders.shape_of(x)
    elem = builders.elem_of(x)
    partial = builders.reduce(builders.reshape(x, [runs, shape[0] // runs, *shape[1:]]), [1])
    return _leading_product(builders.splat(1, builders.tensor([runs], elem)), partial)


def _leading_product(w: ir.Value, x: ir.Value) -> ir.Value:
    """The product of vector `w` with `x` contracting `x`'s dimension 0, in `x`'s element type."""
    return builders.dot_general(w, x, lhs_batch=[], rhs_batch=[], lhs_contract=[0], rhs_contract=[0],
                                elem=builders.elem_of(x), precision_config=None)


def _bytes(v: ir.Value) -> int:
    """The bytes of floating or complex tensor `v`."""
    elem = builders.elem_of(v)
    width = 2 * ir.FloatType(elem.element_type).width if isinstance(elem, ir.ComplexType) else ir.FloatType(elem).width
    return math.prod(builders.shape_of(v)) * width // 8


def _rewritten(op: ir.Operation) -> bool:
    """Whether `_as_dot` replaces sum `op` when it does not keep it: a sum over one dimension but
    the last, or over a last one of at most `FEW_TERMS` terms (rows YNNPACK's reduce fusion runs
    slowly); a sum along longer rows in memory is left to XLA:CPU's reduce."""
    dim = summed_dim(op)
    return dim is not None and (dim != len(builders.shape_of(op.operands[0])) - 1 or _adds_terms(op.operands[0], dim))


def _as_dot(op: ir.Operation) -> list[ir.Value] | None:
    """The sum `op` as its terms' sum, or as a product with ones (or its weights); None for a sum over the
    last dimension or any other reduce."""
    if not _rewritten(op):
        return None
    dim = summed_dim(op)
    x = op.operands[0]
    elem = builders.elem_of(x)
    shape = builders.shape_of(x)
    if _adds_terms(x, dim):
        return [_terms_sum(x, dim)]  # a dot would hold x in memory (over an inner axis, transposed): add its terms
    if dim != 0:  # an inner directions axis (the bi-Laplacian's nested jets): x's other dims keep their order
        ones = builders.splat(1, builders.tensor([shape[dim]], elem))
        return [builders.dot_general(x, ones, lhs_batch=[], rhs_batch=[], lhs_contract=[dim], rhs_contract=[0],
                                     elem=elem, precision_config=None)]
    weighted = _weights(x)
    if weighted is not None:
        x, w = weighted
        w = builders.convert(w, elem)
    else:
        w = builders.splat(1, builders.tensor(shape[:1], elem))
    return [_leading_product(w, x)]


def _planned_sum(op: ir.Operation, plan: Plan[int | None]) -> list[ir.Value] | None:
    """The sum `op` as `plan` says (None: it stays a reduce; m: a sum within m runs), else `_as_dot`'s form."""
    if op not in plan:
        return _as_dot(op)
    runs = plan.get(op)
    return None if runs is None else [_run_sum(op.operands[0], runs)]


@dataclasses.dataclass(frozen=True)
class SumAsDot(PatternPass):
    """Sums as products with ones, or as sums of slices.

    Backend: XLA:CPU runs a `reduce` add in YNNPACK's reduce fusion, slowly over strided rows (a
    leading axis) or short rows (a last axis of a few terms), where a `dot_general` with ones goes
    to its matmul emitter and a sum of slices to its fused loops; benchmark:
    `bench/xla_cpu_tuning.py`.

    A floating `reduce` add over dimension 0 alone becomes a `dot_general` with a vector of
    ones (or with the weights it is multiplied by); one over another single dimension but the
    last, a `dot_general` of the operand with ones contracting it. A sum of at most `FEW_TERMS`
    (8) terms over an inner or the last dimension, or unweighted over dimension 0 of an operand
    of rank 4 or more (nested directions), becomes the sum of its slices, which keeps the operand
    out of memory. No XLA option is needed, so `hlopt.jit` and plain `jax.jit` compile the same
    program:

        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0]
             : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>

    becomes

        %ones = stablehlo.constant dense<1.0> : tensor<3xf32>
        %s = stablehlo.dot_general %ones, %x, contracting_dims = [0] x [0]
             : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>

    Opt-in, for `hlopt.jit` alone: unweighted, either sum of an operand of at most
    `reduce-max-bytes` (over dimension 0, of at most 16 terms) stays a `reduce` when the module's
    reductions then leave YNNPACK's reduce fusion off, which the pass records on the module as
    `xla-cpu-ynn-fusion` does; so does a float32 or float64 one of squares of at most
    `reduce-max-square-terms` terms of any size. Under the same condition a larger unweighted
    float32 or float64 sum over dimension 0 of D = m g terms (m >= 2 the fewest runs of g <= 16
    consecutive terms; `split-large-sums`) is a `reduce` within the runs, then the product of
    the m run sums with ones:

        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0]
             : (tensor<24x32768xf32>, tensor<f32>) -> tensor<32768xf32>

    becomes

        %r = stablehlo.reshape %x : (tensor<24x32768xf32>) -> tensor<2x12x32768xf32>
        %p = stablehlo.reduce(%r init: %zero) applies stablehlo.add across dimensions = [1]
             : (tensor<2x12x32768xf32>, tensor<f32>) -> tensor<2x32768xf32>
        %s = stablehlo.dot_general %ones, %p, contracting_dims = [0] x [0]
             : (tensor<2xf32>, tensor<2x32768xf32>) -> tensor<32768xf32>
    """

    name: ClassVar[str] = "xla-cpu-sum-as-dot"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    renamed_options: ClassVar[dict[str, str]] = {"max-kept-bytes": "reduce-max-bytes",
                                                 "kept-squares": "reduce-max-square-terms",
                                                 "run-sums": "split-large-sums"}
    reduce_max_bytes: int = option(0, low=0, high=1 << 40,
                                   what="an unweighted sum of few terms of an operand of at most this many bytes "
                                        "stays a reduce while YNNPACK's reduce fusion is off (opt-in: it records "
                                        "that option, which only hlopt.jit applies)")
    split_large_sums: bool = option(False, what="a larger leading-axis sum is a reduce within runs of its terms, "
                                               "then the product of the run sums with ones, while YNNPACK's reduce "
                                               "fusion is off")
    reduce_max_square_terms: int = option(0, low=0, high=1 << 20,
                                          what="an unweighted float32 or float64 leading-axis sum of squares of at "
                                               "most this many terms stays a reduce, whatever its size, while "
                                               "YNNPACK's reduce fusion is off")

    def patterns(self, module: ir.Operation) -> PatternSet:
        """The rule for each sum, decided before the walk: which sums stay reduces (`_may_stay`, or a sum
        within runs of an earlier run) and which become sums within runs (`_runs`), when the module's
        other reductions then leave YNNPACK's reduce fusion off (recorded on the module); the rest
        become products with ones or sums of slices (`_as_dot`)."""
        sums = walk_ops(module, "stablehlo.reduce")
        kept = {op for op in sums if self._may_stay(op) or _sums_runs(op)}
        in_runs = {op: runs for op in sums if op not in kept and (runs := self._runs(op)) is not None}
        plan: Plan[int | None] = Plan()  # sum -> its runs, or None for one that stays a reduce
        if kept or in_runs:
            as_dots = {op for op in sums if op not in kept and op not in in_runs and _rewritten(op)}
            if ynn_fusion.reduce_fusion_off(module, leaving_out=as_dots):
                ynn_fusion.record_reduce_fusion_off(module)
                for op in kept:
                    plan[op] = None
                for op, runs in in_runs.items():
                    plan[op] = runs
        return PatternSet(Pattern("stablehlo.reduce", functools.partial(_planned_sum, plan=plan)))

    def _runs(self, op: ir.Operation) -> int | None:
        """The runs m into which `_run_sum` takes the terms of `op`, where `op` is a sum over
        dimension 0 alone of a static, non-empty float32 or float64 operand that `_as_dot` would
        make a product with ones (not kept, not added term by term, not weighted) and its D terms
        split as m runs of g <= `KEPT_TERMS` consecutive terms; else None. Narrower floats are left
        to the product, which XLA:CPU accumulates in float32 where the reduce would round each
        run sum to the narrow type."""
        if not self.split_large_sums or summed_dim(op) != 0:
            return None
        x = op.operands[0]
        shape = builders.shape_of(x)
        if len(shape) < 2 or min(shape) < 0 or _bytes(x) == 0 or _adds_terms(x, 0) or _weights(x) is not None or \
                not wide_float(x):
            return None
        return _runs(shape[0])

    def _may_stay(self, op: ir.Operation) -> bool:
        """Whether `op` may stay a reduce: an unweighted float32 or float64 sum over dimension 0 alone
        of squares of at most reduce-max-square-terms terms, or of an operand of at most reduce-max-bytes over
        dimension 0 alone
        of at most `KEPT_TERMS` terms (neither one of nested directions, whose terms are added), or
        over an inner dimension of at most `FEW_TERMS` terms."""
        dim = summed_dim(op)
        if dim is None or _weights(op.operands[0]) is not None:
            return False
        shape = builders.shape_of(op.operands[0])
        if min(shape) < 0:  # a dynamic dimension
            return False
        if dim == 0 and len(shape) >= 2 and shape[0] <= self.reduce_max_square_terms and _squares(op.operands[0]) and \
                not _adds_terms(op.operands[0], 0) and math.prod(shape) > 0 and wide_float(op.operands[0]):
            return True
        if dim == 0:
            if len(shape) < 2 or shape[0] > KEPT_TERMS or _adds_terms(op.operands[0], 0):
                return False
        elif dim == len(shape) - 1 or shape[dim] > FEW_TERMS:
            return False
        return 0 < _bytes(op.operands[0]) <= self.reduce_max_bytes  # an empty sum: nothing to keep
