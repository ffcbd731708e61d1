"""From a post-pass `Lowered` to a `Compiled` through PJRT."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax

from hlopt.compiler.lowering import module_to_bytecode
from hlopt.runtime.executable import Compiled
from hlopt.runtime.pjrt import compile_module, unsharded_results

if TYPE_CHECKING:
    from hlopt.compiler.stages import Lowered


def program_devices(signature) -> list[jax.Device]:
    """The devices a program runs on: its mesh's, else the first default device."""
    if signature.mesh is not None:
        return list(signature.mesh.devices.flat)
    return [jax.devices()[0]]


def compile_lowered(lowered: "Lowered") -> Compiled:
    sig = lowered.signature
    devices = program_devices(sig)
    executable = compile_module(module_to_bytecode(lowered.module), devices, sig.use_shardy,
                                propagate_to_output=unsharded_results(lowered.module))
    return Compiled(executable, sig, lowered.module, lowered.pipeline)
