"""Batched-COO sparse arrays whose operations lower through the lower-bcoo pass."""
