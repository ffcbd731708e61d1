// RUN: hlopt-opt %s -p jet-expand --verify-diagnostics

// A jet of order 0 is refused at the annotation: the comment names the line below it
// and a part of the message, as mlir-opt's --verify-diagnostics checks them.
func.func @main(%x: tensor<f32>) -> tensor<f32> {
  // expected-error@+1 {{the order must be between 1 and 64, got 0}}
  %0 = stablehlo.custom_call @hlopt.jet(%x) {api_version = 4 : i32, backend_config = {order = 0 : i64}, called_computations = [@f]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}
