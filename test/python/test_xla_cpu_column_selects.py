"""xla-cpu-column-selects changes how the programs of lower-bcoo run on XLA:CPU, never their
values: hlopt-default with and without it computes the same numbers as the dense reference, on
BCOO ops whose lowerings select index columns (slice, squeeze, reduce_sum, dynamic_slice,
concatenate, sort_indices, sum_duplicates, multiply_sparse, extract), over several layouts."""

from __future__ import annotations

import numpy as np
import pytest

import hlopt
import hlopt.sparse as hs
from hlopt.passes.registry import PIPELINES

WITH = PIPELINES["hlopt-default"]
WITHOUT = WITH.replace(",xla-cpu-column-selects", "")

_rng = np.random.default_rng(7)


def _sparse(shape, density=0.4):
    x = _rng.normal(size=shape).astype(np.float32)
    return np.where(_rng.random(shape) < density, x, 0).astype(np.float32)


# name -> (function of a BCOO, the dense reference of the dense array, dense shape, n_batch, n_dense)
CASES = {
    "slice": (lambda m: hs.bcoo_slice(m, start_indices=(1, 0, 1), limit_indices=(3, 5, 6), strides=(1, 2, 2)),
              lambda x: x[1:3, 0:5:2, 1:6:2], (4, 5, 6), 0, 0),
    "slice_batched": (lambda m: hs.bcoo_slice(m, start_indices=(0, 1, 1), limit_indices=(2, 4, 3)),
                      lambda x: x[0:2, 1:4, 1:3], (2, 5, 3), 1, 0),
    "squeeze": (lambda m: hs.bcoo_squeeze(m, dimensions=(1,)), lambda x: x[:, 0], (4, 1, 6), 0, 0),
    "squeeze_dense": (lambda m: hs.bcoo_squeeze(m, dimensions=(1,)), lambda x: x[:, 0], (4, 1, 6, 2), 0, 1),
    "reduce_sum": (lambda m: hs.bcoo_reduce_sum(m, axes=(1,)), lambda x: x.sum(1), (4, 5, 6), 0, 0),
    "reduce_sum_batched": (lambda m: hs.bcoo_reduce_sum(m, axes=(0, 2)), lambda x: x.sum((0, 2)), (2, 5, 6), 1, 0),
    "dynamic_slice": (lambda m: hs.bcoo_dynamic_slice(m, (1, 2, 0), (2, 3, 4)), lambda x: x[1:3, 2:5, 0:4],
                      (4, 5, 6), 0, 0),
    "concatenate": (lambda m: hs.bcoo_concatenate([m, m], dimension=1), lambda x: np.concatenate([x, x], 1),
                    (4, 5, 6), 0, 0),
    "sort_indices": (hs.bcoo_sort_indices, lambda x: x, (4, 5, 6), 0, 0),
    "sum_duplicates": (lambda m: hs.bcoo_sum_duplicates(m, nse=m.nse), lambda x: x, (3, 5, 6), 1, 0),
    "multiply_sparse": (lambda m: hs.bcoo_multiply_sparse(m, m), lambda x: x * x, (4, 5, 6), 0, 0),
    "extract": (lambda m: hs.bcoo_extract(m, m.todense() + 1), lambda x: np.where(x != 0, x + 1, 0), (4, 5, 6), 0, 0),
}


def _selects(text: str) -> int:
    return text.count("stablehlo.select")


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_numbers_with_and_without_the_pass(name):
    fun, reference, shape, n_batch, n_dense = CASES[name]
    x = _sparse(shape)
    m = hs.BCOO.fromdense(x, n_batch=n_batch, n_dense=n_dense)

    def dense(mat):
        return fun(mat).todense()

    lowered = hlopt.lower(dense, m)
    with_, without = lowered.compile(WITH), lowered.compile(WITHOUT)
    want = reference(x)
    got_with, got_without = np.asarray(with_(m)), np.asarray(without(m))
    np.testing.assert_allclose(got_without, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_with, got_without)


def test_the_pass_rewrites_the_lowered_programs():
    """Not vacuous: on slice and squeeze the pass replaces the broadcast-mask selects."""
    for name in ("slice", "squeeze"):
        fun, _, shape, n_batch, n_dense = CASES[name]
        m = hs.BCOO.fromdense(_sparse(shape), n_batch=n_batch, n_dense=n_dense)
        lowered = hlopt.lower(lambda mat: fun(mat).todense(), m).apply("lower-bcoo")
        before = lowered.as_text()
        after = lowered.apply("xla-cpu-column-selects", platform="cpu").as_text()
        assert before != after
        if name == "squeeze":
            assert "stablehlo.gather" in after and _selects(after) < _selects(before)
