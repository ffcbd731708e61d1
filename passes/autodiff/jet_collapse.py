"""`jet-collapse`: a jet over directions whose K-th coefficients are only summed becomes collapsed.

`jax.vmap` of `hlopt.jet` over directions (the primal not batched) lowers to one
directions-batched annotation, `backend_config = {order = K, directions = R}`,
whose coefficients carry a leading R axis. When every use of each K-th output
coefficient is a sum over that axis (a `stablehlo.reduce` add over dimension 0,
possibly after converts, reshapes that keep the axis, and multiplications by a
splat constant, as jax emits for the factorial scaling), the annotation becomes
the collapsed one, `{order = K, collapsed = true}`: the K-th input coefficients
summed over the directions (a zero stays a constant), the K-th outputs without the
axis, and the chain rebuilt on them without the sum. `jet-expand` then carries
that coefficient once instead of R times. Anything else is left as it is.

    %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z)
             {backend_config = {order = 2, directions = 3}, called_computations = [@f]}
             : (tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<3xf32>)
    %s = stablehlo.reduce(%r#2 init: %zero) applies stablehlo.add across dimensions = [0]

becomes

    %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z0)
             {backend_config = {order = 2, collapsed = true}, called_computations = [@f]}
             : (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
    // %s is %r#2
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes.ir import annotation_names, builders
from hlopt.passes.autodiff import jet_directions
from hlopt.passes.mlir import ir, stablehlo
from hlopt.passes.rewrite.patterns import Pattern, PatternPass, PatternSet
from hlopt.passes.target import PORTABLE
from hlopt.passes.ir.walk import call_target

ANNOTATION = annotation_names.JET
PASS_THROUGH = ("stablehlo.convert", "stablehlo.reshape", "stablehlo.multiply")


def _splat_factor(op: ir.Operation, value: ir.Value) -> ir.Attribute | None:
    """For `multiply(value, c)` (either side) with c a splat constant, c's element attribute."""
    other = op.operands[1] if op.operands[0] == value else op.operands[0]
    if other == value or not isinstance(other, ir.OpResult):
        return None
    source = other.owner.operation
    if source.name == "stablehlo.broadcast_in_dim":
        if not isinstance(source.operands[0], ir.OpResult) or builders.shape_of(source.operands[0]):
            return None
        source = source.operands[0].owner.operation
    if source.name != "stablehlo.constant":
        return None
    attr = source.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr) or not attr.is_splat:
        return None
    return attr.get_splat_value()


def _is_direction_sum(op: ir.Operation) -> bool:
    """A one-operand `reduce` add over dimension 0 from zero."""
    return (op.name == "stablehlo.reduce" and len(op.operands) == 2
            and list(ir.DenseI64ArrayAttr(op.attributes["dimensions"])) == [0]
            and builders.reducer_kind(op) == "stablehlo.add" and builders.is_zero_constant(op.operands[1]))


def only_summed(value: ir.Value) -> bool:
    """True if every use of `value` (leading axis: the directions) reaches a sum over
    that axis through converts, axis-keeping reshapes and splat-constant factors."""
    for use in value.uses:
        op = use.owner
        if _is_direction_sum(op):
            continue
        if op.name not in PASS_THROUGH or (op.name == "stablehlo.multiply" and _splat_factor(op, value) is None):
            return False
        if op.name == "stablehlo.reshape" and builders.shape_of(op.result)[:1] != builders.shape_of(value)[:1]:
            return False
        if not only_summed(op.result):
            return False
    return True


def _rebuild(value: ir.Value, summed: ir.Value) -> None:
    """Replace each sum over the directions reached from `value` by the same chain on
    `summed` (value summed over the directions), leaving the old chain unused."""
    for use in list(value.uses):
        op = use.owner
        if _is_direction_sum(op):
            op.result.replace_all_uses_with(summed)
            continue
        shape = builders.shape_of(op.result)[1:]
        with ir.InsertionPoint(op), op.location:
            if op.name == "stablehlo.convert":
                new = builders.convert(summed, builders.elem_of(op.result))
            elif op.name == "stablehlo.reshape":
                new = builders.reshape(summed, shape)
            else:
                factor = _splat_factor(op, value)
                t = builders.tensor(shape, builders.elem_of(op.result))
                new = builders.mul(summed, stablehlo.constant(ir.DenseElementsAttr.get_splat(t, factor)))
        _rebuild(op.result, new)


def collapse(op: ir.Operation) -> list[ir.Value | None] | None:
    """The collapsed form of one directions-batched `hlopt.jet` annotation, if its K-th
    output coefficients are only summed over the directions: its results, None for each
    K-th coefficient, whose sums are rebuilt on the collapsed one; None to leave the op."""
    if call_target(op) != ANNOTATION:
        return None
    config = op.attributes["backend_config"] if "backend_config" in op.attributes else None
    if not isinstance(config, ir.DictAttr) or sorted(a.name for a in config) != ["directions", "order"] \
            or not isinstance(config["order"], ir.IntegerAttr):  # jet-expand reports a malformed config
        return None
    order = config["order"].value
    if order < 1 or len(op.operands) % (order + 1) or len(op.results) % (order + 1):
        return None
    n_in, n_out = len(op.operands) // (order + 1), len(op.results) // (order + 1)
    kth_out = [op.results[n_out + i * order + order - 1] for i in range(n_out)]
    if not any(next(iter(r.uses), None) is not None for r in kth_out) or not all(only_summed(r) for r in kth_out):
        return None
    kth_in = {n_in + i * order + order - 1 for i in range(n_in)}
    operands = [v if i not in kth_in else
                builders.splat(0, builders.tensor(builders.shape_of(v)[1:], builders.elem_of(v)))
                if builders.is_zero_constant(v) else jet_directions.lead_sum(v)
                for i, v in enumerate(op.operands)]
    kth_types = {n_out + i * order + order - 1 for i in range(n_out)}
    types = [builders.tensor(builders.shape_of(r)[1:], builders.elem_of(r)) if i in kth_types else r.type
             for i, r in enumerate(op.results)]
    new = ir.Operation.create(op.name, results=types, operands=operands,
                              attributes={name: op.attributes[name] for name in op.attributes})
    new.attributes["backend_config"] = ir.DictAttr.get({"order": config["order"],
                                                        "collapsed": ir.BoolAttr.get(True)})
    for i in kth_types:
        _rebuild(op.results[i], new.results[i])
    return [None if i in kth_types else value for i, value in enumerate(new.results)]


class JetCollapse(PatternPass):
    """Collapse direction-batched jets summed over their directions.

    Turn directions-batched jets whose K-th coefficients are only summed over the
    directions into collapsed jets (see the module docstring); runs before `jet-expand`."""

    name: ClassVar[str] = "jet-collapse"
    platforms: ClassVar[tuple[str, ...]] = PORTABLE
    PATTERNS: ClassVar[PatternSet] = PatternSet(Pattern("stablehlo.custom_call", collapse), erase_feeders=False)
