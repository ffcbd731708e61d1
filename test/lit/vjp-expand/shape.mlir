// RUN: hlopt-opt %s -p 'vjp-expand{func=f}' --split-input-file | filecheck %s
// RUN: hlopt-opt %s --platform cpu -p 'vjp-expand{func=f},xla-cpu-update-in-place' --split-input-file | filecheck %s --check-prefix=INPLACE

// broadcast_in_dim with permuted dims: the cotangent is summed over the new dim,
// then put back in operand order.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%{{[^:]*}}: tensor<2x3xf32>, %[[CT:[^:]*]]: tensor<4x3x2xf32>) -> tensor<2x3xf32>
// CHECK: %[[S:.*]] = stablehlo.reduce(%[[CT]] init: %{{.*}}) applies stablehlo.add across dimensions = [0]
// CHECK: %[[T:.*]] = stablehlo.transpose %[[S]], dims = [1, 0]
// CHECK: return %[[T]]
func.func @f(%x: tensor<2x3xf32>) -> tensor<4x3x2xf32> {
  %0 = stablehlo.broadcast_in_dim %x, dims = [2, 1] : (tensor<2x3xf32>) -> tensor<4x3x2xf32>
  return %0 : tensor<4x3x2xf32>
}

// -----

// pad -> crop (negative edge padding), reverse -> reverse, strided slice -> pad
// with interior zeros; the forward ops are not needed and not computed.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%{{[^:]*}}: tensor<6xf32>, %[[CT:[^:]*]]: tensor<4xf32>) -> tensor<6xf32>
// CHECK-NOT: stablehlo.slice
// CHECK: %[[CROP:.*]] = stablehlo.pad %[[CT]], %{{.*}}, low = [-1], high = [0], interior = [0]
// CHECK: %[[R:.*]] = stablehlo.reverse %[[CROP]], dims = [0]
// CHECK: %[[P:.*]] = stablehlo.pad %[[R]], %{{.*}}, low = [1], high = [0], interior = [1] : (tensor<3xf32>, tensor<f32>) -> tensor<6xf32>
// CHECK: return %[[P]]
func.func @f(%x: tensor<6xf32>) -> tensor<4xf32> {
  %0 = stablehlo.slice %x [1:6:2] : (tensor<6xf32>) -> tensor<3xf32>
  %1 = stablehlo.reverse %0, dims = [0] : tensor<3xf32>
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %2 = stablehlo.pad %1, %c, low = [1], high = [0], interior = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// concatenate -> slices; dynamic_update_slice -> zeros written into the cotangent
// (operand) and a dynamic_slice of it (update); dynamic_slice -> the cotangent written
// into zeros at the same start and added, which xla-cpu-update-in-place adds in place
// (not whole). The index gets a zero cotangent.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%{{[^:]*}}: tensor<5xf32>, %{{[^:]*}}: tensor<2xf32>, %[[I:[^:]*]]: tensor<i32>, %[[CT0:[^:]*]]: tensor<3xf32>, %[[CT1:[^:]*]]: tensor<7xf32>)
// CHECK: %[[A:.*]] = stablehlo.slice %[[CT1]] [0:5]
// CHECK: %[[B:.*]] = stablehlo.slice %[[CT1]] [5:7]
// CHECK: %[[XCT:.*]] = stablehlo.dynamic_update_slice %[[A]], %{{.*}}, %[[I]]
// CHECK: %[[UCT:.*]] = stablehlo.dynamic_slice %[[A]], %[[I]], sizes = [2]
// CHECK: %[[Y:.*]] = stablehlo.add %[[B]], %[[UCT]]
// CHECK: %[[W:.*]] = stablehlo.dynamic_update_slice %{{.*}}, %[[CT0]], %[[I]]
// CHECK: %[[X:.*]] = stablehlo.add %[[XCT]], %[[W]]
// CHECK: %[[Z:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK: return %[[X]], %[[Y]], %[[Z]]
// INPLACE-LABEL: func.func @f_vjp(%{{[^:]*}}: tensor<5xf32>, %{{[^:]*}}: tensor<2xf32>,
// INPLACE-SAME: %[[I:[^:]*]]: tensor<i32>, %[[CT0:[^:]*]]: tensor<3xf32>, %{{[^:]*}}: tensor<7xf32>)
// INPLACE: %[[XCT:.*]] = stablehlo.dynamic_update_slice
// INPLACE: %[[OLD:.*]] = stablehlo.dynamic_slice %[[XCT]], %[[I]], sizes = [3]
// INPLACE: %[[SUM:.*]] = stablehlo.add %[[OLD]], %[[CT0]]
// INPLACE: %[[X:.*]] = stablehlo.dynamic_update_slice %[[XCT]], %[[SUM]], %[[I]]
// INPLACE: return %[[X]]
func.func @f(%x: tensor<5xf32>, %y: tensor<2xf32>, %i: tensor<i32>) -> (tensor<3xf32>, tensor<7xf32>) {
  %0 = stablehlo.dynamic_slice %x, %i, sizes = [3] : (tensor<5xf32>, tensor<i32>) -> tensor<3xf32>
  %1 = stablehlo.dynamic_update_slice %x, %y, %i : (tensor<5xf32>, tensor<2xf32>, tensor<i32>) -> tensor<5xf32>
  %2 = stablehlo.concatenate %1, %y, dim = 0 : (tensor<5xf32>, tensor<2xf32>) -> tensor<7xf32>
  return %0, %2 : tensor<3xf32>, tensor<7xf32>
}

// -----

// gather -> scatter-add into zeros at the start indices clamped as gather clamps them.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%{{[^:]*}}: tensor<5xf32>, %[[IDX:[^:]*]]: tensor<4x1xi32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[C:.*]] = stablehlo.clamp %{{.*}}, %[[IDX]], %{{.*}} : tensor<4x1xi32>
// CHECK: %[[S:.*]] = "stablehlo.scatter"(%{{.*}}, %[[C]], %[[CT]])
// CHECK: stablehlo.add
// CHECK: return %[[S]]
func.func @f(%x: tensor<5xf32>, %idx: tensor<4x1xi32>) -> tensor<4xf32> {
  %0 = "stablehlo.gather"(%x, %idx) <{dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1>}> : (tensor<5xf32>, tensor<4x1xi32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// scatter add -> the cotangent to the operand, its gather to the updates, zero for
// updates whose index is out of range (XLA drops them).
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%{{[^:]*}}: tensor<5xf32>, %[[IDX:[^:]*]]: tensor<3x1xi32>, %{{[^:]*}}: tensor<3xf32>, %[[CT:[^:]*]]: tensor<5xf32>)
// CHECK: %[[IN:.*]] = stablehlo.reduce(%{{.*}} init: %{{.*}}) applies stablehlo.and across dimensions = [1]
// CHECK: %[[G:.*]] = "stablehlo.gather"(%[[CT]], %{{.*}})
// CHECK: %[[U:.*]] = stablehlo.select %[[IN]], %[[G]], %{{.*}} : tensor<3xi1>, tensor<3xf32>
// CHECK: return %[[CT]], %{{.*}}, %[[U]]
func.func @f(%x: tensor<5xf32>, %idx: tensor<3x1xi32>, %u: tensor<3xf32>) -> tensor<5xf32> {
  %0 = "stablehlo.scatter"(%x, %idx, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<5xf32>, tensor<3x1xi32>, tensor<3xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// A value computed from constants and iotas only needs no cotangent: no backward op
// is built for it.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[I:.*]] = stablehlo.iota dim = 0
// CHECK: %[[E:.*]] = stablehlo.exponential %[[I]]
// CHECK: %[[R:.*]] = stablehlo.multiply %[[CT]], %[[E]]
// CHECK-NOT: stablehlo.exponential
// CHECK: return %[[R]]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %i = stablehlo.iota dim = 0 : tensor<4xf32>
  %e = stablehlo.exponential %i : tensor<4xf32>
  %0 = stablehlo.multiply %x, %e : tensor<4xf32>
  return %0 : tensor<4xf32>
}
