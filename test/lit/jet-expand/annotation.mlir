// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s
// RUN: hlopt-opt %s -p hlopt-default --split-input-file | filecheck %s --check-prefix=DEFAULT

// The annotation becomes a call of the generated jet. The zero constant passed as
// w's coefficient is known zero: the jet built for this call ignores it.
// CHECK-LABEL: func.func @main
// CHECK-NOT: hlopt.jet
// CHECK: %[[R:.*]]:4 = call @f_jet1(%arg0, %arg1, %arg2, %{{.*}})
// CHECK: return %[[R]]#2
// CHECK-LABEL: func.func private @f_jet1
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3xf32>, %[[W:[^:]*]]: tensor<3xf32>, %[[X1:[^:]*]]: tensor<3xf32>, %[[W1:[^:]*]]: tensor<3xf32>)
// CHECK-NOT: %[[W1]]
// CHECK: return
// hlopt-default makes the operation plain in a function of its own, which @main calls (as
// under jax.jit); the jet's body @f is gone.
// DEFAULT-LABEL: func.func @main
// DEFAULT-NOT: custom_call
// DEFAULT: call @jet(
// DEFAULT-NOT: func.func private @f(
// DEFAULT-LABEL: func.func private @jet(
// DEFAULT-NOT: custom_call
// DEFAULT: stablehlo.cosine
func.func @main(%x: tensor<3xf32>, %w: tensor<3xf32>, %x1: tensor<3xf32>) -> tensor<3xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %r:4 = stablehlo.custom_call @hlopt.jet(%x, %w, %x1, %zb) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 1 : i64}} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  return %r#2 : tensor<3xf32>
}
func.func private @f(%x: tensor<3xf32>, %w: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = stablehlo.sine %x : tensor<3xf32>
  %1 = stablehlo.multiply %0, %w : tensor<3xf32>
  return %1, %w : tensor<3xf32>, tensor<3xf32>
}

// -----

// A jet of a function that itself holds an annotation (a jet of a jet):
// the inner annotation is expanded first, then differentiated again.
// CHECK-LABEL: func.func @main
// CHECK: call @outer_jet1
// CHECK-LABEL: func.func private @inner_jet1
// CHECK: stablehlo.exponential
// CHECK-LABEL: func.func private @outer_jet1
// CHECK: call @inner_jet1_jet1
// CHECK-LABEL: func.func private @inner_jet1_jet1
func.func @main(%x: tensor<f32>, %x1: tensor<f32>) -> tensor<f32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, called_computations = [@outer], backend_config = {order = 1 : i64}} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %r#1 : tensor<f32>
}
func.func private @outer(%x: tensor<f32>) -> tensor<f32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %x) {api_version = 4 : i32, called_computations = [@inner], backend_config = {order = 1 : i64}} : (tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return %r#1 : tensor<f32>
}
func.func private @inner(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.exponential %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Results the caller does not use (the primal and the first coefficient, whose one use
// is itself dead) are returned as zeros and not computed: the stacked dot_general of
// x's coefficients shrinks to the second one, and the primal dot_general is gone.
// CHECK-LABEL: func.func @main
// CHECK: %[[R:.*]]:3 = call @g_jet2
// CHECK: return %[[R]]#2
// CHECK-LABEL: func.func private @g_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3x4xf32>, %[[X1:[^:]*]]: tensor<3x4xf32>, %[[X2:[^:]*]]: tensor<3x4xf32>)
// CHECK-NOT: stablehlo.concatenate
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[X2]], %{{.*}}, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x6xf32>) -> tensor<3x6xf32>
// CHECK-NOT: stablehlo.dot_general
// CHECK: %[[Z0:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3x6xf32>
// CHECK: %[[Z1:.*]] = stablehlo.constant dense<0.000000e+00> : tensor<3x6xf32>
// CHECK: return %[[Z0]], %[[Z1]], %[[D]]
func.func @main(%x: tensor<3x4xf32>, %x1: tensor<3x4xf32>, %x2: tensor<3x4xf32>) -> tensor<3x6xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %x1, %x2) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64}} : (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>) -> (tensor<3x6xf32>, tensor<3x6xf32>, tensor<3x6xf32>)
  %dead = stablehlo.multiply %r#1, %r#1 : tensor<3x6xf32>
  return %r#2 : tensor<3x6xf32>
}
func.func private @g(%x: tensor<3x4xf32>) -> tensor<3x6xf32> {
  %c = stablehlo.constant dense<1.0> : tensor<4x6xf32>
  %0 = stablehlo.dot_general %x, %c, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x6xf32>) -> tensor<3x6xf32>
  return %0 : tensor<3x6xf32>
}

// -----

// Results used only inside the regions of another op (here the branches of a case)
// are live: the jet computes both and returns no zeros.
// CHECK-LABEL: func.func private @h_jet1
// CHECK-NOT: stablehlo.constant
// CHECK: stablehlo.cosine
// CHECK-NOT: stablehlo.constant
// CHECK: return
func.func @main(%x: tensor<3xf32>, %x1: tensor<3xf32>, %p: tensor<i32>) -> tensor<3xf32> {
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, called_computations = [@h], backend_config = {order = 1 : i64}} : (tensor<3xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  %c = "stablehlo.case"(%p) ({
    stablehlo.return %r#1 : tensor<3xf32>
  }, {
    stablehlo.return %r#0 : tensor<3xf32>
  }) : (tensor<i32>) -> tensor<3xf32>
  return %c : tensor<3xf32>
}
func.func private @h(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.sine %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}
