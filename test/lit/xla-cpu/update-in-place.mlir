// RUN: hlopt-opt %s --platform cpu -p xla-cpu-update-in-place --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-update-in-place --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-update-in-place > %t.none

// The cotangents of two dynamic slices of one array, each a window written into zeros,
// as vjp-expand adds them: the second window is added into the first update in place.
// CHECK-LABEL: func.func @windows
// CHECK: %[[A:.*]] = stablehlo.dynamic_update_slice %{{.*}}, %arg0, %arg2, %{{.*}} : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
// CHECK: %[[OLD:.*]] = stablehlo.dynamic_slice %[[A]], %arg3, %{{.*}}, sizes = [1, 4]
// CHECK: %[[NEW:.*]] = stablehlo.add %[[OLD]], %arg1 : tensor<1x4xf32>
// CHECK: %[[S:.*]] = stablehlo.dynamic_update_slice %[[A]], %[[NEW]], %arg3, %{{.*}}
// CHECK-NOT: stablehlo.add
// CHECK: return %[[S]]
func.func @windows(%u: tensor<1x4xf32>, %v: tensor<1x4xf32>, %i: tensor<i32>, %j: tensor<i32>) -> tensor<8x4xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<8x4xf32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %a = stablehlo.dynamic_update_slice %c0, %u, %i, %z : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
  %b = stablehlo.dynamic_update_slice %c0, %v, %j, %z : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
  %s = stablehlo.add %a, %b : tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}

// -----

// A gather's cotangent, a scatter-add into zeros, on the left of the sum: the rows are
// added into the other side.
// CHECK-LABEL: func.func @rows
// CHECK: %[[S:.*]] = "stablehlo.scatter"(%arg0, %arg1, %arg2)
// CHECK-NOT: stablehlo.add {{.*}} : tensor<5x3xf32>
// CHECK: return %[[S]]
func.func @rows(%a: tensor<5x3xf32>, %idx: tensor<2x1xi32>, %upd: tensor<2x3xf32>) -> tensor<5x3xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<5x3xf32>
  %t = "stablehlo.scatter"(%c0, %idx, %upd) ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %r = stablehlo.add %x, %y : tensor<f32>
    stablehlo.return %r : tensor<f32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>} : (tensor<5x3xf32>, tensor<2x1xi32>, tensor<2x3xf32>) -> tensor<5x3xf32>
  %s = stablehlo.add %t, %a : tensor<5x3xf32>
  return %s : tensor<5x3xf32>
}

// -----

// An update into something other than zeros, an update used twice, and a scatter
// that replaces stay sums.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: stablehlo.add %
func.func @kept(%a: tensor<8x4xf32>, %u: tensor<1x4xf32>, %i: tensor<i32>, %idx: tensor<2x1xi32>, %upd: tensor<2x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<8x4xf32>
  %c1 = stablehlo.constant dense<1.0> : tensor<8x4xf32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %ones = stablehlo.dynamic_update_slice %c1, %u, %i, %z : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
  %0 = stablehlo.add %a, %ones : tensor<8x4xf32>
  %twice = stablehlo.dynamic_update_slice %c0, %u, %i, %z : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
  %1 = stablehlo.add %a, %twice : tensor<8x4xf32>
  %set = "stablehlo.scatter"(%c0, %idx, %upd) ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    stablehlo.return %y : tensor<f32>
  }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>} : (tensor<8x4xf32>, tensor<2x1xi32>, tensor<2x4xf32>) -> tensor<8x4xf32>
  %2 = stablehlo.add %a, %set : tensor<8x4xf32>
  return %0, %1, %2, %twice : tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
