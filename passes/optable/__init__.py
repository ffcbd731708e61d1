"""What hlopt knows per op, as data the autodiff rules and the runtime's allowlist read: the
derivative formulas of elementwise ops and the linear-algebra meanings (their spellings, the
attributes and types of their LAPACK kernels). Nothing here imports `hlopt.passes.autodiff`;
the op table that names each op's rules is `hlopt.passes.autodiff.table`.
"""
