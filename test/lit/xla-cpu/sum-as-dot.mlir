// RUN: hlopt-opt %s -p xla-cpu-sum-as-dot --split-input-file | filecheck %s

// A sum over the leading axis (a collapsed jet's sum over its directions) becomes a
// product with a vector of ones.
// CHECK-LABEL: func.func @leading
// CHECK: %[[ONES:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<3xf32>
// CHECK: %[[S:.*]] = stablehlo.dot_general %[[ONES]], %arg0, contracting_dims = [0] x [0] : (tensor<3xf32>, tensor<3x4x5xf32>) -> tensor<4x5xf32>
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[S]]
func.func @leading(%x: tensor<3x4x5xf32>) -> tensor<4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3x4x5xf32>, tensor<f32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// A weighted sum: the product with the weights broadcast along the axis is the
// product with the weights, and the broadcast goes.
// CHECK-LABEL: func.func @weighted
// CHECK: %[[W:.*]] = stablehlo.constant dense<[2.000000e+00, 0.000000e+00, 5.000000e-01]> : tensor<3xf64>
// CHECK-NOT: stablehlo.broadcast_in_dim
// CHECK: %[[S:.*]] = stablehlo.dot_general %[[W]], %arg0, contracting_dims = [0] x [0] : (tensor<3xf64>, tensor<3x4xf64>) -> tensor<4xf64>
// CHECK-NOT: stablehlo.multiply
// CHECK: return %[[S]]
func.func @weighted(%x: tensor<3x4xf64>) -> tensor<4xf64> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f64>
  %w = stablehlo.constant dense<[2.0, 0.0, 0.5]> : tensor<3xf64>
  %wb = stablehlo.broadcast_in_dim %w, dims = [0] : (tensor<3xf64>) -> tensor<3x4xf64>
  %p = stablehlo.multiply %x, %wb : tensor<3x4xf64>
  %0 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf64>, tensor<f64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

// Complex weights come converted from real ones; the sum keeps its element type.
// CHECK-LABEL: func.func @complex
// CHECK: %[[W:.*]] = stablehlo.convert %{{.*}} : (tensor<2xf32>) -> tensor<2xcomplex<f32>>
// CHECK: stablehlo.dot_general %[[W]], %arg0, contracting_dims = [0] x [0] : (tensor<2xcomplex<f32>>, tensor<2x3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
func.func @complex(%x: tensor<2x3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
  %r0 = stablehlo.constant dense<0.0> : tensor<f32>
  %c0 = stablehlo.convert %r0 : (tensor<f32>) -> tensor<complex<f32>>
  %w = stablehlo.constant dense<[1.0, 3.0]> : tensor<2xf32>
  %wc = stablehlo.convert %w : (tensor<2xf32>) -> tensor<2xcomplex<f32>>
  %wb = stablehlo.broadcast_in_dim %wc, dims = [0] : (tensor<2xcomplex<f32>>) -> tensor<2x3xcomplex<f32>>
  %p = stablehlo.multiply %wb, %x : tensor<2x3xcomplex<f32>>
  %0 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<2x3xcomplex<f32>>, tensor<complex<f32>>) -> tensor<3xcomplex<f32>>
  return %0 : tensor<3xcomplex<f32>>
}

// -----

// A sum over an inner axis (a nested jet's directions) is the operand's product with
// ones contracting that axis; the other axes keep their order.
// CHECK-LABEL: func.func @inner
// CHECK: %[[ONES:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<3xf32>
// CHECK: %[[S:.*]] = stablehlo.dot_general %arg0, %[[ONES]], contracting_dims = [1] x [0] : (tensor<2x3x4x5xf32>, tensor<3xf32>) -> tensor<2x4x5xf32>
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[S]]
func.func @inner(%x: tensor<2x3x4x5xf32>) -> tensor<2x4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<2x3x4x5xf32>, tensor<f32>) -> tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// -----

// Sums over the last axis, integer sums, sums from another init value and other
// reductions stay as they are.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: stablehlo.dot_general
// CHECK-COUNT-4: stablehlo.reduce
// CHECK-NOT: stablehlo.dot_general
func.func @kept(%x: tensor<3x4xf32>, %i: tensor<3x4xi32>) -> (tensor<3xf32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %c1 = stablehlo.constant dense<1.0> : tensor<f32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.reduce(%i init: %i0) applies stablehlo.add across dimensions = [0] : (tensor<3x4xi32>, tensor<i32>) -> tensor<4xi32>
  %2 = stablehlo.reduce(%x init: %c1) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = stablehlo.reduce(%x init: %c0) applies stablehlo.maximum across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0, %1, %2, %3 : tensor<3xf32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>
}
