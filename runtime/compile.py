"""From a post-pass module to a `Compiled` through PJRT (and the persistent cache)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax

from hlopt.compiler.program import Signature, module_to_bytecode
from hlopt.passes.mlir import ir
from hlopt.runtime.cache import compile_cached
from hlopt.runtime.executable import Compiled
from hlopt.runtime.pjrt import compile_options, declares_sdy_mesh, unsharded_results

if TYPE_CHECKING:
    from jaxlib import xla_client as xc

    from hlopt.compiler.stages import Lowered


def program_devices(signature: Signature) -> list[jax.Device]:
    """The devices a program runs on: its mesh's, else the first default device."""
    if signature.mesh is not None:
        return list(signature.mesh.devices.flat)
    return [jax.devices()[0]]


def program_options(module: ir.Module, devices: Sequence[jax.Device], use_shardy: bool) -> "xc.CompileOptions":
    """The compile options of `module` on `devices`: what compiling and loading it use.

    A module lowered for Shardy but rewritten to `mhlo.sharding` (for example by
    `lower-custom-partitioning{target=gspmd}`) no longer declares a mesh and goes
    to GSPMD.
    """
    use_shardy = use_shardy and declares_sdy_mesh(module)
    return compile_options(len(devices), [d.id for d in devices], use_shardy, unsharded_results(module))


def compile_program(module: ir.Module, signature: Signature) -> Any:
    """A loaded executable of the post-pass `module`, from the cache when it holds one."""
    devices = program_devices(signature)
    options = program_options(module, devices, signature.use_shardy)
    return compile_cached(module_to_bytecode(module), devices, options)


def compile_lowered(lowered: "Lowered") -> Compiled:
    """The `Compiled` of a post-pass `Lowered`."""
    executable = compile_program(lowered.module, lowered.signature)
    return Compiled(executable, lowered.signature, lowered.module, lowered.pipeline)
