// RUN: hlopt-opt %s -p jet-expand --split-input-file --verify-diagnostics

// Malformed collapsed and batched annotations: one line each, at the annotation.

// expected-error@+2 {{jet-expand: @hlopt.jet collapsed: coefficients 1..1 need a leading directions axis, operand 1 has type tensor<4xf32>}}
func.func @no_axis(%x: tensor<4xf32>, %v: tensor<4xf32>, %z: tensor<4xf32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<f32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<f32> {
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet result 2 has type tensor<3xf32>, @g needs tensor<f32>}}
func.func @kth_with_axis(%x: tensor<f32>, %v: tensor<3xf32>, %z: tensor<f32>) -> tensor<3xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<f32>, tensor<3xf32>, tensor<f32>) -> (tensor<f32>, tensor<3xf32>, tensor<3xf32>)
  return %r#2 : tensor<3xf32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet collapsed: 'weights' needs one weight per direction and at least 2 (3 direction(s), 2 weight(s)); scale the result for one direction}}
func.func @weights_count(%x: tensor<f32>, %v: tensor<3xf32>, %z: tensor<f32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64, collapsed = true, weights = array<f64: 1.0, 2.0>}} : (tensor<f32>, tensor<3xf32>, tensor<f32>) -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet 'weights' must be finite and not all zero, got array<f64: 0.000000e+00, 0.000000e+00, 0.000000e+00>}}
func.func @weights_zero(%x: tensor<f32>, %v: tensor<3xf32>, %z: tensor<f32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64, collapsed = true, weights = array<f64: 0.0, 0.0, 0.0>}} : (tensor<f32>, tensor<3xf32>, tensor<f32>) -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet 'weights' needs collapsed = true}}
func.func @weights_standard(%x: tensor<f32>, %v: tensor<f32>) -> tensor<f32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %v) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 1 : i64, weights = array<f64: 1.0, 2.0>}} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %r#1 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet takes 'directions' (a batched jet) or 'collapsed' (R read from the coefficients), not both}}
func.func @both(%x: tensor<f32>, %v: tensor<3xf32>, %z: tensor<f32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64, collapsed = true, directions = 3 : i64}} : (tensor<f32>, tensor<3xf32>, tensor<f32>) -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet 'directions' must be a positive integer, got 0 : i64}}
func.func @zero_directions(%x: tensor<f32>, %v: tensor<0xf32>) -> tensor<0xf32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %v) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 1 : i64, directions = 0 : i64}} : (tensor<f32>, tensor<0xf32>) -> (tensor<f32>, tensor<0xf32>)
  return %r#1 : tensor<0xf32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet operand 1 has type tensor<3xf32>, @g needs tensor<2xf32>}}
func.func @wrong_count(%x: tensor<f32>, %v: tensor<3xf32>) -> tensor<2xf32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %v) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 1 : i64, directions = 2 : i64}} : (tensor<f32>, tensor<3xf32>) -> (tensor<f32>, tensor<2xf32>)
  return %r#1 : tensor<2xf32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// A multiply reduction whose init value has a series (a value of the function) is refused.
// expected-error@+8 {{jet-expand: no rule for 'stablehlo.reduce' with an init value with a series in a directions-batched or collapsed jet; use a standard jet (hlopt-default without jet-collapse)}}
func.func @unsupported(%x: tensor<4xf32>, %v: tensor<2x4xf32>, %z: tensor<4xf32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@p], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<2x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<2xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @p(%x: tensor<4xf32>) -> tensor<f32> {
  %s = stablehlo.slice %x [0:1] : (tensor<4xf32>) -> tensor<1xf32>
  %one = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
  %0 = stablehlo.reduce(%x init: %one) applies stablehlo.multiply across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
