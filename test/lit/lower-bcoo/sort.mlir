// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// sort_indices: one stable sort on a linear key (i32 while the sparse dims allow)
// carrying the data; the sorted keys give back the indices (padding becomes `shape`).
// CHECK-LABEL: func.func @sort_indices
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.reduce
// CHECK: %{{.*}}:2 = "stablehlo.sort"
// CHECK-SAME: is_stable = true
// CHECK: }) : (tensor<1x6xi32>, tensor<1x6xf32>) ->
// CHECK: stablehlo.divide
// CHECK: stablehlo.remainder
// CHECK-NOT: "stablehlo.sort"
// CHECK-NOT: hlopt.bcoo
func.func @sort_indices(%data: tensor<6xf32>, %indices: tensor<6x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sort_indices(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>)
  return %0#0, %0#1 : tensor<6xf32>, tensor<6x2xi32>
}

// -----

// With a dense dim the sort carries a row iota and one gather moves the data.
// CHECK-LABEL: func.func @sort_indices_dense
// CHECK: "stablehlo.sort"
// CHECK: }) : (tensor<2x6xi32>, tensor<2x6xi32>) ->
// CHECK: "stablehlo.gather"
// CHECK-NOT: hlopt.bcoo
func.func @sort_indices_dense(%data: tensor<2x6x3xf32>, %indices: tensor<2x6x1xi32>) -> (tensor<2x6x3xf32>, tensor<2x6x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sort_indices(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 5, 3>, unique_indices = false}} : (tensor<2x6x3xf32>, tensor<2x6x1xi32>) -> (tensor<2x6x3xf32>, tensor<2x6x1xi32>)
  return %0#0, %0#1 : tensor<2x6x3xf32>, tensor<2x6x1xi32>
}

// -----

// sum_duplicates: one sort carrying the data, run boundaries by compare, a prefix
// sum numbers the runs, scatter-adds sum the data into them; no nse x nse table.
// CHECK-LABEL: func.func @sum_duplicates
// CHECK-NOT: hlopt.bcoo
// CHECK: %{{.*}}:2 = "stablehlo.sort"
// CHECK: }) : (tensor<1x6xi32>, tensor<1x6xf32>) ->
// CHECK-NOT: "stablehlo.sort"
// CHECK: stablehlo.compare NE
// CHECK: "stablehlo.scatter"
// CHECK: stablehlo.add
// CHECK: "stablehlo.scatter"
// CHECK-NOT: tensor<1x6x6x
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<4xf32>, tensor<4x2xi32>
func.func @sum_duplicates(%data: tensor<6xf32>, %indices: tensor<6x2xi32>) -> (tensor<4xf32>, tensor<4x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sum_duplicates(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, nse = 4 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>) -> (tensor<4xf32>, tensor<4x2xi32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4x2xi32>
}

// -----

// Sparse dims with more than 2^31 elements: 64-bit keys.
// CHECK-LABEL: func.func @sort_indices_wide_keys
// CHECK: "stablehlo.sort"
// CHECK: }) : (tensor<1x3xi64>, tensor<1x3xf32>) ->
func.func @sort_indices_wide_keys(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sort_indices(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 100000, 100000>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}
