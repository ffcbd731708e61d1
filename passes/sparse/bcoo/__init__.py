"""The `hlopt.bcoo.*` ops: one `Record` per op, in one module per op under `hlopt.passes.sparse.bcoo.ops`.

Every module there defines `RECORDS`, the records of its op (a module holds several only when
they share their lowering, as the products do); `REGISTRY` collects them once, and lower-bcoo,
the checks of the IR (`read`) and the Python primitives of `hlopt.sparse` all read it (the
primitive, its JVP and transpose included, is generated from the record). Adding an op is one
module there, plus the user function that binds its primitive and its export in `hlopt.sparse`
(docs/architecture.md lists the steps).

`read(op)` is the one way to read an annotation: the op's name and its decoded, checked
`backend_config` (`BcooOp.name`, `BcooOp.config`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from hlopt.passes.base import PassError
from hlopt.passes.sparse.bcoo import ops
from hlopt.passes.sparse.bcoo.record import BcooOp, Record, Shape
from hlopt.passes.sparse.names import PREFIX, is_bcoo_op, op_name
from hlopt.passes.mlir import ir

__all__ = ["PREFIX", "REGISTRY", "BcooOp", "Record", "Registry", "is_bcoo_op", "read"]


class Registry(Mapping[str, Record]):
    """Records by op name; each name once."""

    def __init__(self, records: Iterable[Record]):
        self._records: dict[str, Record] = {}
        for record in records:
            if record.name in self._records:
                raise ValueError(f"two records for {record.target}")
            self._records[record.name] = record

    def __getitem__(self, name: str) -> Record:
        return self._records[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def with_records(self, *records: Record) -> Registry:
        """A new registry with these records added (a scratch registry for a new op)."""
        return Registry([*self.values(), *records])

    def read(self, op: ir.Operation) -> BcooOp:
        """The checked `BcooOp` view of an `hlopt.bcoo.*` custom_call; a `PassError` at the op if it is
        unknown or malformed."""
        name = op_name(op)
        if name not in self._records:
            raise PassError(f"@{PREFIX}{name}: unknown sparse op (known: {', '.join(sorted(self))})", op.location)
        return self._records[name].read(op)

    def result_shapes(self, name: str, config: Mapping[str, Any], operands: Sequence[Sequence[int]]) -> list[Shape]:
        """The result buffer shapes of `hlopt.bcoo.<name>` with this config and these operand shapes."""
        return self[name].result_shapes(config, operands)


def _discover() -> Registry:
    records = []
    for info in sorted(pkgutil.iter_modules(ops.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{ops.__name__}.{info.name}")
        if not hasattr(module, "RECORDS"):
            raise ImportError(f"{module.__name__} defines no RECORDS: every module there is one BCOO op's record")
        records.extend(module.RECORDS)
    return Registry(records)


REGISTRY = _discover()


def read(op: ir.Operation) -> BcooOp:
    """The checked view of one `hlopt.bcoo.*` custom_call (name, decoded `backend_config`, result
    types), from the registry in use; a `PassError` at the op if it is unknown or malformed."""
    return REGISTRY.read(op)
