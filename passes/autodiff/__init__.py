"""Automatic differentiation as passes: `jet-expand`, `jet-collapse` and `vjp-expand`, the op
table that names each op's and each custom call's rules (`table`), and the rules (Taylor rules,
directions-batched rules, reverse-mode rules, linear algebra).
"""
