"""The `partitioning` section of `hlopt demo`: JAX's `my_fft` example, resolved ahead of time.

It needs 8 devices. In a process that has fewer (plain `hlopt demo`), the
section reruns itself in a subprocess with 8 host CPU devices.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import TextIO

import jax
import numpy as np
from jax.numpy.fft import fft
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import hlopt
from hlopt.demos import banner, check_close

DEVICES = 8
GATHERS = re.compile(r"\b(all-gather|dynamic-slice)\b")


def _supported_sharding(sharding, shape):
    rank = len(shape.shape)
    keep = min(len(sharding.spec), rank - 1)
    return NamedSharding(sharding.mesh, P(*sharding.spec[:keep], *([None] * (rank - keep))))


def fft_partition(mesh, arg_shapes, result_shape):
    """The `partition` of JAX's my_fft example: keep the batch sharding, gather the FFT axis."""
    sharding = _supported_sharding(arg_shapes[0].sharding, arg_shapes[0])
    return mesh, fft, sharding, (sharding,)


@hlopt.custom_partitioning
def my_fft(x):
    return fft(x)


my_fft.def_partition(fft_partition, sharding_rule="...i -> ...i")


def _run(out: TextIO) -> None:
    banner(out, "partitioning: custom_partitioning resolved before XLA sees the program")
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("x",))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((DEVICES * 32, 16)) + 1j * rng.standard_normal((DEVICES * 32, 16))).astype(np.complex64)
    lowered = hlopt.lower(my_fft, x, mesh=mesh, in_shardings=(P("x"),), out_shardings=P("x"))
    out.write("--- StableHLO from jax (the annotation names its partitioner by key) ---\n" + lowered.as_text())
    for target in ("shardy", "gspmd"):
        after = lowered.apply(f"lower-custom-partitioning{{target={target}}}")
        out.write(f"--- after lower-custom-partitioning{{target={target}}} ---\n" + after.as_text())
        compiled = after.compile()
        if GATHERS.search(compiled.as_text()):
            raise AssertionError(f"target={target}: the compiled program gathers the operand")
        out.write(f"target={target}: no all-gather or dynamic-slice in XLA's optimized HLO\n")
        restored = hlopt.deserialize(compiled.serialize())
        plain = jax.jit(fft, in_shardings=NamedSharding(mesh, P("x")), out_shardings=NamedSharding(mesh, P("x")))
        check_close(out, f"my_fft target={target} (after serialize/deserialize)", restored(x), plain(x),
                    rtol=1e-4, atol=1e-4)
    if not GATHERS.search(plain.lower(x).compile().as_text()):
        raise AssertionError("the plain sharded fft was expected to gather its operand")
    out.write("plain jax.jit(fft) on the same sharding: all-gather/dynamic-slice present\n")


def section(out: TextIO) -> None:
    """Run the demo here if this process has 8 devices, else in a subprocess that has them."""
    if len(jax.devices()) >= DEVICES:
        _run(out)
        return
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}")
    # -P: the current directory stays off sys.path, so a clone named `hlopt` there cannot shadow the package
    proc = subprocess.run([sys.executable, "-P", "-m", "hlopt.demos.partitioning"], env=env, capture_output=True,
                          text=True)
    out.write(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"the partitioning demo failed:\n{proc.stderr[-2000:]}")


if __name__ == "__main__":
    _run(sys.stdout)
