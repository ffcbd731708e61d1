// RUN: hlopt-opt %s --platform cpu -p xla-cpu-join-dot-sums --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-join-dot-sums --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-join-dot-sums > %t.none

// A weight gradient summed over the primal (no directions axis), the directions and
// the collapsed coefficient: one dot of the stacks.
// CHECK-LABEL: func.func @weight_gradient
// CHECK: %[[X0:.*]] = stablehlo.reshape %arg0 : (tensor<7x16xf32>) -> tensor<1x7x16xf32>
// CHECK: %[[C0:.*]] = stablehlo.reshape %arg3 : (tensor<7x8xf32>) -> tensor<1x7x8xf32>
// CHECK: %[[XS:.*]] = stablehlo.concatenate %arg1, %[[X0]], dim = 0 : (tensor<4x7x16xf32>, tensor<1x7x16xf32>) -> tensor<5x7x16xf32>
// CHECK: %[[CS:.*]] = stablehlo.concatenate %arg4, %[[C0]], dim = 0 : (tensor<4x7x8xf32>, tensor<1x7x8xf32>) -> tensor<5x7x8xf32>
// CHECK: %[[X:.*]] = stablehlo.concatenate %[[XS]], %arg2, dim = 0 : (tensor<5x7x16xf32>, tensor<1x7x16xf32>) -> tensor<6x7x16xf32>
// CHECK: %[[C:.*]] = stablehlo.concatenate %[[CS]], %arg5, dim = 0 : (tensor<5x7x8xf32>, tensor<1x7x8xf32>) -> tensor<6x7x8xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[X]], %[[C]], contracting_dims = [0, 1] x [0, 1] : (tensor<6x7x16xf32>, tensor<6x7x8xf32>) -> tensor<16x8xf32>
// CHECK-NOT: stablehlo.add
// CHECK: return %[[D]]
func.func @weight_gradient(%x0: tensor<7x16xf32>, %x1: tensor<4x7x16xf32>, %x2: tensor<1x7x16xf32>, %c0: tensor<7x8xf32>, %c1: tensor<4x7x8xf32>, %c2: tensor<1x7x8xf32>) -> tensor<16x8xf32> {
  %0 = stablehlo.dot_general %x0, %c0, contracting_dims = [0] x [0] : (tensor<7x16xf32>, tensor<7x8xf32>) -> tensor<16x8xf32>
  %1 = stablehlo.dot_general %x1, %c1, contracting_dims = [0, 1] x [0, 1] : (tensor<4x7x16xf32>, tensor<4x7x8xf32>) -> tensor<16x8xf32>
  %2 = stablehlo.dot_general %x2, %c2, contracting_dims = [0, 1] x [0, 1] : (tensor<1x7x16xf32>, tensor<1x7x8xf32>) -> tensor<16x8xf32>
  %3 = stablehlo.add %0, %1 : tensor<16x8xf32>
  %4 = stablehlo.add %3, %2 : tensor<16x8xf32>
  return %4 : tensor<16x8xf32>
}

// -----

// Operands that differ along a free dimension, a dot used twice, other precisions
// and other dimensions stay sums.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: stablehlo.concatenate
// CHECK-COUNT-3: stablehlo.add
func.func @kept(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>, %c: tensor<4x3xf32>, %d: tensor<4x5xf32>, %e: tensor<5x4xf32>) -> (tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>) {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [0] x [0] : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %1 = stablehlo.dot_general %c, %d, contracting_dims = [0] x [0] : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %2 = stablehlo.add %0, %1 : tensor<3x5xf32>
  %3 = stablehlo.dot_general %a, %b, contracting_dims = [0] x [0], precision = [HIGHEST, HIGHEST] : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %4 = stablehlo.dot_general %c, %d, contracting_dims = [0] x [0] : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %5 = stablehlo.add %3, %4 : tensor<3x5xf32>
  %6 = stablehlo.dot_general %a, %e, contracting_dims = [0] x [1] : (tensor<4x3xf32>, tensor<5x4xf32>) -> tensor<3x5xf32>
  %7 = stablehlo.dot_general %c, %d, contracting_dims = [0] x [0] : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %8 = stablehlo.add %6, %7 : tensor<3x5xf32>
  return %2, %5, %8, %0 : tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>
}

// -----

// Operands far larger than the sum (a weight gradient of a 32x32 layer over 25 x 4096
// rows and one more coefficient's 4096): the concatenations would copy them all to save
// one small dot and an add, so the sum stays; small operands (at most 2^16 elements in
// all) are joined whatever the sum's size.
// CHECK-LABEL: func.func @large_operands
// CHECK-NOT: stablehlo.concatenate
// CHECK: stablehlo.add
// CHECK: stablehlo.concatenate %arg4, %arg5, dim = 0 : (tensor<4x16x512xf32>, tensor<1x16x512xf32>) -> tensor<5x16x512xf32>
// CHECK: stablehlo.concatenate %arg6, %arg7, dim = 0 : (tensor<4x16x1xf32>, tensor<1x16x1xf32>) -> tensor<5x16x1xf32>
// CHECK-NOT: stablehlo.add
func.func @large_operands(%x1: tensor<25x4096x32xf32>, %x2: tensor<1x4096x32xf32>, %c1: tensor<25x4096x32xf32>, %c2: tensor<1x4096x32xf32>, %y1: tensor<4x16x512xf32>, %y2: tensor<1x16x512xf32>, %d1: tensor<4x16x1xf32>, %d2: tensor<1x16x1xf32>) -> (tensor<32x32xf32>, tensor<512x1xf32>) {
  %0 = stablehlo.dot_general %x1, %c1, contracting_dims = [0, 1] x [0, 1] : (tensor<25x4096x32xf32>, tensor<25x4096x32xf32>) -> tensor<32x32xf32>
  %1 = stablehlo.dot_general %x2, %c2, contracting_dims = [0, 1] x [0, 1] : (tensor<1x4096x32xf32>, tensor<1x4096x32xf32>) -> tensor<32x32xf32>
  %2 = stablehlo.add %0, %1 : tensor<32x32xf32>
  %3 = stablehlo.dot_general %y1, %d1, contracting_dims = [0, 1] x [0, 1] : (tensor<4x16x512xf32>, tensor<4x16x1xf32>) -> tensor<512x1xf32>
  %4 = stablehlo.dot_general %y2, %d2, contracting_dims = [0, 1] x [0, 1] : (tensor<1x16x512xf32>, tensor<1x16x1xf32>) -> tensor<512x1xf32>
  %5 = stablehlo.add %3, %4 : tensor<512x1xf32>
  return %2, %5 : tensor<32x32xf32>, tensor<512x1xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
