// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file --verify-diagnostics

// expected-error@+2 {{jet-expand: @hlopt.jet.linear_solve needs called_computations = [@matvec, @solve]}}
func.func @f(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.linear_solve(%a, %b) {api_version = 4 : i32, backend_config = {}, called_computations = [@solve]} : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @solve(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  return %b : tensor<3xf32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet.linear_solve needs its operands to be @matvec's constants, @solve's constants and the right-hand sides, @matvec to take its constants and the solutions and give the right-hand sides, and @solve to take its constants and the right-hand sides and give its results}}
func.func @f(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.linear_solve(%a, %b) {api_version = 4 : i32, backend_config = {}, called_computations = [@matvec, @solve]} : (tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @matvec(%a: tensor<f32>, %x: tensor<3xf32>) -> tensor<3xf32> {
  return %x : tensor<3xf32>
}
func.func private @solve(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  return %b : tensor<3xf32>
}
