// RUN: hlopt-opt %s -p 'jet-expand' --split-input-file | filecheck %s --check-prefix=JET
// RUN: hlopt-opt %s -p 'jet-expand,vjp-expand' --split-input-file | filecheck %s --check-prefix=BOTH

// A vjp of a jet: while an hlopt.vjp annotation is left, jet-expand keeps the
// stop_gradient markers (in the jet it built too), so that vjp-expand does not
// differentiate through them; vjp-expand passes no cotangent through a marker
// and removes the markers when it is done.

// JET-LABEL: func.func @main(
// JET:         stablehlo.custom_call @hlopt.vjp(
// JET-LABEL: func.func private @second(
// JET:         call @f_jet1(
// JET-LABEL: func.func private @f(
// JET-NEXT:    %[[S:.*]] = stablehlo.custom_call @hlopt.jet.stop_gradient(%arg0)
// JET-NEXT:    stablehlo.multiply %arg0, %[[S]]
// JET-LABEL: func.func private @f_jet1(
// JET-NEXT:    %[[S1:.*]] = stablehlo.custom_call @hlopt.jet.stop_gradient(%arg0)
// JET-NEXT:    stablehlo.multiply %arg1, %[[S1]]

// y1 = v * sg(x): d y1 / dx = 0 (no cotangent through the marker), d y1 / dv = sg(x)
// BOTH-NOT: hlopt.jet.stop_gradient
// BOTH-LABEL: func.func @main(
// BOTH:         call @second_vjp(
// BOTH-LABEL: func.func private @second_vjp(
// BOTH-SAME:      %[[X:[^:]*]]: tensor<4xf32>, %[[V:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// BOTH-NEXT:    %[[DV:.*]] = stablehlo.multiply %[[CT]], %[[X]]
// BOTH:         %[[ZERO:.*]] = stablehlo.broadcast_in_dim
// BOTH:         return %[[ZERO]], %[[DV]]
// BOTH-NOT: hlopt.jet.stop_gradient
func.func @main(%x: tensor<4xf32>, %v: tensor<4xf32>, %ct: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %g:2 = stablehlo.custom_call @hlopt.vjp(%x, %v, %ct) {api_version = 4 : i32, called_computations = [@second], backend_config = {}} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %g#0, %g#1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @second(%x: tensor<4xf32>, %v: tensor<4xf32>) -> tensor<4xf32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %v) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 1 : i64}} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %r#1 : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.stop_gradient(%x) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.multiply %x, %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// vjp-expand on its own: a marker passes no cotangent, and is removed (no jet is left).
// BOTH-NOT: hlopt.jet.stop_gradient
// BOTH-LABEL: func.func private @f_vjp(
// BOTH-SAME:      %[[X:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// BOTH-NEXT:    %[[D:.*]] = stablehlo.multiply %[[CT]], %[[X]]
// BOTH-NEXT:    return %[[D]]
// BOTH-NOT: hlopt.jet.stop_gradient
func.func @main(%x: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.stop_gradient(%x) {api_version = 4 : i32, backend_config = {}} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.multiply %x, %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
