// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s

// A custom_jvp rule (x, dx) -> solve(x, dx) in a collapsed jet runs along t x'(t), whose
// primal is +0: the jet function of @tangents reads dx as that constant, and there, where
// JAX requires the rule to be linear in dx, the solve of the zero right-hand side is zero
// without a call of @solve, and the matvec's terms with that zero solution vanish (a_1 x_0,
// a_2 x_0): the first coefficients are the solve of dx's alone, the collapsed second
// subtracts only the summed a_1 x_1.
// CHECK-LABEL: func.func private @tangents_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3xf32>, %{{[^:]*}}: tensor<3xf32>, %{{[^:]*}}: tensor<2x3xf32>, %{{[^:]*}}: tensor<1x3xf32>, %[[V1:[^:]*]]: tensor<2x3xf32>, %[[V2:[^:]*]]: tensor<1x3xf32>)
// CHECK: %[[DX:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK: %[[X0:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK-NOT: call @solve(
// CHECK: call @solve_rows2(%[[X]], %[[DX]], %[[V1]])
// CHECK: %[[M:.*]]:3 = call @matvec_jet2(
// CHECK: stablehlo.subtract %[[V2]], %[[M]]#2
// CHECK: call @solve(%[[X]],
// CHECK: return %[[X0]],
// CHECK-LABEL: func.func private @matvec_jet2
// CHECK-SAME: (%{{[^:]*}}: tensor<3xf32>, %{{[^:]*}}: tensor<3xf32>, %[[A1:[^:]*]]: tensor<2x3xf32>, %[[A2:[^:]*]]: tensor<1x3xf32>, %[[U1:[^:]*]]: tensor<2x3xf32>
// CHECK-NOT: %[[A2]]
// CHECK: stablehlo.multiply %[[A1]], %[[U1]]
// CHECK-NOT: %[[A2]]
// CHECK: return
func.func @main(%x: tensor<3xf32>, %v: tensor<2x3xf32>, %z: tensor<3xf32>) -> tensor<3xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<3xf32>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<2x3xf32>, tensor<3xf32>)
  return %r#2 : tensor<3xf32>
}
func.func private @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @primal(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.log %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @tangents(%x: tensor<3xf32>, %dx: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.linear_solve(%x, %x, %dx) {api_version = 4 : i32, backend_config = {}, called_computations = [@matvec, @solve]} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @matvec(%a: tensor<3xf32>, %v: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.multiply %a, %v : tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @solve(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.divide %b, %a : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// Outside such a rule the solve of a zero right-hand side keeps its own value (an iterative
// solve from a non-zero guess is affine in it, and a -0 may come out): x_0 is @solve's.
// CHECK-LABEL: func.func private @g_jet1
// CHECK-SAME: (%[[A:[^:]*]]: tensor<f32>, %{{[^:]*}}: tensor<3xf32>
// CHECK: %[[ZERO:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK: %[[X0:.*]] = call @solve(%[[A]], %[[ZERO]])
// CHECK: return %[[X0]],
func.func @plain(%a: tensor<f32>, %a1: tensor<f32>, %b1: tensor<3xf32>) -> tensor<3xf32> {
  %zero = stablehlo.constant dense<0.0> : tensor<3xf32>
  %r:2 = stablehlo.custom_call @hlopt.jet(%a, %zero, %a1, %b1) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 1 : i64}} : (tensor<f32>, tensor<3xf32>, tensor<f32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  return %r#0 : tensor<3xf32>
}
func.func private @g(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.linear_solve(%a, %a, %b) {api_version = 4 : i32, backend_config = {}, called_computations = [@matvec, @solve]} : (tensor<f32>, tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @matvec(%a: tensor<f32>, %x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.multiply %0, %x : tensor<3xf32>
  return %1 : tensor<3xf32>
}
func.func private @solve(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.divide %b, %0 : tensor<3xf32>
  return %1 : tensor<3xf32>
}
