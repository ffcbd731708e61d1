"""`xla-cpu-sum-as-dot`: a floating sum over the leading axis becomes a matrix-vector product.

XLA:CPU (jaxlib 0.10.2) hands a `reduce` add over a leading axis, with the
elementwise products that feed it, to a YNNPACK reduce fusion that walks the
operand in strided rows and runs far slower than the same sum as a `dot_general`
with a vector of ones, which goes to its matmul emitter (the collapsed jets' sums over directions,
bench/pde_operators.py; `bench/xla_cpu_tuning.py` measures it). A weighted sum,
a product with a rank-1 constant broadcast along that axis, is the product with
the weights instead of ones.

A `dot_general`'s operand is a buffer of its own (XLA:CPU fuses no producer into a
dot), where the `reduce` computed its elementwise operand on the fly. For a sum of
at most `FEW_TERMS` terms over the bi-Laplacian's nested directions (an operand of
rank 4 or more, [outer, inner, batch, width], summed over either direction axis) that
buffer is the whole 5x5x16x768 product, and over the inner axis XLA also copies it
transposed, so bench/pde_operators.py's collapsed bi-Laplacian would hold several
such buffers at once at its peak. Such a sum is the terms' sum instead,
slices of the operand added one after another, which XLA:CPU fuses with the product
into one loop and runs as fast as the dot. So is any sum of at most `FEW_TERMS` terms
over an inner axis, whatever the rank: the mean over a few particles inside a vmapped
function (bench/wavefunction.py's mean-field mixing over n <= 8 electrons, a
[directions, walkers, electrons, width] operand) would otherwise be copied transposed
for the dot. A larger inner-axis sum is the product with ones contracting that axis.

The product with ones needs its operand in memory, where a `reduce` computes it as it
sums: one more write and read of it. XLA:CPU's own loop (YNNPACK's reduce fusion off)
sums a few terms of an operand that fits in a core's L2 cache faster than that write
and read, and more terms, or a larger operand, slower (its strided rows, many at once
where XLA fuses several sums into one loop, leave the cache and the prefetchers' reach).
So an unweighted sum over the leading axis of at most `KEPT_TERMS` (16) terms, or over
an inner axis of at most `FEW_TERMS`, of an operand of at most `max-kept-bytes` (1 MiB
by default, a typical core's L2 cache) stays a `reduce`, provided the module's
reductions, with those kept, are ones xla-cpu-ynn-fusion compiles without YNNPACK's
reduce fusion (which runs a leading-axis sum slowly); the pass then records that option
on the module itself, so that it holds without xla-cpu-ynn-fusion in the pipeline too
(as there, a `compiler_options` entry or `XLA_FLAGS` flag of your own naming the option
wins, and a kept sum then runs as the option you chose runs it).
The term bound matters as well as the size: a few terms of a small operand (the
sums over directions and electrons of bench/wavefunction.py at n = 4) suit the loop,
many terms of one as small (24 directions at n = 8) the product with ones.
`bench/xla_cpu_tuning.py --workloads wavefunction` compares the pass with
`max-kept-bytes=0 run-sums=false kept-squares=0`, which makes every such sum a product with
ones.

A larger unweighted leading-axis sum (more terms, or a larger operand) where YNNPACK's reduce
fusion is off likewise is summed in two steps, so that its operand is never written whole:
its D terms, taken as m runs of g consecutive terms (D = m g, m the fewest runs, at least
2, that leave g at most `KEPT_TERMS`), are first summed within each run by a `reduce` that
computes the operand as it sums (XLA:CPU's own loop, g terms per result), and the m run
sums are then the product with ones. Only the run sums, m / D of the operand, are in
memory. Consecutive terms stay together, as in the sum in order: terms that cancel in
pairs (+x, -x, ...) cancel within a run before anything could overflow.
This keeps large summands, such as those over 24 directions of bench/wavefunction.py's
weight gradient at n = 8, out of the program's peak memory.
`bench/xla_cpu_tuning.py --workloads wavefunction --electrons 6` (or 8) times the pass
against `run-sums=false`, which makes those sums products with ones (at n = 4 the
sums are kept whole and nothing changes). Only unweighted float32 and float64 sums are
summed so: a weighted sum stays the product with its weights, and a narrower float the
product with ones, which XLA:CPU accumulates in float32 (a reduce of float16 terms would
round each run sum to float16). A sum whose D has no split (more than `KEPT_TERMS` terms,
none of whose divisors leaves runs that short: a prime, or 289 = 17 x 17) stays a product
with ones. Run again, the pass leaves its sums within runs as they are.

An unweighted float32 or float64 sum of squares (`y * y`, one value squared: a collapsed jet's
sum over its directions of squared first coefficients) of at most `kept-squares` (24) terms
stays a `reduce` under the same condition whatever its size: XLA:CPU fuses it into its
consumer, so neither run sums nor the sum itself are in memory (the hidden layers' sums of
squares of bench/wavefunction.py's kinetic energy at n = 6 and 8, 18 and 24 directions).
Past about 24 terms XLA:CPU's loop over the strided terms loses to the run sums, hence the
default bound; `bench/xla_cpu_tuning.py --workloads wavefunction` compares the pass with
`kept-squares=0` (records in bench/results/).

Sums annotated with attributes (a sharding, frontend attributes), sums over a dynamically
sized dimension and sums whose result's element type differs from the operand's are left as
they are.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.base import Pass, option
from hlopt.passes.mlir import ir
from hlopt.passes.rewrite.patterns import Pattern, PatternSet
from hlopt.passes.ir.walk import walk_ops
from hlopt.passes.xla_cpu import ynn_fusion
from hlopt.passes.xla_cpu.matching import summed_dim, wide_float


# A sum of at most this many terms over a nested directions axis is added term by term.
FEW_TERMS = 8
# An unweighted leading-axis sum of at most this many terms (and max-kept-bytes) may stay a reduce
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
    """Whether `_as_dot` replaces sum `op` when it does not keep it: not a sum along rows in
    memory (its last dimension), where XLA:CPU's reduce is not slow."""
    dim = summed_dim(op)
    return dim is not None and dim != len(builders.shape_of(op.operands[0])) - 1


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


@dataclasses.dataclass(frozen=True)
class SumAsDot(Pass):
    """Sums as products with ones, or as sums of slices.

    A floating `reduce` add over dimension 0 alone becomes a `dot_general` with a vector of
    ones (or with the weights it is multiplied by), which XLA:CPU runs far faster; one over
    another single dimension but the last, a `dot_general` of the operand with ones contracting it.
    A sum of at most `FEW_TERMS` (8) terms over an inner dimension, or unweighted over dimension 0
    of an operand of rank 4 or more (nested directions), becomes the sum of its slices, which keeps
    the operand out of memory. Unweighted, either sum of an operand of at most `max-kept-bytes`
    (over dimension 0, of at most 16 terms) stays a `reduce` when the module's reductions then
    leave YNNPACK's reduce fusion off, which the pass records on the module as
    `xla-cpu-ynn-fusion` does; so does a float32 or float64 one of squares of at most
    `kept-squares` (24) terms of any size. Under the same condition a larger unweighted float32
    or float64 sum over dimension 0 of D = m g terms (m >= 2 the fewest runs of g <= 16
    consecutive terms; `run-sums`) is a `reduce` within the runs, then the product of the m run
    sums with ones:

        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0]
             : (tensor<24x32768xf32>, tensor<f32>) -> tensor<32768xf32>

    becomes

        %r = stablehlo.reshape %x : (tensor<24x32768xf32>) -> tensor<2x12x32768xf32>
        %p = stablehlo.reduce(%r init: %zero) applies stablehlo.add across dimensions = [1]
             : (tensor<2x12x32768xf32>, tensor<f32>) -> tensor<2x32768xf32>
        %s = stablehlo.dot_general %ones, %p, contracting_dims = [0] x [0]
             : (tensor<2xf32>, tensor<2x32768xf32>) -> tensor<32768xf32>

    and

        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0]
             : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>

    becomes (with `max-kept-bytes=0`, or where YNNPACK's reduce fusion would stay on; 3 terms
    have no runs to sum first)

        %ones = stablehlo.constant dense<1.0> : tensor<3xf32>
        %s = stablehlo.dot_general %ones, %x, contracting_dims = [0] x [0]
             : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>
    """

    name: ClassVar[str] = "xla-cpu-sum-as-dot"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    max_kept_bytes: int = option(1 << 20, low=0, high=1 << 40,
                                 what="an unweighted sum of few terms of an operand of at most this many bytes "
                                      "stays a reduce while YNNPACK's reduce fusion is off")
    run_sums: bool = option(True, what="a larger leading-axis sum is a reduce within runs of its terms, then "
                                       "the product of the run sums with ones, while YNNPACK's reduce fusion is off")
    kept_squares: int = option(24, low=0, high=1 << 20,
                               what="an unweighted float32 or float64 leading-axis sum of squares of at most "
                                    "this many terms stays a reduce, whatever its size, while YNNPACK's reduce "
                                    "fusion is off")

    def apply(self, module: ir.Operation) -> None:
        sums = walk_ops(module, "stablehlo.reduce")
        kept = {op for op in sums if self._may_stay(op) or _sums_runs(op)}
        in_runs = {op: runs for op in sums if op not in kept and (runs := self._runs(op)) is not None}
        if kept or in_runs:
            as_dots = {op for op in sums if op not in kept and op not in in_runs and _rewritten(op)}
            if ynn_fusion.reduce_fusion_off(module, leaving_out=as_dots):
                ynn_fusion.record_reduce_fusion_off(module)
            else:
                kept, in_runs = set(), {}
        PatternSet(Pattern("stablehlo.reduce", lambda op: None if op in kept else
                           [_run_sum(op.operands[0], in_runs[op])] if op in in_runs else _as_dot(op))).apply(module)

    def _runs(self, op: ir.Operation) -> int | None:
        """The runs m into which `_run_sum` takes the terms of `op`, where `op` is a sum over
        dimension 0 alone of a static, non-empty float32 or float64 operand that `_as_dot` would
        make a product with ones (not kept, not added term by term, not weighted) and its D terms
        split as m runs of g <= `KEPT_TERMS` consecutive terms; else None. Narrower floats are left
        to the product, which XLA:CPU accumulates in float32 where the reduce would round each
        run sum to the narrow type."""
        if not self.run_sums or summed_dim(op) != 0:
            return None
        x = op.operands[0]
        shape = builders.shape_of(x)
        if len(shape) < 2 or min(shape) < 0 or _bytes(x) == 0 or _adds_terms(x, 0) or _weights(x) is not None or \
                not wide_float(x):
            return None
        return _runs(shape[0])

    def _may_stay(self, op: ir.Operation) -> bool:
        """Whether `op` may stay a reduce: an unweighted float32 or float64 sum over dimension 0 alone
        of squares of at most kept-squares terms, or of an operand of at most max-kept-bytes over dimension 0 alone
        of at most `KEPT_TERMS` terms (neither one of nested directions, whose terms are added), or
        over an inner dimension of at most `FEW_TERMS` terms."""
        dim = summed_dim(op)
        if dim is None or _weights(op.operands[0]) is not None:
            return False
        shape = builders.shape_of(op.operands[0])
        if min(shape) < 0:  # a dynamic dimension
            return False
        if dim == 0 and len(shape) >= 2 and shape[0] <= self.kept_squares and _squares(op.operands[0]) and \
                not _adds_terms(op.operands[0], 0) and math.prod(shape) > 0 and wide_float(op.operands[0]):
            return True
        if dim == 0:
            if len(shape) < 2 or shape[0] > KEPT_TERMS or _adds_terms(op.operands[0], 0):
                return False
        elif dim == len(shape) - 1 or shape[dim] > FEW_TERMS:
            return False
        return 0 < _bytes(op.operands[0]) <= self.max_kept_bytes  # an empty sum: nothing to keep
