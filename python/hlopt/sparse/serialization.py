"""`hlopt.sparse.BCOO` and `BCSR` as `jax.export` and executable files record them.

Each is registered with `jax.export.register_pytree_node_serialization` under the name
`hlopt.sparse.BCOO` / `hlopt.sparse.BCSR`, its aux data serialized as the JSON object
`{"shape": [...], "indices_sorted": bool, "unique_indices": bool}`. That is also the aux data
of JAX's own experimental sparse arrays of the same names, so a process without hlopt calls an
exported function taking them after registering those classes under these names with
`aux_to_json` and `aux_from_json` (or their three lines of JSON).
"""

from __future__ import annotations

import json
from typing import Any

import jax

from hlopt.runtime.encoding import register_node_type

_FIELDS = ("shape", "indices_sorted", "unique_indices")


def aux_to_json(aux: dict[str, Any]) -> bytes:
    """A BCOO's or BCSR's aux data (shape and layout flags) as JSON bytes."""
    return json.dumps({"shape": [int(d) for d in aux["shape"]], "indices_sorted": bool(aux["indices_sorted"]),
                       "unique_indices": bool(aux["unique_indices"])}).encode()


def aux_from_json(data: bytes) -> dict[str, Any]:
    """The aux data `aux_to_json` wrote; raises ValueError when `data` is not such an object."""
    aux = json.loads(data)
    if not (isinstance(aux, dict) and set(aux) == set(_FIELDS) and isinstance(aux["shape"], list)
            and all(type(d) is int for d in aux["shape"])
            and all(type(aux[k]) is bool for k in _FIELDS[1:])):
        raise ValueError(f"malformed sparse array aux data {data[:60]!r}")
    return dict(aux, shape=tuple(aux["shape"]))


def register(cls: type, check: Any) -> None:
    """Register the sparse array class `cls` with jax.export and executable files, whose
    loader checks each decoded node with `check(aux, children)`."""
    name = f"hlopt.sparse.{cls.__name__}"
    jax.export.register_pytree_node_serialization(cls, serialized_name=name, serialize_auxdata=aux_to_json,
                                                  deserialize_auxdata=aux_from_json)
    register_node_type(name, check=check)
