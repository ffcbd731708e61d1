"""Building and reading StableHLO with the MLIR bindings: op builders, the element-type table,
source locations and walks over nested operations.
"""
