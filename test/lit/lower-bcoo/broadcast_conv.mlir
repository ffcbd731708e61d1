// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// broadcast_in_dim: a new leading batch dim broadcasts both buffers; the indices keep their columns.
// CHECK-LABEL: func.func @broadcast_new_batch
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<4xf32>) -> tensor<2x4xf32>
// CHECK: stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<4x2xi32>) -> tensor<2x4x2xi32>
func.func @broadcast_new_batch(%data: tensor<4xf32>, %indices: tensor<4x2xi32>) -> (tensor<2x4xf32>, tensor<2x4x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.broadcast_in_dim(%data, %indices) {api_version = 4 : i32, backend_config = {broadcast_dimensions = array<i64: 1, 2>, indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, new_shape = array<i64: 2, 3, 4>, shape = array<i64: 3, 4>, unique_indices = false}} : (tensor<4xf32>, tensor<4x2xi32>) -> (tensor<2x4xf32>, tensor<2x4x2xi32>)
  return %0#0, %0#1 : tensor<2x4xf32>, tensor<2x4x2xi32>
}

// -----

// conv: one entry per pair of entries, lhs * rhs at i_lhs + padding_low - i_rhs; pairs with a padding
// entry or a position outside the output (width 5 - 2 + 1 = 4) are padding (index 4, data 0).
// CHECK-LABEL: func.func @conv_pairs
// CHECK-NOT: hlopt.bcoo
// CHECK: %[[AT:.*]] = stablehlo.subtract {{.*}} : tensor<1x3x2xi32>
// CHECK: stablehlo.constant dense<4> : tensor<ui32>
// CHECK: %[[KEEP:.*]] = stablehlo.and {{.*}} : tensor<1x3x2xi1>
// CHECK: %[[PRODUCT:.*]] = stablehlo.multiply {{.*}} : tensor<1x3x2xf32>
// CHECK: stablehlo.select %[[KEEP]], %[[PRODUCT]], {{.*}} : tensor<1x3x2xi1>, tensor<1x3x2xf32>
// CHECK: %[[WIDTH:.*]] = stablehlo.broadcast_in_dim {{.*}} -> tensor<1x3x2xi32>
// CHECK: stablehlo.select %[[KEEP]], %[[AT]], %[[WIDTH]] : tensor<1x3x2xi1>, tensor<1x3x2xi32>
// CHECK: return {{.*}} : tensor<1x1x6xf32>, tensor<1x1x6x1xi32>
func.func @conv_pairs(%ld: tensor<1x1x3xf32>, %li: tensor<1x1x3x1xi32>, %rd: tensor<1x1x2xf32>, %ri: tensor<1x1x2x1xi32>) -> (tensor<1x1x6xf32>, tensor<1x1x6x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.conv(%ld, %li, %rd, %ri) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 2 : i64, n_dense = 0 : i64, padding = array<i64: 0, 0>, rhs_shape = array<i64: 1, 1, 2>, shape = array<i64: 1, 1, 5>, unique_indices = false}} : (tensor<1x1x3xf32>, tensor<1x1x3x1xi32>, tensor<1x1x2xf32>, tensor<1x1x2x1xi32>) -> (tensor<1x1x6xf32>, tensor<1x1x6x1xi32>)
  return %0#0, %0#1 : tensor<1x1x6xf32>, tensor<1x1x6x1xi32>
}
