"""One process of a program that runs on two processes with four CPU devices each.

Start both on one machine (they meet at the coordinator's address):

    python examples/multihost.py --process-id 0 --port 43127 &
    python examples/multihost.py --process-id 1 --port 43127
"""

import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--port", type=int, default=43127)
args = parser.parse_args()
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 4)                      # 4 devices in each process
jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives between processes
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=2,
                           process_id=args.process_id, initialization_timeout=60)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import hlopt  # noqa: E402


def f(a, b):
    return {"act": jnp.tanh(a) @ b, "total": (a * a).sum()}


a = np.linspace(-2, 2, 16 * 6, dtype=np.float32).reshape(16, 6)
b = np.linspace(0, 1, 6 * 3, dtype=np.float32).reshape(6, 3)
mesh = jax.make_mesh((4, 2), ("x", "y"))                         # 8 devices over both processes
compiled = hlopt.lower(f, a, b, mesh=mesh, in_shardings=(P("x", "y"), P())).compile()
reloaded = hlopt.deserialize(compiled.serialize())               # executables ship across processes too

for out in (compiled(a, b), reloaded(a, b)):
    act = out["act"]                                             # a global array; this process holds 4 shards
    assert len(act.addressable_shards) == 4 and len(act.sharding.device_set) == 8
    want = np.tanh(a) @ b
    for shard in act.addressable_shards:
        np.testing.assert_allclose(np.asarray(shard.data), want[shard.index], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(out["total"]), (a * a).sum(), rtol=1e-5)
print(f"process {jax.process_index()}: rows {sorted({s.index[0].start for s in act.addressable_shards})} correct")
jax.distributed.shutdown()
