// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// concatenate along a sparse dim: the entry lists are concatenated and the second operand's
// indices are offset by the first operand's size in that dim (padding stays padding).
// CHECK-LABEL: func.func @concatenate_sparse
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.add
// CHECK: stablehlo.select
// CHECK: stablehlo.concatenate {{.*}} dim = 0 : (tensor<3xf32>, tensor<2xf32>) -> tensor<5xf32>
// CHECK: stablehlo.concatenate {{.*}} dim = 0 : (tensor<3x2xi32>, tensor<2x2xi32>) -> tensor<5x2xi32>
// CHECK: return {{.*}} : tensor<5xf32>, tensor<5x2xi32>
func.func @concatenate_sparse(%d0: tensor<3xf32>, %i0: tensor<3x2xi32>, %d1: tensor<2xf32>, %i1: tensor<2x2xi32>) -> (tensor<5xf32>, tensor<5x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.concatenate(%d0, %i0, %d1, %i1) {api_version = 4 : i32, backend_config = {dimension = 1 : i64, indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, sizes = array<i64: 5, 2>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<2xf32>, tensor<2x2xi32>) -> (tensor<5xf32>, tensor<5x2xi32>)
  return %0#0, %0#1 : tensor<5xf32>, tensor<5x2xi32>
}

// -----

// dynamic_slice: the starts are clamped, the batch buffers sliced with dynamic_slice, the
// sparse indices shifted by the start and entries outside the window masked.
// CHECK-LABEL: func.func @dynamic_slice
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.clamp
// CHECK: stablehlo.dynamic_slice
// CHECK: stablehlo.subtract
// CHECK: return {{.*}} : tensor<2x4xf32>, tensor<2x4x1xi32>
func.func @dynamic_slice(%data: tensor<3x4xf32>, %indices: tensor<3x4x1xi32>, %starts: tensor<2xi32>) -> (tensor<2x4xf32>, tensor<2x4x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.dynamic_slice(%data, %indices, %starts) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 0 : i64, shape = array<i64: 3, 6>, slice_sizes = array<i64: 2, 3>, unique_indices = false}} : (tensor<3x4xf32>, tensor<3x4x1xi32>, tensor<2xi32>) -> (tensor<2x4xf32>, tensor<2x4x1xi32>)
  return %0#0, %0#1 : tensor<2x4xf32>, tensor<2x4x1xi32>
}

