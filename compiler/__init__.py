"""The driver: lowering a function, pipelines, and the stage objects."""
