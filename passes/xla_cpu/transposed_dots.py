"""`xla-cpu-transposed-dots`: a dot_general whose operands are not in the order XLA:CPU's
YNNPACK matmul takes becomes one of operands copied into that order, the smaller copied.

XLA:CPU gives a batched dot to its YNNPACK matmul only when the
lhs is in row-major (batch, m, k) order, contracting its last dimension
(`IsDotSupportedByYnn`: "lhs_canonical"). A product such as `A^T B` of batched
matrices, which the Taylor and reverse rules of LU and triangular solves are full
of, then runs in XLA's own emitter as a loop over the batch that calls a matrix
kernel per batch element, slower than YNNPACK's matmul of the transposed copy
(float32 and float64). `bench/xla_cpu_tuning.py --workloads
wavefunction --electrons 8` measures the pass on bench/wavefunction.py's programs,
where the gradient of the kinetic energy holds such products of the LU's 8x8 factors
along 24 directions and 128 walkers.

Here the lhs is transposed to (batch, free, contracting) and the rhs, unless it is
(batch, contracting, free) or (batch, free, contracting) already with its contracting
dimensions in the lhs's order, to (batch, contracting, free); the batch dimensions of
both are joined into one, and the product's result is reshaped back. XLA folds a
transpose that feeds a dot straight back into the dot's dimension numbers, but not
one behind a reshape of the batch dimensions, which is why they are joined; a single
batch dimension is split into two (its smallest prime factor and the rest), and a
prime one leaves the dot as it is. XLA:CPU fuses the transposes into the loops that
compute the operands.

Which operand is copied: a product `x^T g` whose lhs `x` contracts its leading
dimensions (a weight gradient: x the layer's inputs along every direction and
walker, g the cotangent of a narrow output) makes XLA copy all of `x`, batched or
not, as a transposing loop that reads its inputs with a stride. With the operands
swapped, `(g^T x)^T`, the copy is of `g` instead. The operands are swapped where the
copies of the swapped operands and the transpose of the result come to at most half
of the copies of the operands as they are (counted in elements); option
`swap=never` keeps their order. The result is transposed back with its free
dimensions joined: XLA folds a plain transpose of a dot's result back into the dot,
swapping the operands back. An unbatched product is otherwise left to XLA, which
copies its lhs itself.

Only dots of float32 or float64 operands and result (YNNPACK's element types)
whose m and n are both above 1 and whose m, k or n reaches 8 (below, YNNPACK does
not take it: `xla-cpu-small-dots`) are rewritten. The copy adds a pass over each
transposed operand, small beside the matrix kernel calls it saves at these sizes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar, Literal

from hlopt.passes.ir import builders
from hlopt.passes.base import option
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet
from hlopt.passes.mlir import ir
from hlopt.passes.rewrite.matching import DOT_ATTRIBUTES, dot_dims, free_dims
from hlopt.passes.xla_cpu.small_dots import YNN_MIN_SIZE


def _is_ynn_type(t: ir.Type) -> bool:
    """A float32 or float64 ranked tensor without an encoding (whose reshapes keep nothing else)."""
    return isinstance(t, ir.RankedTensorType) and t.encoding is None and \
        isinstance(t.element_type, (ir.F32Type, ir.F64Type))


def _batch_split(sizes: list[int]) -> list[int] | None:
    """The batch dimensions joined into one, or a single one split into two (its smallest
    prime factor and the rest); None for a single prime (or unit) batch."""
    if len(sizes) > 1:
        return [math.prod(sizes)]
    (size,) = sizes
    factor = next((p for p in range(2, math.isqrt(size) + 1) if size % p == 0), None)
    return None if factor is None else [factor, size // factor]


def _groups_contiguous(order: list[int], first: list[int], second: list[int]) -> bool:
    """True when `order` (an operand's dims after its batch dims) is `first` then `second`,
    or `second` then `first`, each in its own order."""
    return order == first + second or order == second + first


def _in_ynn_order(op: ir.Operation, swap: Literal["smaller", "never"]) -> list[ir.Value] | None:
    """The batched dot_general `op` with its operands copied into YNNPACK's order (swapped where `swap` is
    `smaller` and that copies at most half as much); None where it is in order or not YNNPACK's."""
    if set(op.attributes) - DOT_ATTRIBUTES:
        return None
    lhs, rhs = op.operands
    result = op.results[0]
    if not all(_is_ynn_type(v.type) for v in (lhs, rhs, result)) or \
            len({str(ir.RankedTensorType(v.type).element_type) for v in (lhs, rhs, result)}) != 1:
        return None
    lb, rb, lc, rc = dot_dims(op)
    left, right = _Side(lhs, lb, lc), _Side(rhs, rb, rc)
    if not left.contract:
        return None
    if min(left.shape + right.shape + builders.shape_of(result), default=0) < 0:  # dynamic: no static reshape
        return None
    sizes = [_size(v) for v in (lhs, rhs, result)]
    if min(sizes) == 0 or max(sizes) >= 1 << 63:  # empty: nothing to compute; joined sizes past int64
        return None
    m, n, k = left.free_size, right.free_size, left.contract_size
    if m <= 1 or n <= 1 or max(m, n, k) < YNN_MIN_SIZE:
        return None
    precision = builders.precision_of(op)
    copies = left.copied_as_lhs() + right.copied_as_rhs()
    swap = swap == "smaller" and 2 * (right.copied_as_lhs() + left.copied_as_rhs() + _size(result)) <= copies
    if swap:
        left, right, precision = right, left, builders.swapped_precision(precision)
    product = _in_order(left, right, builders.elem_of(result), precision)
    if product is None and (not swap or left.batch and not (left.lhs_in_order() and right.rhs_in_order())):
        return None  # in order already, or a single prime batch that the swap leaves out of order
    if product is None:  # no batch dimension (XLA copies the smaller lhs itself), or in order when swapped
        product = builders.dot_general(left.value, right.value, lhs_batch=left.batch, rhs_batch=right.batch,
                                       lhs_contract=left.contract, rhs_contract=right.contract,
                                       elem=builders.elem_of(result), precision_config=precision)
    if not swap:
        return [product]
    # The product's dims are (batch, the original rhs's free, the original lhs's free): joined
    # into (batch, n, m, 1) and transposed there, since XLA folds a transpose of a dot's
    # result straight back into the dot (swapping its operands back).
    batch = math.prod(builders.shape_of(product)[:len(left.batch)])
    joined = builders.reshape(product, [batch, n, m, 1])
    return [builders.reshape(builders.transpose(joined, [0, 2, 1, 3]), builders.shape_of(result))]


@dataclasses.dataclass(frozen=True)
class TransposedDots(PatternPass):
    """Batched dot_generals in the operand order YNNPACK takes.

    Backend: XLA:CPU gives a batched dot to YNNPACK's matmul only when its lhs is (batch, m, k),
    and otherwise calls a matrix kernel per batch element; benchmark: `bench/xla_cpu_tuning.py
    --workloads wavefunction batched_products --electrons 8`.

    A batched `dot_general` whose operands are not in YNNPACK's order (the lhs contracting
    its trailing dimensions, the batch dimensions leading) becomes the product of the
    operands transposed to (batch, free, contracting) and (batch, contracting, free), with
    the batch dimensions joined into one, reshaped back to the result's shape.

        %d = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2]
             : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32>

    becomes

        %at = stablehlo.transpose %a, dims = [0, 1, 3, 2]
        %a3 = stablehlo.reshape %at : (tensor<24x128x8x8xf32>) -> tensor<3072x8x8xf32>
        %b3 = stablehlo.reshape %b : (tensor<24x128x8x8xf32>) -> tensor<3072x8x8xf32>
        %p = stablehlo.dot_general %a3, %b3, batching_dims = [0] x [0], contracting_dims = [2] x [1]
        %d = stablehlo.reshape %p : (tensor<3072x8x8xf32>) -> tensor<24x128x8x8xf32>

    A product whose swapped operands need at most half the copies swaps them:

        %d = stablehlo.dot_general %x, %g, contracting_dims = [0, 1] x [0, 1]
             : (tensor<18x768x32xf32>, tensor<18x768x6xf32>) -> tensor<32x6xf32>

    becomes

        %p = stablehlo.dot_general %g, %x, contracting_dims = [0, 1] x [0, 1]
             : (tensor<18x768x6xf32>, tensor<18x768x32xf32>) -> tensor<6x32xf32>
        %j = stablehlo.reshape %p : (tensor<6x32xf32>) -> tensor<1x6x32x1xf32>
        %t = stablehlo.transpose %j, dims = [0, 2, 1, 3] : (tensor<1x6x32x1xf32>) -> tensor<1x32x6x1xf32>
        %d = stablehlo.reshape %t : (tensor<1x32x6x1xf32>) -> tensor<32x6xf32>
    """

    name: ClassVar[str] = "xla-cpu-transposed-dots"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    swap: Literal["smaller", "never"] = option("smaller", what="`smaller` swaps the operands where that copies at "
                                                       "most half as much; `never` keeps their order")

    def patterns(self, module: ir.Operation) -> PatternSet:
        return PatternSet(Pattern("stablehlo.dot_general", functools.partial(_in_ynn_order, swap=self.swap)))


def _size(v: ir.Value) -> int:
    return math.prod(builders.shape_of(v))


class _Side:
    """One operand of a dot_general, with its batch and contracting dimensions."""

    def __init__(self, value: ir.Value, batch: list[int], contract: list[int]):
        self.value, self.batch, self.contract = value, batch, contract
        self.shape = builders.shape_of(value)
        self.free = free_dims(value, batch, contract)
        self.free_size = math.prod(self.shape[i] for i in self.free)
        self.contract_size = math.prod(self.shape[i] for i in contract)

    def rest(self) -> list[int]:
        """The dimensions after the batch ones, in order; none when the batch dimensions do not lead."""
        nb = len(self.batch)
        return list(range(nb, len(self.shape))) if self.batch == list(range(nb)) else []

    def lhs_in_order(self) -> bool:
        """(batch, free, contracting): YNNPACK's lhs."""
        return bool(self.rest()) and self.rest() == self.free + self.contract

    def rhs_in_order(self) -> bool:
        """(batch, contracting, free) or (batch, free, contracting): YNNPACK's rhs."""
        return bool(self.rest()) and _groups_contiguous(self.rest(), self.contract, self.free)

    def copied_as_lhs(self) -> int:
        """The elements copied to make this operand YNNPACK's lhs."""
        return 0 if self.lhs_in_order() else _size(self.value)

    def copied_as_rhs(self) -> int:
        """The elements copied to make this operand YNNPACK's rhs."""
        return 0 if self.rhs_in_order() else _size(self.value)


def _in_order(left: _Side, right: _Side, elem: ir.Type, precision: ir.Attribute | None) -> ir.Value | None:
    """The batched product of `left` and `right` with the operands copied into YNNPACK's order
    and the batch dimensions joined, in dot_general's result shape; None when there is no
    batch dimension, the operands are in order already, or a single prime batch cannot be
    split."""
    if not left.batch or (left.lhs_in_order() and right.rhs_in_order()):
        return None
    batch = _batch_split([left.shape[i] for i in left.batch])
    if batch is None:
        return None
    m, n, k = left.free_size, right.free_size, left.contract_size
    a = builders.reshape(builders.transpose(left.value, left.batch + left.free + left.contract), batch + [m, k])
    if right.rhs_in_order() and right.rest()[:len(right.free)] == right.free:
        b, b_contract = builders.reshape(right.value, batch + [n, k]), len(batch) + 1  # (batch, free, contracting)
    else:
        b, b_contract = builders.reshape(builders.transpose(right.value, right.batch + right.contract + right.free),
                                         batch + [k, n]), len(batch)
    batch_dims = list(range(len(batch)))
    product = builders.dot_general(a, b, lhs_batch=batch_dims, rhs_batch=batch_dims,
                                   lhs_contract=[len(batch) + 1], rhs_contract=[b_contract],
                                   elem=elem, precision_config=precision)
    shape = [left.shape[i] for i in left.batch] + [left.shape[i] for i in left.free] \
        + [right.shape[i] for i in right.free]
    return builders.reshape(product, shape)
