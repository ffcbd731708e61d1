// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s
// RUN: hlopt-opt %s --platform cpu -p 'jet-expand,xla-cpu-stack-dots' --split-input-file | filecheck %s --check-prefix=STACK

// A collapsed jet of order 2 along 3 directions: coefficient 1 keeps the leading
// directions axis, the K-th is carried with an axis of size 1 inside and comes out
// without it. The primal (sine, dot) is computed once, without the axis. The known
// zero K-th input builds nothing; the nonlinear term of sine, -sin(x) v_r^2 / 2, is
// summed over the directions as sum_r v_r^2 (a dot with a vector of ones, not a
// reduce: see jet_directions.lead_sum), multiplied once by the primal factor. The
// second dot takes coefficient 1 (3 rows) and the collapsed one (1 row) stacked, as one
// matmul; the primal's row, stacked with them too, is dropped with the dead primal
// result (and no copy of the replaced primal dot is left behind).
// STACK-LABEL: func.func @main
// STACK: %[[R:.*]]:3 = call @f_jet2(%arg0, %arg1, %{{.*}}) : (tensor<4xf32>, tensor<3x4xf32>, tensor<1x4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<1xf32>)
// STACK: %[[S:.*]] = stablehlo.reshape %[[R]]#2 : (tensor<1xf32>) -> tensor<f32>
// STACK: return %[[R]]#1, %[[S]]
// STACK-LABEL: func.func private @f_jet2
// STACK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[V:[^:]*]]: tensor<3x4xf32>, %{{[^:]*}}: tensor<1x4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<1xf32>)
// STACK: %[[SIN:.*]] = stablehlo.sine %[[X]] : tensor<4xf32>
// STACK: %[[SQ:.*]] = stablehlo.multiply %[[V]], %[[V]] : tensor<3x4xf32>
// STACK: %[[SUM:.*]] = stablehlo.reduce(%[[SQ]] init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
// STACK: stablehlo.multiply %[[SUM]], %[[SIN]] : tensor<4xf32>
// STACK: %[[STACK:.*]] = stablehlo.concatenate %{{.*}}, %{{.*}}, dim = 0 : (tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<4x4xf32>
// STACK: %[[DOT:.*]] = stablehlo.dot_general %[[STACK]], %{{.*}} : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4xf32>
// STACK: %[[D1:.*]] = stablehlo.slice %[[DOT]] [0:3]
// STACK: %[[D2:.*]] = stablehlo.slice %[[DOT]] [3:4]
// STACK-NOT: stablehlo.dot_general
// STACK-NOT: stablehlo.sine
// STACK: return %{{.*}}, %[[D1]], %[[D2]]
func.func @main(%x: tensor<4xf32>, %v: tensor<3x4xf32>) -> (tensor<3xf32>, tensor<f32>) {
  %z = stablehlo.constant dense<0.0> : tensor<4xf32>
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
  return %r#1, %r#2 : tensor<3xf32>, tensor<f32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<f32> {
  %w = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %0 = stablehlo.sine %x : tensor<4xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [0] x [0] : (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// With the primal result live, the primal's row joins the stack too: one matmul reads
// the weights once for the primal, the 3 directions and the collapsed coefficient.
// STACK-LABEL: func.func private @f_jet2
// STACK-SAME: (%[[X:[^:]*]]: tensor<2x4xf32>, %[[V:[^:]*]]: tensor<3x2x4xf32>, %{{[^:]*}}: tensor<1x2x4xf32>)
// STACK: %[[W:.*]] = stablehlo.constant
// STACK: %[[T:.*]] = stablehlo.tanh %[[X]] : tensor<2x4xf32>
// STACK-NOT: stablehlo.dot_general %[[T]]
// STACK: %[[P:.*]] = stablehlo.reshape %[[T]] : (tensor<2x4xf32>) -> tensor<1x2x4xf32>
// STACK: %[[STACK:.*]] = stablehlo.concatenate %[[P]], %{{.*}}, %{{.*}}, dim = 0 : (tensor<1x2x4xf32>, tensor<3x2x4xf32>, tensor<1x2x4xf32>) -> tensor<5x2x4xf32>
// STACK: %[[DOT:.*]] = stablehlo.dot_general %[[STACK]], %[[W]], contracting_dims = [2] x [0] : (tensor<5x2x4xf32>, tensor<4x3xf32>) -> tensor<5x2x3xf32>
// STACK: %[[Y0:.*]] = stablehlo.slice %[[DOT]] [0:1, 0:2, 0:3]
// STACK: %[[Y1:.*]] = stablehlo.slice %[[DOT]] [1:4, 0:2, 0:3]
// STACK: %[[Y2:.*]] = stablehlo.slice %[[DOT]] [4:5, 0:2, 0:3]
// STACK: %[[Y:.*]] = stablehlo.reshape %[[Y0]] : (tensor<1x2x3xf32>) -> tensor<2x3xf32>
// STACK-NOT: stablehlo.dot_general
// STACK: return %[[Y]], %[[Y1]], %[[Y2]]
func.func @primal_too(%x: tensor<2x4xf32>, %v: tensor<3x2x4xf32>) -> (tensor<2x3xf32>, tensor<3x2x3xf32>, tensor<2x3xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<2x4xf32>
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<2x4xf32>, tensor<3x2x4xf32>, tensor<2x4xf32>) -> (tensor<2x3xf32>, tensor<3x2x3xf32>, tensor<2x3xf32>)
  return %r#0, %r#1, %r#2 : tensor<2x3xf32>, tensor<3x2x3xf32>, tensor<2x3xf32>
}
func.func private @f(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %w = stablehlo.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [1.5, 2.5, 3.5]]> : tensor<4x3xf32>
  %0 = stablehlo.tanh %x : tensor<2x4xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}

// -----

// Weights: the sum over the directions is weighted (a signed sum, as the bi-Laplacian needs).
// CHECK-LABEL: func.func private @g_jet2
// CHECK: %[[W:.*]] = stablehlo.constant dense<[2.000000e+00, -1.000000e+00]> : tensor<2xf32>
// CHECK: %[[P:.*]] = stablehlo.multiply %{{.*}}, %[[W]] : tensor<2xf32>
// CHECK: stablehlo.reduce(%[[P]] init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<2xf32>, tensor<f32>) -> tensor<f32>
func.func @weighted(%x: tensor<f32>, %v: tensor<2xf32>, %z: tensor<f32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64, collapsed = true, weights = array<f64: 2.0, -1.0>}} : (tensor<f32>, tensor<2xf32>, tensor<f32>) -> (tensor<f32>, tensor<2xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.exponential %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// A directions-batched jet: every coefficient has the axis, nothing is summed.
// CHECK-LABEL: func.func private @h_jet2
// CHECK-SAME: (%{{[^:]*}}: tensor<f32>, %{{[^:]*}}: tensor<5xf32>, %{{[^:]*}}: tensor<5xf32>) -> (tensor<f32>, tensor<5xf32>, tensor<5xf32>)
// CHECK-NOT: stablehlo.dot_general
// CHECK: return
func.func @batched(%x: tensor<f32>, %v: tensor<5xf32>, %w: tensor<5xf32>) -> tensor<5xf32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %w) {api_version = 4 : i32, called_computations = [@h], backend_config = {order = 2 : i64, directions = 5 : i64}} : (tensor<f32>, tensor<5xf32>, tensor<5xf32>) -> (tensor<f32>, tensor<5xf32>, tensor<5xf32>)
  return %r#2 : tensor<5xf32>
}
func.func private @h(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.tanh %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Negation is linear: coefficient 1 is negated along its 3 directions, the collapsed K-th
// coefficient (its axis of size 1) as it is; the primal once, without the axis.
// CHECK-LABEL: func.func private @neg_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[V:[^:]*]]: tensor<3x4xf32>, %[[Z:[^:]*]]: tensor<1x4xf32>)
// CHECK-DAG: %[[Y:.*]] = stablehlo.negate %[[X]] : tensor<4xf32>
// CHECK-DAG: %[[Y1:.*]] = stablehlo.negate %[[V]] : tensor<3x4xf32>
// CHECK-DAG: %[[Y2:.*]] = stablehlo.negate %[[Z]] : tensor<1x4xf32>
// CHECK: return %[[Y]], %[[Y1]], %[[Y2]]
func.func @negated(%x: tensor<4xf32>, %v: tensor<3x4xf32>, %z: tensor<4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@neg], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>)
  return %r#0, %r#1, %r#2 : tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>
}
func.func private @neg(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.negate %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
