"""Sparse arrays in the IR: the `hlopt.bcoo.*` annotations' names, layouts and shape math, the op
records (`bcoo/`), the platform substitution hook and `lower-bcoo`.
"""
