# RUN: %PYTHON %s | filecheck %s
# Lower a function of your own and check the IR after your pipeline.
import numpy as np

import hlopt
from hlopt import sparse


def rowsums(data, indices):
    return sparse.BCOO((data, indices), shape=(4, 5)).todense().sum(axis=1)


lowered = hlopt.lower(rowsums, np.ones(3, np.float32), np.zeros((3, 2), np.int32))
print("TEST: annotated")
print(lowered.as_text())
# CHECK-LABEL: TEST: annotated
# CHECK: stablehlo.custom_call @hlopt.bcoo.todense

print("TEST: lowered")
print(lowered.apply("lower-bcoo,canonicalize").as_text())
# CHECK-LABEL: TEST: lowered
# CHECK-NOT: hlopt.bcoo
# CHECK: "stablehlo.scatter"
# CHECK: stablehlo.reduce
