// RUN: hlopt-opt %s --split-input-file --platform tpu -p tpu-sparse-products | filecheck %s
// RUN: hlopt-opt %s --split-input-file -p tpu-sparse-products | filecheck %s --check-prefix=OFF
// RUN: hlopt-opt %s --split-input-file --platform cpu -p tpu-sparse-products | filecheck %s --check-prefix=OFF

// SpMV: x read in windows of 8 lanes, one lane kept per entry, one unsorted scatter-add.
// CHECK-LABEL: func.func @spmv
// CHECK: %[[W:.*]] = stablehlo.reshape %{{.*}} : (tensor<8xf32>) -> tensor<1x8xf32>
// CHECK: "stablehlo.gather"(%[[W]], %{{.*}}) {{.*}} slice_sizes = array<i64: 1, 8>}> : (tensor<1x8xf32>, tensor<6x1xi32>) -> tensor<6x8xf32>
// CHECK: stablehlo.remainder
// CHECK: stablehlo.reduce({{.*}}) applies stablehlo.add across dimensions = [1] : (tensor<6x8xf32>, tensor<f32>) -> tensor<6xf32>
// CHECK: "stablehlo.scatter"({{.*}}) <{indices_are_sorted = false, {{.*}}}> ({
// CHECK: -> tensor<4xf32>
// CHECK-NOT: hlopt.bcoo
// Without a TPU target (hlopt-opt's default), the annotation stays for lower-bcoo.
// OFF-LABEL: func.func @spmv
// OFF: stablehlo.custom_call @hlopt.bcoo.dot_general
// OFF-NOT: stablehlo.gather
func.func @spmv(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %x: tensor<5xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Row-sorted SpMM in bfloat16 with int64 indices: a row gather, a scatter-add marked sorted.
// CHECK-LABEL: func.func @spmm_sorted
// CHECK: stablehlo.convert %arg1 : (tensor<6x2xi64>) -> tensor<6x2xi32>
// CHECK: "stablehlo.gather"(%arg2, %{{.*}}) {{.*}} slice_sizes = array<i64: 1, 3>}> : (tensor<5x3xbf16>, tensor<6x1xi32>) -> tensor<6x3xbf16>
// CHECK: "stablehlo.scatter"({{.*}}) <{indices_are_sorted = true, {{.*}}update_window_dims = [1]
// CHECK-NOT: hlopt.bcoo
func.func @spmm_sorted(%data: tensor<6xbf16>, %indices: tensor<6x2xi64>, %x: tensor<5x3xbf16>) -> tensor<4x3xbf16> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xbf16>, tensor<6x2xi64>, tensor<5x3xbf16>) -> tensor<4x3xbf16>
  return %0 : tensor<4x3xbf16>
}

// -----

// A small unsorted SpMM is not sorted first (below SORT_MIN_ENTRIES): its scatter is unsorted.
// CHECK-LABEL: func.func @spmm_unsorted
// CHECK-NOT: stablehlo.sort
// CHECK: "stablehlo.scatter"({{.*}}) <{indices_are_sorted = false,
func.func @spmm_unsorted(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %x: tensor<5x3xf32>) -> tensor<4x3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// A^T @ y (contracting the rows): the entries with rows and columns swapped, gathered and added by
// one scatter (unsorted: sorted by column only at the kernel's sizes).
// CHECK-LABEL: func.func @transposed
// CHECK-NOT: hlopt.bcoo
// CHECK: "stablehlo.scatter"({{.*}}) <{indices_are_sorted = false,
// CHECK-NOT: hlopt.bcoo
func.func @transposed(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %y: tensor<4xf32>) -> tensor<5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %y) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 0>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<4xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// Not rewritten: mixed types.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: stablehlo.gather
// CHECK: stablehlo.custom_call @hlopt.bcoo.dot_general(
// CHECK-NOT: stablehlo.gather
func.func @kept(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %x64: tensor<5xf64>) -> tensor<4xf64> {
  %1 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x64) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5xf64>) -> tensor<4xf64>
  return %1 : tensor<4xf64>
}

// -----

// CSR SpMM: rows from indptr by a prefix sum (non-decreasing), so the scatter is marked sorted.
// CHECK-LABEL: func.func @csr_spmm
// CHECK: "stablehlo.scatter"({{.*}}) <{indices_are_sorted = false, {{.*}}}> ({
// CHECK: "stablehlo.gather"(%arg3, %{{.*}}) {{.*}} slice_sizes = array<i64: 1, 3>}>
// CHECK: "stablehlo.scatter"({{.*}}) <{indices_are_sorted = true, {{.*}}update_window_dims = [1]
// CHECK-NOT: hlopt.bcoo
// OFF-LABEL: func.func @csr_spmm
// OFF: stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general
func.func @csr_spmm(%data: tensor<6xf32>, %indices: tensor<6xi32>, %indptr: tensor<5xi32>, %x: tensor<5x3xf32>) -> tensor<4x3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}
