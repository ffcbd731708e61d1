"""A lit configuration for testing your own hlopt pipelines: copy this file into your test folder.

Run the folder with `lit -sv path/to/folder` (pip install lit filecheck). Tests are
`.mlir` files (`// RUN: hlopt-opt %s -p PIPELINE | filecheck %s`) and Python scripts
that print IR (`# RUN: %PYTHON %s | filecheck %s`). hlopt-opt, filecheck and the
Python they run are the ones of the environment that runs lit.
"""

import os
import shutil
import sys

import lit.formats

config.name = "my-hlopt-pipeline"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)

bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
for var in ("HOME", "TMPDIR", "XLA_FLAGS", "PYTHONPATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
config.environment["JAX_PLATFORMS"] = "cpu"
config.substitutions.append(("%PYTHON", sys.executable))

for tool in ("hlopt-opt", "filecheck"):
    if shutil.which(tool, path=config.environment["PATH"]) is None:
        lit_config.fatal(f"{tool} not found: pip install hlopt lit filecheck in the environment that runs lit")
