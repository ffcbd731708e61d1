"""Compiling and running StableHLO through the PJRT client of jax.extend.backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from hlopt.compiler.jax_compat import get_backend, initialize_lapack
from hlopt.compiler.jax_compat import xla_client as xc
from hlopt.compiler.stages import CompilerOptions
from hlopt.passes.mlir import ir
from hlopt.passes.xla_cpu.sparse_kernels import KERNELS
from hlopt.runtime import kernels


def get_client(platform: str | None = None) -> Any:
    """The PJRT client jax uses for `platform` (the default backend if None)."""
    return get_backend(platform)


def compile_options(
    num_devices: int,
    device_ids: Sequence[int] | None,
    use_shardy: bool,
    propagate_to_output: Sequence[bool] = (),
) -> xc.CompileOptions:
    """One SPMD program over `num_devices` partitions, one replica.

    `propagate_to_output[i]` lets XLA choose the sharding of result i (as
    jax.jit does for results whose sharding is unspecified).
    """
    options = xc.CompileOptions()
    options.num_replicas = 1
    options.num_partitions = num_devices
    build = options.executable_build_options
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = use_shardy
    if num_devices > 1 and any(propagate_to_output):
        build.allow_spmd_sharding_propagation_to_output = list(propagate_to_output)
    if device_ids is not None:
        assignment = np.asarray(device_ids, dtype=np.int64).reshape(1, num_devices)
        options.device_assignment = xc.DeviceAssignment.create(assignment)
    return options


def unsharded_results(module: ir.Module) -> list[bool]:
    """For each result of the public `main`, whether it carries no sharding attribute."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            if "res_attrs" not in op.attributes:
                return [True] * len(ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).results)
            return [
                all(name not in ir.DictAttr(attrs) for name in _SHARDING_ATTRS)
                for attrs in ir.ArrayAttr(op.attributes["res_attrs"])
            ]
    return []


_SHARDING_ATTRS = ("sdy.sharding", "mhlo.sharding")


def declares_sdy_mesh(module: ir.Module) -> bool:
    """Whether `module` holds an `sdy.mesh`: Shardy partitions it, else GSPMD does."""
    return any(op.operation.name == "sdy.mesh" for op in module.body.operations)


# XLA option names that jax.jit sets on the executable build options rather than passing to XLA as
# option overrides (jax's get_compile_options); hlopt does the same.
_BUILD_OPTIONS = ("exec_time_optimization_effort", "memory_fitting_effort", "optimization_level",
                  "memory_fitting_level")

def with_compiler_options(options: xc.CompileOptions, compiler_options: CompilerOptions) -> xc.CompileOptions:
    """`options` with the XLA options `compiler_options` set, as `jax.jit` sets them."""
    overrides = []
    for name, value in compiler_options:
        if name in _BUILD_OPTIONS:
            setattr(options.executable_build_options, name, value)
        else:
            overrides.append((name, value))
    options.env_option_overrides = overrides
    return options


def compile_module(
    module_bytecode: bytes,
    devices: Sequence[jax.Device],
    use_shardy: bool,
    client: Any | None = None,
    propagate_to_output: Sequence[bool] = (),
) -> Any:
    """Compile StableHLO bytecode into a loaded executable on `devices`."""
    options = compile_options(len(devices), [d.id for d in devices], use_shardy, propagate_to_output)
    return compile_with_options(module_bytecode, devices, options, client)


def compile_with_options(
    module_bytecode: bytes, devices: Sequence[jax.Device], options: xc.CompileOptions, client: Any | None = None
) -> Any:
    """Compile StableHLO bytecode with explicit compile options."""
    client = client or get_client()
    prepare_runtimes(client, module_bytecode)
    return client.compile_and_load(
        module_bytecode,
        executable_devices=xc.DeviceList(tuple(devices)),
        compile_options=options,
    )


def load_executable(
    serialized: bytes, devices: Sequence[jax.Device], options: xc.CompileOptions, client: Any | None = None
) -> Any:
    """Load an executable that `client.serialize_executable` wrote, onto `devices`."""
    client = client or get_client()
    prepare_runtimes(client, serialized)
    return client.deserialize_executable(serialized, xc.DeviceList(tuple(devices)), options)


def prepare_runtimes(client: Any, program: bytes) -> None:
    """Initialise what the custom calls of `program` (bytecode or a serialized executable) need on
    `client`'s platform, before it runs.

    A program lowered in this process had jax do it while lowering; one from a
    file, the cache or a `.mlir` did not (jax.export does the same on load).
    On CPU that is jaxlib's LAPACK kernels and hlopt's own (runtime/kernels.py),
    the only runtimes the targets of runtime/portable.py's allowlist need (the
    partitioner's markers never run). Both forms name each custom-call target
    in plain bytes; initialising LAPACK imports scipy's (a third of a second),
    so a program that names no `lapack_` target skips it, and one that names
    none of hlopt's kernels skips hlopt's.
    """
    if client.platform != "cpu":
        return
    if _LAPACK_TARGET in program:
        initialize_lapack()
    if any(name in program for name in _HLOPT_TARGETS):
        kernels.register()


_LAPACK_TARGET = b"lapack_"
_HLOPT_TARGETS = tuple(name.encode() for name in KERNELS)  # whole names: a function may start with hlopt_


@dataclasses.dataclass(frozen=True)
class BuildFlags:
    """What a program's compile options hold besides its devices; files and cache entries record it.

    `shardy`: Shardy partitions the program (a module lowered for Shardy but
    rewritten to `mhlo.sharding`, e.g. by `lower-custom-partitioning{target=gspmd}`,
    declares no mesh and goes to GSPMD). `propagate_to_output[i]`: XLA chooses
    the sharding of result i.
    """

    shardy: bool
    propagate_to_output: tuple[bool, ...]

    @classmethod
    def of(cls, module: ir.Module, use_shardy: bool) -> "BuildFlags":
        """The flags compiling `module` takes."""
        return cls(bool(use_shardy and declares_sdy_mesh(module)), tuple(unsharded_results(module)))

    def options(self, devices: Sequence[jax.Device]) -> xc.CompileOptions:
        """The compile options of a program with these flags on `devices`."""
        return compile_options(len(devices), [d.id for d in devices], self.shardy, self.propagate_to_output)

    def encode(self) -> dict[str, Any]:
        return {"shardy": self.shardy, "propagate_to_output": list(self.propagate_to_output)}

    @classmethod
    def decode(cls, data: Any, n_outputs: int) -> "BuildFlags":
        """The flags `encode` wrote; raises ValueError if malformed."""
        if not (isinstance(data, dict) and set(data) == {"shardy", "propagate_to_output"}
                and isinstance(data["shardy"], bool) and isinstance(data["propagate_to_output"], list)
                and len(data["propagate_to_output"]) == n_outputs
                and all(isinstance(b, bool) for b in data["propagate_to_output"])):
            raise ValueError(f"malformed build flags {str(data)[:80]}")
        return cls(data["shardy"], tuple(data["propagate_to_output"]))
