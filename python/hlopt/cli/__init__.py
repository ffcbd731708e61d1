"""hlopt's command-line tools: `hlopt-opt` and `hlopt`."""

import os

# XLA's informational log lines (device counts) would clutter the tools' output;
# this must be set before jaxlib is loaded, which the tools do lazily.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
