"""What a compiled program is, apart from how it was made: its `Signature`, and its module as bytecode.

The runtime builds on this module, never on the tracing in `lowering.py`.
"""

from __future__ import annotations

import dataclasses
import io
from typing import TYPE_CHECKING, Any

import numpy as np

from hlopt.passes.mlir import get_context, ir

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh


@dataclasses.dataclass(frozen=True)
class Signature:
    """What a program takes and returns, independent of the IR.

    `in_tree` is the treedef of `(dynamic_args, {})`; `static_args` maps each
    static position to the value it was lowered with; `in_names` names each
    input leaf by the function's parameter and its pytree path (`params['W1']`),
    empty when unknown; `kept` lists the input leaves the executable takes as
    parameters (None: all of them; jax.jit's `keep_unused=False` drops the
    others, which a call still accepts); `donated` lists the input leaves whose
    buffers the program may consume. A program runs on
    `mesh`'s devices, else on `device` when its arguments committed it to one
    (its outputs are then committed, as jax.jit's are), else on the default
    device.
    """

    in_tree: Any
    in_avals: tuple[jax.core.ShapedArray, ...]
    out_tree: Any
    out_avals: tuple[jax.core.ShapedArray, ...]
    static_args: tuple[tuple[int, Any], ...] = ()
    mesh: Mesh | None = None
    use_shardy: bool = True
    name: str = "main"
    device: jax.Device | None = None
    in_names: tuple[str, ...] = ()
    kept: tuple[int, ...] | None = None
    donated: tuple[int, ...] = ()

    @property
    def kept_inputs(self) -> tuple[int, ...]:
        """The positions among the input leaves of the executable's parameters, in order."""
        return tuple(range(len(self.in_avals))) if self.kept is None else self.kept

    @property
    def param_avals(self) -> tuple[jax.core.ShapedArray, ...]:
        """The avals of the executable's parameters (the kept input leaves)."""
        return tuple(self.in_avals[i] for i in self.kept_inputs)

    @property
    def num_devices(self) -> int:
        return 1 if self.mesh is None else self.mesh.size

    def describe(self) -> str:
        """`f(float32[8,4], int32[]) -> (float32[8]) on 1 device(s)`."""
        ins = ", ".join(map(aval_str, self.in_avals))
        outs = ", ".join(map(aval_str, self.out_avals))
        return f"{self.name}({ins}) -> ({outs}) on {self.num_devices} device(s)"


def same_value(a: Any, b: Any) -> bool:
    """Whether `a == b` holds (static arguments, pytree literals); identity for values without a plain `==`."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and other values whose == is not a bool
        return a is b


def aval_str(aval: Any) -> str:
    """`float32[8,4]`: how avals appear in messages and `hlopt inspect`."""
    return f"{np.dtype(aval.dtype).name}[{','.join(str(d) for d in aval.shape)}]"


def module_to_bytecode(module: ir.Module) -> bytes:
    """The MLIR bytecode of `module`."""
    buf = io.BytesIO()
    module.operation.write_bytecode(buf)
    return buf.getvalue()


def parse_module(source: str | bytes) -> ir.Module:
    """Parse text or bytecode into the hlopt context."""
    with get_context():
        return ir.Module.parse(source)
