// RUN: hlopt-opt %s -p 'vjp-expand{func=f}' --split-input-file | filecheck %s

// Batched matmul: the lhs cotangent contracts the cotangent with the rhs over the
// rhs free dim; the rhs one contracts the cotangent with the lhs over the lhs free
// dim, transposed into the rhs's order (xla-cpu-dot-operand-order swaps the operands
// instead, test/lit/xla-cpu/dot-operand-order.mlir).
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x4xf32>, %[[Y:[^:]*]]: tensor<2x4x5xf32>, %[[CT:[^:]*]]: tensor<2x3x5xf32>)
// CHECK: %[[XCT:.*]] = stablehlo.dot_general %[[CT]], %[[Y]], batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x3x5xf32>, tensor<2x4x5xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[CT]], %[[X]], batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<2x5x4xf32>
// CHECK: %[[YCT:.*]] = stablehlo.transpose %[[D]], dims = [0, 2, 1] : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
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
// CHECK: %[[X32:.*]] = stablehlo.convert %[[X]] : (tensor<3x4xbf16>) -> tensor<3x4xf32>
// CHECK: stablehlo.dot_general %[[CT]], %[[X32]], contracting_dims = [0] x [0]
// CHECK: %[[WCT:.*]] = stablehlo.convert %{{.*}} : (tensor<4x5xf32>) -> tensor<4x5xbf16>
// CHECK: return %[[XCT]], %[[WCT]]
func.func @f(%x: tensor<3x4xbf16>, %w: tensor<4x5xbf16>) -> tensor<3x5xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<3x4xbf16>, tensor<4x5xbf16>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// jet-expand's stacked dot (pieces concatenated, one dot_general, the result sliced
// apart): the slices' cotangents are concatenated, not padded with zeros and added.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: %[[W:[^:]*]]: tensor<3x4xf32>, %[[CP:[^:]*]]: tensor<2x4xf32>, %[[CQ:[^:]*]]: tensor<1x4xf32>)
// CHECK-NOT: stablehlo.pad
// CHECK: %[[CT:.*]] = stablehlo.concatenate %[[CP]], %[[CQ]], dim = 0 : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<3x4xf32>
// CHECK: stablehlo.dot_general %[[CT]], %[[W]], contracting_dims = [1] x [1]
// CHECK-NOT: stablehlo.pad
// CHECK: return
func.func @f(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>, %w: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<1x4xf32>) {
  %s = stablehlo.concatenate %a, %b, dim = 0 : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %d = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0] : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %p = stablehlo.slice %d [0:2, 0:4] : (tensor<3x4xf32>) -> tensor<2x4xf32>
  %q = stablehlo.slice %d [2:3, 0:4] : (tensor<3x4xf32>) -> tensor<1x4xf32>
  return %p, %q : tensor<2x4xf32>, tensor<1x4xf32>
}

// -----

// Only one slice of the stacked dot is used: the dots read its cotangent unpadded
// (the weight's contracts with the matching rows of the stack), and the unused
// piece's cotangent is a known zero, not a slice of zeros.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: %[[W:[^:]*]]: tensor<3x4xf32>, %[[CQ:[^:]*]]: tensor<1x4xf32>)
// CHECK-NOT: stablehlo.pad
// CHECK: %[[S:.*]] = stablehlo.concatenate
// CHECK: %[[BCT:.*]] = stablehlo.dot_general %[[CQ]], %[[W]], contracting_dims = [1] x [1] : (tensor<1x4xf32>, tensor<3x4xf32>) -> tensor<1x3xf32>
// CHECK: %[[ROWS:.*]] = stablehlo.slice %[[S]] [2:3, 0:3]
// CHECK: %[[WD:.*]] = stablehlo.dot_general %[[CQ]], %[[ROWS]], contracting_dims = [0] x [0] : (tensor<1x4xf32>, tensor<1x3xf32>) -> tensor<4x3xf32>
// CHECK: stablehlo.transpose %[[WD]], dims = [1, 0]
// CHECK: %[[ZERO:.*]] = stablehlo.broadcast_in_dim %{{.*}}, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
// CHECK: return %[[ZERO]], %[[BCT]]
func.func @f(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>, %w: tensor<3x4xf32>) -> tensor<1x4xf32> {
  %s = stablehlo.concatenate %a, %b, dim = 0 : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %d = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0] : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %q = stablehlo.slice %d [2:3, 0:4] : (tensor<3x4xf32>) -> tensor<1x4xf32>
  return %q : tensor<1x4xf32>
}

// -----

// jet-expand's stacked dot of a directions jet: the primal's row (a reshape), 4 direction
// rows and the collapsed row. The three slices' cotangents (the primal's through its
// reshape) are joined into one stacked cotangent: one dot by the weights for the
// operand's cotangent and one product of the stack with it for the weights', in the
// weights' layout (transposed; xla-cpu-dot-operand-order swaps its operands instead),
// and no zero padding anywhere.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: %[[W:[^:]*]]: tensor<3x5xf32>, %{{[^:]*}}: tensor<2x5xf32>, %[[C1:[^:]*]]: tensor<4x2x5xf32>, %{{[^:]*}}: tensor<1x2x5xf32>)
// CHECK-NOT: stablehlo.pad
// CHECK: %[[S:.*]] = stablehlo.concatenate {{.*}} -> tensor<6x2x3xf32>
// CHECK: %[[C0:.*]] = stablehlo.reshape %{{.*}} : (tensor<2x5xf32>) -> tensor<1x2x5xf32>
// CHECK: %[[C12:.*]] = stablehlo.concatenate %[[C1]], %{{.*}}, dim = 0 : (tensor<4x2x5xf32>, tensor<1x2x5xf32>) -> tensor<5x2x5xf32>
// CHECK: %[[CT:.*]] = stablehlo.concatenate %[[C0]], %[[C12]], dim = 0 : (tensor<1x2x5xf32>, tensor<5x2x5xf32>) -> tensor<6x2x5xf32>
// CHECK: %[[DS:.*]] = stablehlo.dot_general %[[CT]], %[[W]], contracting_dims = [2] x [1] : (tensor<6x2x5xf32>, tensor<3x5xf32>) -> tensor<6x2x3xf32>
// CHECK: %[[DT:.*]] = stablehlo.dot_general %[[CT]], %[[S]], contracting_dims = [0, 1] x [0, 1] : (tensor<6x2x5xf32>, tensor<6x2x3xf32>) -> tensor<5x3xf32>
// CHECK: %[[DW:.*]] = stablehlo.transpose %[[DT]], dims = [1, 0]
// CHECK-NOT: stablehlo.pad
// CHECK: return %{{.*}}, %{{.*}}, %{{.*}}, %[[DW]]
func.func @f(%p: tensor<2x3xf32>, %d: tensor<4x2x3xf32>, %k: tensor<1x2x3xf32>, %w: tensor<3x5xf32>) -> (tensor<2x5xf32>, tensor<4x2x5xf32>, tensor<1x2x5xf32>) {
  %r = stablehlo.reshape %p : (tensor<2x3xf32>) -> tensor<1x2x3xf32>
  %s = stablehlo.concatenate %r, %d, %k, dim = 0 : (tensor<1x2x3xf32>, tensor<4x2x3xf32>, tensor<1x2x3xf32>) -> tensor<6x2x3xf32>
  %y = stablehlo.dot_general %s, %w, contracting_dims = [2] x [0] : (tensor<6x2x3xf32>, tensor<3x5xf32>) -> tensor<6x2x5xf32>
  %y0 = stablehlo.slice %y [0:1, 0:2, 0:5] : (tensor<6x2x5xf32>) -> tensor<1x2x5xf32>
  %y1 = stablehlo.slice %y [1:5, 0:2, 0:5] : (tensor<6x2x5xf32>) -> tensor<4x2x5xf32>
  %y2 = stablehlo.slice %y [5:6, 0:2, 0:5] : (tensor<6x2x5xf32>) -> tensor<1x2x5xf32>
  %o = stablehlo.reshape %y0 : (tensor<1x2x5xf32>) -> tensor<2x5xf32>
  %t = stablehlo.tanh %o : tensor<2x5xf32>
  %m = stablehlo.multiply %y2, %y2 : tensor<1x2x5xf32>
  return %t, %y1, %m : tensor<2x5xf32>, tensor<4x2x5xf32>, tensor<1x2x5xf32>
}
