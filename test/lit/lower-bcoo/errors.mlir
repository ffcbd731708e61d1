// RUN: not hlopt-opt %s -p lower-bcoo --split-input-file 2>&1 | filecheck %s

// A config that does not fit the buffers is reported at the op, in one line.
// CHECK: errors.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error: stablehlo.custom_call @hlopt.bcoo.todense: invalid operands or config
// CHECK-NOT: Traceback
func.func @bad_shape(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// CHECK: errors.mlir:[[# @LINE + 3]]:{{[0-9]+}}: error: unknown sparse op @hlopt.bcoo.frobnicate
// CHECK-NOT: Traceback
func.func @unknown(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.frobnicate(%data, %indices) {api_version = 4 : i32, backend_config = {shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}
