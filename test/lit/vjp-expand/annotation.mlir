// RUN: hlopt-opt %s -p vjp-expand --split-input-file --verify-diagnostics | filecheck %s
// RUN: hlopt-opt %s -p hlopt-default --split-input-file | filecheck %s --check-prefix=DEFAULT

// vjp-expand alone refuses the last case (a jet inside: jet-expand runs first, its
// expected-error is there); the other cases are still expanded.

// The annotation becomes a call of the generated vjp; hlopt-default inlines it.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK-NOT: hlopt.vjp
// CHECK: %[[G:.*]] = call @f_vjp(%[[X]], %[[CT]])
// CHECK: return %[[G]]
// CHECK-LABEL: func.func private @f_vjp
// CHECK: stablehlo.cosine
// DEFAULT-LABEL: func.func @main
// DEFAULT-NOT: custom_call
// DEFAULT: call @vjp(
// DEFAULT-LABEL: func.func private @vjp(
// DEFAULT-NOT: custom_call
// DEFAULT: stablehlo.cosine
// DEFAULT-NOT: func.func private
func.func @main(%x: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A zero constant passed as the cotangent of the second result, and an input whose
// cotangent is unused: the vjp built for this call differentiates neither (no tanh,
// no cotangent for x: zeros), only w's through exp(x) w.
// CHECK-LABEL: func.func @main
// CHECK: call @f_vjp(
// CHECK-LABEL: func.func private @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %{{[^:]*}}: tensor<4xf32>, %[[CT0:[^:]*]]: tensor<4xf32>, %{{[^:]*}}: tensor<4xf32>)
// CHECK-NOT: stablehlo.tanh
// CHECK: %[[E:.*]] = stablehlo.exponential %[[X]]
// CHECK: %[[WCT:.*]] = stablehlo.multiply %[[CT0]], %[[E]]
// CHECK-NOT: stablehlo.tanh
// CHECK: return %{{.*}}, %[[WCT]]
// DEFAULT-LABEL: func.func @main
// DEFAULT-NOT: stablehlo.tanh
// DEFAULT: stablehlo.exponential
// DEFAULT-NOT: stablehlo.tanh
func.func @main(%x: tensor<4xf32>, %w: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %g:2 = stablehlo.custom_call @hlopt.vjp(%x, %w, %ct, %zb) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %g#1 : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>, %w: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = stablehlo.exponential %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %w : tensor<4xf32>
  %2 = stablehlo.tanh %x : tensor<4xf32>
  return %1, %2 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Reverse over reverse: the inner annotation is expanded first, then its vjp
// function is differentiated again (d/dx cos x = -sin x; the small @f_vjp is
// differentiated in place).
// CHECK-LABEL: func.func @main
// CHECK: call @grad_vjp
// CHECK-LABEL: func.func private @grad
// CHECK: call @f_vjp
// CHECK-LABEL: func.func private @grad_vjp
// CHECK-NOT: call
// CHECK: stablehlo.sine
// CHECK: stablehlo.negate
// DEFAULT-LABEL: func.func @main
// DEFAULT: call @vjp(
// DEFAULT: stablehlo.sine
// DEFAULT: stablehlo.negate
func.func @main(%x: tensor<f32>, %ct: tensor<f32>) -> tensor<f32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@grad], backend_config = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %g : tensor<f32>
}
func.func private @grad(%x: tensor<f32>) -> tensor<f32> {
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %g = stablehlo.custom_call @hlopt.vjp(%x, %one) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %g : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// The backward of a jet: hlopt-default runs jet-expand, then vjp-expand, so a vjp of
// a function that holds an hlopt.jet is plain StableHLO in the end:
// d/dx [(x e^x)'] = (2 + x) e^x.
// DEFAULT-LABEL: func.func @main
// DEFAULT-NOT: custom_call
// DEFAULT: call @vjp(
// DEFAULT: stablehlo.exponential
// DEFAULT: return
func.func @main(%x: tensor<f32>, %ct: tensor<f32>) -> tensor<f32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %g : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  // expected-error@+1 {{vjp-expand: no reverse-mode rule for 'stablehlo.custom_call' @hlopt.jet (run 'jet-expand' before 'vjp-expand')}}
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %one) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 1 : i64}} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %r#1 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.exponential %x : tensor<f32>
  %1 = stablehlo.multiply %0, %x : tensor<f32>
  return %1 : tensor<f32>
}
