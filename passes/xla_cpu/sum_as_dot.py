"""`xla-cpu-sum-as-dot`: a floating sum over the leading axis becomes a matrix-vector product.

XLA:CPU (jaxlib 0.10.2) hands a `reduce` add over a leading axis, with the
elementwise products that feed it, to a YNNPACK reduce fusion that runs 10-20x
slower than the same sum as a `dot_general` with a vector of ones, which goes
to its matmul emitter (the collapsed jets' sums over directions,
bench/pde_operators.py; `bench/xla_cpu_tuning.py` measures it). A weighted sum,
a product with a rank-1 constant broadcast along that axis, is the product with
the weights instead of ones.

A `dot_general`'s operand is a buffer of its own (XLA:CPU fuses no producer into a
dot), where the `reduce` computed its elementwise operand on the fly. For a sum of
at most `FEW_TERMS` terms over the bi-Laplacian's nested directions (an operand of
rank 4 or more, [outer, inner, batch, width], summed over either direction axis) that
buffer is the whole 5x5x16x768 product, and over the inner axis XLA also copies it
transposed: bench/pde_operators.py's collapsed bi-Laplacian held three such 1.2 MiB
buffers at once (13.2 MiB instead of 10.5). Such a sum is the terms' sum instead,
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
an inner axis of at most `FEW_TERMS`, of an operand of at most `max-kept-bytes` (1 MiB,
one core's L2 on the machine measured) stays a `reduce`, provided the module's
reductions, with those kept, are ones xla-cpu-ynn-fusion compiles without YNNPACK's
reduce fusion (which runs a leading-axis sum slowly); the pass then records that option
on the module itself, so that it holds without xla-cpu-ynn-fusion in the pipeline too
(as there, a `compiler_options` entry or `XLA_FLAGS` flag of your own naming the option
wins, and a kept sum then runs as the option you chose runs it).
On bench/wavefunction.py's programs the sums over 12 directions and over the 4
electrons (0.75 MiB operands, n = 4) ran faster as reduces, and those over 24
directions of operands as small (the 8x8 matrices' coefficients at n = 8) slower;
`bench/xla_cpu_tuning.py --workloads wavefunction` compares the pass with
`max-kept-bytes=0`, which keeps none.

A larger leading-axis sum (more terms, or a larger operand) where YNNPACK's reduce fusion
is off likewise is summed in two steps, so that its operand is never written whole:
the D terms, split as g blocks of m rows (D = g m, m the fewest rows, at least 2, that
leave g at most `KEPT_TERMS`), are first summed over the blocks by a `reduce` that
computes the operand as it sums (XLA:CPU's own loop, g terms per result), and the m
rows left are then the product with ones. Only the partial sum, m / D of the operand,
is in memory. bench/wavefunction.py's weight gradient at n = 8 held two 3 MiB summands
of 24 directions at its peak; as 2 x 32768 partial sums its peak fell from 24.8 to
21.7 MiB (folx: 23.0), and the sums ran faster than the product with ones of the whole
summand (`bench/xla_cpu_tuning.py --workloads wavefunction` compares the pass with
`block-sums=false`, which makes them products with ones as before). A sum whose D has
no such split (a prime number of terms above `KEPT_TERMS`) stays a product with ones.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

from hlopt.passes import builders
from hlopt.passes.base import option
from hlopt.passes.mlir import ir
from hlopt.passes.walk import walk_ops
from hlopt.passes.xla_cpu import ynn_fusion
from hlopt.passes.xla_cpu.rewrite import OpRewrite, rewrite_ops


# A sum of at most this many terms over a nested directions axis is added term by term.
FEW_TERMS = 8
# An unweighted leading-axis sum of at most this many terms (and max-kept-bytes) may stay a reduce
# (an inner-axis one of at most FEW_TERMS).
KEPT_TERMS = 16


def _summed_dim(op: ir.Operation) -> int | None:
    """The dimension a one-operand floating `reduce` add from zero sums over, if one alone."""
    if len(op.operands) != 2 or builders.reducer_kind(op) != "stablehlo.add":
        return None
    if not builders.is_differentiable(op.operands[0].type):
        return None
    dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
    return dims[0] if len(dims) == 1 and builders.is_zero_constant(op.operands[1]) else None


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


def _terms_sum(x: ir.Value, dim: int) -> ir.Value:
    """The sum of `x` over `dim` as its slices along `dim` added in order."""
    shape = builders.shape_of(x)
    rest = shape[:dim] + shape[dim + 1:]
    terms = [builders.reshape(builders.slice_dim(x, dim, i, i + 1), rest) for i in range(shape[dim])]
    return functools.reduce(builders.add, terms)


def _rows(terms: int) -> int | None:
    """The fewest rows m >= 2 of a split of `terms` = g m into g <= `KEPT_TERMS` blocks (g >= 2)."""
    return next((m for m in range(2, terms // 2 + 1) if terms % m == 0 and terms // m <= KEPT_TERMS), None)


def _block_sum(x: ir.Value, rows: int) -> ir.Value:
    """The sum of `x` over dimension 0, its D terms taken as D / rows blocks of `rows` rows: a
    reduce over the blocks (whose operand XLA:CPU computes as it sums), then the product of the
    rows left with ones."""
    shape = builders.shape_of(x)
    elem = builders.elem_of(x)
    partial = builders.reduce(builders.reshape(x, [shape[0] // rows, rows, *shape[1:]]), [0])
    ones = builders.splat(1, builders.tensor([rows], elem))
    return builders.dot_general(ones, partial, lhs_batch=[], rhs_batch=[], lhs_contract=[0], rhs_contract=[0],
                                elem=elem)


def _bytes(v: ir.Value) -> int:
    """The bytes of floating or complex tensor `v`."""
    elem = builders.elem_of(v)
    width = 2 * ir.FloatType(elem.element_type).width if isinstance(elem, ir.ComplexType) else ir.FloatType(elem).width
    return math.prod(builders.shape_of(v)) * width // 8


@dataclasses.dataclass(frozen=True)
class SumAsDot(OpRewrite):
    """A floating `reduce` add over dimension 0 alone becomes a `dot_general` with a vector of
    ones (or with the weights it is multiplied by), which XLA:CPU runs 10-20x faster; one over
    another single dimension but the last, a `dot_general` of the operand with ones contracting it.
    A sum of at most `FEW_TERMS` (8) terms over an inner dimension, or unweighted over dimension 0
    of an operand of rank 4 or more (nested directions), becomes the sum of its slices, which keeps
    the operand out of memory. Unweighted, either sum of an operand of at most `max-kept-bytes`
    (over dimension 0, of at most 16 terms) stays a `reduce` when the module's reductions then
    leave YNNPACK's reduce fusion off, which the pass records on the module as
    `xla-cpu-ynn-fusion` does. Under the same condition a larger sum over dimension 0 of D = g m
    terms (m >= 2 the fewest rows that leave g <= 16 blocks; `block-sums`) is a `reduce` over the
    g blocks, then the product of the m rows left with ones:

        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0]
             : (tensor<24x32768xf32>, tensor<f32>) -> tensor<32768xf32>

    becomes

        %r = stablehlo.reshape %x : (tensor<24x32768xf32>) -> tensor<12x2x32768xf32>
        %p = stablehlo.reduce(%r init: %zero) applies stablehlo.add across dimensions = [0]
             : (tensor<12x2x32768xf32>, tensor<f32>) -> tensor<2x32768xf32>
        %s = stablehlo.dot_general %ones, %p, contracting_dims = [0] x [0]
             : (tensor<2xf32>, tensor<2x32768xf32>) -> tensor<32768xf32>

    and

        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0]
             : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>

    becomes (with `max-kept-bytes=0`, or where YNNPACK's reduce fusion would stay on)

        %ones = stablehlo.constant dense<1.0> : tensor<3xf32>
        %s = stablehlo.dot_general %ones, %x, contracting_dims = [0] x [0]
             : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>
    """

    name: ClassVar[str] = "xla-cpu-sum-as-dot"
    anchors: ClassVar[tuple[str, ...]] = ("stablehlo.reduce",)
    max_kept_bytes: int = option(1 << 20, low=0, high=1 << 40,
                                 what="an unweighted sum of few terms of an operand of at most this many bytes "
                                      "stays a reduce while YNNPACK's reduce fusion is off")
    block_sums: bool = option(True, what="a larger leading-axis sum is a reduce over blocks of its terms, then "
                                         "the product with ones of the rows left, while YNNPACK's reduce fusion is off")

    def apply(self, module: ir.Operation) -> None:
        sums = list(walk_ops(module, *self.anchors))
        kept = {op for op in sums if self._may_stay(op)}
        blocked = {op: rows for op in sums if op not in kept and (rows := self._block_rows(op)) is not None}
        if kept or blocked:
            as_dots = {op for op in sums if op not in kept and op not in blocked and self._rewritten(op)}
            if ynn_fusion.reduce_fusion_off(module, leaving_out=as_dots):
                ynn_fusion.record_reduce_fusion_off(module)
            else:
                kept, blocked = set(), {}
        rewrite_ops(module, self.anchors,
                    lambda op: None if op in kept else
                    [_block_sum(op.operands[0], blocked[op])] if op in blocked else self.rewrite(op))

    def _block_rows(self, op: ir.Operation) -> int | None:
        """The rows m left by summing `op`'s operand over blocks first (`_block_sum`), where
        `op` is a real floating sum over dimension 0 alone of a static operand that `rewrite`
        would make a product with ones (not kept, not added term by term) and its D terms split
        as g blocks of m rows, g at most `KEPT_TERMS`; else None."""
        if not self.block_sums or _summed_dim(op) != 0:
            return None
        x = op.operands[0]
        shape = builders.shape_of(x)
        if len(shape) < 2 or min(shape) < 0 or _adds_terms(x, 0) or \
                not isinstance(builders.elem_of(x), ir.FloatType):
            return None
        return _rows(shape[0])

    def _may_stay(self, op: ir.Operation) -> bool:
        """Whether `op` may stay a reduce: an unweighted sum of an operand of at most max-kept-bytes
        over dimension 0 alone of at most `KEPT_TERMS` terms (not one of nested directions, whose
        terms are added), or over an inner dimension of at most `FEW_TERMS` terms."""
        dim = _summed_dim(op)
        if dim is None or _weights(op.operands[0]) is not None:
            return False
        shape = builders.shape_of(op.operands[0])
        if min(shape) < 0:  # a dynamic dimension
            return False
        if dim == 0:
            if len(shape) < 2 or shape[0] > KEPT_TERMS or _adds_terms(op.operands[0], 0):
                return False
        elif dim == len(shape) - 1 or shape[dim] > FEW_TERMS:
            return False
        return 0 < _bytes(op.operands[0]) <= self.max_kept_bytes  # an empty sum: nothing to keep

    @staticmethod
    def _rewritten(op: ir.Operation) -> bool:
        """Whether `rewrite` replaces sum `op` when it does not keep it: not a sum along rows in
        memory (its last dimension), where XLA:CPU's reduce is not slow."""
        dim = _summed_dim(op)
        return dim is not None and dim != len(builders.shape_of(op.operands[0])) - 1

    def rewrite(self, op: ir.Operation) -> list[ir.Value] | None:
        if not self._rewritten(op):
            return None
        dim = _summed_dim(op)
        x = op.operands[0]
        elem = builders.elem_of(x)
        shape = builders.shape_of(x)
        if _adds_terms(x, dim):
            return [_terms_sum(x, dim)]  # a dot would hold x in memory (over an inner axis, transposed): add its terms
        if dim != 0:  # an inner directions axis (the bi-Laplacian's nested jets): x's other dims keep their order
            ones = builders.splat(1, builders.tensor([shape[dim]], elem))
            return [builders.dot_general(x, ones, lhs_batch=[], rhs_batch=[], lhs_contract=[dim], rhs_contract=[0],
                                         elem=elem)]
        weighted = _weights(x)
        if weighted is not None:
            x, w = weighted
            w = builders.convert(w, elem)
        else:
            w = builders.splat(1, builders.tensor(builders.shape_of(x)[:1], elem))
        return [builders.dot_general(w, x, lhs_batch=[], rhs_batch=[], lhs_contract=[0], rhs_contract=[0],
                                     elem=elem)]
