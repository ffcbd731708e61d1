"""pytest setup: eight host CPU devices (set before jax is imported), and a key of the tests' own.

The user's key (HLOPT_KEY, else $XDG_CONFIG_HOME/hlopt/key) authenticates
executable files and cache entries; the tests (and the processes they start)
use a key file in a temporary folder, never the real ~/.config.
"""

import atexit
import os
import shutil
import tempfile

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

_config_home = tempfile.mkdtemp(prefix="hlopt-test-config-")
atexit.register(shutil.rmtree, _config_home, ignore_errors=True)
os.environ["XDG_CONFIG_HOME"] = _config_home
os.environ.pop("HLOPT_KEY", None)
