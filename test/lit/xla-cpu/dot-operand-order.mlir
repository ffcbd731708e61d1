// RUN: hlopt-opt %s --platform cpu -p xla-cpu-dot-operand-order --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-dot-operand-order --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-dot-operand-order > %t.none

// The weight gradient x^T ct of x @ W as vjp-expand writes it (the cotangent first,
// then the transpose into W's order) becomes the dot with x first.
// CHECK-LABEL: func.func @weight_gradient
// CHECK: %[[D:.*]] = stablehlo.dot_general %arg1, %arg0, contracting_dims = [0] x [0], precision = [HIGHEST, DEFAULT] : (tensor<8x5xf32>, tensor<8x3xf32>) -> tensor<5x3xf32>
// CHECK-NOT: stablehlo.transpose
// CHECK: return %[[D]]
func.func @weight_gradient(%ct: tensor<8x3xf32>, %x: tensor<8x5xf32>) -> tensor<5x3xf32> {
  %0 = stablehlo.dot_general %ct, %x, contracting_dims = [0] x [0], precision = [DEFAULT, HIGHEST] : (tensor<8x3xf32>, tensor<8x5xf32>) -> tensor<3x5xf32>
  %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
  return %1 : tensor<5x3xf32>
}

// -----

// Batch dimensions stay first; free dimensions swap as blocks.
// CHECK-LABEL: func.func @batched
// CHECK: %[[D:.*]] = stablehlo.dot_general %arg1, %arg0, batching_dims = [0] x [0], contracting_dims = [1] x [2] : (tensor<2x4x6x7xf32>, tensor<2x3x4xf32>) -> tensor<2x6x7x3xf32>
// CHECK-NOT: stablehlo.transpose
// CHECK: return %[[D]]
func.func @batched(%a: tensor<2x3x4xf32>, %b: tensor<2x4x6x7xf32>) -> tensor<2x6x7x3xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x4xf32>, tensor<2x4x6x7xf32>) -> tensor<2x3x6x7xf32>
  %1 = stablehlo.transpose %0, dims = [0, 2, 3, 1] : (tensor<2x3x6x7xf32>) -> tensor<2x6x7x3xf32>
  return %1 : tensor<2x6x7x3xf32>
}

// -----

// Another permutation, a dot with another use and a transpose of something else stay.
// CHECK-LABEL: func.func @kept
// CHECK: stablehlo.dot_general %arg0, %arg1
// CHECK: stablehlo.transpose
// CHECK: stablehlo.dot_general %arg0, %arg1
// CHECK: stablehlo.transpose
// CHECK: stablehlo.transpose %arg2
func.func @kept(%a: tensor<2x3x4xf32>, %b: tensor<2x4x6x7xf32>, %c: tensor<3x5xf32>) -> (tensor<2x7x6x3xf32>, tensor<2x6x7x3xf32>, tensor<2x3x6x7xf32>, tensor<5x3xf32>) {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x4xf32>, tensor<2x4x6x7xf32>) -> tensor<2x3x6x7xf32>
  %1 = stablehlo.transpose %0, dims = [0, 3, 2, 1] : (tensor<2x3x6x7xf32>) -> tensor<2x7x6x3xf32>
  %2 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x4xf32>, tensor<2x4x6x7xf32>) -> tensor<2x3x6x7xf32>
  %3 = stablehlo.transpose %2, dims = [0, 2, 3, 1] : (tensor<2x3x6x7xf32>) -> tensor<2x6x7x3xf32>
  %4 = stablehlo.transpose %c, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
  return %1, %3, %2, %4 : tensor<2x7x6x3xf32>, tensor<2x6x7x3xf32>, tensor<2x3x6x7xf32>, tensor<5x3xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
