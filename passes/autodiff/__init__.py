"""Automatic differentiation as passes: `jet-expand`, `jet-collapse` and `vjp-expand`, with their
rule tables (Taylor rules, directions-batched rules, reverse-mode rules, linear algebra) and the
zero-aware term algebra their builders share.
"""
