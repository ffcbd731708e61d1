"""hlopt's command-line tools: `hlopt-opt` and `hlopt`."""
