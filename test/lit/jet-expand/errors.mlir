// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=2}' 2>&1 | filecheck %s
// RUN: not hlopt-opt %s -p 'jet-expand{func=missing order=2}' 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=0}' 2>&1 | filecheck %s --check-prefix=ORDER
// RUN: not hlopt-opt %s -p 'jet-expand{func=g order=1}' 2>&1 | filecheck %s --check-prefix=REDUCE
// RUN: not hlopt-opt %s -p 'jet-expand{order=2}' 2>&1 | filecheck %s --check-prefix=NOFUNC

// An op with no Taylor rule is named with its source location.
// CHECK: errors.mlir:11:{{[0-9]+}}: error: jet-expand: no Taylor rule for 'stablehlo.reduce_precision'
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  %1 = stablehlo.reduce_precision %0, format = e5m10 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// MISSING: error: jet-expand: no function @missing in the module
// ORDER: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '0'{{$}}
// NOFUNC: hlopt-opt: error: pass 'jet-expand': option 'order' needs 'func' (jet-expand{func=NAME order=K}){{$}}

// REDUCE: errors.mlir:24:{{[0-9]+}}: error: jet-expand: no Taylor rule for stablehlo.reduce_window with a general body and an init value with a series
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  %s = stablehlo.slice %x [0:1] : (tensor<4xf32>) -> tensor<1xf32>
  %init = stablehlo.reshape %s : (tensor<1xf32>) -> tensor<f32>
  %0 = stablehlo.exponential %x : tensor<4xf32>
  %1 = "stablehlo.reduce_window"(%0, %init) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.atan2 %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) {window_dimensions = array<i64: 2>, padding = dense<[[1, 0]]> : tensor<1x2xi64>} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// RUN: not hlopt-opt %s -p 'jet-expand{func=h order=1}' 2>&1 | filecheck %s --check-prefix=CUSTOM
// CUSTOM: errors.mlir:36:{{[0-9]+}}: error: jet-expand: no Taylor rule for 'stablehlo.custom_call' @lapack_spotrf
func.func @h(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %x : tensor<4xf32>
  %1 = stablehlo.custom_call @lapack_spotrf(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// The order is bounded: 1000 used to run for minutes, 10^23 to abort with std::bad_alloc.
// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=1000}' 2>&1 | filecheck %s --check-prefix=BIG
// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=100000000000000000000000}' 2>&1 | filecheck %s --check-prefix=HUGE
// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=-1}' 2>&1 | filecheck %s --check-prefix=NEGATIVE
// RUN: not hlopt-opt %s -p 'jet-expand{func=decl order=1}' 2>&1 | filecheck %s --check-prefix=DECL
// BIG: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '1000'{{$}}
// HUGE: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '100000000000000000000000'{{$}}
// NEGATIVE: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '-1'{{$}}
// DECL: hlopt-opt: error: jet-expand: @decl is a declaration without a body
func.func private @decl(%x: tensor<4xf32>) -> tensor<4xf32>
