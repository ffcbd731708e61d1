"""What hlopt knows per StableHLO/CHLO op and per linear-algebra meaning, read by the autodiff
rules and the runtime's allowlist.
"""
