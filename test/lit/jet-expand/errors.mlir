// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file --verify-diagnostics

// An op with no Taylor rule is named with its source location.
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  // expected-error@+1 {{jet-expand: no Taylor rule for 'stablehlo.reduce_precision'}}
  %1 = stablehlo.reduce_precision %0, format = e5m10 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// expected-error@unknown {{jet-expand: no function @f in the module}}
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = stablehlo.slice %x [0:1] : (tensor<4xf32>) -> tensor<1xf32>
  %init = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
  %0 = stablehlo.exponential %x : tensor<4xf32>
  // expected-error@+1 {{jet-expand: no Taylor rule for stablehlo.reduce_window with a general body and an init value with a series}}
  %1 = "stablehlo.reduce_window"(%0, %init) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.atan2 %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) {window_dimensions = array<i64: 2>, padding = dense<[[1, 0]]> : tensor<1x2xi64>} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %x : tensor<4xf32>
  // expected-error@+1 {{jet-expand: no Taylor rule for 'stablehlo.custom_call' @lapack_spotrf}}
  %1 = stablehlo.custom_call @lapack_spotrf(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// expected-error@unknown {{jet-expand: @f is a declaration without a body}}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32>
