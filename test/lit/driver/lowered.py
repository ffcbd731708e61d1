# RUN: %PYTHON -u %s 2>&1 | filecheck %s
"""The IR of each driver stage, printed from Python."""

import jax.numpy as jnp
import numpy as np

import hlopt


def run(f):
    print(f"TEST: {f.__name__}")
    f()
    return f


@run
def lower_prints_stablehlo():
    def f(x, y):
        return jnp.sin(x) * y, (x + x).sum()

    print(hlopt.lower(f, np.ones((2, 3), np.float32), np.float32(2)).as_text())


# CHECK-LABEL: TEST: lower_prints_stablehlo
# CHECK: func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<f32>)
# CHECK-SAME: -> (tensor<2x3xf32> {jax.result_info = "result[0]"}, tensor<f32> {jax.result_info = "result[1]"})
# CHECK: stablehlo.sine %arg0
# CHECK: stablehlo.reduce


@run
def apply_records_ir_after_each_pass():
    def f(x):
        return jnp.exp(x) * 1.0 + jnp.exp(x) * 1.0

    lowered = hlopt.lower(f, np.ones(4, np.float32)).apply("canonicalize,cse")
    print(lowered.as_text())
    traced = hlopt.lower(f, np.ones(4, np.float32)).apply("canonicalize,cse", print_ir_after_all=True)
    print("names:", [name for name, _ in traced.ir_after_passes])


# CHECK-LABEL: TEST: apply_records_ir_after_each_pass
# CHECK: stablehlo.exponential
# CHECK-NOT: stablehlo.exponential
# CHECK: IR Dump After canonicalize
# CHECK: IR Dump After cse
# CHECK: names: ['canonicalize', 'cse']


@run
def compiled_as_text_is_optimized_hlo():
    compiled = hlopt.lower(lambda x: jnp.cos(x) + 1, np.ones(8, np.float32)).compile()
    print(compiled.as_text())


# CHECK-LABEL: TEST: compiled_as_text_is_optimized_hlo
# CHECK: HloModule
# CHECK: cosine(
# CHECK: ENTRY
