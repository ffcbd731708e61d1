// RUN: hlopt-opt %s -p jet-expand --split-input-file --verify-diagnostics

// Every malformed `hlopt.jet` annotation is refused with one line at its location.

// expected-error@+2 {{jet-expand: @hlopt.jet needs backend_config = {order = K : i64} (a dictionary)}}
func.func @no_config(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet needs backend_config = {order = K : i64} (a dictionary)}}
func.func @string_config(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {backend_config = "order=1", called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet backend_config needs 'order' (backend_config = {order = K : i64})}}
func.func @empty_config(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// A key jet-expand does not know is refused, not ignored.
// expected-error@+2 {{jet-expand: @hlopt.jet backend_config has unknown key 'summed' (it takes order, directions, collapsed, weights)}}
func.func @unknown_key(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {summed = true, order = 1 : i64}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet 'order' must be an integer, got 1.000000e+00 : f32}}
func.func @float_order(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1.0 : f32}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet 'order' must be an integer, got true}}
func.func @bool_order(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = true}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: the order must be between 1 and 64, got 0}}
func.func @order_zero(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet(%x) {api_version = 4 : i32, backend_config = {order = 0 : i64}, called_computations = [@f]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: the order must be between 1 and 64, got -3}}
func.func @order_negative(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet(%x) {api_version = 4 : i32, backend_config = {order = -3 : i64}, called_computations = [@f]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// Hostile orders are refused before any work (order 1000 used to run for minutes,
// 10^23 to abort with std::bad_alloc).
// expected-error@+2 {{jet-expand: the order must be between 1 and 64, got 1000}}
func.func @order_1000(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet(%x) {api_version = 4 : i32, backend_config = {order = 1000 : i64}, called_computations = [@f]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: the order must be between 1 and 64, got 100000000000000000000000}}
func.func @order_huge(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet(%x) {api_version = 4 : i32, backend_config = {order = 100000000000000000000000 : i128}, called_computations = [@f]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet needs called_computations = [@f], one function}}
func.func @no_callee(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1 : i64}} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet needs called_computations = [@f], one function}}
func.func @two_callees(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1 : i64}, called_computations = [@f, @f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: no function @missing in the module}}
func.func @missing_callee(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1 : i64}, called_computations = [@missing]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @decl is a declaration without a body}}
func.func @declared_callee(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1 : i64}, called_computations = [@decl]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @decl(%x: tensor<f32>) -> tensor<f32>

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet of order 2 of @f needs 3 operands (the 1 primal(s), then 2 coefficient(s) per primal), got 2}}
func.func @operand_count(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:3 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 2 : i64}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet of order 1 of @f needs 2 results (the 1 primal(s), then 1 coefficient(s) per primal), got 3}}
func.func @result_count(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:3 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1 : i64}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// A coefficient must have its primal's type.
// expected-error@+2 {{jet-expand: @hlopt.jet operand 1 has type tensor<2xf32>, @f needs tensor<f32>}}
func.func @coefficient_type(%x: tensor<f32>, %x1: tensor<2xf32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1 : i64}, called_computations = [@f]} : (tensor<f32>, tensor<2xf32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// expected-error@+2 {{jet-expand: @hlopt.jet result 0 has type tensor<f64>, @f needs tensor<f32>}}
func.func @result_type(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f64> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = 1 : i64}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f64>, tensor<f32>)
  return %0#0 : tensor<f64>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// A complex dense backend_config is refused by the custom_call verifier when parsed.
// expected-error@+2 {{'backend_config' failed to satisfy constraint}}
func.func @complex_config(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = dense<(1.0,0.0)> : tensor<complex<f32>>, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// An order the MLIR bindings cannot read (a complex dense attribute) is malformed, not a crash.
// expected-error@+2 {{jet-expand: @hlopt.jet 'order' must be an integer, got an attribute the MLIR bindings cannot read}}
func.func @complex_order(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, backend_config = {order = dense<(1.0,0.0)> : tensor<complex<f32>>}, called_computations = [@f]} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %0#1 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----

// A malformed stop_gradient marker.
// expected-error@+2 {{jet-expand: @hlopt.jet.stop_gradient needs one operand and one result of the same type, got 2 operand(s) and 1 result(s)}}
func.func @bad_marker(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet.stop_gradient(%x, %x) {api_version = 4 : i32, backend_config = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
