"""Passes that tune plain StableHLO for XLA:CPU; `hlopt-default` runs them after the semantic rules."""
