// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// sort_indices: one sort of a linear key packed with each entry's position into one
// 64-bit word; the sorted keys give back the indices (padding becomes `shape`) and
// one gather moves the data.
// The key is built column by column (no reduce over the 2 columns), padding is
// found by one unsigned compare per column, and unravelling divides unsigned keys.
// CHECK-LABEL: func.func @sort_indices
// CHECK-NOT: hlopt.bcoo
// CHECK-NOT: stablehlo.reduce
// CHECK: stablehlo.multiply
// CHECK: stablehlo.add
// CHECK: stablehlo.compare LT, {{.*}} : (tensor<1x6x2xui32>, tensor<1x6x2xui32>) -> tensor<1x6x2xi1>
// CHECK: "stablehlo.sort"
// CHECK: }) : (tensor<1x6xi64>) -> tensor<1x6xi64>
// CHECK-NOT: "stablehlo.sort"
// CHECK: stablehlo.divide {{.*}} : tensor<1x6xui32>
// CHECK: stablehlo.remainder {{.*}} : tensor<1x6xui32>
// CHECK: "stablehlo.gather"
// CHECK-NOT: "stablehlo.sort"
// CHECK-NOT: hlopt.bcoo
func.func @sort_indices(%data: tensor<6xf32>, %indices: tensor<6x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sort_indices(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>)
  return %0#0, %0#1 : tensor<6xf32>, tensor<6x2xi32>
}

// -----

// With a dense dim the gather moves whole rows.
// CHECK-LABEL: func.func @sort_indices_dense
// CHECK: "stablehlo.sort"
// CHECK: }) : (tensor<2x6xi64>) -> tensor<2x6xi64>
// CHECK: "stablehlo.gather"
// CHECK-SAME: offset_dims = [2]
// CHECK-NOT: hlopt.bcoo
func.func @sort_indices_dense(%data: tensor<2x6x3xf32>, %indices: tensor<2x6x1xi32>) -> (tensor<2x6x3xf32>, tensor<2x6x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sort_indices(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 5, 3>, unique_indices = false}} : (tensor<2x6x3xf32>, tensor<2x6x1xi32>) -> (tensor<2x6x3xf32>, tensor<2x6x1xi32>)
  return %0#0, %0#1 : tensor<2x6x3xf32>, tensor<2x6x1xi32>
}

// -----

// sum_duplicates: one sort (key and position in one word), run boundaries by compare,
// a prefix sum numbers the runs, a scatter-add sums the data into them; no nse x nse table.
// CHECK-LABEL: func.func @sum_duplicates
// CHECK-NOT: hlopt.bcoo
// CHECK: "stablehlo.sort"
// CHECK: }) : (tensor<1x6xi64>) -> tensor<1x6xi64>
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

// Sparse dims with more than 2^31 elements: 64-bit keys, sorted with a position operand.
// CHECK-LABEL: func.func @sort_indices_wide_keys
// CHECK: "stablehlo.sort"
// CHECK-SAME: is_stable = true
// CHECK: }) : (tensor<1x3xi64>, tensor<1x3xi32>) ->
func.func @sort_indices_wide_keys(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sort_indices(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 100000, 100000>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}
