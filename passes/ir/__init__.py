"""Building and reading StableHLO with the MLIR bindings: op builders, the element-type table,
source locations, walks over nested operations, and the zero-aware term algebra
the autodiff builders share.
"""
