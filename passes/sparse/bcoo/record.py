"""What one `hlopt.bcoo.<op>` is: its `Record` (signature, shape rule, lowering, batching
parameters, `Derivative`, and hooks over abstract terms for what tables cannot say), and the
checked view (`BcooOp`) that its lowering and every reader of the IR get. `hlopt.sparse.rules`
turns a record into the jax primitive, with no per-op code of its own.

A record's `Signature` names the operand roles, the result count and the `backend_config`
fields beyond the common ones (`shape`, `n_batch`, `n_dense`, `indices_sorted`,
`unique_indices`). The same signature builds the config the Python primitive emits
(`Record.config`) and checks the config lower-bcoo reads (`Record.read`), so the two cannot
drift; the shape rule gives the result buffers from the config and the operand shapes, for
abstract evaluation and for the checks of lower-bcoo alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

from hlopt.passes.sparse import shapes
from hlopt.passes.base import PassError
from hlopt.passes.sparse.names import PREFIX
from hlopt.passes.mlir import ir

# Operand roles: a BCOO's `data` and `indices`, a `dense` array, gather `starts`.
DATA, INDICES, DENSE, STARTS = "data", "indices", "dense", "starts"

# Field kinds: a non-negative i64 array, any i64 array, an integer, a boolean, a string, and
# dot_general's `((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))` as arrays of i64 arrays.
SHAPE, INTS, INT, BOOL, STR, DIMS = "shape", "ints", "int", "bool", "str", "dims"

COMMON_FIELDS = {"shape": SHAPE, "n_batch": INT, "n_dense": INT}
FLAGS = {"indices_sorted": BOOL, "unique_indices": BOOL}

# Element-type rules: every data and dense operand and the data result share one type (SAME),
# or the operands are any numbers converted to the result's type (NUMBERS: the products).
SAME, NUMBERS = "same", "numbers"


class Signature(NamedTuple):
    """Operand roles, result count, and the backend_config fields (beyond the common ones)."""

    operands: tuple[str, ...]
    results: int
    fields: Mapping[str, str] = {}
    optional: Mapping[str, str] = {}
    variadic: bool = False  # the operand roles repeat, once per operand array (concatenate)

    def roles(self, n_operands: int) -> tuple[str, ...]:
        """The role of each of `n_operands` operands (a variadic signature's roles repeated)."""
        if self.variadic and n_operands and n_operands % len(self.operands) == 0:
            return self.operands * (n_operands // len(self.operands))
        return self.operands

    def field_errors(self, config: Mapping[str, Any]) -> list[str]:
        """What in `config` does not fit the fields: a required one missing, or one of the wrong kind."""
        errors = []
        for fields, required in ((COMMON_FIELDS, True), (self.fields, True), (FLAGS, False), (self.optional, False)):
            for key, kind in fields.items():
                if key not in config:
                    if required:
                        errors.append(f"backend_config has no '{key}' ({_KIND_NAMES[kind]})")
                elif not _is_kind(config[key], kind):
                    errors.append(f"backend_config '{key}' must be {_KIND_NAMES[kind]}, got {config[key]!r}")
        return errors

    def known(self) -> set[str]:
        return {*COMMON_FIELDS, *FLAGS, *self.fields, *self.optional}


Shape = shapes.Shape
ShapeRule = Callable[..., list[Shape]]
BatchedParams = Callable[[dict[str, Any], int], dict[str, Any]]


def same_params(params: dict[str, Any], size: int) -> dict[str, Any]:
    """The batching parameters of an op whose parameters do not name dims: unchanged."""
    return params


@dataclasses.dataclass(frozen=True)
class Derivative:
    """How the data result of an op changes with its operands, declared for `hlopt.sparse` to turn
    into the primitive's JVP and transpose rules (the other results, indices, have zero tangents).

    - `linear`: the operands the data result is linear in, each with the others fixed (so the JVP
      binds the op on each nonzero tangent in turn and adds the terms), or the role `DATA`: every
      data operand (variadic ops). Every other operand is an integer operand without a tangent.
    - `joint`: the data result is linear in all `linear` operands together (the JVP binds the op
      once on all their tangents): concatenate.
    - `transpose(t, ct, *operands, **params)`: the cotangent of the one operand `t.is_undefined`
      holds (a joint op: a list, one per `linear` operand, None for a known one), `ct` the data
      result's cotangent; None (`SELECTS`): the op only moves, repeats or drops elements of its
      one linear operand, and the cotangent is found by running it on the elements' positions.
    - `jvp(t, primals, tangents, outs, **params)`: the data tangent (None: zero) of an op that is
      not linear in its operands (fromdense, whose indices depend on the values); `linear` is
      then empty.

    Rules are functions over `hlopt.passes.sparse.bcoo.terms.Terms`: data, never jax.
    """

    linear: tuple[int, ...] | str = (0,)
    joint: bool = False
    transpose: Callable[..., Any] | None = None
    jvp: Callable[..., Any] | None = None

    def linear_operands(self, roles: Sequence[str]) -> tuple[int, ...]:
        """The indices of the linear operands among operands with these roles."""
        if isinstance(self.linear, str):
            return tuple(i for i, role in enumerate(roles) if role == self.linear)
        return self.linear


SELECTS = None  # `Derivative.transpose` of an op that only moves, repeats or drops data elements
DATA_LINEAR = Derivative()  # linear in its data, selecting elements: most structural ops


@dataclasses.dataclass(frozen=True)
class Record:
    """One BCOO op: everything hlopt knows about `hlopt.bcoo.<name>`, its jax rules included.

    - `shapes(config, *operand_shapes)`: the result buffer shapes (ValueError, TypeError or
      NotImplementedError when config and operands do not fit);
    - `lower(op)`: the StableHLO values replacing the results of the checked `BcooOp`;
    - `batched(params, size)`: the primitive's parameters for operands with one more leading batch
      dim of `size` (None: the jax side batches the op its own way);
    - `array_shape(params, operand_shapes)`: the `shape` of the config when the primitive's
      parameters do not hold one (None: they do);
    - `indices_operand`: the operand whose indices `n_batch` and `n_dense` describe (None: the
      primitive's parameters give them);
    - `type_only`: primitive parameters that the result types carry and the config does not;
    - `derivative`: its `Derivative` (None: the primitive has no JVP or transpose);
    - `batch(t, args, dims, **params)`: hook for a vmap rule that `batched` cannot give, as jax's
      batching rules: (outputs, their mapped dims);
    - `prepare_batch(t, operands, params, size)`: the operands, their mapped axes leading, as the
      op with `batched` parameters takes them (None: as they are);
    - `dtypes(t, avals, params)`: hook for the result dtypes (None: the data and dense operands'
      promoted dtype, then the indices operands' or the `index_dtype` parameter's).

    The hooks are functions over `hlopt.passes.sparse.bcoo.terms.Terms` (see `Derivative`).
    """

    name: str
    signature: Signature
    shapes: ShapeRule
    lower: Callable[[BcooOp], list[ir.Value]]
    batched: BatchedParams | None = None
    elements: str = SAME
    array_shape: Callable[[Mapping[str, Any], Sequence[Shape]], Shape] | None = None
    indices_operand: int | None = 1
    type_only: tuple[str, ...] = ()
    derivative: Derivative | None = None
    batch: Callable[..., Any] | None = None
    prepare_batch: Callable[..., list[Any]] | None = None
    dtypes: Callable[..., list[Any]] | None = None

    @property
    def target(self) -> str:
        """The custom_call target of the annotation."""
        return PREFIX + self.name

    def config(self, params: Mapping[str, Any], operands: Sequence[Sequence[int]]) -> dict[str, Any]:
        """The `backend_config` of this op bound with `params` on operands of these shapes, checked
        against the signature (a ValueError names what does not fit)."""
        unknown = sorted(set(params) - self.signature.known() - set(self.type_only))
        if unknown:
            raise ValueError(f"{self.target}: parameters {unknown} are not fields of its backend_config")
        config = {k: v for k, v in params.items() if v is not None and k not in self.type_only}
        if self.array_shape is not None:
            config["shape"] = tuple(self.array_shape(params, [tuple(s) for s in operands]))
        if self.indices_operand is not None:
            indices = tuple(operands[self.indices_operand])
            n_batch = len(indices) - 2
            config.setdefault("n_batch", n_batch)
            config.setdefault("n_dense", len(config["shape"]) - n_batch - indices[-1])
        config.setdefault("indices_sorted", False)
        config.setdefault("unique_indices", False)
        errors = self.signature.field_errors(config)
        if errors:
            raise ValueError(f"{self.target}: {errors[0]}")
        return config

    def result_shapes(self, config: Mapping[str, Any], operands: Sequence[Sequence[int]]) -> list[Shape]:
        """The result buffer shapes with this config and these operand shapes (the one rule of
        abstract evaluation and of lower-bcoo's checks)."""
        return [tuple(s) for s in self.shapes(config, *(tuple(o) for o in operands))]

    def read(self, op: ir.Operation) -> BcooOp:
        """The checked `BcooOp` view of `op`, a custom_call of this record's target; a `PassError`
        at the op, in one line, if its config, operands or results do not fit."""

        def fail(message: str) -> NoReturn:
            raise PassError(f"@{self.target}: {message}", op.location)

        raw = op.attributes["backend_config"] if "backend_config" in op.attributes else None
        if not isinstance(raw, ir.DictAttr):
            fail("needs a dictionary backend_config")
        try:
            config = {a.name: _decode(a.attr) for a in raw}
        except ValueError as e:
            fail(str(e))
        errors = self.signature.field_errors(config)
        if errors:
            fail(errors[0])
        operands = [_tensor_type(v.type) for v in op.operands]
        results = [_tensor_type(r.type) for r in op.results]
        roles = self.signature.roles(len(operands))
        if len(operands) != len(roles) or len(results) != self.signature.results:
            fail(f"takes {_count(len(roles), 'operand')} ({', '.join(roles)}) and returns "
                 f"{_count(self.signature.results, 'result')}, got {_count(len(operands), 'operand')} and "
                 f"{_count(len(results), 'result')}")
        for i, t in enumerate(operands + results):
            if t is None or not t.has_static_shape:
                fail(f"{f'operand {i}' if i < len(operands) else f'result {i - len(operands)}'} must be a "
                     "statically shaped tensor")
        for i, role in enumerate(roles):
            if role in (INDICES, STARTS) and not isinstance(operands[i].element_type, ir.IntegerType):
                fail(f"operand {i} ({role}) must have an integer element type, got {operands[i].element_type}")
        try:
            expected = self.result_shapes(config, [t.shape for t in operands])
        except (ValueError, TypeError, NotImplementedError, IndexError) as e:
            fail(f"backend_config does not fit the operands: {e}")
        for i, (t, shape) in enumerate(zip(results, expected)):
            if tuple(t.shape) != shape:
                fail(f"result {i} has type {t}, but the config and operands give shape {list(shape)}")
        rule = _product_element_errors if self.elements == NUMBERS else _element_type_errors
        errors = rule(roles, operands, results) + _size_errors(config, roles, operands)
        if errors:
            fail(errors[0])
        return BcooOp(op, self.name, config, results)


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


_MAX_ELEMENTS = (1 << 63) - 1  # the lowerings number the elements of `shape` in int64


def _size_errors(config: Mapping[str, Any], roles: Sequence[str], operands: list[ir.RankedTensorType]) -> list[str]:
    """What makes `shape` too large for the lowerings: more elements than int64 numbers, or a sparse
    dimension whose indices (and the padding index, its size) the indices' integer type cannot hold."""
    shape = tuple(config["shape"])
    total = 1
    for size in shape:
        total *= size
    if total > _MAX_ELEMENTS:
        return [f"shape {list(shape)} has {total} elements, more than the 2^63 - 1 an int64 index numbers"]
    if INDICES not in roles:
        return []
    indices = operands[roles.index(INDICES)]
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


def _index_elements(roles: Sequence[str], operands: list[ir.RankedTensorType]) -> set[ir.Type]:
    return {t.element_type for role, t in zip(roles, operands) if role == INDICES}


def _index_errors(roles: Sequence[str], operands: list[ir.RankedTensorType]) -> list[str]:
    """Every indices operand has one integer type."""
    index_elems = _index_elements(roles, operands)
    if len(index_elems) > 1:
        return [f"the indices operands must have one element type, got {', '.join(sorted(map(str, index_elems)))}"]
    return []


def _element_type_errors(roles: Sequence[str], operands: list[ir.RankedTensorType],
                         results: list[ir.RankedTensorType]) -> list[str]:
    """Element types that break the SAME rule: the data result keeps operand 0's type (every data
    operand has it), the indices result keeps the indices operands' (which have one type)."""
    elem = operands[0].element_type
    errors = [f"operand {i} ({role}) has element type {t.element_type}, not {elem} like operand 0"
              for i, (role, t) in enumerate(zip(roles, operands))
              if role in (DATA, DENSE) and t.element_type != elem]
    if results[0].element_type != elem:
        errors.append(f"result 0 has element type {results[0].element_type}, not {elem} like operand 0")
    if len(results) == 2:
        index_elems = _index_elements(roles, operands)
        got = results[1].element_type
        if not isinstance(got, ir.IntegerType) or (index_elems and got not in index_elems):
            errors.append(f"result 1 (indices) has element type {got}, not the indices operand's")
    return errors + _index_errors(roles, operands)


def _product_element_errors(roles: Sequence[str], operands: list[ir.RankedTensorType],
                            results: list[ir.RankedTensorType]) -> list[str]:
    """A product's numbers may have any numeric types (each is converted to the result's), but a
    complex operand needs a complex result; every indices operand and result has one integer type."""
    numbers = [t.element_type for role, t in zip(roles, operands) if role in (DATA, DENSE)]
    out = results[0].element_type
    errors = [f"operand {i} ({role}) has element type {t.element_type}, which is not a number"
              for i, (role, t) in enumerate(zip(roles, operands))
              if role in (DATA, DENSE) and not _is_number(t.element_type)]
    if not _is_number(out):
        errors.append(f"result 0 has element type {out}, which is not a number")
    elif any(isinstance(e, ir.ComplexType) for e in numbers) and not isinstance(out, ir.ComplexType):
        errors.append(f"result 0 has element type {out}, but a complex operand needs a complex result")
    errors += _index_errors(roles, operands)
    if len(results) == 2 and results[1].element_type not in _index_elements(roles, operands):
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
