"""Compiling and running StableHLO through the PJRT client of jax.extend.backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import backend as jax_backend
from jaxlib import xla_client as xc


def get_client(platform: str | None = None) -> Any:
    """The PJRT client jax uses for `platform` (the default backend if None)."""
    return jax_backend.get_backend(platform)


def compile_options(num_devices: int, device_ids: Sequence[int] | None, use_shardy: bool) -> xc.CompileOptions:
    """One SPMD program over `num_devices` partitions, one replica."""
    options = xc.CompileOptions()
    options.num_replicas = 1
    options.num_partitions = num_devices
    build = options.executable_build_options
    build.use_spmd_partitioning = True
    build.use_shardy_partitioner = use_shardy
    if device_ids is not None:
        assignment = np.asarray(device_ids, dtype=np.int64).reshape(1, num_devices)
        options.device_assignment = xc.DeviceAssignment.create(assignment)
    return options


def compile_module(
    module_bytecode: bytes,
    devices: Sequence[jax.Device],
    use_shardy: bool,
    client: Any | None = None,
) -> Any:
    """Compile StableHLO bytecode into a loaded executable on `devices`."""
    client = client or get_client()
    options = compile_options(len(devices), [d.id for d in devices], use_shardy)
    return client.compile_and_load(
        module_bytecode,
        executable_devices=xc.DeviceList(tuple(devices)),
        compile_options=options,
    )
