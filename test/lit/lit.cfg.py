"""lit configuration for hlopt's IR tests.

Works two ways: `lit test/lit` from the repository root after `pip install`,
and through CMake's `check-hlopt-lit`, whose lit.site.cfg.py sets the tool
directory and the Python interpreter before loading this file.
"""

import os
import shutil
import sys

import lit.formats

config.name = "hlopt"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "lit.local.cfg", "Inputs"]
config.test_source_root = os.path.dirname(__file__)

python = getattr(config, "python_executable", None) or sys.executable
tools_dir = getattr(config, "hlopt_tools_dir", None) or os.path.dirname(python)
config.environment["PATH"] = os.pathsep.join([tools_dir, os.path.dirname(python), os.environ.get("PATH", "")])
for var in ("XLA_FLAGS", "HOME", "JAX_PLATFORMS", "PYTHONPATH", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.environment["JAX_PLATFORMS"] = config.environment.get("JAX_PLATFORMS", "cpu")
config.environment["TF_CPP_MIN_LOG_LEVEL"] = "3"
# Executable files are authenticated with the user's key: the tests have their own, never ~/.config's.
config.environment["HLOPT_KEY"] = "lit-tests-key-" + "0" * 32

config.substitutions.append(("%PYTHON", python))
hlopt_opt = shutil.which("hlopt-opt", path=config.environment["PATH"])
if hlopt_opt is None:
    lit_config.fatal("hlopt-opt not found: install hlopt first (pip install -e '.[test]')")
filecheck = shutil.which("filecheck", path=config.environment["PATH"])
if filecheck is None:
    lit_config.fatal("filecheck not found: pip install filecheck")
