"""pytest setup: eight host CPU devices (set before jax is imported) and float64; the partitioner fixture."""

import os

import pytest

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(params=[True, False], ids=["shardy", "gspmd"])
def partitioner(request):
    """Runs a test with Shardy, then with GSPMD, as XLA's SPMD partitioner."""
    import jax  # after the flags above are set

    old = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", request.param)
    yield request.param
    jax.config.update("jax_use_shardy_partitioner", old)
