// RUN: hlopt-opt %s --platform cpu -p xla-cpu-summed-batch-dots --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-summed-batch-dots --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-summed-batch-dots > %t.none

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

// -----

// Kept: an operand with a dynamic batch dimension under a static product, a broadcast of a
// dynamic operand, annotations on the sum or the broadcast, a half-precision product (each
// batch's result rounds before the sum), a sum in another element type, and a sum inside a
// loop of a product outside it.
// CHECK-LABEL: func.func @kept_more
// CHECK-COUNT-7: stablehlo.dot_general {{.*}}batching_dims = [0
// CHECK-NOT: stablehlo.dot_general
func.func @kept_more(%a: tensor<6x?x4x3xf32>, %b: tensor<6x5x3x2xf32>, %p: tensor<1x?x3xf32>, %r: tensor<6x4x3x2xf32>, %q: tensor<5x4x3xf32>, %h: tensor<6x4x3xf16>, %k: tensor<6x3x2xf16>, %n: tensor<i32>) -> (tensor<5x4x2xf32>, tensor<6x4x2xf32>, tensor<5x4x2xf32>, tensor<6x5x4x2xf32>, tensor<4x2xf16>, tensor<4x2xf32>, tensor<5x4x2xf32>) {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %hzero = stablehlo.constant dense<0.0> : tensor<f16>
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<6x?x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  %1 = stablehlo.reduce(%0 init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<6x5x4x2xf32>, tensor<f32>) -> tensor<5x4x2xf32>
  %bp = stablehlo.broadcast_in_dim %p, dims = [0, 1, 2] : (tensor<1x?x3xf32>) -> tensor<6x4x3xf32>
  %2 = stablehlo.dot_general %bp, %r, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2] : (tensor<6x4x3xf32>, tensor<6x4x3x2xf32>) -> tensor<6x4x2xf32>
  %a2 = stablehlo.reshape %a : (tensor<6x?x4x3xf32>) -> tensor<6x5x4x3xf32>
  %3 = stablehlo.dot_general %a2, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<6x5x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  %4 = stablehlo.reduce(%3 init: %zero) applies stablehlo.add across dimensions = [0] {mhlo.sharding = "{replicated}"} : (tensor<6x5x4x2xf32>, tensor<f32>) -> tensor<5x4x2xf32>
  %bq = stablehlo.broadcast_in_dim %q, dims = [1, 2, 3] {mhlo.sharding = "{replicated}"} : (tensor<5x4x3xf32>) -> tensor<6x5x4x3xf32>
  %5 = stablehlo.dot_general %bq, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<6x5x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  %6 = stablehlo.dot_general %h, %k, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf16>, tensor<6x3x2xf16>) -> tensor<6x4x2xf16>
  %7 = stablehlo.reduce(%6 init: %hzero) applies stablehlo.add across dimensions = [0] : (tensor<6x4x2xf16>, tensor<f16>) -> tensor<4x2xf16>
  %8 = stablehlo.dot_general %h, %k, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x3xf16>, tensor<6x3x2xf16>) -> tensor<6x4x2xf16>
  %9 = stablehlo.reduce(%8 init: %zero) across dimensions = [0] : (tensor<6x4x2xf16>, tensor<f32>) -> tensor<4x2xf32>
   reducer(%x: tensor<f32>, %y: tensor<f32>) {
     %t = stablehlo.add %x, %y : tensor<f32>
     stablehlo.return %t : tensor<f32>
   }
  %10 = stablehlo.dot_general %a2, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<6x5x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %init = stablehlo.constant dense<0.0> : tensor<5x4x2xf32>
  %11:2 = stablehlo.while(%i = %c0, %acc = %init) : tensor<i32>, tensor<5x4x2xf32>
  cond {
    %lt = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %lt : tensor<i1>
  } do {
    %s = stablehlo.reduce(%10 init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<6x5x4x2xf32>, tensor<f32>) -> tensor<5x4x2xf32>
    %next = stablehlo.add %acc, %s : tensor<5x4x2xf32>
    %j = stablehlo.add %i, %c1 : tensor<i32>
    stablehlo.return %j, %next : tensor<i32>, tensor<5x4x2xf32>
  }
  return %1, %2, %4, %5, %7, %9, %11#1 : tensor<5x4x2xf32>, tensor<6x4x2xf32>, tensor<5x4x2xf32>, tensor<6x5x4x2xf32>, tensor<4x2xf16>, tensor<4x2xf32>, tensor<5x4x2xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
