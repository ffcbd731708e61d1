"""Small builders for StableHLO ops at the current insertion point and location.

Every function takes and returns `ir.Value`s and builds with the MLIR Python
bindings only. Shapes are static. Passes call these inside
`with op.location, ir.InsertionPoint(op):`.

One way per op: an op with attributes or a shape to infer has its typed helper
here (`broadcast`, `reduce`, `dot_general`...), as do the binary arithmetic and
comparison ops every pass uses; any other elementwise op, in particular one a
rule table names (`stablehlo.cosine`, `chlo.digamma`), is built by name with
`op(name, operands)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from hlopt.passes.mlir import func, ir, stablehlo
from hlopt.passes.target import current_target

Value = ir.Value


def i1() -> ir.Type:
    return ir.IntegerType.get_signless(1)


def i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def unsigned(elem: ir.Type) -> ir.Type:
    """The unsigned integer type as wide as integer type `elem`."""
    return ir.IntegerType.get_unsigned(ir.IntegerType(elem).width)


def shape_of(v: Value) -> list[int]:
    """The static shape of a ranked tensor value."""
    return list(ir.RankedTensorType(v.type).shape)


def elem_of(v: Value) -> ir.Type:
    return ir.RankedTensorType(v.type).element_type


def tensor(shape: Sequence[int], elem: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(shape), elem)


def is_integer(elem: ir.Type) -> bool:
    return isinstance(elem, ir.IntegerType)


def scalar(value: int | float | bool, elem: ir.Type) -> Value:
    """A rank-0 constant; complex types get `value` as the real part."""
    if isinstance(elem, ir.ComplexType):
        return convert(scalar(value, elem.element_type), elem)
    if isinstance(elem, ir.IntegerType):
        attr = ir.IntegerAttr.get(elem, int(value))
    else:
        attr = ir.FloatAttr.get(elem, float(value))
    return stablehlo.constant(ir.DenseElementsAttr.get_splat(tensor([], elem), attr))


def full(shape: Sequence[int], value: int | float | bool, elem: ir.Type) -> Value:
    return broadcast(scalar(value, elem), shape, [])


def zeros_like(v: Value) -> Value:
    return full(shape_of(v), 0, elem_of(v))


def int_vector(values: Sequence[int], elem: ir.Type) -> Value:
    """A rank-1 integer constant."""
    if not values:
        return full([0], 0, elem)
    attrs = [ir.IntegerAttr.get(elem, int(x)) for x in values]
    return stablehlo.constant(ir.DenseElementsAttr.get(attrs, type=tensor([len(values)], elem)))


def iota(shape: Sequence[int], dim: int, elem: ir.Type) -> Value:
    return stablehlo.iota(tensor(shape, elem), dim)


def convert(v: Value, elem: ir.Type) -> Value:
    if elem_of(v) == elem:
        return v
    return stablehlo.convert(tensor(shape_of(v), elem), v)


# --- splat constants, calls and regions ---------------------------------------------


def splat(value: float, t: ir.Type) -> Value:
    """A constant of tensor type `t` with every element `value` (real; a complex
    type gets it as the real part, through a convert of a real splat)."""
    shape, elem = ir.RankedTensorType(t).shape, ir.RankedTensorType(t).element_type
    if isinstance(elem, ir.ComplexType):
        return convert(splat(value, tensor(shape, elem.element_type)), elem)
    if isinstance(elem, ir.IntegerType):
        attr = ir.IntegerAttr.get(elem, int(bool(value)) if elem.width == 1 else int(value))
    else:
        attr = ir.FloatAttr.get(elem, float(value))
    return stablehlo.constant(ir.DenseElementsAttr.get_splat(tensor(shape, elem), attr))


def call(callee: str, operands: Sequence[Value], result_types: Sequence[ir.Type]) -> list[Value]:
    """`func.call @callee`; its results."""
    return list(func.CallOp(list(result_types), ir.FlatSymbolRefAttr.get(callee), list(operands)).results)


TERMINATORS: dict[str, Callable[[Sequence[Value]], ir.OpView]] = {
    "func.return": func.return_,
    "stablehlo.return": stablehlo.return_,
}


def regrown(op: ir.Operation, operands: Sequence[Value], result_types: Sequence[ir.Type],
            regions: int = 0) -> ir.Operation:
    """An op of `op`'s kind and attributes with other operands and results and `regions`
    empty regions: a variadic op (reduce, sort, while, case) grown by more values."""
    return ir.Operation.create(op.name, results=list(result_types), operands=list(operands),
                               attributes={name: op.attributes[name] for name in op.attributes}, regions=regions)


def fill_region(region: ir.Region, arg_types: Sequence[ir.Type], body: Callable[..., Sequence[Value]],
                terminator: str = "stablehlo.return") -> None:
    """Append a block with arguments `arg_types` to `region`, ending in `terminator` of `body(*args)`."""
    block = region.blocks.append(*arg_types)
    with ir.InsertionPoint(block):
        TERMINATORS[terminator](list(body(*block.arguments)))


def move_block(block: ir.Block, region: ir.Region, arg_types: Sequence[ir.Type]) -> ir.Block:
    """Move the ops of `block` into a new block of `region` whose arguments are `arg_types`
    (the first ones replace `block`'s arguments; the rest are new)."""
    new = region.blocks.append(*arg_types)
    for op in list(block.operations):
        new.append(op.operation)
    for old, arg in zip(block.arguments, new.arguments):
        old.replace_all_uses_with(arg)
    return new


def broadcast(v: Value, shape: Sequence[int], dims: Sequence[int]) -> Value:
    """`broadcast_in_dim`: operand dim i becomes result dim dims[i]."""
    if list(shape) == shape_of(v) and list(dims) == list(range(len(dims))):
        return v
    return stablehlo.broadcast_in_dim(tensor(shape, elem_of(v)), v, list(dims))


def broadcast_to(v: Value, shape: Sequence[int]) -> Value:
    """Numpy-style broadcast of a value of equal rank (size-1 dims stretch)."""
    return broadcast(v, shape, range(len(shape)))


def reshape(v: Value, shape: Sequence[int]) -> Value:
    if list(shape) == shape_of(v):
        return v
    return stablehlo.reshape(tensor(shape, elem_of(v)), v)


def transpose(v: Value, perm: Sequence[int]) -> Value:
    if list(perm) == list(range(len(perm))):
        return v
    return stablehlo.transpose(v, list(perm))


def reverse(v: Value, dims: Sequence[int]) -> Value:
    return stablehlo.reverse(v, list(dims))


def slice_dim(v: Value, dim: int, start: int, limit: int, stride: int = 1) -> Value:
    """`v[..., start:limit:stride, ...]` along `dim`."""
    shape = shape_of(v)
    starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
    starts[dim], limits[dim], strides[dim] = start, limit, stride
    return slice_(v, starts, limits, strides)


def slice_(v: Value, starts: Sequence[int], limits: Sequence[int], strides: Sequence[int]) -> Value:
    if list(starts) == [0] * len(starts) and list(limits) == shape_of(v) and set(strides) <= {1}:
        return v
    return stablehlo.slice(v, list(starts), list(limits), list(strides))


def concat(values: Sequence[Value], dim: int) -> Value:
    return values[0] if len(values) == 1 else stablehlo.concatenate(list(values), dim)


def pad(v: Value, low: Sequence[int], high: Sequence[int], interior: Sequence[int], value: Value) -> Value:
    return stablehlo.pad(v, value, list(low), list(high), list(interior))


# The elementwise arithmetic and logic ops every pass uses: the bindings' own builders
# (`stablehlo.add(lhs, rhs)` builds the op at the insertion point and returns its result).
add = stablehlo.add
sub = stablehlo.subtract
mul = stablehlo.multiply
div = stablehlo.divide
rem = stablehlo.remainder
maximum = stablehlo.maximum
minimum = stablehlo.minimum
and_ = stablehlo.and_
or_ = stablehlo.or_
not_ = stablehlo.not_


def compare(a: Value, b: Value, direction: str) -> Value:
    """Elementwise comparison (`EQ`, `NE`, `LT`, `LE`, `GT`, `GE`) giving i1."""
    return stablehlo.compare(a, b, stablehlo.ComparisonDirectionAttr.get(direction))


def select(pred: Value, on_true: Value, on_false: Value) -> Value:
    return stablehlo.select(pred, on_true, on_false)


COMBINERS: dict[str, Callable[[Value, Value], Value]] = {
    "add": add,
    "max": maximum,
    "mul": mul,
    "and": and_,
    "or": or_,
}

_IDENTITIES: dict[str, int | bool] = {"add": 0, "mul": 1, "and": 1, "or": 0}


def _identity(kind: str, elem: ir.Type) -> Value:
    if kind == "max":
        if is_integer(elem):
            return scalar(-(2 ** (elem.width - 1)), elem)
        return scalar(float("-inf"), elem)
    return scalar(_IDENTITIES[kind], elem)


def _scalar_region(region: ir.Region, elems: Sequence[ir.Type], body: Callable[..., Sequence[Value]]) -> None:
    fill_region(region, [tensor([], e) for e in elems], body)


def reduce(v: Value, dims: Sequence[int], kind: str = "add") -> Value:
    """Reduce `v` over `dims` with `add`, `max`, `mul`, `and` or `or`."""
    dims = sorted(dims)
    if not dims:
        return v
    elem = elem_of(v)
    shape = [s for i, s in enumerate(shape_of(v)) if i not in dims]
    op = stablehlo.ReduceOp([tensor(shape, elem)], [v], [_identity(kind, elem)], dims)
    _scalar_region(op.body, [elem, elem], lambda a, b: [COMBINERS[kind](a, b)])
    return op.result


def sort(operands: Sequence[Value], dim: int, num_keys: int = 1, stable: bool = True) -> list[Value]:
    """Ascending sort of `operands` along `dim`, lexicographic on the first `num_keys`."""
    op = stablehlo.SortOp([v.type for v in operands], list(operands), dimension=dim, is_stable=stable)
    elems = [e for v in operands for e in (elem_of(v), elem_of(v))]

    def less(*args: Value) -> list[Value]:
        result = None
        for k in reversed(range(num_keys)):
            lt = compare(args[2 * k], args[2 * k + 1], "LT")
            if result is not None:
                eq = compare(args[2 * k], args[2 * k + 1], "EQ")
                lt = or_(lt, and_(eq, result))
            result = lt
        return [result]

    _scalar_region(op.comparator, elems, less)
    return list(op.results)


def gather(
    operand: Value,
    indices: Value,
    *,
    offset_dims: Sequence[int],
    collapsed_slice_dims: Sequence[int],
    operand_batching_dims: Sequence[int],
    start_indices_batching_dims: Sequence[int],
    start_index_map: Sequence[int],
    index_vector_dim: int,
    slice_sizes: Sequence[int],
    sorted_indices: bool = False,
) -> Value:
    dnums = stablehlo.GatherDimensionNumbers.get(
        offset_dims=list(offset_dims), collapsed_slice_dims=list(collapsed_slice_dims),
        operand_batching_dims=list(operand_batching_dims),
        start_indices_batching_dims=list(start_indices_batching_dims),
        start_index_map=list(start_index_map), index_vector_dim=index_vector_dim)
    return stablehlo.gather(operand, indices, dnums, list(slice_sizes), indices_are_sorted=sorted_indices)


def scatter(
    operand: Value,
    indices: Value,
    updates: Value,
    *,
    update_window_dims: Sequence[int],
    inserted_window_dims: Sequence[int],
    input_batching_dims: Sequence[int],
    scatter_indices_batching_dims: Sequence[int],
    scattered_dims_to_operand_dims: Sequence[int],
    index_vector_dim: int,
    combine: str = "add",
    sorted_indices: bool = False,
) -> Value:
    """Scatter `updates` into `operand`; `combine` is `add` or `set` (last writer wins);
    `sorted_indices` promises indices in ascending order (`indices_are_sorted`).

    Updates whose window falls outside `operand` are dropped, as XLA does.
    """
    dnums = stablehlo.ScatterDimensionNumbers.get(
        update_window_dims=list(update_window_dims), inserted_window_dims=list(inserted_window_dims),
        input_batching_dims=list(input_batching_dims),
        scatter_indices_batching_dims=list(scatter_indices_batching_dims),
        scattered_dims_to_operand_dims=list(scattered_dims_to_operand_dims), index_vector_dim=index_vector_dim)
    op = stablehlo.ScatterOp([operand.type], [operand], indices, [updates], dnums, indices_are_sorted=sorted_indices)
    elem = elem_of(operand)
    if combine == "add":
        _scalar_region(op.update_computation, [elem, elem], lambda a, b: [add(a, b)])
    else:
        _scalar_region(op.update_computation, [elem, elem], lambda a, b: [b])
    return op.results[0]


SCAN_BLOCK = 16


def prefix_scan(v: Value, axis: int, kind: str = "add") -> Value:
    """Inclusive prefix `add`, `max` or `mul` along `axis`.

    Blocks of `SCAN_BLOCK` elements are scanned by one `reduce_window`, the block totals are
    scanned the same way (recursively) and combined back in: O(n SCAN_BLOCK) work in a few
    kernels per level, which XLA compiles in a fraction of the time an odd-even recursion
    (log2(n) levels of interleaving pads, one kernel each) takes.
    """
    shape = shape_of(v)
    n = shape[axis]
    if n <= SCAN_BLOCK:
        return _window_scan(v, axis, kind)
    blocks = -(-n // SCAN_BLOCK)
    identity = _identity(kind, elem_of(v))
    rank = len(shape)
    high = [0] * rank
    high[axis] = blocks * SCAN_BLOCK - n
    padded = pad(v, [0] * rank, high, [0] * rank, identity)
    split = [*shape[:axis], blocks, SCAN_BLOCK, *shape[axis + 1 :]]
    inner = _window_scan(reshape(padded, split), axis + 1, kind)
    totals_shape = [*shape[:axis], blocks, *shape[axis + 1 :]]
    totals = prefix_scan(reshape(slice_dim(inner, axis + 1, SCAN_BLOCK - 1, SCAN_BLOCK), totals_shape), axis, kind)
    low = [0] * rank
    low[axis] = 1
    before = pad(slice_dim(totals, axis, 0, blocks - 1), low, [0] * rank, [0] * rank, identity)
    keep = [d for d in range(rank + 1) if d != axis + 1]
    out = COMBINERS[kind](broadcast(before, split, keep), inner)
    return slice_dim(reshape(out, [*shape[:axis], blocks * SCAN_BLOCK, *shape[axis + 1 :]]), axis, 0, n)


def _window_scan(v: Value, axis: int, kind: str) -> Value:
    """Inclusive prefix along a short `axis`: one `reduce_window` whose window ends at each element."""
    shape = shape_of(v)
    n, rank = shape[axis], len(shape)
    if n < 2:
        return v
    window = [1] * rank
    window[axis] = n
    padding = [[0, 0] for _ in range(rank)]
    padding[axis] = [n - 1, 0]
    return reduce_window(v, _identity(kind, elem_of(v)), kind, window, [1] * rank, padding, [1] * rank, [1] * rank)


def while_loop(inits: Sequence[Value], cond: Callable[..., Value], body: Callable[..., Sequence[Value]]) -> list[Value]:
    """`stablehlo.while` over the loop state `inits`: `cond(*state)` gives an i1 scalar,
    `body(*state)` the next state."""
    types = [v.type for v in inits]
    op = stablehlo.WhileOp(types, list(inits))
    for region, fn in ((op.cond, cond), (op.body, body)):
        block = region.blocks.append(*types)
        with ir.InsertionPoint(block):
            out = fn(*block.arguments)
            stablehlo.return_([out] if isinstance(out, Value) else list(out))
    return list(op.results)


# --- ops for reverse mode (vjp-expand) ----------------------------------------------


def is_differentiable(t: ir.Type) -> bool:
    """True for ranked tensors of floating-point or complex numbers."""
    return isinstance(t, ir.RankedTensorType) and isinstance(t.element_type, (ir.FloatType, ir.ComplexType))


def op(name: str, operands: Sequence[Value], result_type: ir.Type | None = None,
       attributes: dict[str, ir.Attribute] | None = None) -> Value:
    """The one result of op `name` (`stablehlo.cosine`, `chlo.digamma`...); the type of
    `operands[0]` unless `result_type` is given."""
    rt = result_type if result_type is not None else operands[0].type
    return ir.Operation.create(name, results=[rt], operands=list(operands), attributes=attributes or {}).result


def neg(a: Value) -> Value:
    return stablehlo.negate(a)


def clamp(lo: Value, v: Value, hi: Value) -> Value:
    """`min(max(v, lo), hi)`; `lo` and `hi` may be rank 0."""
    return stablehlo.clamp(lo, v, hi)


def real(v: Value) -> Value:
    return stablehlo.real(v)


def imag(v: Value) -> Value:
    return stablehlo.imag(v)


def complex_(re: Value, im: Value) -> Value:
    return stablehlo.complex(re, im)


def dynamic_slice(v: Value, starts: Sequence[Value], sizes: Sequence[int]) -> Value:
    """`v[starts[0]:starts[0]+sizes[0], ...]`, starts clamped so the slice fits."""
    return stablehlo.dynamic_slice(v, list(starts), list(sizes))


def dynamic_update_slice(v: Value, update: Value, starts: Sequence[Value]) -> Value:
    """`v` with `update` written at `starts` (clamped so it fits, as dynamic_slice clamps)."""
    return stablehlo.dynamic_update_slice(v, update, list(starts))


def precision_of(op: ir.Operation) -> ir.Attribute | None:
    """The `precision_config` of `op` (a dot_general or convolution), if it has one."""
    return op.attributes["precision_config"] if "precision_config" in op.attributes else None


def swapped_precision(precision: ir.Attribute | None) -> ir.Attribute | None:
    """A dot_general's `precision_config` (one entry per operand) for its operands swapped."""
    if precision is None:
        return None
    return ir.ArrayAttr.get(list(reversed(list(ir.ArrayAttr(precision)))))


def program_precision() -> ir.Attribute | None:
    """The `precision_config` of a product of the program being compiled that sets none
    (`hlopt.passes.target.Target.precision`); None where the program leaves it to the compiler."""
    name = current_target().precision
    if name is None:
        return None
    each = ir.Attribute.parse(f"#stablehlo<precision {name}>")
    return ir.ArrayAttr.get([each, each])


def dot_general(
    lhs: Value,
    rhs: Value,
    *,
    lhs_batch: Sequence[int],
    rhs_batch: Sequence[int],
    lhs_contract: Sequence[int],
    rhs_contract: Sequence[int],
    elem: ir.Type,
    precision_config: ir.Attribute | None,
) -> Value:
    """`dot_general` with result dims (batch, lhs free, rhs free) of element type `elem`, and the
    precision `precision_config` (that of the op the product derives from; None: the program's,
    `program_precision`)."""
    if precision_config is None:
        precision_config = program_precision()
    ls, rs = shape_of(lhs), shape_of(rhs)
    lhs_free = [ls[d] for d in range(len(ls)) if d not in lhs_batch and d not in lhs_contract]
    rhs_free = [rs[d] for d in range(len(rs)) if d not in rhs_batch and d not in rhs_contract]
    dims = stablehlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=list(lhs_batch),
        rhs_batching_dimensions=list(rhs_batch),
        lhs_contracting_dimensions=list(lhs_contract),
        rhs_contracting_dimensions=list(rhs_contract),
    )
    shape = [ls[d] for d in lhs_batch] + lhs_free + rhs_free
    return stablehlo.dot_general(tensor(shape, elem), lhs, rhs, dims, precision_config=precision_config)


def _padding_attr(padding: Sequence[Sequence[int]]) -> ir.Attribute:
    """The `[rank, 2]` i64 padding attribute of a windowed op (rank >= 1)."""
    flat = [ir.IntegerAttr.get(i64(), int(x)) for pair in padding for x in pair]
    return ir.DenseElementsAttr.get(flat, type=tensor([len(padding), 2], i64()))


def reduce_window(
    v: Value,
    init: Value,
    kind: str,
    window: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[Sequence[int]],
    base_dilations: Sequence[int],
    window_dilations: Sequence[int],
) -> Value:
    """`v` reduced over each window with `kind` (`add`, `max`, `mul`...) from the rank-0 `init`."""
    def dilate(n: int, d: int) -> int:
        return 0 if n == 0 else (n - 1) * d + 1

    out = [(dilate(n, bd) + lo + hi - dilate(w, wd)) // s + 1
           for n, (lo, hi), w, s, bd, wd in zip(shape_of(v), padding, window, strides, base_dilations, window_dilations)]
    elem = elem_of(v)
    op_ = stablehlo.ReduceWindowOp([tensor(out, elem)], [v], [init], list(window), window_strides=list(strides),
                                   base_dilations=list(base_dilations), window_dilations=list(window_dilations),
                                   padding=_padding_attr(padding))
    _scalar_region(op_.body, [elem, elem], lambda a, b: [COMBINERS[kind](a, b)])
    return op_.result


def select_and_scatter_add(
    operand: Value,
    source: Value,
    direction: str,
    window: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[Sequence[int]],
) -> Value:
    """Each element of `source` added at the element of its window of `operand` that
    wins the comparison `direction` (`GE`: the first maximum, `LE`: the first minimum)."""
    elem = elem_of(operand)
    op_ = stablehlo.SelectAndScatterOp(operand.type, operand, source, scalar(0, elem),
                                       window_dimensions=list(window), window_strides=list(strides),
                                       padding=_padding_attr(padding))
    _scalar_region(op_.select, [elem, elem], lambda a, b: [compare(a, b, direction)])
    _scalar_region(op_.scatter, [elem, elem], lambda a, b: [add(a, b)])
    return op_.result


ZERO_PRESERVING = ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.transpose", "stablehlo.convert")


def splat_constant(v: Value) -> float | int | None:
    """The value of a real splat constant (possibly broadcast, reshaped, transposed or converted), else None.

    Complex constants give None: the MLIR bindings cannot read complex dense
    attributes (reading one raises), so they are never known by value."""
    if not isinstance(v, ir.OpResult):
        return None
    owner = v.owner.operation
    if owner.name in ZERO_PRESERVING:
        return splat_constant(owner.operands[0])
    if owner.name != "stablehlo.constant" or isinstance(elem_of(v), ir.ComplexType):
        return None
    attr = owner.attributes["value"]
    if not isinstance(attr, ir.DenseElementsAttr) or not attr.is_splat:
        return None
    splat = attr.get_splat_value()
    if isinstance(splat, ir.FloatAttr):
        return ir.FloatAttr(splat).value
    if isinstance(splat, ir.IntegerAttr):
        return ir.IntegerAttr(splat).value
    return None


def is_zero_constant(v: Value) -> bool:
    """True if `v` is a real splat zero constant, possibly broadcast, reshaped, converted
    or multiplied by a finite splat constant (a scaled zero)."""
    if not isinstance(v, ir.OpResult):
        return False
    owner = v.owner.operation
    if owner.name in ZERO_PRESERVING:
        return is_zero_constant(owner.operands[0])
    if owner.name == "stablehlo.multiply":
        a, b = owner.operands
        return any(is_zero_constant(x) and _is_finite(splat_constant(y)) for x, y in ((a, b), (b, a)))
    return splat_constant(v) == 0


def _is_finite(value: float | int | None) -> bool:
    return value is not None and math.isfinite(value)


def power_of_two(value: float) -> bool:
    """True if `value` is +-2^e: multiplying by it is exact (in range)."""
    return value != 0 and math.isfinite(value) and math.frexp(abs(value))[0] == 0.5


def int_constant(v: Value) -> int | None:
    """The value of a splat integer constant (possibly broadcast or reshaped), else None."""
    if not isinstance(v, ir.OpResult):
        return None
    owner = v.owner.operation
    if owner.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape"):
        return int_constant(owner.operands[0])
    if owner.name != "stablehlo.constant" or not is_integer(elem_of(v)):
        return None
    attr = ir.DenseElementsAttr(owner.attributes["value"])
    return ir.IntegerAttr(attr.get_splat_value()).value if attr.is_splat else None


def reducer_kind(region_op: ir.Operation) -> str | None:
    """For an op whose first region is `^bb(a, b): r = OP a, b; return r`, the name of OP;
    "replace" for a region that returns its second argument (scatter's set); else None."""
    block = region_op.regions[0].blocks[0]
    ops, args = list(block.operations), list(block.arguments)
    if len(args) != 2:
        return None
    if len(ops) == 1 and list(ops[0].operands) == [args[1]]:
        return "replace"
    if len(ops) == 2 and list(ops[0].operands) == args and list(ops[1].operands) == [ops[0].result]:
        return ops[0].name
    return None


def unique_symbol(names: set[str], base: str) -> str:
    """`base`, or `base_1`, `base_2`... the first not in `names` (which it joins)."""
    name, i = base, 0
    while name in names:
        i += 1
        name = f"{base}_{i}"
    names.add(name)
    return name


def clone_function(src: ir.Operation, into: ir.Block, name: str, public: bool) -> ir.Operation:
    """A copy of `func.func` `src` named `name` at the end of `into`, without argument and
    result attributes, public or private."""
    new = src.clone(ip=ir.InsertionPoint(into))
    new.attributes["sym_name"] = ir.StringAttr.get(name)
    for attr in ("arg_attrs", "res_attrs", "sym_visibility"):
        if attr in new.attributes:
            del new.attributes[attr]
    if not public:
        new.attributes["sym_visibility"] = ir.StringAttr.get("private")
    return new


def import_functions(module: ir.Operation, text: str, base: str) -> str:
    """Copy the functions of the module `text` to the end of `module`, private and renamed `base_<name>`
    (made unique); the new name of its `@main`."""
    source = ir.Module.parse(text, module.context)
    into = module.regions[0].blocks[0]
    taken = {ir.StringAttr(o.attributes["sym_name"]).value for o in into.operations if "sym_name" in o.attributes}
    functions = [(f.operation, ir.StringAttr(f.attributes["sym_name"]).value) for f in source.body.operations]
    names = {old: unique_symbol(taken, f"{base}_{old}") for _, old in functions}
    for old, new in names.items():
        ir.SymbolTable.replace_all_symbol_uses(old, new, source.operation)
    for f, old in functions:
        clone_function(f, into, names[old], public=False)
    return names["main"]


def has_uses(v: Value) -> bool:
    return next(iter(v.uses), None) is not None


def nested_ops(op: ir.Operation) -> list[ir.Operation]:
    """Every op inside the regions of `op`, at any depth, in program order."""
    found: list[ir.Operation] = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                found.append(inner.operation)
                found.extend(nested_ops(inner.operation))
    return found


def functions(module_body: ir.Block) -> tuple[dict[str, ir.Operation], set[str]]:
    """The `func.func`s of a module body by name, and every symbol name it defines."""
    funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op.operation
             for op in module_body.operations if op.operation.name == "func.func"}
    names = {ir.StringAttr(op.attributes["sym_name"]).value
             for op in module_body.operations if "sym_name" in op.attributes}
    return funcs, names
