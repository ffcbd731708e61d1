// RUN: hlopt-opt %s -p vjp-expand --split-input-file --verify-diagnostics
// RUN: not hlopt-opt %s -p 'vjp-expand{order=2}' --split-input-file 2>&1 | filecheck %s --check-prefix=OPTION

// A pipeline is checked before the input is read, so its errors are the command's, not
// diagnostics of the input: they stay on stderr. func= naming no function: missing-function.mlir.
// OPTION: pass 'vjp-expand' has no option 'order' (options: func)

// An op without a rule is named at its location (inside the differentiated callee).
// expected-error@+6 {{vjp-expand: no reverse-mode rule for 'chlo.bessel_i1e'}}
func.func @main(%x: tensor<3x3xf32>, %ct: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  return %g : tensor<3x3xf32>
}
func.func private @f(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = chlo.bessel_i1e %x : tensor<3x3xf32> -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// -----

// Operands must be the callee's inputs then one cotangent per result.
// expected-error@+2 {{vjp-expand: @hlopt.vjp of @f takes its 1 input(s) then one cotangent per result (tensor<4xf32>, tensor<4xf32>) and returns one cotangent per input (tensor<4xf32>); got (tensor<4xf32>) -> (tensor<4xf32>)}}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Types must match the callee's.
// expected-error@+2 {{vjp-expand: @hlopt.vjp of @f takes its 1 input(s) then one cotangent per result (tensor<4xf32>, tensor<4xf32>) and returns one cotangent per input (tensor<4xf32>); got (tensor<4xf32>, tensor<4xf64>) -> (tensor<4xf32>)}}
func.func @main(%x: tensor<4xf32>, %ct: tensor<4xf64>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error@+2 {{vjp-expand: @hlopt.vjp needs called_computations = [@f] (the function to differentiate), got None}}
func.func @main(%x: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}

// -----

// expected-error@+2 {{vjp-expand: @hlopt.vjp has unknown backend_config fields: order (none are defined)}}
func.func @main(%x: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error@+2 {{vjp-expand: no function @nowhere in the module}}
func.func @main(%x: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@nowhere], backend_config = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}

// -----

// An annotation another pass lowers: the message says which to run first.
// expected-error@+6 {{vjp-expand: no reverse-mode rule for 'stablehlo.custom_call' @hlopt.jet (run 'jet-expand' before 'vjp-expand')}}
func.func @main(%x: tensor<f32>, %ct: tensor<f32>) -> tensor<f32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %g : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %x) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 1 : i64}} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %r#1 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// A scatter that multiplies gives its updates a cotangent only with unique indices (as JAX).
// expected-error@+7 {{vjp-expand: the cotangent of the updates of a scatter multiply needs unique indices}}
func.func @main(%x: tensor<5xf32>, %u: tensor<2xf32>, %ct: tensor<5xf32>) -> (tensor<5xf32>, tensor<2xf32>) {
  %g:2 = stablehlo.custom_call @hlopt.vjp(%x, %u, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<5xf32>, tensor<2xf32>, tensor<5xf32>) -> (tensor<5xf32>, tensor<2xf32>)
  return %g#0, %g#1 : tensor<5xf32>, tensor<2xf32>
}
func.func private @f(%x: tensor<5xf32>, %u: tensor<2xf32>) -> tensor<5xf32> {
  %idx = stablehlo.constant dense<[[1], [3]]> : tensor<2x1xi32>
  %0 = "stablehlo.scatter"(%x, %idx, %u) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.multiply %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) : (tensor<5xf32>, tensor<2x1xi32>, tensor<2xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// A scatter with another body has no rule.
// expected-error@+7 {{vjp-expand: no reverse-mode rule for stablehlo.scatter with a stablehlo.subtract body over 1 operand(s) (add, replace, multiply, maximum and minimum have one)}}
func.func @main(%x: tensor<5xf32>, %u: tensor<2xf32>, %ct: tensor<5xf32>) -> (tensor<5xf32>, tensor<2xf32>) {
  %g:2 = stablehlo.custom_call @hlopt.vjp(%x, %u, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<5xf32>, tensor<2xf32>, tensor<5xf32>) -> (tensor<5xf32>, tensor<2xf32>)
  return %g#0, %g#1 : tensor<5xf32>, tensor<2xf32>
}
func.func private @f(%x: tensor<5xf32>, %u: tensor<2xf32>) -> tensor<5xf32> {
  %idx = stablehlo.constant dense<[[1], [3]]> : tensor<2x1xi32>
  %0 = "stablehlo.scatter"(%x, %idx, %u) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.subtract %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) : (tensor<5xf32>, tensor<2x1xi32>, tensor<2xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// Max pooling with window dilation has no rule (select_and_scatter has no dilation).
// expected-error@+8 {{vjp-expand: no reverse-mode rule for a stablehlo.reduce_window with a stablehlo.maximum body and base or window dilation}}
// CHECK-NOT: Traceback
func.func @main(%x: tensor<6xf32>, %ct: tensor<4xf32>) -> tensor<6xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<6xf32>, tensor<4xf32>) -> tensor<6xf32>
  return %g : tensor<6xf32>
}
func.func private @f(%x: tensor<6xf32>) -> tensor<4xf32> {
  %m = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %0 = "stablehlo.reduce_window"(%x, %m) <{window_dimensions = array<i64: 2>, window_dilations = array<i64: 2>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.maximum %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<6xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
