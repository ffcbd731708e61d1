// RUN: hlopt-opt %s -p jet-expand,canonicalize --split-input-file | filecheck %s
// RUN: hlopt-opt %s --platform cpu -p 'jet-expand,canonicalize,xla-cpu-stack-dots' --split-input-file | filecheck %s --check-prefix=STACK

// The collapsed K-th coefficient of tanh is sum_r P(y) x1_r^2 (P(y) = -y (1 - y^2),
// the same for every direction): the sum over the directions is taken of x1_r^2 alone
// (a dot with ones) and multiplied once by the primal factors; nothing of the primal
// is broadcast along the 3 directions (coefficient 1 is unused here). The collapsed
// coefficient is y2 = (1 - y^2) x2 - y (1 - y^2) sum_r x1_r^2, its last op the add: the
// ODE step's 1/2 and the square's 2 cancel (no constant 2 or 1/2, no multiply after the add).
// CHECK-LABEL: func.func private @t_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[V:[^:]*]]: tensor<3x4xf32>, %[[X2:[^:]*]]: tensor<1x4xf32>)
// CHECK-NOT: -> tensor<3x4xf32>
// CHECK-NOT: dense<{{2|5}}.0
// CHECK: %[[Y:.*]] = stablehlo.tanh %[[X]] : tensor<4xf32>
// CHECK: %[[D:.*]] = stablehlo.add %{{.*}} : tensor<4xf32>
// CHECK: %[[DB:.*]] = stablehlo.broadcast_in_dim %[[D]], dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>
// CHECK: %[[LIN:.*]] = stablehlo.multiply %[[X2]], %[[DB]] : tensor<1x4xf32>
// CHECK: %[[SQ:.*]] = stablehlo.multiply %[[V]], %[[V]] : tensor<3x4xf32>
// CHECK: %[[S:.*]] = stablehlo.reduce(%[[SQ]] init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK: %[[A:.*]] = stablehlo.multiply %[[S]], %[[Y]] : tensor<4xf32>
// CHECK: %[[B:.*]] = stablehlo.multiply %[[A]], %[[D]] : tensor<4xf32>
// CHECK: %[[N:.*]] = stablehlo.negate %[[B]] : tensor<4xf32>
// CHECK: %[[R:.*]] = stablehlo.reshape %[[N]] : (tensor<4xf32>) -> tensor<1x4xf32>
// CHECK: %[[Y2:.*]] = stablehlo.add %[[R]], %[[LIN]] : tensor<1x4xf32>
// CHECK-NOT: -> tensor<3x4xf32>
// CHECK: stablehlo.reduce(%[[Y2]]
// CHECK: return
func.func @first(%x: tensor<4xf32>, %v: tensor<3x4xf32>, %z: tensor<4xf32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@t], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @t(%x: tensor<4xf32>) -> tensor<f32> {
  %0 = stablehlo.tanh %x : tensor<4xf32>
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%0 init: %c) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Two layers: the primal, coefficient 1 and the collapsed K-th one go through the dot
// as one matmul (1 + 3 + 1 rows, sliced apart: the primal's row reshaped), and the
// second tanh's sum is again taken of u1_r^2 alone, multiplied by its primal after the sum.
// STACK-LABEL: func.func private @t2_jet2
// STACK: %[[Y0:.*]] = stablehlo.tanh %arg0 : tensor<4xf32>
// STACK: %[[X1:.*]] = stablehlo.multiply %arg1, %{{.*}} : tensor<3x4xf32>
// STACK: %[[SQ0:.*]] = stablehlo.multiply %arg1, %arg1 : tensor<3x4xf32>
// STACK: %[[S0:.*]] = stablehlo.reduce(%[[SQ0]] init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
// STACK: stablehlo.multiply %[[S0]], %[[Y0]] : tensor<4xf32>
// STACK: %[[X2:.*]] = stablehlo.add %{{.*}} : tensor<1x4xf32>
// STACK: %[[P:.*]] = stablehlo.reshape %[[Y0]] : (tensor<4xf32>) -> tensor<1x4xf32>
// STACK: %[[ST:.*]] = stablehlo.concatenate %[[P]], %[[X1]], %[[X2]], dim = 0 : (tensor<1x4xf32>, tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<5x4xf32>
// STACK: %[[U:.*]] = stablehlo.dot_general %[[ST]], %{{.*}}, contracting_dims = [1] x [0] : (tensor<5x4xf32>, tensor<4x2xf32>) -> tensor<5x2xf32>
// STACK: %[[U0:.*]] = stablehlo.slice %[[U]] [0:1, 0:2]
// STACK: %[[U1:.*]] = stablehlo.slice %[[U]] [1:4, 0:2]
// STACK: %[[R0:.*]] = stablehlo.reshape %[[U0]] : (tensor<1x2xf32>) -> tensor<2xf32>
// STACK: %[[Y1:.*]] = stablehlo.tanh %[[R0]] : tensor<2xf32>
// STACK: %[[SQ1:.*]] = stablehlo.multiply %[[U1]], %[[U1]] : tensor<3x2xf32>
// STACK: %[[S1:.*]] = stablehlo.reduce(%[[SQ1]] init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<3x2xf32>, tensor<f32>) -> tensor<2xf32>
// STACK: stablehlo.multiply %[[S1]], %[[Y1]] : tensor<2xf32>
// STACK-NOT: stablehlo.broadcast_in_dim {{.*}} -> tensor<3x2xf32>
// STACK: return
func.func @second(%x: tensor<4xf32>, %v: tensor<3x4xf32>, %z: tensor<4xf32>) -> tensor<2xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@t2], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<2xf32>, tensor<3x2xf32>, tensor<2xf32>)
  return %r#2 : tensor<2xf32>
}
func.func private @t2(%x: tensor<4xf32>) -> tensor<2xf32> {
  %w = stablehlo.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]> : tensor<4x2xf32>
  %0 = stablehlo.tanh %x : tensor<4xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [0] x [0] : (tensor<4xf32>, tensor<4x2xf32>) -> tensor<2xf32>
  %2 = stablehlo.tanh %1 : tensor<2xf32>
  return %2 : tensor<2xf32>
}

// -----

// log with a weighted sum: the factor 1/x of the collapsed term is a divisor outside
// the sum (sum_r w_r v_r^2 / 2, then divided by x once).
// CHECK-LABEL: func.func private @l_jet2
// CHECK-NOT: -> tensor<2x4xf32>
// CHECK: %[[SQ:.*]] = stablehlo.multiply %arg1, %arg1 : tensor<2x4xf32>
// CHECK: %[[S:.*]] = stablehlo.reduce(%{{.*}} init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK: %[[H:.*]] = stablehlo.multiply %[[S]], %{{.*}} : tensor<4xf32>
// CHECK: stablehlo.divide %[[H]], %arg0 : tensor<4xf32>
// CHECK-NOT: -> tensor<2x4xf32>
// CHECK: return
func.func @logw(%x: tensor<4xf32>, %v: tensor<2x4xf32>, %z: tensor<4xf32>) -> tensor<4xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@l], backend_config = {order = 2 : i64, collapsed = true, weights = array<f64: 2.0, -1.0>}} : (tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>)
  return %r#2 : tensor<4xf32>
}
func.func private @l(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.log %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
