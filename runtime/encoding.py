"""JSON encodings of what a program's `Signature` holds, without pickle.

Treedefs of tuples, lists, dicts, None and the node classes of `NODE_TYPES`; avals of the dtypes in `DTYPES`;
static arguments that are JSON scalars or tuples/lists of them; meshes as
axis names, shape, axis types and device ids. Decoding validates every field
and never imports or evaluates anything named in the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import ml_dtypes
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from hlopt.compiler.program import Signature, aval_str  # noqa: F401 - aval_str re-exported for older callers
from hlopt.passes.dtypes import DTYPES  # the dtypes a file may hold


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

# pytree node classes a file may hold besides tuple, list, dict and None: stable name ->
# class, registered by the package that defines the class with the check of its aux data
# (`register_node_type`; `hlopt.sparse` registers its BCOO, whose check is the layout rule
# of `hlopt.passes.bcoo_shapes`: the runtime knows no node class itself). Each is registered with
# `register_pytree_node_class` and its aux data is a static value (see
# `encode_static`). Only registered classes are ever built.
NODE_TYPES: dict[str, type | Callable[[], type]] = {}
# node name -> what its aux data must satisfy given its children's avals (an error message, or None)
NODE_CHECKS: dict[str, Callable[[dict[str, Any], Sequence[Any]], str | None]] = {}


def register_node_type(name: str, cls: type | Callable[[], type],
                       check: Callable[[dict[str, Any], Sequence[Any]], str | None] | None = None) -> None:
    """Let files hold pytree nodes of class `cls` under the stable `name`; `check(aux,
    children)` says what is wrong with a decoded node's aux data for its children's avals.

    `cls` may be a function giving the class, called when a file first holds such a node
    (so reading a file that holds none imports nothing); a class registered under `name`
    is never replaced by such a function."""
    if isinstance(cls, type) or not isinstance(NODE_TYPES.get(name), type):
        NODE_TYPES[name] = cls
    if check is not None:
        NODE_CHECKS[name] = check


def _node_name(x: Any) -> str | None:
    return next((name for name, cls in NODE_TYPES.items() if type(x) is cls), None)


def _node_class(name: str) -> type:
    cls = NODE_TYPES[name]
    if not isinstance(cls, type):
        cls = NODE_TYPES[name] = cls()
    return cls


def encode_tree(treedef: Any) -> Any:
    """A treedef of tuples, lists, dicts (str or int keys), None and `NODE_TYPES` as JSON."""
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
        name = _node_name(x)
        if name is None:
            raise EncodingError(
                f"pytree node of type {type(x).__module__}.{type(x).__qualname__} cannot be saved: "
                f"only tuples, lists, dicts, None and {', '.join(NODE_TYPES)} can "
                "(flatten it to those at the function boundary)"
            )
        children, level = jax.tree_util.tree_flatten(x, is_leaf=lambda y: y is not x)
        return {"node": [name, encode_static(level.node_data()[1]), [enc(c) for c in children]]}

    return enc(skeleton)


def decode_tree(data: Any) -> Any:
    """The treedef that `encode_tree` encoded as `data`."""

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
        if kind == "node":
            if not (len(children) == 3 and isinstance(children[0], str) and children[0] in NODE_TYPES
                    and isinstance(children[2], list)):
                raise EncodingError(f"unknown pytree node {_short(children[:1])} (known: {', '.join(NODE_TYPES)})")
            aux = decode_static(children[1])
            kids = [dec(c, depth + 1) for c in children[2]]
            try:
                node = _node_class(children[0]).tree_unflatten(aux, kids)
                jax.tree_util.tree_structure(node)  # flattening a node built from bad aux data fails here
            except (TypeError, ValueError, AttributeError, KeyError) as e:
                raise EncodingError(f"cannot build pytree node {children[0]}: {type(e).__name__}: {e}") from None
            return node
        raise EncodingError(f"unknown pytree node kind {kind!r}")

    skeleton = dec(data, 0)
    try:
        treedef = jax.tree_util.tree_structure(skeleton)
    except (TypeError, ValueError) as e:
        raise EncodingError(f"cannot build the pytree: {e}") from None
    _check(encode_tree(treedef) == data, "the pytree is not in canonical form (it does not re-encode to itself)")
    return treedef


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


def encode_static(value: Any) -> Any:
    """A static value: None, bool, int, float, str, or tuples/lists/str-keyed dicts of them."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (tuple, list):
        return {type(value).__name__: [encode_static(v) for v in value]}
    if type(value) is dict and all(type(k) is str for k in value):
        return {"dict": [[k, encode_static(v)] for k, v in value.items()]}
    raise EncodingError(
        f"static argument {value!r} of type {type(value).__name__} cannot be saved: "
        "only None, bool, int, float, str and tuples/lists/str-keyed dicts of them can"
    )


def decode_static(data: Any, depth: int = 0) -> Any:
    """The static argument `encode_static` encoded."""
    _check(depth < _MAX_DEPTH, f"static argument nested deeper than {_MAX_DEPTH} levels")
    if data is None or type(data) in (bool, int, float, str):
        return data
    _check(isinstance(data, dict) and len(data) == 1 and next(iter(data)) in ("tuple", "list", "dict")
           and isinstance(next(iter(data.values())), list), f"malformed static argument {_short(data)}")
    (kind, items), = data.items()
    if kind == "dict":
        _check(all(isinstance(i, list) and len(i) == 2 and type(i[0]) is str for i in items),
               f"malformed static dict {_short(items)}")
        return {k: decode_static(v, depth + 1) for k, v in items}
    values = [decode_static(v, depth + 1) for v in items]
    return tuple(values) if kind == "tuple" else values


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


def decode_signature(data: Any) -> Signature:
    """The Signature encoded in `data`; checks that trees and avals agree."""
    _check(isinstance(data, dict) and set(data) - {"kept", "donated"} == _SIGNATURE_FIELDS, "malformed signature")
    _check(isinstance(data["name"], str) and data["name"].isprintable() and len(data["name"]) <= 200,
           f"malformed signature name {_short(data['name'])}")
    _check(isinstance(data["use_shardy"], bool), "malformed use_shardy")
    device = data["device"]
    _check(device is None or (type(device) is int and device >= 0 and data["mesh"] is None),
           f"malformed device {_short(device)}")
    for key in ("in_avals", "out_avals", "static_args"):
        _check(isinstance(data[key], list), f"malformed {key}")
    in_tree, out_tree = decode_tree(data["in_tree"]), decode_tree(data["out_tree"])
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
        static.append((item[0], decode_static(item[1])))
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
    names = [name for name in NODE_CHECKS if name in _node_names(encoded)]
    if not names:
        return
    tree = jax.tree_util.tree_unflatten(treedef, avals)
    for name in names:
        cls = _node_class(name)
        for node in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, cls)):
            if isinstance(node, cls):
                children, level = jax.tree_util.tree_flatten(node, is_leaf=lambda y: y is not node)
                problem = NODE_CHECKS[name](level.node_data()[1], children)
                _check(problem is None, f"{what} {problem}")


def _node_names(encoded: Any) -> set[str]:
    """The node names an encoded pytree uses."""
    found, stack = set(), [encoded]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if isinstance(x.get("node"), list) and x["node"] and isinstance(x["node"][0], str):
                found.add(x["node"][0])
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return found


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."
