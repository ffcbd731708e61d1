// RUN: hlopt-opt %s -p xla-cpu-summed-batch-dots --split-input-file | filecheck %s

// A sum over the directions (batch dimension 0) of per-direction, per-point matrix
// products: one product per point contracting the directions first, its precision kept.
// CHECK-LABEL: func.func @directions
// CHECK: %[[S:.*]] = stablehlo.dot_general %arg0, %arg1, batching_dims = [1] x [1], contracting_dims = [0, 3] x [0, 2], precision = [HIGHEST, HIGHEST] : (tensor<6x5x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<5x4x2xf32>
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[S]]
func.func @directions(%a: tensor<6x5x4x3xf32>, %b: tensor<6x5x3x2xf32>) -> tensor<5x4x2xf32> {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %p = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [HIGHEST, HIGHEST] : (tensor<6x5x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  %s = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<6x5x4x2xf32>, tensor<f32>) -> tensor<5x4x2xf32>
  return %s : tensor<5x4x2xf32>
}

// -----

// The second batch dimension summed, batch dimensions anywhere in the operands.
// CHECK-LABEL: func.func @second_batch
// CHECK: %[[S:.*]] = stablehlo.dot_general %arg0, %arg1, batching_dims = [2] x [0], contracting_dims = [0, 1] x [2, 1] : (tensor<7x3x5xf64>, tensor<5x3x7x2xf64>) -> tensor<5x2xf64>
// CHECK: return %[[S]]
func.func @second_batch(%a: tensor<7x3x5xf64>, %b: tensor<5x3x7x2xf64>) -> tensor<5x2xf64> {
  %zero = stablehlo.constant dense<0.0> : tensor<f64>
  %p = stablehlo.dot_general %a, %b, batching_dims = [2, 0] x [0, 2], contracting_dims = [1] x [1] : (tensor<7x3x5xf64>, tensor<5x3x7x2xf64>) -> tensor<5x7x2xf64>
  %s = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<5x7x2xf64>, tensor<f64>) -> tensor<5x2xf64>
  return %s : tensor<5x2xf64>
}

// -----

// Kept, each its own product: a sum over a free dimension, over two dimensions, from a
// non-zero start, a maximum, of integers, and of a product read elsewhere too.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-6: stablehlo.reduce
// CHECK-NOT: stablehlo.reduce
func.func @kept(%a: tensor<6x4x3xf32>, %b: tensor<6x3x2xf32>, %i: tensor<6x4x3xi32>, %j: tensor<6x3x2xi32>) -> (tensor<6x2xf32>, tensor<2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<6x4x2xf32>) {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %izero = stablehlo.constant dense<0> : tensor<i32>
  %p0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf32>, tensor<6x3x2xf32>) -> tensor<6x4x2xf32>
  %free = stablehlo.reduce(%p0 init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<6x4x2xf32>, tensor<f32>) -> tensor<6x2xf32>
  %p1 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf32>, tensor<6x3x2xf32>) -> tensor<6x4x2xf32>
  %both = stablehlo.reduce(%p1 init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<6x4x2xf32>, tensor<f32>) -> tensor<2xf32>
  %p2 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf32>, tensor<6x3x2xf32>) -> tensor<6x4x2xf32>
  %start = stablehlo.reduce(%p2 init: %one) applies stablehlo.add across dimensions = [0] : (tensor<6x4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
  %p3 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf32>, tensor<6x3x2xf32>) -> tensor<6x4x2xf32>
  %max = stablehlo.reduce(%p3 init: %zero) applies stablehlo.maximum across dimensions = [0] : (tensor<6x4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
  %q = stablehlo.dot_general %i, %j, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xi32>, tensor<6x3x2xi32>) -> tensor<6x4x2xi32>
  %int = stablehlo.reduce(%q init: %izero) applies stablehlo.add across dimensions = [0] : (tensor<6x4x2xi32>, tensor<i32>) -> tensor<4x2xi32>
  %p4 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf32>, tensor<6x3x2xf32>) -> tensor<6x4x2xf32>
  %shared = stablehlo.reduce(%p4 init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<6x4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
  return %free, %both, %start, %max, %int, %shared, %p4 : tensor<6x2xf32>, tensor<2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<6x4x2xf32>
}

// -----

// A product whose lhs is a broadcast along batch dimension 0 (through a transpose): that
// dimension is a free one of the rhs, the result transposed back (the reverse-mode form of
// @directions: each direction's cotangent is the cotangent of their sum).
// CHECK-LABEL: func.func @broadcast_lhs
// CHECK: %[[P:.*]] = stablehlo.transpose %arg0, dims = [0, 2, 1] : (tensor<5x4x3xf32>) -> tensor<5x3x4xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[P]], %arg1, batching_dims = [0] x [1], contracting_dims = [1] x [2], precision = [HIGHEST, HIGHEST] : (tensor<5x3x4xf32>, tensor<6x5x3x2xf32>) -> tensor<5x4x6x2xf32>
// CHECK: %[[T:.*]] = stablehlo.transpose %[[D]], dims = [2, 0, 1, 3] : (tensor<5x4x6x2xf32>) -> tensor<6x5x4x2xf32>
// CHECK: return %[[T]]
func.func @broadcast_lhs(%p: tensor<5x4x3xf32>, %r: tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32> {
  %b = stablehlo.broadcast_in_dim %p, dims = [1, 2, 3] : (tensor<5x4x3xf32>) -> tensor<6x5x4x3xf32>
  %t = stablehlo.transpose %b, dims = [0, 1, 3, 2] : (tensor<6x5x4x3xf32>) -> tensor<6x5x3x4xf32>
  %o = stablehlo.dot_general %t, %r, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2], precision = [HIGHEST, HIGHEST] : (tensor<6x5x3x4xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  return %o : tensor<6x5x4x2xf32>
}

// -----

// The rhs a broadcast of a size-1 dimension along the second batch dimension: the lhs keeps
// that dimension as a free one, already in the result's order.
// CHECK-LABEL: func.func @broadcast_rhs
// CHECK: %[[P:.*]] = stablehlo.reshape %arg1 : (tensor<1x5x3xf32>) -> tensor<5x3xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %arg0, %[[P]], batching_dims = [2] x [0], contracting_dims = [1] x [1] : (tensor<6x3x5x2xf32>, tensor<5x3xf32>) -> tensor<5x6x2xf32>
// CHECK-NOT: stablehlo.transpose
// CHECK: return %[[D]]
func.func @broadcast_rhs(%r: tensor<6x3x5x2xf32>, %p: tensor<1x5x3xf32>) -> tensor<5x6x2xf32> {
  %b = stablehlo.broadcast_in_dim %p, dims = [0, 1, 2] : (tensor<1x5x3xf32>) -> tensor<6x5x3xf32>
  %o = stablehlo.dot_general %r, %b, batching_dims = [2, 0] x [1, 0], contracting_dims = [1] x [2] : (tensor<6x3x5x2xf32>, tensor<6x5x3xf32>) -> tensor<5x6x2xf32>
  return %o : tensor<5x6x2xf32>
}

// -----

// Kept: operands that vary along every batch dimension, a broadcast along a contracted
// dimension only, and integers.
// CHECK-LABEL: func.func @varying
// CHECK-COUNT-3: stablehlo.dot_general {{.*}}batching_dims = [0]
func.func @varying(%a: tensor<6x4x3xf32>, %b: tensor<6x3x2xf32>, %c: tensor<6x4xf32>, %i: tensor<4x3xi32>, %j: tensor<6x3x2xi32>) -> (tensor<6x4x2xf32>, tensor<6x4x2xf32>, tensor<6x4x2xi32>) {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf32>, tensor<6x3x2xf32>) -> tensor<6x4x2xf32>
  %bc = stablehlo.broadcast_in_dim %c, dims = [0, 1] : (tensor<6x4xf32>) -> tensor<6x4x3xf32>
  %1 = stablehlo.dot_general %bc, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf32>, tensor<6x3x2xf32>) -> tensor<6x4x2xf32>
  %bi = stablehlo.broadcast_in_dim %i, dims = [1, 2] : (tensor<4x3xi32>) -> tensor<6x4x3xi32>
  %2 = stablehlo.dot_general %bi, %j, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xi32>, tensor<6x3x2xi32>) -> tensor<6x4x2xi32>
  return %0, %1, %2 : tensor<6x4x2xf32>, tensor<6x4x2xf32>, tensor<6x4x2xi32>
}

// -----

// Kept: dynamically shaped products.
// CHECK-LABEL: func.func @dynamic
// CHECK: stablehlo.dot_general {{.*}}batching_dims = [0] x [0]
// CHECK: stablehlo.reduce
// CHECK: stablehlo.dot_general {{.*}}batching_dims = [0, 1] x [0, 1]
func.func @dynamic(%a: tensor<?x4x3xf32>, %b: tensor<?x3x2xf32>, %p: tensor<5x4x3xf32>, %r: tensor<?x5x3x2xf32>) -> (tensor<4x2xf32>, tensor<?x5x4x2xf32>) {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<?x4x3xf32>, tensor<?x3x2xf32>) -> tensor<?x4x2xf32>
  %1 = stablehlo.reduce(%0 init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<?x4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
  %c = stablehlo.constant dense<[6, 5, 4, 3]> : tensor<4xi64>
  %bp = stablehlo.dynamic_broadcast_in_dim %p, %c, dims = [1, 2, 3] : (tensor<5x4x3xf32>, tensor<4xi64>) -> tensor<?x5x4x3xf32>
  %2 = stablehlo.dot_general %bp, %r, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<?x5x4x3xf32>, tensor<?x5x3x2xf32>) -> tensor<?x5x4x2xf32>
  return %1, %2 : tensor<4x2xf32>, tensor<?x5x4x2xf32>
}
