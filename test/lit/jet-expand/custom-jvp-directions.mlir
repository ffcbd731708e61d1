// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s

// A custom_jvp function in a collapsed jet (order 2, 3 directions) follows its own
// rule: the standard jet of @tangents runs per direction in one `while` loop over the
// directions, each direction's first coefficient written into its row, the nonlinear
// part of its second coefficient summed. The collapsed second coefficient's term in the
// input's own (summed) second coefficient is linear: one call of @tangents at the primal.
// CHECK-LABEL: func.func private @f_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[V:[^:]*]]: tensor<3x4xf32>, %[[X2:[^:]*]]: tensor<1x4xf32>)
// CHECK: %[[N:.*]] = stablehlo.constant dense<3> : tensor<i32>
// CHECK: stablehlo.while(%[[R:[^ ]*]] = {{.*}}, %[[ROWS:[^ ]*]] = {{.*}}, %[[SUM:[^ ]*]] = {{.*}}) : tensor<i32>, tensor<3x4xf32>, tensor<1x4xf32>
// CHECK: stablehlo.compare LT, %[[R]], %[[N]]
// CHECK: %[[ROW:.*]] = stablehlo.dynamic_slice %[[V]], %[[R]], %{{.*}}, sizes = [1, 4]
// CHECK: %[[VR:.*]] = stablehlo.reshape %[[ROW]] : (tensor<1x4xf32>) -> tensor<4xf32>
// CHECK: %[[G:.*]]:2 = func.call @tangents_jet1(%[[X]], %[[VR]], %[[VR]], %{{.*}})
// CHECK: stablehlo.dynamic_update_slice %[[ROWS]], %{{.*}}, %[[R]], %{{.*}} : (tensor<3x4xf32>, tensor<1x4xf32>, tensor<i32>, tensor<i32>) -> tensor<3x4xf32>
// CHECK: stablehlo.add %[[SUM]], %{{.*}} : tensor<1x4xf32>
// CHECK: %[[TOP:.*]] = stablehlo.reshape %[[X2]] : (tensor<1x4xf32>) -> tensor<4xf32>
// CHECK: call @tangents(%[[X]], %[[TOP]])
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

// Weighted collapsed sum: each direction's nonlinear part is scaled by its weight,
// read at the loop index from the weights vector, built once before the loop.
// CHECK-LABEL: func.func private @g_jet2
// CHECK: %[[W:.*]] = stablehlo.constant dense<[2.000000e+00, -1.000000e+00]> : tensor<2xf32>
// CHECK: stablehlo.while
// CHECK: stablehlo.dynamic_slice %[[W]], %{{.*}}, sizes = [1] : (tensor<2xf32>, tensor<i32>) -> tensor<1xf32>
// CHECK: stablehlo.multiply
// CHECK: call @tangents(
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

// A directions-batched jet: every coefficient of every direction is written into its
// row; nothing is summed and the rule is not called outside the loop.
// CHECK-LABEL: func.func private @h_jet2
// CHECK-SAME: -> (tensor<f32>, tensor<5xf32>, tensor<5xf32>)
// CHECK: stablehlo.while({{.*}}) : tensor<i32>, tensor<5xf32>, tensor<5xf32>
// CHECK-COUNT-2: stablehlo.dynamic_update_slice
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
