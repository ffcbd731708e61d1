// RUN: hlopt-opt %s -p jet-collapse --split-input-file | filecheck %s
// RUN: hlopt-opt %s -p hlopt-default --split-input-file | filecheck %s --check-prefix=DEFAULT

// What `jax.vmap(lambda v: hlopt.jet(f, (x,), ((v, zeros),))[1][1])(V).sum(0)` lowers
// to: a jet batched over 3 directions whose K-th output is scaled by 2 (the factorial)
// and summed over the directions. It becomes the collapsed jet; the zero K-th input
// becomes a zero without the axis, the scaling applies to the collapsed output.
// CHECK-LABEL: func.func @summed
// CHECK: %[[Z:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[R:.*]]:3 = stablehlo.custom_call @hlopt.jet(%arg0, %arg1, %[[Z]])
// CHECK-SAME: backend_config = {collapsed = true, order = 2 : i64}
// CHECK-SAME: -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
// CHECK: %[[S:.*]] = stablehlo.multiply %[[R]]#2, %{{.*}} : tensor<f32>
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[S]]
// DEFAULT-LABEL: func.func @summed
// DEFAULT-NOT: custom_call
// DEFAULT: stablehlo.sine
func.func @summed(%x: tensor<4xf32>, %v: tensor<3x4xf32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %z = stablehlo.broadcast_in_dim %c0, dims = [] : (tensor<f32>) -> tensor<3x4xf32>
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {directions = 3 : i64, order = 2 : i64}} : (tensor<4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<3xf32>)
  %two = stablehlo.constant dense<2.0> : tensor<f32>
  %twos = stablehlo.broadcast_in_dim %two, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %0 = stablehlo.multiply %r#2, %twos : tensor<3xf32>
  %1 = stablehlo.reduce(%0 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.sine %x : tensor<4xf32>
  %1 = stablehlo.reduce(%0 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// A K-th input that is not zero is summed over the directions; a convert on the way
// to the sum is rebuilt on the collapsed output.
// CHECK-LABEL: func.func @nonzero_input
// CHECK: %[[S:.*]] = stablehlo.reduce(%arg2 init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<4xf32>
// CHECK: %[[R:.*]]:3 = stablehlo.custom_call @hlopt.jet(%arg0, %arg1, %[[S]])
// CHECK: stablehlo.convert %[[R]]#2 : (tensor<f32>) -> tensor<f64>
func.func @nonzero_input(%x: tensor<4xf32>, %v: tensor<2x4xf32>, %w: tensor<2x4xf32>) -> tensor<f64> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %w) {api_version = 4 : i32, called_computations = [@f], backend_config = {directions = 2 : i64, order = 2 : i64}} : (tensor<4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<f32>, tensor<2xf32>, tensor<2xf32>)
  %0 = stablehlo.convert %r#2 : (tensor<2xf32>) -> tensor<2xf64>
  %c0 = stablehlo.constant dense<0.0> : tensor<f64>
  %1 = stablehlo.reduce(%0 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<2xf64>, tensor<f64>) -> tensor<f64>
  return %1 : tensor<f64>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<f32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.sine %x : tensor<4xf32>
  %1 = stablehlo.reduce(%0 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Not a match: the K-th coefficient is also returned as it is.
// CHECK-LABEL: func.func @used_elsewhere
// CHECK: backend_config = {directions = 3 : i64, order = 2 : i64}
// CHECK: stablehlo.reduce
func.func @used_elsewhere(%x: tensor<f32>, %v: tensor<3xf32>, %z: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>) {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {directions = 3 : i64, order = 2 : i64}} : (tensor<f32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<3xf32>)
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%r#2 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %1, %r#2 : tensor<f32>, tensor<3xf32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.tanh %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Not a match: the sum is over another axis than the directions.
// CHECK-LABEL: func.func @other_axis
// CHECK: backend_config = {directions = 3 : i64, order = 2 : i64}
// CHECK: across dimensions = [1]
func.func @other_axis(%x: tensor<2xf32>, %v: tensor<3x2xf32>, %z: tensor<3x2xf32>) -> tensor<3xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@h], backend_config = {directions = 3 : i64, order = 2 : i64}} : (tensor<2xf32>, tensor<3x2xf32>, tensor<3x2xf32>) -> (tensor<2xf32>, tensor<3x2xf32>, tensor<3x2xf32>)
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%r#2 init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<3x2xf32>, tensor<f32>) -> tensor<3xf32>
  return %1 : tensor<3xf32>
}
func.func private @h(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.tanh %x : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// Not a match: a standard jet (the primal batched too: the vmap of the whole jet).
// CHECK-LABEL: func.func @primal_batched
// CHECK: backend_config = {order = 2 : i64}
// CHECK: stablehlo.reduce
func.func @primal_batched(%x: tensor<3xf32>, %v: tensor<3xf32>, %z: tensor<3xf32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@k], backend_config = {order = 2 : i64}} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%r#2 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}
func.func private @k(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.tanh %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// Not a match: the factor is not a splat constant (a multiply by another value).
// CHECK-LABEL: func.func @not_a_constant_factor
// CHECK: backend_config = {directions = 2 : i64, order = 1 : i64}
func.func @not_a_constant_factor(%x: tensor<f32>, %v: tensor<2xf32>, %s: tensor<2xf32>) -> tensor<f32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %v) {api_version = 4 : i32, called_computations = [@g], backend_config = {directions = 2 : i64, order = 1 : i64}} : (tensor<f32>, tensor<2xf32>) -> (tensor<f32>, tensor<2xf32>)
  %0 = stablehlo.multiply %r#1, %s : tensor<2xf32>
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%0 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.tanh %x : tensor<f32>
  return %0 : tensor<f32>
}
