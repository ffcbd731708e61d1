// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file --verify-diagnostics

// expected-error@+2 {{jet-expand: @hlopt.jet.custom_jvp needs called_computations = [@primal, @tangents]}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal]} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @primal(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet.custom_jvp needs @tangents to take its operands and the tangents of the floating-point ones, and give the tangents of its floating-point results}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @primal(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func private @tangents(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet.custom_jvp needs @primal to take its operands and give its results}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @primal(%x: tensor<2xf32>) -> tensor<4xf32> {
  %0 = stablehlo.concatenate %x, %x, dim = 0 : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @tangents(%x: tensor<4xf32>, %dx: tensor<4xf32>) -> tensor<4xf32> {
  return %dx : tensor<4xf32>
}

// -----

// A marker outside the jets is checked too when it is replaced by its primal call.
// expected-error@+5 {{jet-expand: no function @nowhere in the module}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@nowhere, @nowhere]} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
