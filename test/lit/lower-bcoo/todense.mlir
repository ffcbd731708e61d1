// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// One scatter-add builds the dense array; it drops the updates of padding entries
// (indices outside the array), so nothing is masked first.
// CHECK-LABEL: func.func @todense
// CHECK-NOT: hlopt.bcoo
// CHECK-NOT: stablehlo.select
// CHECK: "stablehlo.scatter"
// CHECK-SAME: inserted_window_dims = [0, 1], scatter_dims_to_operand_dims = [0, 1], index_vector_dim = 1
// CHECK: stablehlo.add
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<4x5xf32>
func.func @todense(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// Broadcast batch buffers, a dense dim: a batched scatter whose updates carry a window.
// CHECK-LABEL: func.func @todense_batched
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.broadcast_in_dim
// CHECK: "stablehlo.scatter"
// CHECK-SAME: update_window_dims = [2], inserted_window_dims = [1], input_batching_dims = [0]
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<2x3x4xf32>
func.func @todense_batched(%data: tensor<1x5x4xf32>, %indices: tensor<2x5x1xi32>) -> tensor<2x3x4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 3, 4>, unique_indices = false}} : (tensor<1x5x4xf32>, tensor<2x5x1xi32>) -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

// No sparse dims: todense is a sum over the stored entries.
// CHECK-LABEL: func.func @todense_no_sparse_dims
// CHECK-NOT: stablehlo.scatter
// CHECK: stablehlo.reduce
// CHECK-NOT: hlopt.bcoo
func.func @todense_no_sparse_dims(%data: tensor<2x3x4xf32>, %indices: tensor<2x3x0xi32>) -> tensor<2x4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 4>, unique_indices = false}} : (tensor<2x3x4xf32>, tensor<2x3x0xi32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// extract (the transpose of todense): one gather, padding reads 0.
// CHECK-LABEL: func.func @extract
// CHECK-NOT: hlopt.bcoo
// CHECK: "stablehlo.gather"
// CHECK-SAME: collapsed_slice_dims = [0, 1], start_index_map = [0, 1], index_vector_dim = 1
// CHECK: stablehlo.select
// CHECK-NOT: hlopt.bcoo
func.func @extract(%arr: tensor<4x5xf32>, %indices: tensor<3x2xi32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.extract(%arr, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<4x5xf32>, tensor<3x2xi32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// fromdense: a prefix sum ranks the nonzeros, a scatter places them, a gather reads the data.
// CHECK-LABEL: func.func @fromdense
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.compare NE
// CHECK: "stablehlo.reduce_window"
// CHECK: "stablehlo.scatter"
// CHECK: "stablehlo.gather"
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<2x3xf32>, tensor<2x3x1xi32>
func.func @fromdense(%x: tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<2x3x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.fromdense(%x) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 0 : i64, nse = 3 : i64, shape = array<i64: 2, 4>, unique_indices = false}} : (tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<2x3x1xi32>)
  return %0#0, %0#1 : tensor<2x3xf32>, tensor<2x3x1xi32>
}
