"""A custom_partitioning program compiled with hlopt (default) or with JAX's own cache (`jax DIR`).

test_cache runs it in fresh processes: hlopt's cache key holds no process-specific value.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.custom_partitioning import custom_partitioning  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import hlopt  # noqa: E402

use_jax = sys.argv[1:2] == ["jax"]
double = (custom_partitioning if use_jax else hlopt.custom_partitioning)(lambda x: x * 2)


def partition(mesh, arg_shapes, result_shape):
    s = NamedSharding(mesh, P("x"))
    return mesh, lambda x: x * 2, s, (s,)


double.def_partition(partition=partition, sharding_rule="i -> i",
                     infer_sharding_from_operands=lambda mesh, shapes, result: NamedSharding(mesh, P("x")))
mesh = jax.make_mesh((2,), ("x",))
x = np.arange(8, dtype=np.float32)
if use_jax:
    jax.config.update("jax_compilation_cache_dir", sys.argv[2])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    out = jax.jit(lambda x: double(jnp.sin(x)), in_shardings=NamedSharding(mesh, P("x")))(x)
    print(json.dumps({"out": np.asarray(out).tolist()}))
else:
    out = hlopt.lower(lambda x: double(jnp.sin(x)), x, mesh=mesh, in_shardings=(P("x"),)).compile()(x)
    info = hlopt.cache_info()
    print(json.dumps({"out": np.asarray(out).tolist(), "hits": info.hits, "misses": info.misses}))
