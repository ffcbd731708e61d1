// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s

// A custom_jvp function in a collapsed jet (order 2, 3 directions) follows its own
// rule in one jet of @tangents along all directions, no loop: t y'(t) = jvp(x(t), t x'(t))
// (the rule is linear in its tangents), and t x'(t) = (0, x_1, 2 x_2) has a zero primal
// that the directions share, so the order-2 collapsed jet of @tangents along (x, t x')
// gives (0, y_1, 2 y_2): y_1 its first coefficient, y_2 half its collapsed second.
// CHECK-LABEL: func.func private @f_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[V:[^:]*]]: tensor<3x4xf32>, %[[X2:[^:]*]]: tensor<1x4xf32>)
// CHECK-NOT: stablehlo.while
// CHECK: %[[ZERO:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[TWO:.*]] = stablehlo.constant dense<2.000000e+00> : tensor<1x4xf32>
// CHECK: %[[U2:.*]] = stablehlo.multiply %[[X2]], %[[TWO]]
// CHECK: %[[Z:.*]]:3 = call @tangents_jet2(%[[X]], %[[ZERO]], %[[V]], %[[X2]], %[[V]], %[[U2]])
// CHECK: %[[HALF:.*]] = stablehlo.constant dense<5.000000e-01> : tensor<1x4xf32>
// CHECK: %[[Y2:.*]] = stablehlo.multiply %[[Z]]#2, %[[HALF]]
// CHECK: return %{{.*}}, %[[Z]]#1, %[[Y2]]
// CHECK-LABEL: func.func private @tangents_jet2
// CHECK-NOT: stablehlo.while
// CHECK: return
func.func @main(%x: tensor<4xf32>, %v: tensor<3x4xf32>, %z: tensor<4xf32>) -> (tensor<3x4xf32>, tensor<4xf32>) {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>)
  return %r#1, %r#2 : tensor<3x4xf32>, tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @primal(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @tangents(%x: tensor<4xf32>, %dx: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.cosine %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %dx : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Weighted collapsed sum: the jet of @tangents is collapsed with the same weights.
// CHECK-LABEL: func.func private @g_jet2
// CHECK-NOT: stablehlo.while
// CHECK: call @tangents_jet2(
// CHECK-LABEL: func.func private @tangents_jet2
// CHECK: stablehlo.constant dense<[2.000000e+00, -1.000000e+00]> : tensor<2xf32>
func.func @weighted(%x: tensor<f32>, %v: tensor<2xf32>, %z: tensor<f32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64, collapsed = true, weights = array<f64: 2.0, -1.0>}} : (tensor<f32>, tensor<2xf32>, tensor<f32>) -> (tensor<f32>, tensor<2xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @primal(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.exponential %x : tensor<f32>
  return %0 : tensor<f32>
}
func.func private @tangents(%x: tensor<f32>, %dx: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.exponential %x : tensor<f32>
  %1 = stablehlo.multiply %0, %dx : tensor<f32>
  return %1 : tensor<f32>
}

// -----

// A directions-batched jet: the same one jet of @tangents, batched (nothing summed).
// CHECK-LABEL: func.func private @h_jet2
// CHECK-SAME: -> (tensor<f32>, tensor<5xf32>, tensor<5xf32>)
// CHECK-NOT: stablehlo.while
// CHECK: call @tangents_jet2({{.*}}) : (tensor<f32>, tensor<f32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>)
// CHECK-NOT: call @tangents(
// CHECK: return
func.func @batched(%x: tensor<f32>, %v: tensor<5xf32>, %w: tensor<5xf32>) -> tensor<5xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %w) {api_version = 4 : i32, called_computations = [@h], backend_config = {order = 2 : i64, directions = 5 : i64}} : (tensor<f32>, tensor<5xf32>, tensor<5xf32>) -> (tensor<f32>, tensor<5xf32>, tensor<5xf32>)
  return %r#2 : tensor<5xf32>
}
func.func private @h(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @primal(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.tanh %x : tensor<f32>
  return %0 : tensor<f32>
}
func.func private @tangents(%x: tensor<f32>, %dx: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.tanh %x : tensor<f32>
  %1 = stablehlo.multiply %0, %0 : tensor<f32>
  %2 = stablehlo.multiply %1, %dx : tensor<f32>
  %3 = stablehlo.subtract %dx, %2 : tensor<f32>
  return %3 : tensor<f32>
}
