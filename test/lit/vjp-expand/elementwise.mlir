// RUN: hlopt-opt %s -p 'vjp-expand{func=f}' --split-input-file | filecheck %s

// @f_vjp runs the forward ops, then the backward ones: sin(x) * y gives
// x_ct = ct * y * cos(x) and y_ct = ct * sin(x). The primal result itself is
// not needed and is not computed.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[Y:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK: %[[S:.*]] = stablehlo.sine %[[X]]
// CHECK-NOT: stablehlo.multiply %[[S]], %[[Y]]
// CHECK-DAG: %[[A:.*]] = stablehlo.multiply %[[CT]], %[[Y]]
// CHECK-DAG: %[[YCT:.*]] = stablehlo.multiply %[[CT]], %[[S]]
// CHECK-DAG: %[[C:.*]] = stablehlo.cosine %[[X]]
// CHECK: %[[XCT:.*]] = stablehlo.multiply %[[A]], %[[C]]
// CHECK: return %[[XCT]], %[[YCT]]
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %y : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Derivatives from the operand or the result: log divides the cotangent by its
// operand, logistic multiplies by y (1 - y), exp by its result; no op is built for
// the constant.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[E:.*]] = stablehlo.exponential %[[X]]
// CHECK: %[[L:.*]] = stablehlo.logistic %[[E]]
// CHECK-NOT: stablehlo.log %
// CHECK: %[[D:.*]] = stablehlo.divide %[[CT]], %[[L]]
// CHECK: %[[ONE_MINUS:.*]] = stablehlo.subtract %{{.*}}, %[[L]]
// CHECK: %[[DL:.*]] = stablehlo.multiply %[[L]], %[[ONE_MINUS]]
// CHECK: %[[A:.*]] = stablehlo.multiply %[[D]], %[[DL]]
// CHECK: %[[R:.*]] = stablehlo.multiply %[[A]], %[[E]]
// CHECK: return %[[R]]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = stablehlo.exponential %x : tensor<4xf32>
  %l = stablehlo.logistic %e : tensor<4xf32>
  %g = stablehlo.log %l : tensor<4xf32>
  %c = stablehlo.constant dense<2.0> : tensor<4xf32>
  %r = stablehlo.add %g, %c : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Zero family: floor passes nothing back, so x gets only the direct term; the
// integer input gets a zero cotangent of its own type, and the second result's
// integer cotangent is ignored.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[N:[^:]*]]: tensor<4xi32>, %[[CT:[^:]*]]: tensor<4xf32>, %[[CTN:[^:]*]]: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>)
// CHECK-NOT: stablehlo.floor
// CHECK: %[[ZI:.*]] = stablehlo.broadcast_in_dim %{{.*}} -> tensor<4xi32>
// CHECK: return %[[CT]], %[[ZI]]
func.func @f(%x: tensor<4xf32>, %n: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>) {
  %0 = stablehlo.floor %x : tensor<4xf32>
  %1 = stablehlo.add %0, %x : tensor<4xf32>
  %2 = stablehlo.add %n, %n : tensor<4xi32>
  return %1, %2 : tensor<4xf32>, tensor<4xi32>
}

// -----

// max splits the cotangent evenly on ties, as JAX: ct * (x == m) / (y == m ? 2 : 1).
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[Y:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[M:.*]] = stablehlo.maximum %[[X]], %[[Y]]
// CHECK-DAG: stablehlo.compare EQ, %[[X]], %[[M]]
// CHECK-DAG: stablehlo.compare EQ, %[[Y]], %[[M]]
// CHECK: stablehlo.divide
// CHECK: return
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.maximum %x, %y : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// clamp with rank-0 bounds: the bounds' cotangents are summed to rank 0.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: -> (tensor<f32>, tensor<4xf32>, tensor<f32>)
// CHECK: stablehlo.compare GT
// CHECK: stablehlo.reduce
// CHECK: stablehlo.reduce
// CHECK: return
func.func @f(%lo: tensor<f32>, %x: tensor<4xf32>, %hi: tensor<f32>) -> tensor<4xf32> {
  %0 = stablehlo.clamp %lo, %x, %hi : (tensor<f32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
