// RUN: hlopt-opt %s --platform cpu -p xla-cpu-small-dots --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-small-dots --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-small-dots > %t.none

// A batched product of 4x2 and 2x3 matrices (all of m, k, n below 8) becomes the sum of
// two broadcast products of the operands' slices.
// CHECK-LABEL: func.func @batched
// CHECK: %[[BT:.*]] = stablehlo.transpose %arg1, dims = [0, 2, 1] : (tensor<128x2x3xf32>) -> tensor<128x3x2xf32>
// CHECK: %[[A0:.*]] = stablehlo.slice %arg0 [0:128, 0:4, 0:1]
// CHECK: %[[A0R:.*]] = stablehlo.reshape %[[A0]] : (tensor<128x4x1xf32>) -> tensor<128x4xf32>
// CHECK: %[[A0B:.*]] = stablehlo.broadcast_in_dim %[[A0R]], dims = [0, 1] : (tensor<128x4xf32>) -> tensor<128x4x3xf32>
// CHECK: %[[B0:.*]] = stablehlo.slice %[[BT]] [0:128, 0:3, 0:1]
// CHECK: %[[B0R:.*]] = stablehlo.reshape %[[B0]] : (tensor<128x3x1xf32>) -> tensor<128x3xf32>
// CHECK: %[[B0B:.*]] = stablehlo.broadcast_in_dim %[[B0R]], dims = [0, 2] : (tensor<128x3xf32>) -> tensor<128x4x3xf32>
// CHECK: %[[T0:.*]] = stablehlo.multiply %[[A0B]], %[[B0B]]
// CHECK: stablehlo.slice %arg0 [0:128, 0:4, 1:2]
// CHECK: stablehlo.slice %[[BT]] [0:128, 0:3, 1:2]
// CHECK: %[[T1:.*]] = stablehlo.multiply
// CHECK: %[[S:.*]] = stablehlo.add %[[T0]], %[[T1]] : tensor<128x4x3xf32>
// CHECK-NOT: stablehlo.dot_general
// CHECK: return %[[S]]
func.func @batched(%a: tensor<128x4x2xf32>, %b: tensor<128x2x3xf32>) -> tensor<128x4x3xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [HIGHEST, HIGHEST] : (tensor<128x4x2xf32>, tensor<128x2x3xf32>) -> tensor<128x4x3xf32>
  return %0 : tensor<128x4x3xf32>
}

// -----

// Batch dimensions anywhere, in the result's order; two contracting dimensions are one of
// 2 x 2 = 4 positions (lhs (2, 3) with rhs (2, 1)); a wider result type converts the operands.
// CHECK-LABEL: func.func @general
// CHECK: %[[A:.*]] = stablehlo.convert %arg0 : (tensor<3x5x2x2xf32>) -> tensor<3x5x2x2xf64>
// CHECK: %[[AT:.*]] = stablehlo.transpose %[[A]], dims = [1, 0, 2, 3] : (tensor<3x5x2x2xf64>) -> tensor<5x3x2x2xf64>
// CHECK: stablehlo.reshape %[[AT]] : (tensor<5x3x2x2xf64>) -> tensor<5x3x4xf64>
// CHECK: %[[B:.*]] = stablehlo.convert %arg1
// CHECK: %[[BT:.*]] = stablehlo.transpose %[[B]], dims = [0, 3, 2, 1] : (tensor<5x2x2x3xf64>) -> tensor<5x3x2x2xf64>
// CHECK: stablehlo.reshape %[[BT]] : (tensor<5x3x2x2xf64>) -> tensor<5x3x4xf64>
// CHECK-COUNT-4: stablehlo.multiply {{.*}} : tensor<5x3x3xf64>
// CHECK-NOT: stablehlo.dot_general
func.func @general(%a: tensor<3x5x2x2xf32>, %b: tensor<5x2x2x3xf32>) -> tensor<5x3x3xf64> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [1] x [0], contracting_dims = [2, 3] x [2, 1] : (tensor<3x5x2x2xf32>, tensor<5x2x2x3xf32>) -> tensor<5x3x3xf64>
  return %0 : tensor<5x3x3xf64>
}

// -----

// Kept: a dot with a matrix size of 8 (YNNPACK takes it), one without batch dimensions,
// an integer dot and an empty contraction.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-4: stablehlo.dot_general
// CHECK-NOT: stablehlo.multiply
func.func @kept(%a: tensor<16x8x4xf32>, %b: tensor<16x4x4xf32>, %c: tensor<4x4xf32>, %i: tensor<16x4x4xi32>, %e: tensor<16x4x0xf32>, %f: tensor<16x0x4xf32>) -> (tensor<16x8x4xf32>, tensor<4x4xf32>, tensor<16x4x4xi32>, tensor<16x4x4xf32>) {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<16x8x4xf32>, tensor<16x4x4xf32>) -> tensor<16x8x4xf32>
  %1 = stablehlo.dot_general %c, %c, contracting_dims = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = stablehlo.dot_general %i, %i, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<16x4x4xi32>, tensor<16x4x4xi32>) -> tensor<16x4x4xi32>
  %3 = stablehlo.dot_general %e, %f, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<16x4x0xf32>, tensor<16x0x4xf32>) -> tensor<16x4x4xf32>
  return %0, %1, %2, %3 : tensor<16x8x4xf32>, tensor<4x4xf32>, tensor<16x4x4xi32>, tensor<16x4x4xf32>
}

// -----

// A smaller bound by the option: a 4x4 product stays when max-size is 4 (goes by default).
// RUN: hlopt-opt %s --platform cpu -p 'xla-cpu-small-dots{max-size=4}' --split-input-file | filecheck %s --check-prefix=BOUND
// CHECK-LABEL: func.func @bound
// CHECK: stablehlo.multiply
// BOUND-LABEL: func.func @bound
// BOUND: stablehlo.dot_general
// BOUND-NOT: stablehlo.multiply
func.func @bound(%a: tensor<16x4x4xf32>) -> tensor<16x4x4xf32> {
  %0 = stablehlo.dot_general %a, %a, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<16x4x4xf32>, tensor<16x4x4xf32>) -> tensor<16x4x4xf32>
  return %0 : tensor<16x4x4xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
