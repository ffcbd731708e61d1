"""The jax primitives behind `hlopt.sparse`: one per `hlopt.bcoo.*` op, each defined from the
op's record (`hlopt.passes.sparse.bcoo`) by `hlopt.sparse.rules`, with the few helpers the API binds
them through.

A record gives the primitive everything: its abstract evaluation (the shape rule lower-bcoo
checks against), its lowering (the annotation with the config the record's signature builds),
its batching, and its JVP and transpose rules (the record's `Derivative`). Nothing about one op
is written here.

Operands are `(data, indices, ...)`; `extract` takes `(arr, indices)`, the dense
array in the data slot. Every BCOO operand comes with the parameters `shape`,
`indices_sorted` and `unique_indices`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from hlopt.passes.sparse import shapes
from hlopt.passes.sparse.bcoo import REGISTRY
from hlopt.passes.sparse.bcoo import terms
from hlopt.sparse.rules import TERMS, layout, primitive

PRIMITIVES = {name: primitive(name) for name in REGISTRY}

todense_p = PRIMITIVES["todense"]
extract_p = PRIMITIVES["extract"]
fromdense_p = PRIMITIVES["fromdense"]
sort_indices_p = PRIMITIVES["sort_indices"]
sum_duplicates_p = PRIMITIVES["sum_duplicates"]
transpose_p = PRIMITIVES["transpose"]
squeeze_p = PRIMITIVES["squeeze"]
slice_p = PRIMITIVES["slice"]
reduce_sum_p = PRIMITIVES["reduce_sum"]
reshape_p = PRIMITIVES["reshape"]
update_layout_p = PRIMITIVES["update_layout"]
gather_p = PRIMITIVES["gather"]
multiply_dense_p = PRIMITIVES["multiply_dense"]
multiply_sparse_p = PRIMITIVES["multiply_sparse"]


def todense(data: jax.Array, indices: jax.Array, shape: Sequence[int]) -> jax.Array:
    """The dense array of BCOO buffers."""
    return terms.todense(TERMS, data, indices, shape)


def extract(indices: jax.Array, arr: jax.Array, assume_unique: bool = True) -> jax.Array:
    """`arr` at each stored index of a BCOO array with these `indices` (0 at padding; without
    `assume_unique`, 0 also at every repeat of an index after its first occurrence)."""
    return terms.extract(TERMS, indices, arr, assume_unique)


def per_column(values: Sequence[int], indices: Any) -> jax.Array:
    """`values[k]` for index column k, with the rank of `indices` (no implicit rank promotion)."""
    return terms.per_column(TERMS, values, indices)


def multiply_sparse(ld, li, rd, ri, lhs_shape, rhs_shape, driver=None) -> tuple[jax.Array, jax.Array]:
    """(data, indices) of the elementwise product; `driver` None picks the cheapest valid one."""
    driver = shapes.multiply_sparse(layout(ld, li, lhs_shape), layout(rd, ri, rhs_shape), driver).driver
    return multiply_sparse_p.bind(
        ld, li, rd, ri, shape=tuple(lhs_shape), rhs_shape=tuple(rhs_shape), driver=driver,
        indices_sorted=False, unique_indices=False,
    )


def unique_count(indices: np.ndarray, sizes: Sequence[int]) -> int:
    """The largest number of distinct in-range indices in any batch (host-side, for nse=None)."""
    indices = np.asarray(indices)
    if indices.shape[-1] == 0:
        return 1
    if indices.shape[-2] == 0:
        return 0
    valid = np.all((indices >= 0) & (indices < np.array(sizes)), axis=-1)
    strides = np.array([math.prod(sizes[k + 1 :]) for k in range(len(sizes))], dtype=np.int64)
    keys = np.where(valid, (indices.astype(np.int64) * strides).sum(-1), -1)
    keys = np.sort(keys, axis=-1)
    first = np.concatenate([np.ones_like(keys[..., :1], bool), keys[..., 1:] != keys[..., :-1]], axis=-1)
    counts = (first & (keys >= 0)).sum(-1)
    return int(counts.max(initial=0))


