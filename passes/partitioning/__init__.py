"""Custom partitioning ahead of time: `lower-custom-partitioning` and the sharding codec (Shardy
and GSPMD text forms of a sharding).
"""
