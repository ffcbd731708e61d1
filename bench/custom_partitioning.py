"""hlopt.custom_partitioning next to JAX's own, on 8 host CPU devices, in one process.

The workload is the `my_fft` example of JAX's documentation: an FFT over the
last axis of a complex64 array sharded on its first axis (default
(8*512, 512), smaller than the documentation's (32*1024, 1024) so that it runs
on a 2-core machine; --rows/--cols change it). Reported (median of --repeat):

  run      one call of the compiled program (median of 10x --repeat): hlopt vs jax.jit(JAX custom_partitioning), and vs plain sharded fft
  compile  lower + passes + PJRT compile vs jax.jit(...).lower().compile()
  reload   hlopt.deserialize(compiled.serialize()) vs what JAX must do in a new process: compile again
           (JAX's executable holds a Python callback: serialize_executable and jax.export refuse it)

Usage: python bench/custom_partitioning.py [--repeat 5] [--rows 4096] [--cols 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import custom_partitioning as jax_cp  # noqa: E402
from jax.numpy.fft import fft  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import hlopt  # noqa: E402
from hlopt.demos.partitioning import fft_partition as partition  # noqa: E402
from record import write_record  # noqa: E402


def _fft(x):
    return fft(x)


ours = hlopt.custom_partitioning(_fft)
ours.def_partition(partition, sharding_rule="...i -> ...i")
theirs = jax_cp.custom_partitioning(_fft)
theirs.def_partition(partition, sharding_rule="...i -> ...i")


def paired_medians(first, second, repeat: int) -> tuple[float, float]:
    """Median seconds of `first` and of `second`, timed alternately so that machine noise hits both."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, bucket in zip((first, second), times):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", type=int, default=8 * 512)
    parser.add_argument("--cols", type=int, default=512)
    parser.add_argument("--note", default="", help="recorded with the figures: what else ran on the machine, ...")
    args = parser.parse_args()
    load_before = os.getloadavg()

    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))
    sharding = NamedSharding(mesh, P("x"))
    rng = np.random.default_rng(0)
    host = (rng.standard_normal((args.rows, args.cols)) + 1j * rng.standard_normal((args.rows, args.cols)))
    x = jax.device_put(host.astype(np.complex64), sharding)

    def hlopt_compile():
        return hlopt.lower(ours, x, mesh=mesh, in_shardings=(P("x"),), out_shardings=P("x")).compile()

    def jax_compile(fun):
        with jax.set_mesh(mesh):
            return jax.jit(fun, in_shardings=sharding, out_shardings=sharding).lower(x).compile()

    compiled = hlopt_compile()
    reference = jax_compile(theirs)
    plain = jax_compile(fft)
    np.testing.assert_allclose(np.asarray(compiled(x)), np.asarray(reference(x)), rtol=1e-3, atol=1e-2)
    data = compiled.serialize()

    def call(fn):
        return lambda: jax.block_until_ready(fn(x))

    runs = 10 * args.repeat
    for fn in (compiled, reference, plain):
        call(fn)()
    rows = [
        ("run: one call", *paired_medians(call(compiled), call(reference), runs), "JAX custom_partitioning"),
        ("run: one call", *paired_medians(call(compiled), call(plain), runs), "plain sharded jnp.fft.fft"),
        ("compile", *paired_medians(hlopt_compile, lambda: jax_compile(lambda v: theirs(v)), args.repeat),
         "JAX custom_partitioning"),
        ("reload in a new process",
         *paired_medians(lambda: hlopt.deserialize(data), lambda: jax_compile(lambda v: theirs(v)), args.repeat),
         "JAX: compile again"),
    ]
    try:
        with jax.set_mesh(mesh):
            jax.export.export(jax.jit(theirs, in_shardings=sharding, out_shardings=sharding))(x)
        export = "accepted"
    except Exception as e:  # noqa: BLE001 - the point is to show what JAX says
        export = f"refused ({str(e).splitlines()[0][:80]})"
    print(f"jax.export of JAX's custom_partitioning: {export}")
    print(f"my_fft, complex64[{args.rows}, {args.cols}] sharded on 8 host CPU devices, median of {args.repeat}")
    print(f"{'measure':<26} {'hlopt ms':>10} {'reference ms':>13} {'ratio':>7}  reference")
    for name, ours_s, ref_s, ref_name in rows:
        print(f"{name:<26} {ours_s * 1e3:>10.2f} {ref_s * 1e3:>13.2f} {ours_s / ref_s:>7.2f}  {ref_name}")
    figures = [{"measure": name, "reference": ref_name, "hlopt_s": ours_s, "reference_s": ref_s,
                "ratio": ours_s / ref_s, "ratio_is": "hlopt / reference"} for name, ours_s, ref_s, ref_name in rows]
    write_record("custom_partitioning", figures, load_before=load_before,
                 options={**vars(args), "workload": f"my_fft complex64[{args.rows}, {args.cols}] on 8 host CPU devices",
                          "jax_export_of_jax_custom_partitioning": export})


if __name__ == "__main__":
    main()
