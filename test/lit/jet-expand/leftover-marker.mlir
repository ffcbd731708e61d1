// RUN: not hlopt compile %s --pipeline canonicalize -o %t.hlx 2>&1 | filecheck %s
// RUN: hlopt compile %s -o %t.hlx | filecheck %s --check-prefix=DEFAULT

// A jet marker that reaches PJRT is refused with its location, naming the pass that
// removes it; hlopt-default removes it (and nothing of it is left to run). Checked on
// stderr: the error is `hlopt compile`'s (hlopt-opt runs no PJRT compile) and it is located
// in model.py, the op's own location, which is not a line of this file.
// CHECK: model.py:9:5: error: custom_call @hlopt.jet.stop_gradient (and 1 more) cannot be compiled by XLA; run the 'jet-expand' pass first
// DEFAULT: wrote {{.*}}: leftover-marker(float32[4]) -> (float32[4])
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.stop_gradient(%x) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32> loc("model.py":9:5)
  %1 = stablehlo.custom_call @hlopt.jet.custom_jvp(%0) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @primal(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @tangents(%x: tensor<4xf32>, %dx: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.cosine %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %dx : tensor<4xf32>
  return %1 : tensor<4xf32>
}
