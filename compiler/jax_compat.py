"""The one module that reaches into jax's private APIs (jax._src, jaxlib._jax, private attributes).

Each wrapper says what it reads, so a jax upgrade that moves something is
fixed here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from jax._src.interpreters import pxla


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where `jax.jit` placed a lowered program.

    `devices` is its device assignment (None when jax left it open),
    `committed` whether an argument or a sharding fixed it (jax.jit's outputs
    are then committed), and `in_shardings`/`out_shardings` the shardings
    jax resolved for its flat inputs and outputs (unspecified ones are not
    `jax.sharding.Sharding`s).
    """

    devices: tuple[jax.Device, ...] | None
    committed: bool
    in_shardings: tuple[Any, ...]
    out_shardings: tuple[Any, ...]


def lowering_placement(lowered: jax.stages.Lowered) -> Placement:
    """The placement jax chose for `lowered` (reads `Lowered._lowering`'s device list and compile args)."""
    lowering = lowered._lowering
    device_list = getattr(lowering, "_device_list", None)
    args = lowering.compile_args
    return Placement(
        devices=None if device_list is None else tuple(device_list),
        committed=bool(args.get("committed", False)),
        in_shardings=tuple(args.get("in_shardings", ())),
        out_shardings=tuple(args.get("out_shardings", ())),
    )


def result_handler(aval: jax.core.ShapedArray, sharding: jax.sharding.Sharding, committed: bool) -> Any:
    """jax.jit's output handler for `aval`: its per-device buffers -> one `jax.Array` (`pxla.global_aval_to_result_handler`)."""
    return pxla.global_aval_to_result_handler(aval, sharding, committed)


def lowered_out_avals(lowered: jax.stages.Lowered) -> tuple[jax.core.ShapedArray, ...]:
    """The avals of `lowered`'s flat outputs with their weak types (`Lowered.out_info` drops them)."""
    return tuple(lowered._lowering.compile_args["global_out_avals"])
