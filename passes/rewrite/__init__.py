"""The drivers that apply a pass's rules to a module: `patterns` rewrites op by op (a pass's pattern
set, one walk), `transform` walks whole functions with a pass's state (jet-expand, vjp-expand,
check-key-reuse).
"""
