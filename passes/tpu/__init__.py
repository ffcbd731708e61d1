"""Passes that substitute formulations the TPU runs fast, named `tpu-*`; they rewrite only for a TPU compile."""
