"""The drivers that apply a pass's rules to a module.
"""
