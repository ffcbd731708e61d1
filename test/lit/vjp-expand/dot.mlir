// RUN: hlopt-opt %s -p 'vjp-expand{func=f}' --split-input-file | filecheck %s

// Batched matmul: the lhs cotangent contracts the cotangent with the rhs over the
// rhs free dim; the rhs one contracts over the lhs free dim, then transposes.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x4xf32>, %[[Y:[^:]*]]: tensor<2x4x5xf32>, %[[CT:[^:]*]]: tensor<2x3x5xf32>)
// CHECK: %[[XCT:.*]] = stablehlo.dot_general %[[CT]], %[[Y]], batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x3x5xf32>, tensor<2x4x5xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[CT]], %[[X]], batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<2x5x4xf32>
// CHECK: %[[YCT:.*]] = stablehlo.transpose %[[D]], dims = [0, 2, 1]
// CHECK: return %[[XCT]], %[[YCT]]
func.func @f(%x: tensor<2x3x4xf32>, %y: tensor<2x4x5xf32>) -> tensor<2x3x5xf32> {
  %0 = stablehlo.dot_general %x, %y, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// -----

// A wider result type (bf16 x bf16 -> f32): the backward dots run in f32 and their
// results are converted back to bf16.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3x4xbf16>, %[[W:[^:]*]]: tensor<4x5xbf16>, %[[CT:[^:]*]]: tensor<3x5xf32>) -> (tensor<3x4xbf16>, tensor<4x5xbf16>)
// CHECK: %[[W32:.*]] = stablehlo.convert %[[W]] : (tensor<4x5xbf16>) -> tensor<4x5xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[CT]], %[[W32]], contracting_dims = [1] x [1]
// CHECK: %[[XCT:.*]] = stablehlo.convert %[[D]] : (tensor<3x4xf32>) -> tensor<3x4xbf16>
// CHECK: stablehlo.dot_general %[[CT]], %{{.*}}, contracting_dims = [0] x [0]
// CHECK: %[[WCT:.*]] = stablehlo.convert %{{.*}} : (tensor<4x5xf32>) -> tensor<4x5xbf16>
// CHECK: return %[[XCT]], %[[WCT]]
func.func @f(%x: tensor<3x4xbf16>, %w: tensor<4x5xbf16>) -> tensor<3x5xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<3x4xbf16>, tensor<4x5xbf16>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}
