"""The rewrites a platform pass declares to contract a sum over a batch dimension of a
dot_general inside the dot: `xla-cpu-summed-batch-dots` and `tpu-summed-batch-dots` take
these patterns (`PATTERNS`) as they are, so a change here changes both platforms' output.

A collapsed jet's sum over its directions of one product per direction (the second
coefficient of a linear solve, `A^-1 (b_2 - sum_d A_1d x_1d)`) is one product whose
contraction runs over the direction and the matrices' inner dimension together. The summed
dimension goes first among the contracted ones, so each operand is read as [batch, free,
(summed, contracted)]: where the contracted dimension is already the operand's last (a row
of a matrix), a backend that lays the operand out for the product copies it in runs of whole
rows. Put last, the summed dimension would be the fastest-varying index of that copy: a
transpose of single elements.

    %p = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]
         : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32>
    %s = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [0]
         : (tensor<24x128x8x8xf32>, tensor<f32>) -> tensor<128x8x8xf32>

becomes

    %s = stablehlo.dot_general %a, %b, batching_dims = [1] x [1], contracting_dims = [0, 3] x [0, 2]
         : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<128x8x8xf32>

Reverse mode makes the transposed form: the cotangent of each direction's product is a
product with the cotangent of their sum, the same for every direction, broadcast along the
batch dimension. A dot_general one of whose operands is a broadcast along a batch dimension
(through transposes, or of a size-1 dimension) takes the operand before the broadcast and has
that dimension free in the other operand (one product per point), its result
transposed back to the original order:

    %c = stablehlo.broadcast_in_dim %g, dims = [1, 2, 3] : (tensor<128x8x8xf32>) -> tensor<24x128x8x8xf32>
    %p = stablehlo.dot_general %c, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]
         : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32>

becomes

    %q = stablehlo.dot_general %g, %b, batching_dims = [0] x [1], contracting_dims = [2] x [2]
         : (tensor<128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<128x8x24x8xf32>
    %p = stablehlo.transpose %q, dims = [2, 0, 1, 3] : (tensor<128x8x24x8xf32>) -> tensor<24x128x8x8xf32>

Only statically shaped floating products without annotations are rewritten (nor those
fed through an annotated broadcast or transpose), and a sum only when it is from zero over
one batch dimension of a float32 or float64 dot_general of its own element type that it
alone reads, in the same block (a sum inside a loop's body of a product outside it stays,
as does a half-precision one, whose product rounds each batch's result before the sum);
the values are the same up to the order of the additions.
"""

from __future__ import annotations

from hlopt.passes.ir import builders
from hlopt.passes.mlir import ir
from hlopt.passes.rewrite.patterns import Pattern, PatternSet
from hlopt.passes.rewrite.matching import DOT_ATTRIBUTES, dot_dims, free_dims, owner_op, summed_dim, wide_float


def _static(*values: ir.Value) -> bool:
    return all(min(builders.shape_of(v), default=0) >= 0 for v in values)


def _summed_dot(op: ir.Operation) -> tuple[ir.Operation, int] | None:
    """(the dot_general, the batch index) when `op` is an unannotated float32 or float64 `reduce` add
    from zero over one dimension of a statically shaped dot_general's result of its own element type,
    that dimension one of the dot's batch dimensions, the result read by `op` alone in its block."""
    if op.name != "stablehlo.reduce" or (dim := summed_dim(op)) is None:
        return None
    x = op.operands[0]
    if not isinstance(x, ir.OpResult) or x.owner.operation.name != "stablehlo.dot_general" or \
            not wide_float(x) or len(list(x.uses)) != 1:
        return None
    dot = x.owner.operation
    if set(dot.attributes) - DOT_ATTRIBUTES or dot.block != op.block or not _static(x, *dot.operands):
        return None
    return (dot, dim) if dim < len(dot_dims(dot)[0]) else None


def _without(v: ir.Value, dim: int) -> ir.Value | None:
    """`v` with dimension `dim` dropped, where `v` is a broadcast along it (through transposes): the
    same for every index of `dim`. None where that is not seen."""
    if not isinstance(v, ir.OpResult):
        return None
    op = v.owner.operation
    shape = builders.shape_of(v)
    if set(op.attributes) - {"permutation", "broadcast_dimensions"}:
        return None  # an annotated transpose or broadcast
    if op.name == "stablehlo.transpose":
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        inner = _without(op.operands[0], perm[dim])
        if inner is None:
            return None
        rest = [p - (p > perm[dim]) for i, p in enumerate(perm) if i != dim]
        return builders.transpose(inner, rest)
    if op.name != "stablehlo.broadcast_in_dim" or not _static(v, op.operands[0]):
        return None
    x = op.operands[0]
    dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
    kept = [j for j, d in enumerate(dims) if d != dim]
    if len(kept) < len(dims):
        if builders.shape_of(x)[dims.index(dim)] != 1:
            return None
        x = builders.reshape(x, [builders.shape_of(x)[j] for j in kept])
    return builders.broadcast(x, shape[:dim] + shape[dim + 1:], [dims[j] - (dims[j] > dim) for j in kept])


def _contracted_sum(op: ir.Operation) -> list[ir.Value] | None:
    """The sum `op` over a batch dimension of a dot_general as that dot_general with the dimension
    contracted, first among the contracted ones; None if `op` is no such sum."""
    found = _summed_dot(op)
    if found is None:
        return None
    dot, i = found
    lb, rb, lc, rc = dot_dims(dot)
    return [builders.dot_general(dot.operands[0], dot.operands[1],
                                 lhs_batch=lb[:i] + lb[i + 1:], rhs_batch=rb[:i] + rb[i + 1:],
                                 lhs_contract=[lb[i], *lc], rhs_contract=[rb[i], *rc],
                                 elem=builders.elem_of(op.results[0]), precision_config=builders.precision_of(dot))]


def _broadcast_batch(op: ir.Operation) -> list[ir.Value] | None:
    """`op` with a batch dimension along which one operand is a broadcast made a free
    dimension of the other operand, its result transposed back; None if there is none."""
    if set(op.attributes) - DOT_ATTRIBUTES or not builders.is_differentiable(op.results[0].type) or \
            not _static(op.results[0], *op.operands):
        return None  # an integer, dynamically shaped or annotated product
    uses = list(op.results[0].uses)
    if len(uses) == 1 and _summed_dot(owner_op(uses[0])) is not None:
        return None  # a sum over a batch dimension contracts it instead
    lb, rb, lc, rc = dot_dims(op)
    batch, contract = [lb, rb], [lc, rc]
    for i in range(len(batch[0])):
        for side in (0, 1):
            reduced = _without(op.operands[side], batch[side][i])
            if reduced is not None:
                break
        else:
            continue
        b = batch[side][i]
        renumber = lambda dims: [x - (x > b) for x in dims]  # noqa: E731
        other = 1 - side
        dims = [None, None]
        dims[side] = (renumber(batch[side][:i] + batch[side][i + 1:]), renumber(contract[side]))
        dims[other] = (batch[other][:i] + batch[other][i + 1:], contract[other])
        operands = [None, None]
        operands[side], operands[other] = reduced, op.operands[other]
        new = builders.dot_general(operands[0], operands[1], lhs_batch=dims[0][0], rhs_batch=dims[1][0],
                                   lhs_contract=dims[0][1], rhs_contract=dims[1][1],
                                   elem=builders.elem_of(op.results[0]), precision_config=builders.precision_of(op))
        return [builders.transpose(new, _back(op, batch, contract, i, other))]
    return None

def _back(op: ir.Operation, batch: list[list[int]], contract: list[list[int]], i: int, other: int) -> list[int]:
    """The permutation that puts the result of `op` (its operands' `batch` and `contract` dimensions)
    rewritten with batch dimension i free in operand `other` (ordered among that operand's free
    dimensions) back into `op`'s result order."""
    free = [free_dims(v, batch[s], contract[s]) for s, v in enumerate(op.operands)]
    original = [("b", k) for k in range(len(batch[0]))] + [(s, x) for s in (0, 1) for x in free[s]]
    widened = free[:]
    widened[other] = sorted(free[other] + [batch[other][i]])
    new = [("b", k) for k in range(len(batch[0])) if k != i] + [(s, x) for s in (0, 1) for x in widened[s]]
    position = {key: n for n, key in enumerate(new)}
    position[("b", i)] = position[(other, batch[other][i])]
    return [position[key] for key in original]


# a sum over a dot's batch dimension contracts it in the dot; a broadcast along one is taken
# before the broadcast, the dimension free in the other operand
PATTERNS = PatternSet(Pattern("stablehlo.reduce", _contracted_sum), Pattern("stablehlo.dot_general", _broadcast_batch))
