// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s

// A primal known to be zero (a zero constant, here the right-hand side of a solve) is
// read as that constant by the jet functions it reaches: the solve x = S(b) of b_0 = 0
// is x_0 = 0 without a call of @solve (S is linear in b), and the matvec's terms with
// x_0 vanish, so x_1 = S(b_1) alone.
// CHECK-LABEL: func.func @main
// CHECK: %[[ZERO:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK: call @f_jet1(%{{[^,]*}}, %[[ZERO]],
// CHECK-LABEL: func.func private @f_jet1
// CHECK-SAME: (%[[A:[^:]*]]: tensor<f32>, %{{[^:]*}}: tensor<3xf32>, %{{[^:]*}}: tensor<f32>, %[[B1:[^:]*]]: tensor<3xf32>)
// CHECK: %[[X0:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK-NOT: call @solve(%[[A]], %[[X0]])
// CHECK: %[[X1:.*]] = call @solve(%[[A]], %[[B1]])
// CHECK-NOT: stablehlo.subtract
// CHECK: return %[[X0]], %[[X1]]
// CHECK-LABEL: func.func private @matvec_jet1
// CHECK-NOT: stablehlo.multiply %{{.*}}, %arg3
// CHECK: return
func.func @main(%a: tensor<f32>, %a1: tensor<f32>, %b1: tensor<3xf32>) -> tensor<3xf32> {
  %zero = stablehlo.constant dense<0.0> : tensor<3xf32>
  %r:2 = stablehlo.custom_call @hlopt.jet(%a, %zero, %a1, %b1) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 1 : i64}} : (tensor<f32>, tensor<3xf32>, tensor<f32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  return %r#1 : tensor<3xf32>
}
func.func private @f(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
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

// -----

// A call whose argument is a zero constant: the callee's jet is specialized to it, and
// a product with it adds no terms (here y = w . 0 + sin(u): only sin's series remains).
// CHECK-LABEL: func.func private @h_jet2
// CHECK-SAME: (%{{[^:]*}}: tensor<f32>, %[[W:[^:]*]]: tensor<4xf32>, %{{[^:]*}}: tensor<4xf32>, %{{[^:]*}}: tensor<f32>, %{{[^:]*}}: tensor<f32>, %[[W1:[^:]*]]: tensor<4xf32>
// CHECK: %[[Z:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: stablehlo.dot_general %[[W]], %[[Z]]
// CHECK-NOT: stablehlo.dot_general
// CHECK: stablehlo.cosine
// CHECK: return
func.func @two(%u: tensor<f32>, %u1: tensor<f32>, %u2: tensor<f32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%u, %u1, %u2) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64}} : (tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @g(%u: tensor<f32>) -> tensor<f32> {
  %w = stablehlo.broadcast_in_dim %u, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<4xf32>
  %0 = call @h(%u, %w, %zero) : (tensor<f32>, tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @h(%u: tensor<f32>, %w: tensor<4xf32>, %z: tensor<4xf32>) -> tensor<f32> {
  %0 = stablehlo.dot_general %w, %z, contracting_dims = [0] x [0] : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  %1 = stablehlo.sine %u : tensor<f32>
  %2 = stablehlo.add %0, %1 : tensor<f32>
  return %2 : tensor<f32>
}
