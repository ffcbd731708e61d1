// RUN: hlopt-opt %s -p lower-bcoo --split-input-file | filecheck %s

// update_layout to n_batch=0, n_dense=2: the batch dim becomes the first sparse dim
// (an iota column), the last sparse dim becomes a dense dim (a one-hot select).
// CHECK-LABEL: func.func @update_layout
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.iota
// CHECK: stablehlo.concatenate
// CHECK: stablehlo.compare EQ
// CHECK: stablehlo.select
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<10x6x3xf32>, tensor<10x2xi32>
func.func @update_layout(%data: tensor<2x5x3xf32>, %indices: tensor<2x5x2xi32>) -> (tensor<10x6x3xf32>, tensor<10x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.update_layout(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 2 : i64, shape = array<i64: 2, 4, 6, 3>, unique_indices = false}} : (tensor<2x5x3xf32>, tensor<2x5x2xi32>) -> (tensor<10x6x3xf32>, tensor<10x2xi32>)
  return %0#0, %0#1 : tensor<10x6x3xf32>, tensor<10x2xi32>
}

// -----

// reshape merging the sparse dims: indices are linearized (multiply-add per column,
// no reduce) and unravelled again; the merged dim needs no division.
// CHECK-LABEL: func.func @reshape
// CHECK-NOT: hlopt.bcoo
// CHECK-NOT: stablehlo.reduce
// CHECK: stablehlo.multiply
// CHECK: stablehlo.add
// CHECK: stablehlo.compare LT, {{.*}} : (tensor<2x5x2xui32>, tensor<2x5x2xui32>) -> tensor<2x5x2xi1>
// CHECK-NOT: stablehlo.divide
// CHECK-NOT: stablehlo.remainder
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<2x5x3xf32>, tensor<2x5x1xi32>
func.func @reshape(%data: tensor<2x5x3xf32>, %indices: tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.reshape(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, new_sizes = array<i64: 2, 24, 3>, shape = array<i64: 2, 4, 6, 3>, unique_indices = false}} : (tensor<2x5x3xf32>, tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x1xi32>)
  return %0#0, %0#1 : tensor<2x5x3xf32>, tensor<2x5x1xi32>
}

// -----

// transpose of the sparse dims: the index columns swap (reversed columns are one
// `reverse`, cheaper than slices and a concatenate); data is untouched.
// CHECK-LABEL: func.func @transpose
// CHECK-NOT: hlopt.bcoo
// CHECK: %[[I:.*]] = stablehlo.reverse %arg1, dims = [2] : tensor<2x5x2xi32>
// CHECK: return %arg0, %[[I]]
func.func @transpose(%data: tensor<2x5x3xf32>, %indices: tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.transpose(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, permutation = array<i64: 0, 2, 1, 3>, shape = array<i64: 2, 4, 6, 3>, unique_indices = false}} : (tensor<2x5x3xf32>, tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x2xi32>)
  return %0#0, %0#1 : tensor<2x5x3xf32>, tensor<2x5x2xi32>
}

// -----

// slice: dense dims are sliced, entries outside the window become padding and
// their data zero; strided dims are divided.
// CHECK-LABEL: func.func @slice
// CHECK-NOT: hlopt.bcoo
// The window test `start <= i < limit` is one unsigned compare of `i - start`.
// CHECK: stablehlo.slice %arg0 [0:2, 0:5, 0:2]
// CHECK: %[[SHIFT:.*]] = stablehlo.subtract %arg1
// CHECK: %[[U:.*]] = stablehlo.convert %[[SHIFT]] : (tensor<2x5x2xi32>) -> tensor<2x5x2xui32>
// CHECK: stablehlo.compare LT, %[[U]]
// CHECK-NOT: stablehlo.compare GE
// CHECK: stablehlo.remainder {{.*}} : tensor<2x5x2xui32>
// CHECK: stablehlo.divide {{.*}} : tensor<2x5x2xui32>
// The kept entries' indices, padding elsewhere: one select of the row mask broadcast over the
// columns (xla-cpu-column-selects splits it per column for XLA:CPU).
// CHECK: %[[ROWS:.*]] = stablehlo.broadcast_in_dim {{.*}}, dims = [0, 1] : (tensor<2x5xi1>) -> tensor<2x5x2xi1>
// CHECK: stablehlo.select %[[ROWS]], {{.*}} : tensor<2x5x2xi1>, tensor<2x5x2xi32>
// CHECK-NOT: hlopt.bcoo
// CHECK: return {{.*}} : tensor<2x5x2xf32>, tensor<2x5x2xi32>
func.func @slice(%data: tensor<2x5x3xf32>, %indices: tensor<2x5x2xi32>) -> (tensor<2x5x2xf32>, tensor<2x5x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.slice(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, limit_indices = array<i64: 2, 4, 6, 2>, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 4, 6, 3>, start_indices = array<i64: 0, 1, 0, 0>, strides = array<i64: 1, 1, 2, 1>, unique_indices = false}} : (tensor<2x5x3xf32>, tensor<2x5x2xi32>) -> (tensor<2x5x2xf32>, tensor<2x5x2xi32>)
  return %0#0, %0#1 : tensor<2x5x2xf32>, tensor<2x5x2xi32>
}

// -----

// reduce_sum over the batch dim and a sparse dim: the summed index column goes, an entry out of
// range there becomes padding in the kept column (one select on the index; the data is only
// reshaped), and the batch dim folds into nse (2 x 5 = 10).
// CHECK-LABEL: func.func @reduce_sum
// CHECK-NOT: hlopt.bcoo
// CHECK: %[[KEPT:.*]] = stablehlo.slice %arg1 [0:2, 0:5, 0:1]
// CHECK: %[[SUMMED:.*]] = stablehlo.slice %arg1 [0:2, 0:5, 1:2]
// CHECK: stablehlo.convert %[[SUMMED]] : (tensor<2x5x1xi32>) -> tensor<2x5x1xui32>
// CHECK: stablehlo.compare LT
// CHECK: stablehlo.constant dense<4> : tensor<i32>
// CHECK: stablehlo.select {{.*}} : tensor<2x5x1xi1>, tensor<2x5x1xi32>
// CHECK-NOT: stablehlo.select
// CHECK: stablehlo.reshape %arg0 : (tensor<2x5x3xf32>) -> tensor<10x3xf32>
// CHECK: stablehlo.reshape {{.*}} -> tensor<10x1xi32>
// CHECK-NOT: hlopt.bcoo
func.func @reduce_sum(%data: tensor<2x5x3xf32>, %indices: tensor<2x5x2xi32>) -> (tensor<10x3xf32>, tensor<10x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.reduce_sum(%data, %indices) {api_version = 4 : i32, backend_config = {axes = array<i64: 0, 2>, indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 4, 6, 3>, unique_indices = false}} : (tensor<2x5x3xf32>, tensor<2x5x2xi32>) -> (tensor<10x3xf32>, tensor<10x1xi32>)
  return %0#0, %0#1 : tensor<10x3xf32>, tensor<10x1xi32>
}

// -----

// reduce_sum over every sparse dim: no index is left to mark padding, so padding data is zeroed.
// CHECK-LABEL: func.func @reduce_sum_all_sparse
// CHECK-NOT: hlopt.bcoo
// CHECK: stablehlo.compare LT
// CHECK: stablehlo.select {{.*}} : tensor<2x5x3xi1>, tensor<2x5x3xf32>
// CHECK: return {{.*}} : tensor<2x5x3xf32>, tensor<2x5x0xi32>
func.func @reduce_sum_all_sparse(%data: tensor<2x5x3xf32>, %indices: tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x0xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.reduce_sum(%data, %indices) {api_version = 4 : i32, backend_config = {axes = array<i64: 1, 2>, indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 4, 6, 3>, unique_indices = false}} : (tensor<2x5x3xf32>, tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x0xi32>)
  return %0#0, %0#1 : tensor<2x5x3xf32>, tensor<2x5x0xi32>
}

// -----

// squeeze of a size-1 sparse dim: an entry whose index there is not 0 becomes padding (a
// select of the kept index and the size; xla-cpu-column-selects makes it a gather).
// CHECK-LABEL: func.func @squeeze
// CHECK-NOT: hlopt.bcoo
// CHECK: %[[SQ:.*]] = stablehlo.slice %arg1 [0:2, 0:5, 0:1]
// CHECK: %[[KEPT:.*]] = stablehlo.slice %arg1 [0:2, 0:5, 1:2]
// CHECK: %[[NZ:.*]] = stablehlo.compare NE, %[[SQ]]
// CHECK: %[[ANY:.*]] = stablehlo.reduce(%[[NZ]] init: {{.*}}) applies stablehlo.or across dimensions = [2]
// CHECK: %[[ROWS:.*]] = stablehlo.broadcast_in_dim %[[ANY]], dims = [0, 1] : (tensor<2x5xi1>) -> tensor<2x5x1xi1>
// CHECK: %[[SIZE:.*]] = stablehlo.constant dense<6> : tensor<i32>
// CHECK: stablehlo.select %[[ROWS]], {{.*}}, %[[KEPT]] : tensor<2x5x1xi1>, tensor<2x5x1xi32>
// CHECK-NOT: hlopt.bcoo
// CHECK: return %arg0, {{.*}} : tensor<2x5x3xf32>, tensor<2x5x1xi32>
func.func @squeeze(%data: tensor<2x5x3xf32>, %indices: tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.squeeze(%data, %indices) {api_version = 4 : i32, backend_config = {dimensions = array<i64: 1>, indices_sorted = false, n_batch = 1 : i64, n_dense = 1 : i64, shape = array<i64: 2, 1, 6, 3>, unique_indices = false}} : (tensor<2x5x3xf32>, tensor<2x5x2xi32>) -> (tensor<2x5x3xf32>, tensor<2x5x1xi32>)
  return %0#0, %0#1 : tensor<2x5x3xf32>, tensor<2x5x1xi32>
}
