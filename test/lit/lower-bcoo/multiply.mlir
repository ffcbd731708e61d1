// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// multiply_dense: the dense operand is gathered at the stored indices.
// CHECK-LABEL: func.func @multiply_dense
// CHECK-NOT: hlopt.bcoo
// CHECK: "stablehlo.gather"
// CHECK: stablehlo.multiply
// CHECK-NOT: hlopt.bcoo
func.func @multiply_dense(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<4x5xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<4x5xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// multiply_sparse: duplicates of the lookup side are summed (one sort), then one sort
// of both key lists and a prefix max find each driver entry's partner. Nothing of size
// lhs.nse x rhs.nse (6 x 4) is built, and the output has the driver's nse (4).
// CHECK-LABEL: func.func @multiply_sparse
// CHECK-NOT: hlopt.bcoo
// CHECK-NOT: tensor<1x6x4x
// CHECK-NOT: tensor<1x24
// CHECK: "stablehlo.sort"
// CHECK: "stablehlo.sort"
// CHECK: }) : (tensor<1x10xi64>) -> tensor<1x10xi64>
// CHECK: stablehlo.maximum
// CHECK: "stablehlo.gather"
// CHECK-NOT: tensor<1x6x4x
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<4xf32>, tensor<4x2xi32>
func.func @multiply_sparse(%ld: tensor<6xf32>, %li: tensor<6x2xi32>, %rd: tensor<4xf32>, %ri: tensor<4x2xi32>) -> (tensor<4xf32>, tensor<4x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.multiply_sparse(%ld, %li, %rd, %ri) {api_version = 4 : i32, backend_config = {driver = "rhs", indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, rhs_shape = array<i64: 4, 5>, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<4xf32>, tensor<4x2xi32>) -> (tensor<4xf32>, tensor<4x2xi32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4x2xi32>
}

// -----

// Both operands broadcast along different sparse dims: every pair is a candidate.
// CHECK-LABEL: func.func @multiply_sparse_pairs
// CHECK-NOT: "stablehlo.sort"
// CHECK: stablehlo.compare EQ
// CHECK-SAME: tensor<1x3x2xi32>
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<6xf32>, tensor<6x2xi32>
func.func @multiply_sparse_pairs(%ld: tensor<3xf32>, %li: tensor<3x2xi32>, %rd: tensor<2xf32>, %ri: tensor<2x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.multiply_sparse(%ld, %li, %rd, %ri) {api_version = 4 : i32, backend_config = {driver = "pairs", indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, rhs_shape = array<i64: 1, 5>, shape = array<i64: 4, 1>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<2xf32>, tensor<2x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>)
  return %0#0, %0#1 : tensor<6xf32>, tensor<6x2xi32>
}
