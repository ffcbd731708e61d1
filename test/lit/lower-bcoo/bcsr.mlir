// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// BCSR SpMM: each entry's row from indptr (a scatter of ones at the pointers, then a prefix sum
// by reduce_window), x gathered at the columns, out-of-range columns masked, one scatter-add
// into the rows (which drops rows out of range: padding).
// CHECK-LABEL: func.func @spmm
// CHECK-NOT: hlopt.bcoo
// CHECK: "stablehlo.scatter"
// CHECK: stablehlo.reduce_window
// CHECK: "stablehlo.gather"
// CHECK: stablehlo.select
// CHECK: "stablehlo.scatter"
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<4x3xf32>
func.func @spmm(%data: tensor<6xf32>, %indices: tensor<6xi32>, %indptr: tensor<5xi32>, %x: tensor<5x3xf32>) -> tensor<4x3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// SpMV with mixed operand types: both converted to the result's (complex) type first.
// CHECK-LABEL: func.func @spmv_mixed
// CHECK: stablehlo.convert {{.*}} : (tensor<5xf32>) -> tensor<5xcomplex<f32>>
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<4xcomplex<f32>>
func.func @spmv_mixed(%data: tensor<6xcomplex<f32>>, %indices: tensor<6xi32>, %indptr: tensor<5xi32>, %x: tensor<5xf32>) -> tensor<4xcomplex<f32>> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xcomplex<f32>>, tensor<6xi32>, tensor<5xi32>, tensor<5xf32>) -> tensor<4xcomplex<f32>>
  return %0 : tensor<4xcomplex<f32>>
}

// -----

// No entries: zeros, nothing gathered.
// CHECK-LABEL: func.func @no_entries
// CHECK-NOT: stablehlo.gather
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<4xf64>
func.func @no_entries(%data: tensor<0xf64>, %indices: tensor<0xi32>, %indptr: tensor<5xi32>, %x: tensor<5xf64>) -> tensor<4xf64> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<0xf64>, tensor<0xi32>, tensor<5xi32>, tensor<5xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
