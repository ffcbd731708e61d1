"""The `hlopt.bcoo.*` annotations as lower-bcoo reads them, checked before anything is rewritten.

`read(op)` turns one `stablehlo.custom_call @hlopt.bcoo.<name>` into a `BcooOp`:
its `backend_config` decoded to Python values and checked against the op's
`Signature` (operand and result counts, static ranked tensor types, integer
index operands, each field present with its kind), and its result types
checked against the buffer shapes `bcoo_shapes.result_shapes` derives from the
config and the operand types (the rule `hlopt.sparse` uses for abstract
evaluation) and against the element types the op keeps. Anything that does not
fit is a `PassError` at the op, in one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple, NoReturn

from hlopt.passes import bcoo_shapes as shapes
from hlopt.passes.base import PassError
from hlopt.passes.mlir import ir

PREFIX = "hlopt.bcoo."

# Operand roles: a BCOO's `data` and `indices`, a `dense` array, gather `starts`.
DATA, INDICES, DENSE, STARTS = "data", "indices", "dense", "starts"

# Field kinds: a non-negative i64 array, any i64 array, an integer, a boolean, a string, and
# dot_general's `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))` as arrays of i64 arrays.
SHAPE, INTS, INT, BOOL, STR, DIMS = "shape", "ints", "int", "bool", "str", "dims"

COMMON_FIELDS = {"shape": SHAPE, "n_batch": INT, "n_dense": INT}
FLAGS = {"indices_sorted": BOOL, "unique_indices": BOOL}


class Signature(NamedTuple):
    """Operand roles, result count, and the backend_config fields (beyond the common ones)."""

    operands: tuple[str, ...]
    results: int
    fields: Mapping[str, str] = {}
    optional: Mapping[str, str] = {}
    variadic: bool = False  # the operand roles repeat, once per operand array (concatenate)


SIGNATURES: dict[str, Signature] = {
    "todense": Signature((DATA, INDICES), 1),
    "extract": Signature((DENSE, INDICES), 1, {}, {"assume_unique": BOOL}),
    "fromdense": Signature((DENSE,), 2, {"nse": INT}),
    "multiply_dense": Signature((DATA, INDICES, DENSE), 1),
    "multiply_sparse": Signature((DATA, INDICES, DATA, INDICES), 2, {"rhs_shape": SHAPE, "driver": STR}),
    "update_layout": Signature((DATA, INDICES), 2),
    "reduce_sum": Signature((DATA, INDICES), 2, {"axes": INTS}),
    "reshape": Signature((DATA, INDICES), 2, {"new_sizes": SHAPE}, {"dimensions": INTS}),
    "slice": Signature((DATA, INDICES), 2, {"start_indices": INTS, "limit_indices": INTS, "strides": INTS}),
    "sort_indices": Signature((DATA, INDICES), 2),
    "squeeze": Signature((DATA, INDICES), 2, {"dimensions": INTS}),
    "sum_duplicates": Signature((DATA, INDICES), 2, {"nse": INT}),
    "transpose": Signature((DATA, INDICES), 2, {"permutation": INTS}),
    "gather": Signature((DATA, INDICES, STARTS), 2, {"slice_sizes": SHAPE}),
    "dot_general": Signature((DATA, INDICES, DENSE), 1, {"dimension_numbers": DIMS}),
    "dot_general_sampled": Signature((DENSE, DENSE, INDICES), 1, {"dimension_numbers": DIMS}, {"permutation": INTS}),
    "spdot_general": Signature((DATA, INDICES, DATA, INDICES), 2,
                               {"rhs_shape": SHAPE, "dimension_numbers": DIMS, "nse": INT}),
    "spdot_general_sampled": Signature((DATA, INDICES, DATA, INDICES, INDICES), 1,
                                       {"lhs_shape": SHAPE, "rhs_shape": SHAPE, "dimension_numbers": DIMS},
                                       {"permutation": INTS}),
    "broadcast_in_dim": Signature((DATA, INDICES), 2, {"new_shape": SHAPE, "broadcast_dimensions": INTS}),
    "concatenate": Signature((DATA, INDICES), 2, {"dimension": INT, "sizes": SHAPE}, variadic=True),
    "dynamic_slice": Signature((DATA, INDICES, STARTS), 2, {"slice_sizes": SHAPE}),
    "conv": Signature((DATA, INDICES, DATA, INDICES), 2, {"rhs_shape": SHAPE, "padding": INTS}),
}

# Products: their operands may have different element types, converted to the result's.
PRODUCTS = frozenset({"dot_general", "dot_general_sampled", "spdot_general", "spdot_general_sampled"})


@dataclasses.dataclass
class BcooOp:
    """One checked `hlopt.bcoo.<name>` op as a lowering rule sees it."""

    op: ir.Operation
    name: str
    config: dict[str, Any]
    result_types: list[ir.RankedTensorType]

    @property
    def operands(self) -> list[ir.Value]:
        """Read when the rule runs: rules for earlier ops may have replaced these values."""
        return list(self.op.operands)

    def layout(self, first: int = 0, shape_key: str = "shape") -> shapes.Layout:
        """The layout of the BCOO operand whose data is operand `first` (indices follow it)."""
        types = [ir.RankedTensorType(v.type) for v in self.operands[first : first + 2]]
        return shapes.layout(self.config[shape_key], types[0].shape, types[1].shape)

    def result_shape(self, i: int) -> list[int]:
        return list(self.result_types[i].shape)

    def result_elem(self, i: int) -> ir.Type:
        return self.result_types[i].element_type


def is_bcoo_op(op: ir.Operation) -> bool:
    """True for a `stablehlo.custom_call` whose target starts with `hlopt.bcoo.`."""
    return op.name == "stablehlo.custom_call" and ir.StringAttr(op.attributes["call_target_name"]).value.startswith(PREFIX)


def read(op: ir.Operation) -> BcooOp:
    """The checked `BcooOp` view of an `hlopt.bcoo.*` custom_call; a `PassError` at the op if it is malformed."""
    name = ir.StringAttr(op.attributes["call_target_name"]).value[len(PREFIX) :]

    def fail(message: str) -> NoReturn:
        raise PassError(f"@{PREFIX}{name}: {message}", op.location)

    signature = SIGNATURES.get(name)
    if signature is None:
        fail(f"unknown sparse op (known: {', '.join(sorted(SIGNATURES))})")
    raw = op.attributes["backend_config"] if "backend_config" in op.attributes else None
    if not isinstance(raw, ir.DictAttr):
        fail("needs a dictionary backend_config")
    try:
        config = {a.name: _decode(a.attr) for a in raw}
    except ValueError as e:
        fail(str(e))
    for fields, required in ((COMMON_FIELDS, True), (signature.fields, True), (FLAGS, False),
                             (signature.optional, False)):
        for key, kind in fields.items():
            if key not in config:
                if required:
                    fail(f"backend_config has no '{key}' ({_KIND_NAMES[kind]})")
            elif not _is_kind(config[key], kind):
                fail(f"backend_config '{key}' must be {_KIND_NAMES[kind]}, got {config[key]!r}")
    operands = [_tensor_type(v.type) for v in op.operands]
    results = [_tensor_type(r.type) for r in op.results]
    if signature.variadic and operands and len(operands) % len(signature.operands) == 0:
        signature = signature._replace(operands=signature.operands * (len(operands) // len(signature.operands)))
    if len(operands) != len(signature.operands) or len(results) != signature.results:
        fail(f"takes {_count(len(signature.operands), 'operand')} ({', '.join(signature.operands)}) and returns "
             f"{_count(signature.results, 'result')}, got {_count(len(operands), 'operand')} and "
             f"{_count(len(results), 'result')}")
    for i, t in enumerate(operands + results):
        if t is None or not t.has_static_shape:
            fail(f"{f'operand {i}' if i < len(operands) else f'result {i - len(operands)}'} must be a "
                 "statically shaped tensor")
    for i, role in enumerate(signature.operands):
        if role in (INDICES, STARTS) and not isinstance(operands[i].element_type, ir.IntegerType):
            fail(f"operand {i} ({role}) must have an integer element type, got {operands[i].element_type}")
    try:
        expected = shapes.result_shapes(name, config, [t.shape for t in operands])
    except (ValueError, TypeError, NotImplementedError, IndexError) as e:
        fail(f"backend_config does not fit the operands: {e}")
    for i, (t, shape) in enumerate(zip(results, expected)):
        if tuple(t.shape) != shape:
            fail(f"result {i} has type {t}, but the config and operands give shape {list(shape)}")
    errors = _element_type_errors(name, signature, operands, results) + _size_errors(config, signature, operands)
    if errors:
        fail(errors[0])
    return BcooOp(op, name, config, results)


_MAX_ELEMENTS = (1 << 63) - 1  # the lowerings number the elements of `shape` in int64


def _size_errors(config: Mapping[str, Any], signature: Signature, operands: list[ir.RankedTensorType]) -> list[str]:
    """What makes `shape` too large for the lowerings: more elements than int64 numbers, or a sparse
    dimension whose indices (and the padding index, its size) the indices' integer type cannot hold."""
    shape = tuple(config["shape"])
    total = 1
    for size in shape:
        total *= size
    if total > _MAX_ELEMENTS:
        return [f"shape {list(shape)} has {total} elements, more than the 2^63 - 1 an int64 index numbers"]
    if INDICES not in signature.operands:
        return []
    indices = operands[signature.operands.index(INDICES)]
    width = ir.IntegerType(indices.element_type).width
    n_batch = config["n_batch"]
    largest = (1 << (width - 1)) - 1
    for d in range(n_batch, n_batch + indices.shape[-1]):
        if d < len(shape) and shape[d] > largest:
            return [f"sparse dimension {d} of shape {list(shape)} is {shape[d]}, more than {indices.element_type} "
                    f"indices can address ({largest}): use {'int64' if width < 64 else 'a smaller shape'} indices"]
    return []


_KIND_NAMES = {SHAPE: "an i64 array of non-negative sizes", INTS: "an i64 array", INT: "an integer",
               BOOL: "a boolean", STR: "a string",
               DIMS: "[[lhs_contracting, rhs_contracting], [lhs_batch, rhs_batch]] (i64 arrays)"}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _is_kind(value: Any, kind: str) -> bool:
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == DIMS:
        pairs = isinstance(value, tuple) and len(value) == 2
        return pairs and all(isinstance(p, tuple) and len(p) == 2 and all(_is_kind(d, INTS) for d in p) for p in value)
    ints = isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return ints and (kind == INTS or all(v >= 0 for v in value))


def _tensor_type(t: ir.Type) -> ir.RankedTensorType | None:
    return t if isinstance(t, ir.RankedTensorType) else None


def _element_type_errors(name: str, signature: Signature, operands: list[ir.RankedTensorType],
                         results: list[ir.RankedTensorType]) -> list[str]:
    """Element types that break the op's rules: the data result keeps operand 0's type (every data
    operand has it), the indices result keeps the indices operand's."""
    if name in PRODUCTS:
        return _product_element_errors(signature, operands, results)
    elem = operands[0].element_type
    errors = [f"operand {i} ({role}) has element type {t.element_type}, not {elem} like operand 0"
              for i, (role, t) in enumerate(zip(signature.operands, operands))
              if role in (DATA, DENSE) and t.element_type != elem]
    if results[0].element_type != elem:
        errors.append(f"result 0 has element type {results[0].element_type}, not {elem} like operand 0")
    if signature.results == 2:
        index_elems = {t.element_type for role, t in zip(signature.operands, operands) if role == INDICES}
        got = results[1].element_type
        if not isinstance(got, ir.IntegerType) or (index_elems and got not in index_elems):
            errors.append(f"result 1 (indices) has element type {got}, not the indices operand's")
    if name == "multiply_sparse" and operands[1].element_type != operands[3].element_type:
        errors.append(f"the indices of both operands must have one element type, got {operands[1].element_type} "
                      f"and {operands[3].element_type}")
    return errors


def _product_element_errors(signature: Signature, operands: list[ir.RankedTensorType],
                            results: list[ir.RankedTensorType]) -> list[str]:
    """A product's numbers may have any numeric types (each is converted to the result's), but a
    complex operand needs a complex result; every indices operand and result has one integer type."""
    numbers = [t.element_type for role, t in zip(signature.operands, operands) if role in (DATA, DENSE)]
    out = results[0].element_type
    errors = [f"operand {i} ({role}) has element type {t.element_type}, which is not a number"
              for i, (role, t) in enumerate(zip(signature.operands, operands))
              if role in (DATA, DENSE) and not _is_number(t.element_type)]
    if not _is_number(out):
        errors.append(f"result 0 has element type {out}, which is not a number")
    elif any(isinstance(e, ir.ComplexType) for e in numbers) and not isinstance(out, ir.ComplexType):
        errors.append(f"result 0 has element type {out}, but a complex operand needs a complex result")
    index_elems = {t.element_type for role, t in zip(signature.operands, operands) if role == INDICES}
    if len(index_elems) > 1:
        errors.append(f"the indices operands must have one element type, got {', '.join(sorted(map(str, index_elems)))}")
    if signature.results == 2 and results[1].element_type not in index_elems:
        errors.append(f"result 1 (indices) has element type {results[1].element_type}, not the indices operands'")
    return errors


def _is_number(elem: ir.Type) -> bool:
    return isinstance(elem, (ir.IntegerType, ir.FloatType, ir.ComplexType))


def _decode(attr: ir.Attribute) -> Any:
    """A backend_config value as Python: bool, int, str, tuple, dict."""
    if isinstance(attr, ir.BoolAttr):
        return attr.value
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return tuple(attr)
    if isinstance(attr, ir.ArrayAttr):
        return tuple(_decode(a) for a in attr)
    if isinstance(attr, ir.DictAttr):
        return {a.name: _decode(a.attr) for a in attr}
    if isinstance(attr, ir.UnitAttr):
        return None
    raise ValueError(f"backend_config holds an attribute hlopt cannot read: {attr}")
