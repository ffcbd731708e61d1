"""The symbolic phase of a sparse x sparse product: its exact output structure, from concrete
indices, in numpy on the host (as scipy's and every CSR SpGEMM compute it before the values).

The structure is structural: every pair of stored entries (padding excluded) whose batch-pair
and contracting indices agree gives an output position, whatever the values. `nse` is the most
distinct positions of any output batch; the output indices are each batch's positions in
row-major order (then padding); and every pair is listed with its lhs entry, rhs entry and the
output slot it adds into, sorted by slot: the numeric phase is a gather of both operands' data,
a product and a sorted segment sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from hlopt.passes.sparse import shapes

# Pairs of entries whose output keys are sorted at once (the host sorts a chunk in cache).
PAIRS_PER_CHUNK = 1 << 20


class Structure(NamedTuple):
    """A product's exact structure. Entries of an operand are numbered in its buffers broadcast to
    `batch_order` (the batch dims in output order) and flattened; output slots are `g * nse + k`
    for output batch g (row-major) and its k-th position."""

    nse: int
    indices: np.ndarray  # [*batch, nse, n_sparse], padding = the sparse sizes
    lhs_entry: np.ndarray  # [pairs]
    rhs_entry: np.ndarray  # [pairs]
    slot: np.ndarray  # [pairs], nondecreasing


class _Entries(NamedTuple):
    """One operand's stored entries (padding dropped): flat id, join key, output-batch part, free sparse key."""

    ids: np.ndarray
    join: np.ndarray
    batch: np.ndarray
    free: np.ndarray


def batch_target(lay: shapes.Layout, pairs: Sequence[int]) -> tuple[int, ...]:
    """The batch shape an operand's buffers are broadcast to: full along batch pairs, else its buffers'."""
    return tuple(lay.shape[d] if d in pairs else lay.max_batch[d] for d in range(lay.n_batch))


def _entries(indices: np.ndarray, lay: shapes.Layout, pairs: Sequence[int], free_batch: Sequence[int],
             contract: Sequence[int]) -> _Entries:
    """`pairs`/`free_batch`: the operand's batch dims in output order; `contract`: its contracting
    sparse columns; the other sparse columns are its free ones."""
    nb, ns = lay.n_batch, lay.n_sparse
    target = batch_target(lay, pairs)
    idx = np.broadcast_to(indices, (*target, lay.nse, ns))
    idx = np.transpose(idx, (*pairs, *free_batch, nb, nb + 1))
    p = math.prod(target[d] for d in pairs)
    f = math.prod(target[d] for d in free_batch)
    idx = idx.reshape(p, f, lay.nse, ns).astype(np.int64)
    sizes = np.asarray(lay.sparse_shape, np.int64)
    valid = np.all((idx >= 0) & (idx < sizes), axis=-1)
    ids = np.flatnonzero(valid)
    pair_coord = np.broadcast_to(np.arange(p, dtype=np.int64)[:, None, None], valid.shape)[valid]
    batch_coord = np.broadcast_to(np.arange(f, dtype=np.int64)[None, :, None], valid.shape)[valid]
    idx = idx[valid]
    free_cols = [k for k in range(ns) if k not in contract]
    contract_sizes = [lay.sparse_shape[k] for k in contract]
    join = pair_coord * math.prod(contract_sizes) + _linear(idx[:, list(contract)], contract_sizes)
    free = _linear(idx[:, free_cols], [lay.sparse_shape[k] for k in free_cols])
    return _Entries(ids, join, pair_coord * f + batch_coord, free)


def _linear(cols: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    key = np.zeros(cols.shape[0], np.int64)
    for k, size in enumerate(sizes):
        key = key * size + cols[:, k]
    return key


def _sorted_by(key: np.ndarray, *others: np.ndarray) -> tuple[np.ndarray, ...]:
    """`key` and `others` ordered by `key` (stable; no sort when already sorted, as row-sorted indices are)."""
    if key.size < 2 or bool(np.all(key[1:] >= key[:-1])):
        return (key, *others)
    order = np.argsort(key, kind="stable")
    return (key[order], *(x[order] for x in others))


def _runs(sorted_keys: np.ndarray, keys: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of `keys` (in `[0, space)`): where its run in `sorted_keys` starts, and its length;
    a count per key and its prefix sum when the key space is small, else binary searches."""
    if space <= 4 * (sorted_keys.size + keys.size):
        per_key = np.bincount(sorted_keys, minlength=space)
        return (np.cumsum(per_key) - per_key)[keys], per_key[keys]
    lo = np.searchsorted(sorted_keys, keys, "left")
    return lo, np.searchsorted(sorted_keys, keys, "right") - lo


def _index_type(*bounds: int) -> type:
    return np.int32 if max(bounds, default=0) < 2**31 - 1 else np.int64


def _joined(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """The chunks' arrays end to end (the one chunk itself, uncopied)."""
    if not parts:
        return np.zeros(0, dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def spdot_structure(lhs_indices: np.ndarray, lhs: shapes.Layout, rhs_indices: np.ndarray, rhs: shapes.Layout,
                    dimension_numbers: shapes.DotDims, nse: int | None = None) -> Structure | None:
    """The exact structure of `bcoo_spdot_general` for these concrete indices, with `nse` slots a
    batch (None: the exact count; fewer keep each batch's first positions). None when the
    output's positions do not fit int64 keys."""
    plan = shapes.spdot_general(lhs, rhs, dimension_numbers)
    if math.prod(plan.shape) >= 2**62:
        return None
    (lc, rc), (lb, rb) = dimension_numbers
    lfb, rfb = shapes.free_dims(lhs.n_batch, lb), shapes.free_dims(rhs.n_batch, rb)
    lcols, rcols = [d - lhs.n_batch for d in lc], [d - rhs.n_batch for d in rc]
    left = _entries(np.asarray(lhs_indices), lhs, lb, lfb, lcols)
    right = _entries(np.asarray(rhs_indices), rhs, rb, rfb, rcols)
    r_batches = math.prod(rhs.max_batch[d] for d in rfb)
    lsizes = [lhs.sparse_shape[k] for k in range(lhs.n_sparse) if k not in lcols]
    rsizes = [rhs.sparse_shape[k] for k in range(rhs.n_sparse) if k not in rcols]
    l_free, r_free = math.prod(lsizes), math.prod(rsizes)
    stride = r_batches * r_free
    # A pair's output key: (lhs's output batch, lhs free index) then (rhs's free batch, rhs free index).
    prefix, join, l_ids = _sorted_by(left.batch * l_free + left.free, left.join, left.ids)
    r_join, r_ids, r_suffix = _sorted_by(right.join, right.ids, (right.batch % r_batches) * r_free + right.free)
    lo, count = _runs(r_join, join, math.prod(plan.batch[: len(lb)]) * math.prod(lhs.shape[d] for d in lc))
    upto = np.cumsum(count)
    it = _index_type(join.size, r_join.size, l_ids.max(initial=0), r_ids.max(initial=0))
    l_ids, r_ids = l_ids.astype(it), r_ids.astype(it)
    keys, lpair, rpair = [], [], []
    start = 0
    while start < join.size:
        done = int(upto[start - 1]) if start else 0
        stop = max(int(np.searchsorted(upto, done + PAIRS_PER_CHUNK, "right")), start + 1)
        # Chunks end where the lhs prefix changes: keys sorted per chunk are sorted over all.
        stop = int(np.searchsorted(prefix, prefix[stop - 1], "right"))
        c = count[start:stop]
        entry = np.repeat(np.arange(start, stop, dtype=it), c)
        rpos = (lo[entry] - np.repeat(upto[start:stop] - c - done, c)).astype(it)
        rpos += np.arange(entry.size, dtype=it)
        k = prefix[entry] * stride + r_suffix[rpos]
        by_key = np.argsort(k, kind="stable")  # keys come in runs of one lhs entry: a merge sort is fastest
        keys.append(k[by_key])
        del k
        lpair.append(l_ids[entry[by_key]])
        rpair.append(r_ids[rpos[by_key]])
        del entry, rpos, by_key
        start = stop
    key, lpair, rpair = (_joined(x, t) for x, t in ((keys, np.int64), (lpair, it), (rpair, it)))
    del keys
    first = np.ones(key.size, bool)
    first[1:] = key[1:] != key[:-1]
    position = np.cumsum(first) - 1  # each pair's distinct output position
    ukey = key[first]
    batch = ukey // stride // l_free * r_batches + ukey % stride // r_free
    n_out = math.prod(plan.batch)
    per_batch = np.bincount(batch, minlength=n_out)
    if n_out == 1:
        local = np.arange(ukey.size)
    else:
        by_batch = np.argsort(batch, kind="stable")  # positions of one batch stay in row-major order
        local = np.empty(ukey.size, np.int64)
        local[by_batch] = np.arange(ukey.size) - np.repeat(np.cumsum(per_batch) - per_batch, per_batch)
    nse = int(per_batch.max(initial=0)) if nse is None else nse
    sparse = [*lsizes, *rsizes]
    flat = ukey // stride % l_free * r_free + ukey % r_free
    indices = np.broadcast_to(np.asarray(sparse, np.int64), (n_out * nse, len(sparse))).copy()
    kept = local < nse
    indices[(batch * nse + local)[kept]] = np.stack(np.unravel_index(flat[kept], sparse), -1) if sparse else 0
    slot = (batch * nse + local).astype(_index_type(n_out * nse))[position]
    if not kept.all():
        keep = kept[position]
        slot, lpair, rpair = slot[keep], lpair[keep], rpair[keep]
    del position
    if r_batches > 1:  # rhs's free batch dims come after lhs's free index in the key: sort by slot
        by_slot = np.argsort(slot, kind="stable")
        slot, lpair, rpair = slot[by_slot], lpair[by_slot], rpair[by_slot]
    return Structure(nse, indices.reshape(*plan.batch, nse, len(sparse)), lpair, rpair, slot)
