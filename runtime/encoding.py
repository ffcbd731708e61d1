"""JSON encodings of what a program's `Signature` holds, without pickle.

Treedefs of tuples, lists, dicts, None and the node classes jax.export or jax.tree_util
knows; avals of the dtypes in `DTYPES`; static values that are JSON scalars, tuples/lists/dicts of
them, treedefs, objects named by module and qualified name, or frozen dataclasses, namedtuples and
hashable mappings of static values (flax NNX's GraphDef); meshes as axis names, shape, axis types and
device ids. Decoding validates every field and never imports anything named in the data: it
finds named classes and objects among the modules the process has already imported.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import ml_dtypes
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from hlopt.compiler.jax_compat import export_node_deserializer, export_node_serializer, pytree_node_builder
from hlopt.compiler.program import Signature, aval_str  # noqa: F401 - aval_str re-exported for older callers
from hlopt.passes.ir.dtypes import DTYPES  # the dtypes a file may hold


class EncodingError(ValueError):
    """A value cannot be encoded, or encoded data is malformed."""


_MAX_DEPTH = 64
# The most dimensions an aval in a file may have (XLA and jax have no use for more).
MAX_RANK = 64


def dtype_from_name(name: Any) -> np.dtype:
    """The numpy dtype named `name`, if it is one of `DTYPES`."""
    if not isinstance(name, str) or name not in DTYPES:
        raise EncodingError(f"unsupported dtype {name!r} (supported: {', '.join(DTYPES)})")
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise EncodingError(what)


# --- pytree structure ---------------------------------------------------------

_LEAF = "*"

# How a file names a pytree node class other than tuple, list, dict and None:
# - a class registered with `jax.export.register_pytree_node_serialization` (`hlopt.sparse`'s
#   BCOO and BCSR are) as {"export": [serialized name, base64 of its serialized aux data, children]};
# - any other class jax.tree_util knows (equinox modules, flax nnx State and Variables,
#   registered dataclasses, namedtuples...) defined at the top level of a module as
#   {"node": ["module:qualname", aux data as a static value (`encode_static`), children]}.
# Decoding finds the class among jax.export's registrations and the modules this process has
# already imported (a fresh process imports the same libraries before loading): it imports nothing
# named in the data, except the hlopt modules of `NODE_LOADERS`.
# serialized name -> a function importing the hlopt module that registers it (so reading a file that
# holds no such node imports nothing)
NODE_LOADERS: dict[str, Callable[[], object]] = {}
# serialized name -> what a node's aux data must satisfy given its children's avals (an error message, or None)
NODE_CHECKS: dict[str, Callable[[Any, Sequence[Any]], str | None]] = {}


def register_node_type(serialized_name: str, load: Callable[[], object] | None = None,
                       check: Callable[[Any, Sequence[Any]], str | None] | None = None) -> None:
    """Let a file hold nodes of the class registered with jax.export under `serialized_name`:
    `load()` registers it when a file holds one and it is not yet registered; `check(aux,
    children)` says what is wrong with a decoded node's aux data for its children's avals."""
    if load is not None:
        NODE_LOADERS[serialized_name] = load
    if check is not None:
        NODE_CHECKS[serialized_name] = check


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _is_namedtuple(cls: type) -> bool:
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def _node_builder(cls: type) -> Callable[[Any, Sequence[Any]], Any] | None:
    """How to build a `cls` node from aux data and children (None: jax.tree_util does not know `cls`)."""
    if _is_namedtuple(cls):
        return lambda aux, children: cls(*children)
    return pytree_node_builder(cls)


def _save_hint(cls: type) -> str:
    return (f"register it with jax.export.register_pytree_node_serialization({cls.__qualname__}, "
            "serialized_name=..., serialize_auxdata=..., deserialize_auxdata=...) before saving and loading")


def encode_tree(treedef: Any) -> Any:
    """A treedef as JSON: tuples, lists, dicts (str or int keys), None and the node classes
    described above; raises EncodingError naming a node class that cannot be saved and the call
    that makes it savable."""
    marker = object()
    skeleton = jax.tree_util.tree_unflatten(treedef, [marker] * treedef.num_leaves)

    def enc(x: Any) -> Any:
        if x is marker:
            return _LEAF
        if x is None:
            return None
        if type(x) is tuple:
            return {"tuple": [enc(c) for c in x]}
        if type(x) is list:
            return {"list": [enc(c) for c in x]}
        if type(x) is dict:
            for k in x:
                if type(k) not in (str, int):
                    raise EncodingError(f"dict key {k!r} of type {type(k).__name__}: only str and int keys can be saved")
            return {"dict": [[k, enc(v)] for k, v in x.items()]}
        children, level = jax.tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)
        cls, aux = level.node_data()
        kids = [enc(c) for c in children]
        export = export_node_serializer(cls)
        if export is not None:
            return {"export": [export[0], base64.b64encode(export[1](aux)).decode("ascii"), kids]}
        name = global_name(cls)
        where = f"pytree node of type {_type_name(cls)} cannot be saved"
        if name is None or _node_builder(cls) is None:
            raise EncodingError(f"{where}: it is not a pytree class defined at the top level of a module; {_save_hint(cls)}")
        try:
            return {"node": [name, encode_static(aux, what="aux data"), kids]}
        except EncodingError as e:
            # a node without children holds no arrays (flax NNX's GraphDef): the function can close over it
            close_over = "" if children else "; or close over it rather than pass it, as it holds no arrays"
            raise EncodingError(f"{where}: {e}; {_save_hint(cls)}{close_over}") from None

    return enc(skeleton)


def _build_export_node(name: Any, aux: Any, kids: list[Any]) -> Any:
    _check(isinstance(name, str) and isinstance(aux, str), f"malformed pytree node {_short([name, aux])}")
    entry = export_node_deserializer(name)
    if entry is None and name in NODE_LOADERS:
        NODE_LOADERS[name]()
        entry = export_node_deserializer(name)
    if entry is None:
        raise EncodingError(f"the program holds pytree nodes registered with jax.export as {name!r}, which this "
                            "process has not registered: import MODULE, the module whose "
                            "jax.export.register_pytree_node_serialization call registers that class, before loading")
    _, deserialize_aux, build = entry
    try:
        raw = base64.b64decode(aux, validate=True)
    except ValueError:
        raise EncodingError(f"malformed aux data of pytree node {name!r}") from None
    return build(deserialize_aux(raw), kids)


def _build_named_node(name: Any, aux: Any, kids: list[Any], named: bool = True) -> Any:
    _check(isinstance(name, str) and ":" in name, f"malformed pytree node {_short(name)}")
    _check(named, f"the pytree names the class {_short(name)}; {UNAUTHENTICATED_NAMES}")
    cls = resolve_global(name)
    dotted = name.replace(":", ".")
    if cls is None:
        raise EncodingError(f"the program holds pytree nodes of type {dotted}, which is not defined in this "
                            f"process: {import_advice(name.partition(':')[0])}")
    build = _node_builder(cls) if isinstance(cls, type) else None
    _check(build is not None, f"{dotted} is not a pytree node class in this process")
    return build(decode_static(aux, named=named), kids)


_NODE_KINDS = ("export", "node")
# Why a file that is not authenticated may not name classes or objects.
UNAUTHENTICATED_NAMES = ("a file that is not authenticated may hold only tuples, lists, dicts, None and classes "
                         "registered with jax.export.register_pytree_node_serialization: load it signed (share "
                         "HLOPT_KEY) or register the class's serialization")


def decode_tree(data: Any, *, named: bool = True) -> Any:
    """The treedef that `encode_tree` encoded as `data`; `named=False` (a file not authenticated)
    refuses node classes and objects named by `module:qualname`, whose unflattening would run
    with the file's data."""

    def dec(x: Any, depth: int) -> Any:
        _check(depth < _MAX_DEPTH, f"pytree nested deeper than {_MAX_DEPTH} levels")
        if x == _LEAF:
            return 0
        if x is None:
            return None
        if not (isinstance(x, dict) and len(x) == 1 and isinstance(next(iter(x.values())), list)):
            raise EncodingError(f"malformed pytree node {_short(x)}")  # built only on failure: loads run this often
        (kind, children), = x.items()
        if kind == "tuple":
            return tuple(dec(c, depth + 1) for c in children)
        if kind == "list":
            return [dec(c, depth + 1) for c in children]
        if kind == "dict":
            out = {}
            for item in children:
                if not (isinstance(item, list) and len(item) == 2 and type(item[0]) in (str, int)):
                    raise EncodingError(f"malformed dict entry {_short(item)}")
                if item[0] in out:
                    raise EncodingError(f"duplicate dict key {item[0]!r}")
                out[item[0]] = dec(item[1], depth + 1)
            return out
        if kind in _NODE_KINDS:
            _check(len(children) == 3 and isinstance(children[2], list), f"malformed pytree node {_short(x)}")
            kids = [dec(c, depth + 1) for c in children[2]]
            try:
                node = (_build_named_node(children[0], children[1], kids, named) if kind == "node"
                        else _build_export_node(children[0], children[1], kids))
                jax.tree_util.tree_structure(node)  # flattening a node built from bad aux data fails here
            except (TypeError, ValueError, AttributeError, KeyError) as e:
                if isinstance(e, EncodingError):
                    raise
                raise EncodingError(f"cannot build pytree node {_short(children[0])}: {type(e).__name__}: {e}") from None
            return node
        raise EncodingError(f"unknown pytree node kind {kind!r}")

    skeleton = dec(data, 0)
    try:
        treedef = jax.tree_util.tree_structure(skeleton)
    except (TypeError, ValueError) as e:
        raise EncodingError(f"cannot build the pytree: {e}") from None
    _check(encode_tree(treedef) == data, "the pytree is not in canonical form (it does not re-encode to itself)")
    return treedef


# --- objects named by module and qualified name ----------------------------------


def public_module(module: str) -> str:
    """The module a user imports to define what `module` defines: its name up to its first private
    part (`equinox.nn` for `equinox.nn._mlp`; `flax.nnx.statelib` as it is)."""
    parts = module.split(".")
    public = next((i for i, part in enumerate(parts) if part.startswith("_")), len(parts))
    return ".".join(parts[:max(public, 1)])


def import_advice(module: str) -> str:
    """What a loading process that lacks a class or object of `module` does about it: import the module
    (`import equinox.nn before loading`); for `__main__`, the script that saved the file, define it in a module."""
    if module == "__main__":
        return ("it was defined in the script that saved the file (__main__): define it in a module that both "
                "the saving and the loading process import, or in the loading script too")
    return f"import {public_module(module)} before loading"


def resolve_global(name: str) -> Any:
    """The object `module:qualname` names in a module this process has already imported (None
    when there is none); imports nothing and runs no module `__getattr__`."""
    module, _, qualname = name.partition(":")
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        namespace = getattr(obj, "__dict__", None)
        if not part or not isinstance(namespace, Mapping) or part not in namespace:
            return None
        obj = namespace[part]
    return obj


def global_name(obj: Any) -> str | None:
    """`module:qualname` of a class, function or module-level object that `resolve_global` finds
    again in this process (None: it has no such name)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not (isinstance(obj, type) or callable(obj)) or not isinstance(qualname, str):
        module = type(obj).__module__
        namespace = vars(sys.modules[module]) if module in sys.modules else {}
        qualname = next((k for k, v in namespace.items() if v is obj), None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    name = f"{module}:{qualname}"
    return name if resolve_global(name) is obj else None


# --- avals ----------------------------------------------------------------------


def encode_aval(aval: Any) -> dict[str, Any]:
    """`{"shape", "dtype", "weak_type"}` of a ShapedArray."""
    name = np.dtype(aval.dtype).name
    dtype_from_name(name)
    return {"shape": [int(d) for d in aval.shape], "dtype": name, "weak_type": bool(getattr(aval, "weak_type", False))}


def decode_aval(data: Any) -> jax.core.ShapedArray:
    """The ShapedArray `encode_aval` encoded, after checking every field."""
    # Messages are built only on failure (`if not ...: raise`): loads decode every aval.
    if not (isinstance(data, dict) and set(data) == {"shape", "dtype", "weak_type"}):
        raise EncodingError(f"malformed aval {_short(data)}")
    shape = data["shape"]
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise EncodingError(f"malformed shape {_short(shape)}")
    _check(len(shape) <= MAX_RANK, f"an aval of rank {len(shape)} (at most {MAX_RANK})")
    if math.prod(shape) >= 1 << 62:
        raise EncodingError(f"an aval of {_short(shape)}: more elements than any machine holds")
    if not isinstance(data["weak_type"], bool):
        raise EncodingError(f"malformed weak_type {_short(data['weak_type'])}")
    return jax.core.ShapedArray(tuple(shape), dtype_from_name(data["dtype"]), weak_type=data["weak_type"])


def tensor_type(aval: Any) -> str:
    """The MLIR tensor type of `aval`, e.g. `tensor<8x4xf32>`."""
    dims = "".join(f"{d}x" for d in aval.shape)
    return f"tensor<{dims}{DTYPES[np.dtype(aval.dtype).name]}>"


# --- static arguments -------------------------------------------------------

# The kinds of a static value that name a class (and so need an authenticated file), each with
# its named class's parts: a frozen dataclass by its init fields, a namedtuple by its values, an
# immutable (hashable) mapping class by its items. flax NNX's GraphDef is such a dataclass, of
# dataclasses, namedtuples, mappings and treedefs.
_CLASS_KINDS = ("dataclass", "namedtuple", "mapping")


def _static_parts(value: Any) -> tuple[str, list[Any]] | None:
    """(kind, parts) of a value of `_CLASS_KINDS`, else None."""
    cls = type(value)
    if dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen and all(
            f.init for f in dataclasses.fields(cls)):
        return "dataclass", [[f.name, getattr(value, f.name)] for f in dataclasses.fields(cls)]
    if _is_namedtuple(cls):
        return "namedtuple", list(value)
    if isinstance(value, Mapping) and cls.__hash__ is not None and all(type(k) in (str, int) for k in value):
        return "mapping", [[k, v] for k, v in value.items()]
    return None


def encode_static(value: Any, what: str = "static argument") -> Any:
    """A static value: None, bool, int, float, str, tuples/lists/str-keyed dicts of them, pytree
    structures (treedefs), classes, functions and module-level objects by name (`global_name`),
    and instances of `_CLASS_KINDS` by their class's name and parts."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (tuple, list):
        return {type(value).__name__: [encode_static(v, what) for v in value]}
    if type(value) is dict and all(type(k) is str for k in value):
        return {"dict": [[k, encode_static(v, what)] for k, v in value.items()]}
    if isinstance(value, jax.tree_util.PyTreeDef):
        return {"treedef": [encode_tree(value)]}
    name = None if isinstance(value, (np.ndarray, jax.Array)) else global_name(value)
    if name is not None:
        return {"global": [name]}
    parts = _static_parts(value)
    cls_name = global_name(type(value)) if parts is not None else None
    if cls_name is not None:
        kind, items = parts
        encoded = ([[k, encode_static(v, what)] for k, v in items] if kind != "namedtuple"
                   else [encode_static(v, what) for v in items])
        return {kind: [cls_name, encoded]}
    raise EncodingError(
        f"{what} {_short(value)} of type {type(value).__name__} cannot be saved: only None, bool, int, float, "
        "str, tuples/lists/str-keyed dicts of them, frozen dataclasses, namedtuples and hashable mappings of "
        "them, and classes, functions and objects defined at the top level of a module can"
    )


def decode_static(data: Any, depth: int = 0, *, named: bool = True) -> Any:
    """The static value `encode_static` encoded; a named class or object must be defined in this
    process (and is refused with `named=False`, as `decode_tree` refuses it)."""
    _check(depth < _MAX_DEPTH, f"static argument nested deeper than {_MAX_DEPTH} levels")
    if data is None or type(data) in (bool, int, float, str):
        return data
    _check(isinstance(data, dict) and len(data) == 1
           and next(iter(data)) in ("tuple", "list", "dict", "global", "treedef", *_CLASS_KINDS)
           and isinstance(next(iter(data.values())), list), f"malformed static argument {_short(data)}")
    (kind, items), = data.items()
    if kind == "treedef":
        _check(len(items) == 1, f"malformed treedef {_short(items)}")
        return decode_tree(items[0], named=named)
    if kind == "global" or kind in _CLASS_KINDS:
        _check(len(items) == (1 if kind == "global" else 2) and isinstance(items[0], str) and ":" in items[0],
               f"malformed name {_short(items)}")
        _check(named, f"the file names the object {_short(items[0])}; {UNAUTHENTICATED_NAMES}")
        obj = resolve_global(items[0])
        _check(obj is not None, f"{items[0].replace(':', '.')} is not defined in this process: "
                                f"{import_advice(items[0].partition(':')[0])}")
        return obj if kind == "global" else _build_static(kind, obj, items, depth)
    if kind == "dict":
        _check(all(isinstance(i, list) and len(i) == 2 and type(i[0]) is str for i in items),
               f"malformed static dict {_short(items)}")
        return {k: decode_static(v, depth + 1, named=named) for k, v in items}
    values = [decode_static(v, depth + 1, named=named) for v in items]
    return tuple(values) if kind == "tuple" else values


def _build_static(kind: str, cls: Any, items: list[Any], depth: int) -> Any:
    """The instance of the class `cls` that a static value of `kind` in `_CLASS_KINDS` records."""
    _check(isinstance(cls, type) and isinstance(items[1], list), f"malformed {kind} {_short(items)}")
    if kind == "namedtuple":
        _check(_is_namedtuple(cls), f"{_short(items[0])} is not a namedtuple class in this process")
        return cls(*[decode_static(v, depth + 1) for v in items[1]])
    _check(all(isinstance(i, list) and len(i) == 2 and type(i[0]) in (str, int) for i in items[1]),
           f"malformed {kind} {_short(items)}")
    fields = {k: decode_static(v, depth + 1) for k, v in items[1]}
    if kind == "dataclass":
        _check(dataclasses.is_dataclass(cls) and [f.name for f in dataclasses.fields(cls)] == list(fields),
               f"{_short(items[0])} is not a dataclass with fields {_short(list(fields))} in this process")
    else:
        _check(issubclass(cls, Mapping), f"{_short(items[0])} is not a mapping class in this process")
    try:
        return cls(**fields) if kind == "dataclass" else cls(fields)
    except (TypeError, ValueError) as e:
        raise EncodingError(f"cannot build {_short(items[0])}: {type(e).__name__}: {e}") from None


# --- meshes and shardings ---------------------------------------------------


def encode_mesh(mesh: Mesh) -> dict[str, Any]:
    """A mesh as axis names, shape, axis types and device ids."""
    return {
        "axis_names": [str(a) for a in mesh.axis_names],
        "shape": [int(s) for s in mesh.devices.shape],
        "axis_types": [t.name for t in mesh.axis_types],
        "device_ids": [int(d.id) for d in mesh.devices.flat],
    }


def devices_for(device_ids: Sequence[int]) -> list[jax.Device]:
    """The devices with these ids, else the first as many devices of this process's platform.

    Raises with the number of devices needed when there are too few.
    """
    available = jax.devices()
    by_id = {d.id: d for d in available}
    if all(i in by_id for i in device_ids):
        return [by_id[i] for i in device_ids]
    if len(available) < len(device_ids):
        raise EncodingError(
            f"the program runs on {len(device_ids)} devices but only {len(available)} "
            f"{available[0].platform} device(s) are available; run it where {len(device_ids)} are "
            f"(on CPU: XLA_FLAGS=--xla_force_host_platform_device_count={len(device_ids)})"
        )
    return available[: len(device_ids)]


def decode_mesh(data: Any) -> Mesh:
    """The mesh `encode_mesh` encoded, over this process's devices (see `devices_for`)."""
    _check(isinstance(data, dict) and set(data) == {"axis_names", "shape", "axis_types", "device_ids"},
           f"malformed mesh {_short(data)}")
    names, shape, types, ids = data["axis_names"], data["shape"], data["axis_types"], data["device_ids"]
    _check(isinstance(names, list) and all(isinstance(n, str) and n.isprintable() for n in names)
           and len(set(names)) == len(names),
           f"malformed mesh axis names {_short(names)}")
    _check(isinstance(shape, list) and len(shape) == len(names) and all(type(s) is int and s > 0 for s in shape),
           f"malformed mesh shape {_short(shape)}")
    _check(isinstance(types, list) and len(types) == len(names) and all(isinstance(t, str) and t in AxisType.__members__ for t in types),
           f"malformed mesh axis types {_short(types)}")
    _check(isinstance(ids, list) and all(type(i) is int for i in ids) and len(set(ids)) == len(ids)
           and len(ids) == math.prod(shape), f"mesh device ids {_short(ids)} do not fill shape {_short(shape)}")
    devices = np.array(devices_for(ids), dtype=object).reshape(shape)
    return Mesh(devices, tuple(names), axis_types=tuple(AxisType[t] for t in types))


def encode_spec(sharding: Any) -> list[Any] | None:
    """A NamedSharding's PartitionSpec as JSON (None for a single-device sharding)."""
    if not isinstance(sharding, NamedSharding):
        return None
    return [list(p) if isinstance(p, tuple) else p for p in sharding.spec]


def decode_spec(data: Any) -> PartitionSpec:
    """The PartitionSpec `encode_spec` encoded."""
    _check(isinstance(data, list), f"malformed partition spec {_short(data)}")
    parts = []
    for p in data:
        _check(p is None or isinstance(p, str) or (isinstance(p, list) and all(isinstance(a, str) for a in p)),
               f"malformed partition spec {_short(data)}")
        parts.append(tuple(p) if isinstance(p, list) else p)
    return PartitionSpec(*parts)


def spec_str(data: list[Any] | None) -> str:
    """An encoded spec as `P('x', None)`, or `single device`."""
    if data is None:
        return "single device"
    return "P(" + ", ".join("None" if p is None else repr(tuple(p)) if isinstance(p, list) else repr(p) for p in data) + ")"


# --- signatures ----------------------------------------------------------------


def encode_signature(sig: Signature) -> dict[str, Any]:
    """Every field of `sig` as JSON; raises EncodingError naming what cannot be saved."""
    try:
        in_tree, out_tree = encode_tree(sig.in_tree), encode_tree(sig.out_tree)
        static = [[i, encode_static(v)] for i, v in sig.static_args]
    except EncodingError as e:
        raise EncodingError(f"{sig.name}: {e}") from None
    return {
        "name": sig.name,
        "in_tree": in_tree,
        "in_avals": [encode_aval(a) for a in sig.in_avals],
        "out_tree": out_tree,
        "out_avals": [encode_aval(a) for a in sig.out_avals],
        "static_args": static,
        "mesh": None if sig.mesh is None else encode_mesh(sig.mesh),
        "device": None if sig.device is None else int(sig.device.id),
        "use_shardy": bool(sig.use_shardy),
        "kept": None if sig.kept is None else list(sig.kept),
        "donated": list(sig.donated),
    }


_SIGNATURE_FIELDS = {"name", "in_tree", "in_avals", "out_tree", "out_avals", "static_args", "mesh", "device",
                     "use_shardy"}


MAX_NAME_CHARS = 200


def decode_in_names(data: Any, count: int) -> tuple[str, ...]:
    """The manifest's `in_names`: one printable name per input leaf; empty for a file written without them."""
    if data is None or data == []:
        return ()
    _check(isinstance(data, list) and len(data) == count, f"malformed in_names: not a list of {count} names")
    for name in data:
        _check(isinstance(name, str) and name.isprintable() and 0 < len(name) <= MAX_NAME_CHARS,
               f"malformed input name {_short(name)}")
    return tuple(data)


def decode_signature(data: Any, *, named: bool = True) -> Signature:
    """The Signature encoded in `data`; checks that trees and avals agree. `named` as for `decode_tree`."""
    _check(isinstance(data, dict) and set(data) - {"kept", "donated"} == _SIGNATURE_FIELDS, "malformed signature")
    _check(isinstance(data["name"], str) and data["name"].isprintable() and len(data["name"]) <= 200,
           f"malformed signature name {_short(data['name'])}")
    _check(isinstance(data["use_shardy"], bool), "malformed use_shardy")
    device = data["device"]
    _check(device is None or (type(device) is int and device >= 0 and data["mesh"] is None),
           f"malformed device {_short(device)}")
    for key in ("in_avals", "out_avals", "static_args"):
        _check(isinstance(data[key], list), f"malformed {key}")
    in_tree, out_tree = decode_tree(data["in_tree"], named=named), decode_tree(data["out_tree"], named=named)
    in_avals = tuple(decode_aval(a) for a in data["in_avals"])
    out_avals = tuple(decode_aval(a) for a in data["out_avals"])
    _check(in_tree.num_leaves == len(in_avals),
           f"the input pytree has {in_tree.num_leaves} leaves but {len(in_avals)} input avals are listed")
    _check(out_tree.num_leaves == len(out_avals),
           f"the output pytree has {out_tree.num_leaves} leaves but {len(out_avals)} output avals are listed")
    for what, tree, avals, encoded in (("input", in_tree, in_avals, data["in_tree"]),
                                       ("output", out_tree, out_avals, data["out_tree"])):
        _check_nodes(tree, avals, encoded, what)
    kept, donated = data.get("kept"), data.get("donated", [])  # files from before them: all kept, none donated
    for what, positions in (("kept", [] if kept is None else kept), ("donated", donated)):
        _check(isinstance(positions, list) and all(type(i) is int and 0 <= i < len(in_avals) for i in positions)
               and positions == sorted(set(positions)), f"malformed {what} inputs {_short(positions)}")
    static = []
    for item in data["static_args"]:
        _check(isinstance(item, list) and len(item) == 2 and type(item[0]) is int and item[0] >= 0,
               f"malformed static argument entry {_short(item)}")
        static.append((item[0], decode_static(item[1], named=named)))
    return Signature(
        in_tree=in_tree,
        in_avals=in_avals,
        out_tree=out_tree,
        out_avals=out_avals,
        static_args=tuple(static),
        mesh=None if data["mesh"] is None else decode_mesh(data["mesh"]),
        use_shardy=data["use_shardy"],
        name=data["name"],
        device=None if device is None else devices_for([device])[0],
        kept=None if kept is None else tuple(kept),
        donated=tuple(donated),
    )


def _check_nodes(treedef: Any, avals: Sequence[Any], encoded: Any, what: str) -> None:
    """Each pytree node of `NODE_CHECKS` must agree with the avals of its children."""
    names = [name for name in NODE_CHECKS if name in _export_names(encoded)]
    if not names:
        return
    tree = jax.tree_util.tree_unflatten(treedef, avals)
    for name in names:
        cls = export_node_deserializer(name)[0]
        for node in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, cls)):
            if isinstance(node, cls):
                children, level = jax.tree_util.tree_flatten(node, is_leaf=lambda y: y is not node)
                problem = NODE_CHECKS[name](level.node_data()[1], children)
                _check(problem is None, f"{what} {problem}")


def _export_names(encoded: Any) -> set[str]:
    """The serialized names of the jax.export-registered nodes an encoded pytree holds."""
    found, stack = set(), [encoded]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if isinstance(x.get("export"), list) and x["export"] and isinstance(x["export"][0], str):
                found.add(x["export"][0])
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return found


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."
