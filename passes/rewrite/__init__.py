"""The drivers that apply a pass's rules to a module: `patterns` rewrites op by op (a pass's pattern
set, one walk), `transform` walks whole functions with a pass's state (jet-expand, vjp-expand,
check-key-reuse). Beside them: the matchers the platform passes read ops with (`matching`), and
the rewrites that passes of more than one platform declare (`summed_batch_dots`).
"""
