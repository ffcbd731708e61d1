# RUN: %PYTHON %s | filecheck %s
"""The hlopt.bcoo.* annotations the hlopt.sparse frontend emits, and what lower-bcoo leaves."""

import numpy as np

import hlopt
from hlopt import sparse as hs

DATA = np.ones((2, 3), np.float32)
INDICES = np.zeros((2, 3, 1), np.int32)


def run(f):
    print(f"TEST: {f.__name__}")
    f()
    return f


def mat(data, indices):
    return hs.BCOO((data, indices), shape=(2, 4))


@run
def todense():
    print(hlopt.lower(lambda d, i: mat(d, i).todense(), DATA, INDICES).as_text())


# CHECK-LABEL: TEST: todense
# CHECK: stablehlo.custom_call @hlopt.bcoo.todense(%arg0, %arg1)
# CHECK-SAME: api_version = 4
# CHECK-SAME: backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 0 : i64, shape = array<i64: 2, 4>, unique_indices = false}
# CHECK-SAME: (tensor<2x3xf32>, tensor<2x3x1xi32>) -> tensor<2x4xf32>


@run
def fromdense():
    print(hlopt.lower(lambda x: hs.BCOO.fromdense(x, nse=3, n_batch=1).indices, np.ones((2, 4), np.float32)).as_text())


# CHECK-LABEL: TEST: fromdense
# CHECK: stablehlo.custom_call @hlopt.bcoo.fromdense(%arg0)
# CHECK-SAME: n_batch = 1 : i64, n_dense = 0 : i64, nse = 3 : i64, shape = array<i64: 2, 4>
# CHECK-SAME: (tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<2x3x1xi32>)


@run
def slice_and_sum_duplicates():
    print(hlopt.lower(lambda d, i: mat(d, i)[:, 1:3].data, DATA, INDICES).as_text())


# CHECK-LABEL: TEST: slice_and_sum_duplicates
# CHECK: @hlopt.bcoo.slice(%arg0, %arg1)
# CHECK-SAME: limit_indices = array<i64: 2, 3>
# CHECK-SAME: start_indices = array<i64: 0, 1>
# CHECK-SAME: strides = array<i64: 1, 1>
# CHECK: @hlopt.bcoo.sum_duplicates
# CHECK-SAME: nse = 2 : i64
# CHECK-SAME: -> (tensor<2x2xf32>, tensor<2x2x1xi32>)


@run
def multiply_sparse_nse():
    def f(d, i):
        return hs.bcoo_multiply_sparse(mat(d, i), mat(d[:, :2], i[:, :2])).data

    print(hlopt.lower(f, DATA, INDICES).as_text())


# The output stores one entry per entry of the smaller operand, not 3 * 2.
# CHECK-LABEL: TEST: multiply_sparse_nse
# CHECK: @hlopt.bcoo.multiply_sparse
# CHECK-SAME: driver = "rhs"
# CHECK-SAME: rhs_shape = array<i64: 2, 4>
# CHECK-SAME: -> (tensor<2x2xf32>, tensor<2x2x1xi32>)


@run
def after_lower_bcoo():
    lowered = hlopt.lower(lambda d, i: hs.bcoo_sum_duplicates(mat(d, i), nse=3).todense(), DATA, INDICES)
    print(lowered.apply("lower-bcoo").as_text())


# CHECK-LABEL: TEST: after_lower_bcoo
# CHECK-NOT: hlopt.bcoo
# CHECK: stablehlo.sort
# CHECK: stablehlo.scatter
# CHECK-NOT: hlopt.bcoo
# CHECK: return
