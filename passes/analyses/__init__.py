"""Analyses of whole programs that report, not rewrite: `check-key-reuse`.
"""
