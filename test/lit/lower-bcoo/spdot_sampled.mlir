// RUN: hlopt-opt %s -p lower-bcoo | filecheck %s

// spdot_general_sampled (the transpose of spdot_general): the pairs of lhs and rhs entries with
// equal contracting indices, each product added into the sampled entry with its output index,
// found by a binary search of the sorted sampled keys.
// CHECK-LABEL: func.func @spdot_sampled
// CHECK-NOT: hlopt.bcoo
// CHECK: "stablehlo.sort"
// CHECK: stablehlo.while
// CHECK: "stablehlo.scatter"
// CHECK: return {{.*}} : tensor<4xf32>
func.func @spdot_sampled(%ad: tensor<9xf32>, %ai: tensor<9x2xi32>, %bd: tensor<4xf32>, %bi: tensor<4x2xi32>, %indices: tensor<4x2xi32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.spdot_general_sampled(%ad, %ai, %bd, %bi, %indices) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 1>], [array<i64>, array<i64>]], indices_sorted = false, lhs_shape = array<i64: 3, 3>, n_batch = 0 : i64, n_dense = 0 : i64, permutation = array<i64: 0, 1>, rhs_shape = array<i64: 4, 3>, shape = array<i64: 3, 4>, unique_indices = false}} : (tensor<9xf32>, tensor<9x2xi32>, tensor<4xf32>, tensor<4x2xi32>, tensor<4x2xi32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
