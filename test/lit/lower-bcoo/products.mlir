// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// dot_general (SpMM): each entry gathers its row of the dense operand, scales it by its
// data and scatter-adds it into the output row of its index: one gather and one scatter over all
// the entries, no loop (portable; xla-cpu-gather-blocks makes blocks for CPU).
// CHECK-LABEL: func.func @spmm
// CHECK-NOT: hlopt.bcoo
// CHECK-NOT: stablehlo.while
// CHECK: "stablehlo.gather"
// CHECK: stablehlo.multiply
// CHECK: "stablehlo.scatter"
// CHECK-NOT: indices_are_sorted = true
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<4x2xf32>
func.func @spmm(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<5x2xf32>) -> tensor<4x2xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %v) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<5x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

// With indices_sorted and the output rows as the leading index column, the scatter is sorted.
// CHECK-LABEL: func.func @spmm_sorted
// CHECK: "stablehlo.scatter"
// CHECK-SAME: indices_are_sorted = true
func.func @spmm_sorted(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<5x2xf32>) -> tensor<4x2xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %v) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<5x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

// dot_general_sampled (SDDMM): a row of a and a column of b gathered per entry, contracted
// by one dot_general batched over the entries.
// CHECK-LABEL: func.func @sddmm
// CHECK-NOT: hlopt.bcoo
// CHECK: "stablehlo.gather"
// CHECK: "stablehlo.gather"
// CHECK: stablehlo.dot_general {{.*}} batching_dims = [0] x [0], contracting_dims = [1] x [1]
// CHECK: return {{.*}} : tensor<3xf32>
func.func @sddmm(%a: tensor<4x6xf32>, %b: tensor<6x5xf32>, %indices: tensor<3x2xi32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general_sampled(%a, %b, %indices) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<4x6xf32>, tensor<6x5xf32>, tensor<3x2xi32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// spdot_general: one sort of both key lists matches the entries; nothing of size
// lhs.nse x rhs.nse (3 x 4) is built before the pairs are merged into the nse = 12 outputs.
// CHECK-LABEL: func.func @spspmm
// CHECK-NOT: hlopt.bcoo
// CHECK-NOT: tensor<3x4x
// CHECK: "stablehlo.sort"
// CHECK: }) : (tensor<1x7xi{{[0-9]+}}>) -> tensor<1x7xi{{[0-9]+}}>
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<12xf32>, tensor<12x2xi32>
func.func @spspmm(%ld: tensor<3xf32>, %li: tensor<3x2xi32>, %rd: tensor<4xf32>, %ri: tensor<4x2xi32>) -> (tensor<12xf32>, tensor<12x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.spdot_general(%ld, %li, %rd, %ri) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, nse = 12 : i64, rhs_shape = array<i64: 5, 3>, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<4xf32>, tensor<4x2xi32>) -> (tensor<12xf32>, tensor<12x2xi32>)
  return %0#0, %0#1 : tensor<12xf32>, tensor<12x2xi32>
}

