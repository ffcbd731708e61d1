// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file | filecheck %s

// `lax.stop_gradient` in a jet body arrives as the `hlopt.jet.stop_gradient` marker:
// its value is its operand, its series is zero, and jet-expand removes every marker,
// in the jets and in the functions it copied them from.

// CHECK-NOT: hlopt.jet.stop_gradient
// CHECK-LABEL: func.func @f(
// CHECK-NEXT:    %[[P:.*]] = stablehlo.multiply %arg0, %arg0
// CHECK-NEXT:    return %[[P]]
// CHECK-LABEL: func.func @f_jet2(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4xf32>, %[[X1:[^:]*]]: tensor<4xf32>, %[[X2:[^:]*]]: tensor<4xf32>)
// x * stop_gradient(x): y1 = x1 * x, y2 = x2 * x (no x1 * x1 term)
// CHECK-NEXT:    %[[Y0:.*]] = stablehlo.multiply %[[X]], %[[X]]
// CHECK-NEXT:    %[[Y1:.*]] = stablehlo.multiply %[[X1]], %[[X]]
// CHECK-NEXT:    %[[Y2:.*]] = stablehlo.multiply %[[X2]], %[[X]]
// CHECK-NEXT:    return %[[Y0]], %[[Y1]], %[[Y2]]
// CHECK-NOT: hlopt.jet.stop_gradient
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.stop_gradient(%x) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.multiply %x, %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Through a call and a loop: the callee's jet and the loop body see the marker too.
// exp(stop_gradient(v)) has no series: w = e * x gets e * x_k, nothing from v's series.
// CHECK-NOT: hlopt.jet.stop_gradient
// CHECK-LABEL: func.func @f_jet2(
// CHECK:         call @g_jet2(
// CHECK-LABEL: func.func private @g_jet2(
// CHECK:         stablehlo.while(%{{[^ ]*}} = %{{[^,]*}}, %[[V:[^ ]*]] = %arg0,
// CHECK:         %[[E:.*]] = stablehlo.exponential %[[V]]
// CHECK-NEXT:    stablehlo.multiply %[[E]], %arg0
// CHECK-NEXT:    stablehlo.multiply %[[E]], %arg1
// CHECK-NEXT:    stablehlo.multiply %[[E]], %arg2
// CHECK-NEXT:    stablehlo.return
// CHECK-NOT: hlopt.jet.stop_gradient
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @g(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %0:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<4xf32>
    cond {
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %c1 : tensor<i32>
      %s = stablehlo.custom_call @hlopt.jet.stop_gradient(%v) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32>
      %e = stablehlo.exponential %s : tensor<4xf32>
      %w = stablehlo.multiply %e, %x : tensor<4xf32>
      stablehlo.return %j, %w : tensor<i32>, tensor<4xf32>
    }
  return %0#1 : tensor<4xf32>
}

// -----

// A marker outside any jet is the identity and is removed as well.
// CHECK-LABEL: func.func @other(
// CHECK-NEXT:    %[[S:.*]] = stablehlo.sine %arg0
// CHECK-NEXT:    return %[[S]]
// CHECK-NOT: hlopt.jet.stop_gradient
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @other(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.stop_gradient(%x) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.sine %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
