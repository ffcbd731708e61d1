// RUN: hlopt-opt %s --platform cpu -p xla-cpu-stack-dots --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-stack-dots --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-stack-dots > %t.none

// A collapsed jet's dots of one layer: the primal (no directions axis), 3 directions
// and the collapsed coefficient times the same weights become one matmul, the
// primal's row reshaped back.
// CHECK-LABEL: func.func @layer
// CHECK: %[[P:.*]] = stablehlo.reshape %arg0 : (tensor<2x4xf32>) -> tensor<1x2x4xf32>
// CHECK: %[[S:.*]] = stablehlo.concatenate %[[P]], %arg1, %arg2, dim = 0 : (tensor<1x2x4xf32>, tensor<3x2x4xf32>, tensor<1x2x4xf32>) -> tensor<5x2x4xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[S]], %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<5x2x4xf32>, tensor<4x3xf32>) -> tensor<5x2x3xf32>
// CHECK: %[[Y0:.*]] = stablehlo.slice %[[D]] [0:1, 0:2, 0:3]
// CHECK: %[[Y1:.*]] = stablehlo.slice %[[D]] [1:4, 0:2, 0:3]
// CHECK: %[[Y2:.*]] = stablehlo.slice %[[D]] [4:5, 0:2, 0:3]
// CHECK: %[[Y:.*]] = stablehlo.reshape %[[Y0]] : (tensor<1x2x3xf32>) -> tensor<2x3xf32>
// CHECK-NOT: stablehlo.dot_general
// CHECK: return %[[Y]], %[[Y1]], %[[Y2]]
func.func @layer(%x: tensor<2x4xf32>, %v: tensor<3x2x4xf32>, %k: tensor<1x2x4xf32>, %w: tensor<4x3xf32>) -> (tensor<2x3xf32>, tensor<3x2x3xf32>, tensor<1x2x3xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %1 = stablehlo.dot_general %v, %w, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<3x2x4xf32>, tensor<4x3xf32>) -> tensor<3x2x3xf32>
  %2 = stablehlo.dot_general %k, %w, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x2x4xf32>, tensor<4x3xf32>) -> tensor<1x2x3xf32>
  return %0, %1, %2 : tensor<2x3xf32>, tensor<3x2x3xf32>, tensor<1x2x3xf32>
}

// -----

// The shared operand on the left: the others stack along their free dimension, which
// comes after the shared one's in the result.
// CHECK-LABEL: func.func @left
// CHECK: %[[S:.*]] = stablehlo.concatenate %arg1, %arg2, dim = 1 : (tensor<4x2xf32>, tensor<4x3xf32>) -> tensor<4x5xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %arg0, %[[S]], contracting_dims = [1] x [0] : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
// CHECK: %[[A:.*]] = stablehlo.slice %[[D]] [0:6, 0:2]
// CHECK: %[[B:.*]] = stablehlo.slice %[[D]] [0:6, 2:5]
// CHECK: return %[[A]], %[[B]]
func.func @left(%w: tensor<6x4xf32>, %a: tensor<4x2xf32>, %b: tensor<4x3xf32>) -> (tensor<6x2xf32>, tensor<6x3xf32>) {
  %0 = stablehlo.dot_general %w, %a, contracting_dims = [1] x [0] : (tensor<6x4xf32>, tensor<4x2xf32>) -> tensor<6x2xf32>
  %1 = stablehlo.dot_general %w, %b, contracting_dims = [1] x [0] : (tensor<6x4xf32>, tensor<4x3xf32>) -> tensor<6x3xf32>
  return %0, %1 : tensor<6x2xf32>, tensor<6x3xf32>
}

// -----

// A dot whose result feeds the other's operand cannot join it; other dimensions or
// precisions, or operands that differ along a contracted dimension, stay apart.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: stablehlo.concatenate
// CHECK-COUNT-5: stablehlo.dot_general
// CHECK-NOT: stablehlo.concatenate
func.func @kept(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>, %y: tensor<3x5xf32>, %u: tensor<5x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<3x4xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = stablehlo.dot_general %x, %w, contracting_dims = [0] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = stablehlo.dot_general %y, %u, contracting_dims = [1] x [0] : (tensor<3x5xf32>, tensor<5x4xf32>) -> tensor<3x4xf32>
  %4 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %1, %2, %4, %3 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<3x4xf32>
}

// -----

// A bi-Laplacian layer's weight products: rows of shapes 2, 1x2, 3x2x2 and 2x1x2 times
// the same weights stack along no one dimension; each is flattened to rows (16 in all),
// one matmul, its slices reshaped back.
// CHECK-LABEL: func.func @mixed
// CHECK: %[[B:.*]] = stablehlo.reshape %arg1 : (tensor<1x2x4xf64>) -> tensor<2x4xf64>
// CHECK: %[[C:.*]] = stablehlo.reshape %arg2 : (tensor<3x2x2x4xf64>) -> tensor<12x4xf64>
// CHECK: %[[E:.*]] = stablehlo.reshape %arg3 : (tensor<2x1x2x4xf64>) -> tensor<4x4xf64>
// CHECK: %[[S:.*]] = stablehlo.concatenate %arg0, %[[B]], %[[C]], %[[E]], dim = 0 : (tensor<2x4xf64>, tensor<2x4xf64>, tensor<12x4xf64>, tensor<4x4xf64>) -> tensor<20x4xf64>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[S]], %arg4, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<20x4xf64>, tensor<4x3xf64>) -> tensor<20x3xf64>
// CHECK: %[[Y0:.*]] = stablehlo.slice %[[D]] [0:2, 0:3]
// CHECK: %[[Y1:.*]] = stablehlo.slice %[[D]] [2:4, 0:3]
// CHECK: %[[R1:.*]] = stablehlo.reshape %[[Y1]] : (tensor<2x3xf64>) -> tensor<1x2x3xf64>
// CHECK: %[[Y2:.*]] = stablehlo.slice %[[D]] [4:16, 0:3]
// CHECK: %[[R2:.*]] = stablehlo.reshape %[[Y2]] : (tensor<12x3xf64>) -> tensor<3x2x2x3xf64>
// CHECK: %[[Y3:.*]] = stablehlo.slice %[[D]] [16:20, 0:3]
// CHECK: %[[R3:.*]] = stablehlo.reshape %[[Y3]] : (tensor<4x3xf64>) -> tensor<2x1x2x3xf64>
// CHECK-NOT: stablehlo.dot_general
// CHECK: return %[[Y0]], %[[R1]], %[[R2]], %[[R3]]
func.func @mixed(%x: tensor<2x4xf64>, %v: tensor<1x2x4xf64>, %c: tensor<3x2x2x4xf64>, %k: tensor<2x1x2x4xf64>, %w: tensor<4x3xf64>) -> (tensor<2x3xf64>, tensor<1x2x3xf64>, tensor<3x2x2x3xf64>, tensor<2x1x2x3xf64>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<2x4xf64>, tensor<4x3xf64>) -> tensor<2x3xf64>
  %1 = stablehlo.dot_general %v, %w, contracting_dims = [2] x [0], precision = [HIGHEST, HIGHEST] : (tensor<1x2x4xf64>, tensor<4x3xf64>) -> tensor<1x2x3xf64>
  %2 = stablehlo.dot_general %c, %w, contracting_dims = [3] x [0], precision = [HIGHEST, HIGHEST] : (tensor<3x2x2x4xf64>, tensor<4x3xf64>) -> tensor<3x2x2x3xf64>
  %3 = stablehlo.dot_general %k, %w, contracting_dims = [3] x [0], precision = [HIGHEST, HIGHEST] : (tensor<2x1x2x4xf64>, tensor<4x3xf64>) -> tensor<2x1x2x3xf64>
  return %0, %1, %2, %3 : tensor<2x3xf64>, tensor<1x2x3xf64>, tensor<3x2x2x3xf64>, tensor<2x1x2x3xf64>
}

// -----

// The shared operand on the left, the others contracting their first dimension: rows
// flatten to the last dimension, which follows the shared operand's free one.
// CHECK-LABEL: func.func @mixed_left
// CHECK: %[[B:.*]] = stablehlo.reshape %arg2 : (tensor<4x3x2xf32>) -> tensor<4x6xf32>
// CHECK: %[[S:.*]] = stablehlo.concatenate %arg1, %[[B]], dim = 1 : (tensor<4x2xf32>, tensor<4x6xf32>) -> tensor<4x8xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %arg0, %[[S]], contracting_dims = [1] x [0] : (tensor<5x4xf32>, tensor<4x8xf32>) -> tensor<5x8xf32>
// CHECK: %[[A:.*]] = stablehlo.slice %[[D]] [0:5, 0:2]
// CHECK: %[[Y:.*]] = stablehlo.slice %[[D]] [0:5, 2:8]
// CHECK: %[[R:.*]] = stablehlo.reshape %[[Y]] : (tensor<5x6xf32>) -> tensor<5x3x2xf32>
// CHECK: return %[[A]], %[[R]]
func.func @mixed_left(%w: tensor<5x4xf32>, %a: tensor<4x2xf32>, %b: tensor<4x3x2xf32>) -> (tensor<5x2xf32>, tensor<5x3x2xf32>) {
  %0 = stablehlo.dot_general %w, %a, contracting_dims = [1] x [0] : (tensor<5x4xf32>, tensor<4x2xf32>) -> tensor<5x2xf32>
  %1 = stablehlo.dot_general %w, %b, contracting_dims = [1] x [0] : (tensor<5x4xf32>, tensor<4x3x2xf32>) -> tensor<5x3x2xf32>
  return %0, %1 : tensor<5x2xf32>, tensor<5x3x2xf32>
}

// -----

// Operands used elsewhere too (an activation the reverse pass reads again), many times
// larger than the small weights: the concatenation would write them again to save
// reading 12 weights once, so the dots stay apart. With weights that large beside them
// (reads saved at least 1/4 of their elements) they stack.
// CHECK-LABEL: func.func @shared_operands
// CHECK-NOT: stablehlo.concatenate
// CHECK: stablehlo.dot_general %arg0, %arg2
// CHECK: stablehlo.dot_general %arg1, %arg2
// CHECK-NOT: stablehlo.concatenate
// CHECK-LABEL: func.func @shared_operands_large_weights
// CHECK: %[[S:.*]] = stablehlo.concatenate %arg0, %arg1, dim = 0 : (tensor<3x2x64xf32>, tensor<1x2x64xf32>) -> tensor<4x2x64xf32>
// CHECK: stablehlo.dot_general %[[S]], %arg2
func.func @shared_operands(%x: tensor<3x64x4xf32>, %y: tensor<1x64x4xf32>, %w: tensor<4x3xf32>) -> (tensor<3x64x3xf32>, tensor<1x64x3xf32>, tensor<3x64x4xf32>, tensor<1x64x4xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [2] x [0] : (tensor<3x64x4xf32>, tensor<4x3xf32>) -> tensor<3x64x3xf32>
  %1 = stablehlo.dot_general %y, %w, contracting_dims = [2] x [0] : (tensor<1x64x4xf32>, tensor<4x3xf32>) -> tensor<1x64x3xf32>
  return %0, %1, %x, %y : tensor<3x64x3xf32>, tensor<1x64x3xf32>, tensor<3x64x4xf32>, tensor<1x64x4xf32>
}
func.func @shared_operands_large_weights(%x: tensor<3x2x64xf32>, %y: tensor<1x2x64xf32>, %w: tensor<64x64xf32>) -> (tensor<3x2x64xf32>, tensor<1x2x64xf32>, tensor<3x2x64xf32>, tensor<1x2x64xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [2] x [0] : (tensor<3x2x64xf32>, tensor<64x64xf32>) -> tensor<3x2x64xf32>
  %1 = stablehlo.dot_general %y, %w, contracting_dims = [2] x [0] : (tensor<1x2x64xf32>, tensor<64x64xf32>) -> tensor<1x2x64xf32>
  return %0, %1, %x, %y : tensor<3x2x64xf32>, tensor<1x2x64xf32>, tensor<3x2x64xf32>, tensor<1x2x64xf32>
}

// -----

// Operands used by their dots alone, but many times larger than the small weights (a
// jet's 26 coefficient rows of 512 points times a 7x32 layer): stacking would save
// reading 224 weights twice and keep all rows in one buffer, so the dots stay apart.
// CHECK-LABEL: func.func @small_weights
// CHECK-NOT: stablehlo.concatenate
// CHECK-COUNT-3: stablehlo.dot_general
// CHECK-NOT: stablehlo.concatenate
func.func @small_weights(%p: tensor<512x7xf32>, %d: tensor<24x512x7xf32>, %c: tensor<512x7xf32>, %w: tensor<7x32xf32>)
    -> (tensor<512x32xf32>, tensor<24x512x32xf32>, tensor<512x32xf32>) {
  %0 = stablehlo.dot_general %p, %w, contracting_dims = [1] x [0] : (tensor<512x7xf32>, tensor<7x32xf32>) -> tensor<512x32xf32>
  %1 = stablehlo.dot_general %d, %w, contracting_dims = [2] x [0] : (tensor<24x512x7xf32>, tensor<7x32xf32>) -> tensor<24x512x32xf32>
  %2 = stablehlo.dot_general %c, %w, contracting_dims = [1] x [0] : (tensor<512x7xf32>, tensor<7x32xf32>) -> tensor<512x32xf32>
  return %0, %1, %2 : tensor<512x32xf32>, tensor<24x512x32xf32>, tensor<512x32xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
