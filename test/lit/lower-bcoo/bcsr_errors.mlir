// RUN: hlopt-opt %s -p lower-bcoo --split-input-file --verify-diagnostics

// The BCSR product's operands are checked against its shape before anything is rewritten.

// expected-error@+2 {{@hlopt.bcoo.bcsr_dot_general: backend_config does not fit the operands: needs data[nse], indices[nse] and indptr[5] for shape [4, 5], got data[6], indices[6] and indptr[4]}}
func.func @short_indptr(%data: tensor<6xf32>, %indices: tensor<6xi32>, %indptr: tensor<4xi32>, %x: tensor<5xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<6xf32>, tensor<6xi32>, tensor<4xi32>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.bcsr_dot_general: backend_config does not fit the operands: needs x[5] or x[5, N] for shape [4, 5], got x[6, 2]}}
func.func @x_rows(%data: tensor<6xf32>, %indices: tensor<6xi32>, %indptr: tensor<5xi32>, %x: tensor<6x2xf32>) -> tensor<4x2xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<6x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.bcsr_dot_general: backend_config does not fit the operands: a CSR matrix (shape of 2 dims, n_batch = n_dense = 0), got shape [2, 4, 5], n_batch=1, n_dense=0}}
func.func @batched(%data: tensor<6xf32>, %indices: tensor<6xi32>, %indptr: tensor<5xi32>, %x: tensor<5xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {n_batch = 1 : i64, n_dense = 0 : i64, shape = array<i64: 2, 4, 5>}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.bcsr_dot_general: the indices operands must have one element type, got i32, i64}}
func.func @index_types(%data: tensor<6xf32>, %indices: tensor<6xi32>, %indptr: tensor<5xi64>, %x: tensor<5xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi64>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
