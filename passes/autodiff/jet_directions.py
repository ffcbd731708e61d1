"""Linear ops on coefficients with a leading directions axis (batched and collapsed jets).

In a directions-batched jet (`backend_config = {order = K, directions = R}`) or a
collapsed one (`{order = K, collapsed = true}`) every Taylor coefficient carries a
leading axis over the R directions (size 1 for the collapsed K-th coefficient, the
sum over them) while primals do not: the primal is computed once. The jet rules
stay the same; where a rule applies an op to coefficients (the linear and bilinear
families), the op's directions rule `rule(op, operands, lead, n)` builds the op on
operands of which those marked in `lead` carry that axis (of size `n`), with the
axis leading in the result, like a batching rule of `jax.vmap` with the batch axis
at 0. The rules are here; the op table (`hlopt.passes.autodiff.table`) names each
op's, or derives it from the op's family (`elementwise` for elementwise ops).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from hlopt.passes.ir import builders
from hlopt.passes.base import PassError
from hlopt.passes.mlir import ir, stablehlo

Apply = Callable[[ir.Operation, list[ir.Value], list[bool], int], ir.Value]


def _with_lead(t: ir.Type, n: int) -> ir.RankedTensorType:
    t = ir.RankedTensorType(t)
    return ir.RankedTensorType.get([n, *t.shape], t.element_type)


def _lead_all(operands: Sequence[ir.Value], lead: Sequence[bool], n: int) -> list[ir.Value]:
    """Every operand with the directions axis (the others broadcast along it)."""
    return [v if d else builders.broadcast(v, [n, *builders.shape_of(v)], range(1, len(builders.shape_of(v)) + 1))
            for v, d in zip(operands, lead)]


def _rebuilt(op: ir.Operation, operands: Sequence[ir.Value], n: int, attributes: dict | None = None) -> ir.Value:
    """`op` (its attributes, `attributes` overriding them, and its regions) on
    `operands`, its one result with the directions axis."""
    if len(operands) == len(op.operands):
        new = op.clone(ip=ir.InsertionPoint.current)
        for i, v in enumerate(operands):
            new.operands[i] = v
        new.results[0].set_type(_with_lead(op.results[0].type, n))
    else:  # an op without regions that takes one more index (dynamic slices)
        new = ir.Operation.create(op.name, results=[_with_lead(op.results[0].type, n)], operands=list(operands),
                                  attributes={name: op.attributes[name] for name in op.attributes})
    for name, attr in (attributes or {}).items():
        new.attributes[name] = attr
    return new.results[0]


def _i64s(values: Sequence[int]) -> ir.DenseI64ArrayAttr:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def _array(op: ir.Operation, name: str) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes[name]))


def elementwise(op, operands, lead, n):
    return _rebuilt(op, _lead_all(operands, lead, n), n)


def select(op, operands, lead, n):
    """A scalar predicate stays scalar; a tensor one is broadcast along the directions."""
    pred, on_true, on_false = operands
    if not builders.shape_of(pred):
        return _rebuilt(op, [pred, *_lead_all([on_true, on_false], lead[1:], n)], n)
    return elementwise(op, operands, lead, n)


def broadcast_in_dim(op, operands, lead, n):
    dims = [0] + [d + 1 for d in _array(op, "broadcast_dimensions")]
    return _rebuilt(op, operands, n, {"broadcast_dimensions": _i64s(dims)})


def transpose(op, operands, lead, n):
    return _rebuilt(op, operands, n, {"permutation": _i64s([0] + [p + 1 for p in _array(op, "permutation")])})


def slice_(op, operands, lead, n):
    return _rebuilt(op, operands, n, {"start_indices": _i64s([0] + _array(op, "start_indices")),
                                      "limit_indices": _i64s([n] + _array(op, "limit_indices")),
                                      "strides": _i64s([1] + _array(op, "strides"))})


def reverse(op, operands, lead, n):
    return _rebuilt(op, operands, n, {"dimensions": _i64s([d + 1 for d in _array(op, "dimensions")])})


def concatenate(op, operands, lead, n):
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    return _rebuilt(op, _lead_all(operands, lead, n), n,
                    {"dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim + 1)})


def pad(op, operands, lead, n):
    if lead[1]:
        raise unsupported(op, "a padding value with a series")
    return _rebuilt(op, operands, n, {name: _i64s([0] + _array(op, name))
                                      for name in ("edge_padding_low", "edge_padding_high", "interior_padding")})


def _zero_index(like: ir.Value) -> ir.Value:
    return builders.splat(0, like.type)


def dynamic_slice(op, operands, lead, n):
    x, *starts = operands
    return _rebuilt(op, [x, _zero_index(starts[0]), *starts], n,
                    {"slice_sizes": _i64s([n] + _array(op, "slice_sizes"))})


def dynamic_update_slice(op, operands, lead, n):
    x, update, *starts = operands
    x, update = _lead_all([x, update], lead[:2], n)
    return _rebuilt(op, [x, update, _zero_index(starts[0]), *starts], n)


def reduce_add(op, operands, lead, n):
    """A sum over `dimensions` (+ the init value's coefficient, if it has a series)."""
    x, init = operands
    x = _lead_all([x], lead[:1], n)[0]
    total = builders.reduce(x, [d + 1 for d in _array(op, "dimensions")])
    if not lead[1]:
        return total
    return builders.add(total, builders.broadcast(init, builders.shape_of(total), [0]))


def lead_attributes(op: ir.Operation, n: int) -> dict[str, ir.Attribute]:
    """The attributes of a `reduce`, `reduce_window` or `scatter` `op` on operands (and
    updates) with a leading directions axis of size `n`: not reduced (dimensions shifted,
    windows of size 1), or a leading window dimension of the scatter."""
    if op.name == "stablehlo.reduce":
        return {"dimensions": _i64s([d + 1 for d in _array(op, "dimensions")])}
    if op.name == "stablehlo.scatter":
        s = stablehlo.ScatterDimensionNumbers(op.attributes["scatter_dimension_numbers"])
        window, inserted, batching, to_operand = _shifted(s.update_window_dims, s.inserted_window_dims,
                                                          s.input_batching_dims, s.scattered_dims_to_operand_dims)
        return {"scatter_dimension_numbers": stablehlo.ScatterDimensionNumbers.get(
            update_window_dims=[0] + window, inserted_window_dims=inserted, input_batching_dims=batching,
            scatter_indices_batching_dims=list(s.scatter_indices_batching_dims),
            scattered_dims_to_operand_dims=to_operand, index_vector_dim=s.index_vector_dim)}
    rank = len(builders.shape_of(op.operands[0])) + 1
    attrs = {name: _i64s([1] + (_array(op, name) if name in op.attributes else [1] * (rank - 1)))
             for name in ("window_dimensions", "window_strides", "base_dilations", "window_dilations")}
    if "padding" in op.attributes:
        pairs = [0, 0] + [int(v) for v in ir.DenseIntElementsAttr(op.attributes["padding"])]
        i64 = ir.IntegerType.get_signless(64)
        attrs["padding"] = ir.DenseElementsAttr.get([ir.IntegerAttr.get(i64, v) for v in pairs],
                                                    type=ir.RankedTensorType.get([rank, 2], i64))
    return attrs


def reduce_window_add(op, operands, lead, n):
    x, init = operands
    if lead[1]:
        raise unsupported(op, "an init value with a series")
    return _rebuilt(op, [x, init], n, lead_attributes(op, n))


def convolution(op, operands, lead, n):
    """The directions axis of the input alone joins its batch dimension (one convolution
    over R times the batch); a kernel with the axis, one convolution per direction."""
    lhs, rhs = operands
    dims = stablehlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    groups = ir.IntegerAttr(op.attributes["batch_group_count"]).value if "batch_group_count" in op.attributes else 1
    if lead[0] and not lead[1] and groups == 1:
        shape = builders.shape_of(lhs)[1:]
        b, ob = dims.input_batch_dimension, dims.output_batch_dimension
        moved = builders.transpose(lhs, [*range(1, b + 1), 0, *range(b + 1, len(shape) + 1)])
        merged = builders.reshape(moved, [*shape[:b], n * shape[b], *shape[b + 1:]])
        out_shape = builders.shape_of(op.result)
        new = op.clone(ip=ir.InsertionPoint.current)
        new.operands[0], new.operands[1] = merged, rhs
        new.result.set_type(builders.tensor([*out_shape[:ob], n * out_shape[ob], *out_shape[ob + 1:]],
                                            builders.elem_of(op.result)))
        split = builders.reshape(new.result, [*out_shape[:ob], n, *out_shape[ob:]])
        return builders.transpose(split, [ob, *range(ob), *range(ob + 1, len(out_shape) + 1)])
    pieces = []
    for r in range(n):
        one = [builders.reshape(builders.slice_dim(v, 0, r, r + 1), builders.shape_of(v)[1:]) if d else v
               for v, d in zip(operands, lead)]
        new = op.clone(ip=ir.InsertionPoint.current)
        new.operands[0], new.operands[1] = one
        pieces.append(builders.reshape(new.result, [1, *builders.shape_of(op.result)]))
    return builders.concat(pieces, 0) if n > 1 else pieces[0]


def dot_general(op, operands, lead, n):
    """The directions axis of one side is a free dimension of it, moved to the front
    of the result (one large matmul); when both sides carry it, a batch dimension.
    A side that is a broadcast along free dimensions of it (the unit directions
    broadcast over a vmapped batch of points, say) is multiplied before the broadcast
    (`_dot_of_broadcast`)."""
    dims = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    if lead.count(True) == 1:
        sunk = _dot_of_broadcast(op, dims, operands, lead.index(True), n)
        if sunk is not None:
            return sunk
    lb, rb = list(dims.lhs_batching_dimensions), list(dims.rhs_batching_dimensions)
    lc, rc = list(dims.lhs_contracting_dimensions), list(dims.rhs_contracting_dimensions)
    lhs_rank = ir.RankedTensorType(op.operands[0].type).rank
    shift = lambda ds, d: [x + 1 for x in ds] if d else ds  # noqa: E731
    lb, lc, rb, rc = shift(lb, lead[0]), shift(lc, lead[0]), shift(rb, lead[1]), shift(rc, lead[1])
    if lead[0] and lead[1]:
        lb, rb, position = [0] + lb, [0] + rb, 0
    elif lead[0]:
        position = len(lb)
    else:
        position = len(lb) + lhs_rank - len(lb) - len(lc)
    number = stablehlo.DotDimensionNumbers.get(lhs_batching_dimensions=lb, rhs_batching_dimensions=rb,
                                               lhs_contracting_dimensions=lc, rhs_contracting_dimensions=rc)
    out = _rebuilt(op, operands, n, {"dot_dimension_numbers": number})
    shape = list(ir.RankedTensorType(op.results[0].type).shape)
    shape.insert(position, n)
    out.set_type(ir.RankedTensorType.get(shape, builders.elem_of(out)))
    perm = [position] + [d for d in range(len(shape)) if d != position]
    return builders.transpose(out, perm)


def _dot_of_broadcast(op: ir.Operation, dims: stablehlo.DotDimensionNumbers, operands: list[ir.Value], side: int,
                      n: int) -> ir.Value | None:
    """`dot_general`'s result when operand `side` (the one with the directions axis) is
    a `broadcast_in_dim` of a value along free dimensions of it only (not along the
    directions axis, no size-1 stretch): the dot of that value, broadcast after, so the
    matmul does not repeat along the broadcast dimensions; else None."""
    v = operands[side]
    sunk = _sunk_dims(dims, v, side)
    if sunk is None:
        return None
    batch, contract, added = sunk
    src = v.owner.operation.operands[0]
    placed = _array(v.owner.operation, "broadcast_dimensions")
    full = builders.shape_of(v)
    kept = sorted(placed)
    at = {d: i for i, d in enumerate(kept)}
    reduced = builders.transpose(src, [placed.index(d) for d in kept])  # v without the broadcast dimensions
    other = operands[1 - side]
    other_batch = list(dims.lhs_batching_dimensions if side else dims.rhs_batching_dimensions)
    other_contract = list(dims.lhs_contracting_dimensions if side else dims.rhs_contracting_dimensions)
    mine = {"batch": [at[d] for d in batch], "contract": [at[d] for d in contract]}
    theirs = {"batch": other_batch, "contract": other_contract}
    lhs, rhs = (other, reduced) if side else (reduced, other)
    left, right = (theirs, mine) if side else (mine, theirs)
    out = builders.dot_general(lhs, rhs, lhs_batch=left["batch"], rhs_batch=right["batch"],
                               lhs_contract=left["contract"], rhs_contract=right["contract"],
                               elem=builders.elem_of(op.result), precision_config=builders.precision_of(op))
    # Label every dimension: ("b", i) batch, ("v", d) free dimension d of `v`, ("o", j) free of the other side.
    other_free = [("o", j) for j in range(len(builders.shape_of(other)))
                  if j not in other_batch and j not in other_contract]
    v_free = [("v", d) for d in range(len(full)) if d not in batch and d not in contract]
    batches = [("b", i) for i in range(len(batch))]
    v_kept = [label for label in v_free if label[1] not in added]
    labels = batches + (other_free + v_kept if side else v_kept + other_free)
    final = [("v", 0)] + batches + (other_free + v_free[1:] if side else v_free[1:] + other_free)
    present = [label for label in final if label in labels]
    moved = builders.transpose(out, [labels.index(label) for label in present])
    shape = [n, *builders.shape_of(op.result)]
    return builders.broadcast(moved, shape, [final.index(label) for label in present])


def _sunk_dims(dims: stablehlo.DotDimensionNumbers, v: ir.Value,
               side: int) -> tuple[list[int], list[int], list[int]] | None:
    """(batch, contracting, broadcast) dimensions of `v`, operand `side` of a dot_general
    with `dims` plus a leading directions axis, when it is a `broadcast_in_dim` that
    `_dot_of_broadcast` multiplies before it: along free dimensions of it only, not
    along the directions axis, no size-1 stretch; else None."""
    if not isinstance(v, ir.OpResult) or v.owner.operation.name != "stablehlo.broadcast_in_dim":
        return None
    placed = _array(v.owner.operation, "broadcast_dimensions")
    full, src_shape = builders.shape_of(v), builders.shape_of(v.owner.operation.operands[0])
    if 0 not in placed or any(src_shape[i] != full[d] for i, d in enumerate(placed)):
        return None
    batch = [d + 1 for d in (dims.rhs_batching_dimensions if side else dims.lhs_batching_dimensions)]
    contract = [d + 1 for d in (dims.rhs_contracting_dimensions if side else dims.lhs_contracting_dimensions)]
    added = [d for d in range(len(full)) if d not in placed]
    if not added or any(d in batch or d in contract for d in added):
        return None
    return batch, contract, added


def _shifted(*dims: Sequence[int]) -> list[list[int]]:
    """Operand (or window) dimension lists past a new leading directions axis: each one up by one."""
    return [[d + 1 for d in ds] for ds in dims]


def gather(op, operands, lead, n):
    """The directions axis is a leading offset (window) dimension of the operand."""
    x, indices = operands
    g = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
    offset, collapsed, batching, index_map = _shifted(g.offset_dims, g.collapsed_slice_dims, g.operand_batching_dims,
                                                      g.start_index_map)
    number = stablehlo.GatherDimensionNumbers.get(
        offset_dims=[0] + offset, collapsed_slice_dims=collapsed, operand_batching_dims=batching,
        start_indices_batching_dims=list(g.start_indices_batching_dims), start_index_map=index_map,
        index_vector_dim=g.index_vector_dim)
    return _rebuilt(op, [x, indices], n, {"dimension_numbers": number,
                                          "slice_sizes": _i64s([n] + _array(op, "slice_sizes"))})


def scatter(op, operands, lead, n):
    """The directions axis is a leading window dimension of the operand and the updates."""
    x, indices, updates = operands
    x, updates = _lead_all([x, updates], [lead[0], lead[2]], n)
    return _rebuilt(op, [x, indices, updates], n, lead_attributes(op, n))


def identity(op, operands, lead, n):
    """Sharding hints are dropped on the coefficients: their shardings name the primal's rank."""
    return operands[0]


def unsupported(op: ir.Operation, what: str) -> PassError:
    return PassError(f"jet-expand: no rule for '{op.name}' with {what} in a directions-batched or collapsed jet; "
                     "use a standard jet (hlopt-default without jet-collapse)", op.location)


def weight_vector(values: Sequence[float], elem: ir.Type) -> ir.Value:
    """A rank-1 constant of `values` with element type `elem` (real weights, converted if complex)."""
    real = elem.element_type if isinstance(elem, ir.ComplexType) else elem
    w = stablehlo.constant(ir.DenseElementsAttr.get([ir.FloatAttr.get(real, x) for x in values],
                                                    type=builders.tensor([len(values)], real)))
    return builders.convert(w, elem)


def lead_sum(v: ir.Value, weights: Sequence[float] | None = None) -> ir.Value:
    """The sum of `v` over its leading (directions) axis, weighted by `weights` if
    given, without that axis.

    Factors that do not vary along the axis leave the sum: when `v` is a product (of
    multiplies, negates and divides) of such factors (broadcasts along the axis of a
    value without it, splat constants) and of others, the sum is that of the others'
    product, multiplied once by the invariant ones (sum_r a b_r = a sum_r b_r), so no
    invariant factor (a primal, say) is broadcast along the directions. A product of
    broadcasts along other axes (of the unit directions over a vmapped batch, say) is
    summed before it is broadcast (`_broadcast_sum`).

    The sum itself is a `reduce` add over the axis (of the product with the weights
    broadcast along it, if given); `xla-cpu-sum-as-dot` makes it a matrix-vector
    product for XLA:CPU."""
    shape, elem = builders.shape_of(v), builders.elem_of(v)
    values = [1.0] * shape[0] if weights is None else list(weights)
    factors = _Factors(shape[1:])
    negated = factors.split(v)
    if not factors.invariant and not factors.constants and not factors.divisors:  # nothing to take out
        varying, negated = [v], False
    else:
        varying = factors.varying
    if not varying:  # v does not vary along the axis: the sum is sum(w) times it
        factors.constants.append(math.fsum(values))
    out = _broadcast_sum(varying, weights, shape) if varying else None
    if varying and out is None:
        product = functools.reduce(builders.mul, varying)
        if weights is not None:
            product = builders.mul(product, builders.broadcast(weight_vector(values, elem), shape, [0]))
        out = builders.reduce(product, [0])
    for a in factors.invariant:
        out = a if out is None else builders.mul(out, a)
    for c in _folded(factors.constants) or ([1.0] if out is None else []):  # constants whose product is 1
        a = builders.splat(c, builders.tensor(shape[1:], elem))
        out = a if out is None else builders.mul(out, a)
    for d in factors.divisors:
        out = builders.div(out, d)
    return builders.neg(out) if negated else out


def _folded(constants: Sequence[float]) -> list[float]:
    """`constants` (factors of one product), those whose product is exact multiplied into
    one: a power of two times any constant is (multiplying by it only moves the exponent),
    so the collapsed second coefficient's 1/2 cancels the 2 of a square. A product of 1 is
    left out."""
    exact, others = 1.0, []
    for c in constants:
        if builders.power_of_two(c) or builders.power_of_two(exact):
            exact *= c
        else:
            others.append(c)
    return ([exact] if exact != 1 else []) + others


def _broadcast_sum(varying: Sequence[ir.Value], weights: Sequence[float] | None,
                   shape: Sequence[int]) -> ir.Value | None:
    """`lead_sum` of the product of `varying` when every factor is the same kind of
    broadcast (`broadcast_in_dim` with the same dimensions, keeping the leading axis
    first, no size-1 stretch) of values of one shape: the sum of the product of those
    values, broadcast after; else None."""
    ops = [v.owner.operation if isinstance(v, ir.OpResult) else None for v in varying]
    if any(op is None or op.name != "stablehlo.broadcast_in_dim" for op in ops):
        return None
    placed = _array(ops[0], "broadcast_dimensions")
    sources = [op.operands[0] for op in ops]
    src_shape = builders.shape_of(sources[0])
    if (any(_array(op, "broadcast_dimensions") != placed or builders.shape_of(v) != src_shape
            for op, v in zip(ops, sources)) or not placed or placed[0] != 0 or len(placed) == len(shape)
            or any(src_shape[i] != shape[d] for i, d in enumerate(placed))):
        return None
    total = lead_sum(functools.reduce(builders.mul, sources), weights)
    return builders.broadcast(total, shape[1:], [d - 1 for d in placed[1:]])


class _Factors:
    """The factors of a product of values with a leading axis (`lead_sum`): those that
    do not vary along it (without the axis, shaped `shape`), splat constants apart,
    divisors among them, and the others."""

    def __init__(self, shape: Sequence[int]):
        self.shape = list(shape)
        self.invariant: list[ir.Value] = []
        self.constants: list[float] = []
        self.divisors: list[ir.Value] = []
        self.varying: list[ir.Value] = []

    def split(self, v: ir.Value) -> bool:
        """Record the factors of `v`; True if the product of them is -v."""
        name = v.owner.operation.name if isinstance(v, ir.OpResult) else None
        if name == "stablehlo.multiply":
            return self.split(v.owner.operation.operands[0]) != self.split(v.owner.operation.operands[1])
        if name == "stablehlo.negate":
            return not self.split(v.owner.operation.operands[0])
        if name == "stablehlo.divide":
            divisor = self.unstretched(v.owner.operation.operands[1])
            if divisor is not None:
                self.divisors.append(divisor)
                return self.split(v.owner.operation.operands[0])
        value = builders.splat_constant(v)
        if value is not None:
            self.constants.append(value)
            return False
        invariant = self.unstretched(v)
        if invariant is not None:
            self.invariant.append(invariant)
        else:
            self.varying.append(v)
        return False

    def unstretched(self, v: ir.Value) -> ir.Value | None:
        """`v` without the leading axis if it does not vary along it, else None."""
        value = builders.splat_constant(v)
        if value is not None:
            return builders.splat(value, builders.tensor(self.shape, builders.elem_of(v)))
        if not isinstance(v, ir.OpResult) or v.owner.operation.name != "stablehlo.broadcast_in_dim":
            return None
        op = v.owner.operation
        dims = _array(op, "broadcast_dimensions")
        if 0 in dims:
            return None
        return builders.broadcast(op.operands[0], self.shape, [d - 1 for d in dims])
