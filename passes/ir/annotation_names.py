"""The custom-call targets of hlopt's annotations: the one definition of each, which the passes
that lower them, the front end that emits them and `hlopt.passes.base.ANNOTATIONS` read."""

from __future__ import annotations

JET = "hlopt.jet"  # a truncated Taylor series of a function (jet-expand)
STOP_GRADIENT = "hlopt.jet.stop_gradient"  # a zero derivative for jet-expand and vjp-expand
CUSTOM_JVP = "hlopt.jet.custom_jvp"  # a function with its own JVP (jet-expand)
LINEAR_SOLVE = "hlopt.jet.linear_solve"  # a custom_linear_solve (jet-expand)
VJP = "hlopt.vjp"  # a reverse-mode derivative of a function (vjp-expand)
CUSTOM_PARTITIONING = "hlopt.custom_partitioning"  # a partitioner's call (lower-custom-partitioning)
BCOO_PREFIX = "hlopt.bcoo."  # the prefix of a sparse op's target (lower-bcoo)
