"""One process of test_runtime_multiprocess: 4 host CPU devices of a 2-process, 8-device mesh.

Usage: python -m support.multiprocess_worker PORT PROCESS_ID OUT_DIR
"""

import os
import sys

port, process_id, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                           initialization_timeout=60)

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import hlopt  # noqa: E402
from support.multiprocess_program import ARGS, f  # noqa: E402

assert jax.process_count() == 2 and len(jax.devices()) == 8 and len(jax.local_devices()) == 4
mesh = jax.make_mesh((4, 2), ("x", "y"))
specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ARGS]
compiled = hlopt.lower(f, *specs, mesh=mesh, in_shardings=(P("x", "y"), P())).compile()
reloaded = hlopt.deserialize(compiled.serialize())

# process-local input shards: this process holds rows [4 * process_id, 4 * process_id + 4) of a
a_sharding = NamedSharding(mesh, P("x", "y"))
local_a = jax.make_array_from_callback(ARGS[0].shape, a_sharding, lambda index: ARGS[0][index])
results = {"numpy": compiled(*ARGS), "local": compiled(local_a, ARGS[1]), "reloaded": reloaded(local_a, ARGS[1])}

out = {}
for name, tree in results.items():
    for i, leaf in enumerate(jax.tree_util.tree_leaves(tree)):
        assert len(leaf.addressable_shards) == 4 and len(leaf.sharding.device_set) == 8
        full = np.full(leaf.shape, np.nan, dtype=np.float64)
        for shard in leaf.addressable_shards:
            full[shard.index] = np.asarray(shard.data)
        out[f"{name}-{i}"] = full
np.savez(os.path.join(out_dir, f"process{process_id}.npz"), **out)
jax.distributed.shutdown()
