// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s

// The unit directions of a Laplacian under jax.vmap: the directions (3, on a
// 4-vector) are not batched while the point is (2 points), so the annotation carries
// them on a second primal %z that the function broadcasts over the batch and adds to
// x (hlopt.jet's batching rule). The dot takes the directions before the broadcast
// (3 rows, not 3 x 2) and broadcasts its result; the collapsed sum of the squares of
// that broadcast sums the 3 x 5 squares and broadcasts the sum over the batch.
// CHECK-LABEL: func.func private @f_jet2
// CHECK-SAME: %[[V:[^:]*]]: tensor<3x4xf32>, %{{[^:]*}}: tensor<1x4xf32>)
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[V]], %{{.*}}, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
// CHECK: %[[B:.*]] = stablehlo.broadcast_in_dim %[[D]], dims = [0, 2] : (tensor<3x5xf32>) -> tensor<3x2x5xf32>
// CHECK-NOT: tensor<3x2x4xf32>
// CHECK: stablehlo.multiply %{{.*}}, %[[B]] : tensor<3x2x5xf32>
// CHECK: %[[SQ:.*]] = stablehlo.multiply %[[D]], %[[D]] : tensor<3x5xf32>
// CHECK: %[[SUM:.*]] = stablehlo.reduce(%[[SQ]] init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<3x5xf32>, tensor<f32>) -> tensor<5xf32>
// CHECK: stablehlo.broadcast_in_dim %[[SUM]], dims = [1] : (tensor<5xf32>) -> tensor<2x5xf32>
// CHECK-NOT: tensor<3x2x5xf32>
// CHECK: return
func.func @main(%x: tensor<2x4xf32>, %v: tensor<3x4xf32>) -> (tensor<3x2x5xf32>, tensor<2x5xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<4xf32>
  %x1 = stablehlo.constant dense<0.0> : tensor<3x2x4xf32>
  %x2 = stablehlo.constant dense<0.0> : tensor<2x4xf32>
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %z, %x1, %x2, %v, %z) {api_version = 4 : i32, called_computations = [@f], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<2x4xf32>, tensor<4xf32>, tensor<3x2x4xf32>, tensor<2x4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<2x5xf32>, tensor<3x2x5xf32>, tensor<2x5xf32>)
  return %r#1, %r#2 : tensor<3x2x5xf32>, tensor<2x5xf32>
}
func.func private @f(%x: tensor<2x4xf32>, %z: tensor<4xf32>) -> tensor<2x5xf32> {
  %w = stablehlo.constant dense<0.5> : tensor<4x5xf32>
  %b = stablehlo.broadcast_in_dim %z, dims = [1] : (tensor<4xf32>) -> tensor<2x4xf32>
  %0 = stablehlo.add %x, %b : tensor<2x4xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<2x4xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  %2 = stablehlo.tanh %1 : tensor<2x5xf32>
  return %2 : tensor<2x5xf32>
}

// -----

// The broadcast on the right-hand side of the dot (W x, the batch a free dimension of
// the right): the dot of the 3 x 4 directions, transposed so that the directions
// axis leads, then broadcast over the batch (dimension 2 of the result).
// CHECK-LABEL: func.func private @g_jet2
// CHECK-SAME: %[[V:[^:]*]]: tensor<3x4xf32>, %{{[^:]*}}: tensor<1x4xf32>)
// CHECK: %[[D:.*]] = stablehlo.dot_general %{{.*}}, %[[V]], contracting_dims = [1] x [1] : (tensor<5x4xf32>, tensor<3x4xf32>) -> tensor<5x3xf32>
// CHECK: %[[T:.*]] = stablehlo.transpose %[[D]], dims = [1, 0] : (tensor<5x3xf32>) -> tensor<3x5xf32>
// CHECK: stablehlo.broadcast_in_dim %[[T]], dims = [0, 1] : (tensor<3x5xf32>) -> tensor<3x5x2xf32>
// CHECK-NOT: tensor<3x4x2xf32>
// CHECK: return
func.func @main(%x: tensor<4x2xf32>, %v: tensor<3x4xf32>) -> (tensor<3x5x2xf32>, tensor<5x2xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<4xf32>
  %x1 = stablehlo.constant dense<0.0> : tensor<3x4x2xf32>
  %x2 = stablehlo.constant dense<0.0> : tensor<4x2xf32>
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %z, %x1, %x2, %v, %z) {api_version = 4 : i32, called_computations = [@g], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4x2xf32>, tensor<4xf32>, tensor<3x4x2xf32>, tensor<4x2xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<5x2xf32>, tensor<3x5x2xf32>, tensor<5x2xf32>)
  return %r#1, %r#2 : tensor<3x5x2xf32>, tensor<5x2xf32>
}
func.func private @g(%x: tensor<4x2xf32>, %z: tensor<4xf32>) -> tensor<5x2xf32> {
  %w = stablehlo.constant dense<0.5> : tensor<5x4xf32>
  %b = stablehlo.broadcast_in_dim %z, dims = [0] : (tensor<4xf32>) -> tensor<4x2xf32>
  %0 = stablehlo.add %x, %b : tensor<4x2xf32>
  %1 = stablehlo.dot_general %w, %0, contracting_dims = [1] x [0] : (tensor<5x4xf32>, tensor<4x2xf32>) -> tensor<5x2xf32>
  %2 = stablehlo.tanh %1 : tensor<5x2xf32>
  return %2 : tensor<5x2xf32>
}

// -----

// Not sunk: a broadcast along a contracted dimension (the sum over it is not a
// broadcast of anything), nor along a batch dimension of the dot.
// CHECK-LABEL: func.func private @h_jet2
// CHECK: stablehlo.dot_general %{{.*}}, %{{.*}}, contracting_dims = [2] x [0] : (tensor<3x2x4xf32>, tensor<4x5xf32>) -> tensor<3x2x5xf32>
// CHECK: stablehlo.dot_general %{{.*}}, %{{.*}}, batching_dims = [1] x [0], contracting_dims = [2] x [1] : (tensor<3x2x4xf32>, tensor<2x4xf32>) -> tensor<2x3xf32>
// CHECK: return
func.func @main(%x: tensor<2x4xf32>, %v: tensor<3x2xf32>) -> (tensor<3x2x5xf32>, tensor<3x2xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<2xf32>
  %x1 = stablehlo.constant dense<0.0> : tensor<3x2x4xf32>
  %x2 = stablehlo.constant dense<0.0> : tensor<2x4xf32>
  %r:6 = stablehlo.custom_call @hlopt.jet(%x, %z, %x1, %x2, %v, %z) {api_version = 4 : i32, called_computations = [@h], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<2x4xf32>, tensor<2xf32>, tensor<3x2x4xf32>, tensor<2x4xf32>, tensor<3x2xf32>, tensor<2xf32>) -> (tensor<2x5xf32>, tensor<2xf32>, tensor<3x2x5xf32>, tensor<2x5xf32>, tensor<3x2xf32>, tensor<2xf32>)
  return %r#2, %r#4 : tensor<3x2x5xf32>, tensor<3x2xf32>
}
func.func private @h(%x: tensor<2x4xf32>, %z: tensor<2xf32>) -> (tensor<2x5xf32>, tensor<2xf32>) {
  %w = stablehlo.constant dense<0.5> : tensor<4x5xf32>
  %u = stablehlo.constant dense<0.25> : tensor<2x4xf32>
  %b = stablehlo.broadcast_in_dim %z, dims = [0] : (tensor<2xf32>) -> tensor<2x4xf32>
  %0 = stablehlo.add %x, %b : tensor<2x4xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<2x4xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  %2 = stablehlo.dot_general %0, %u, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2xf32>
  return %1, %2 : tensor<2x5xf32>, tensor<2xf32>
}
