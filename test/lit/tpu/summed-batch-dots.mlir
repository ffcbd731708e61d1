// RUN: hlopt-opt %s --split-input-file --platform tpu -p tpu-summed-batch-dots | filecheck %s
// RUN: hlopt-opt %s --split-input-file -p tpu-summed-batch-dots | filecheck %s --check-prefix=OFF
// RUN: hlopt-opt %s --split-input-file --platform cpu -p tpu-summed-batch-dots | filecheck %s --check-prefix=OFF

// A sum over the directions (batch dimension 0) of per-direction, per-point matrix
// products: one product per point contracting the directions first, its precision kept.
// CHECK-LABEL: func.func @directions
// CHECK: %[[S:.*]] = stablehlo.dot_general %arg0, %arg1, batching_dims = [1] x [1], contracting_dims = [0, 3] x [0, 2], precision = [HIGHEST, HIGHEST] : (tensor<6x5x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<5x4x2xf32>
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[S]]
// Without a TPU target the product and its sum stay.
// OFF-LABEL: func.func @directions
// OFF: stablehlo.dot_general %arg0, %arg1, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]
// OFF: stablehlo.reduce
func.func @directions(%a: tensor<6x5x4x3xf32>, %b: tensor<6x5x3x2xf32>) -> tensor<5x4x2xf32> {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %p = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [HIGHEST, HIGHEST] : (tensor<6x5x4x3xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  %s = stablehlo.reduce(%p init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<6x5x4x2xf32>, tensor<f32>) -> tensor<5x4x2xf32>
  return %s : tensor<5x4x2xf32>
}

// -----

// The reverse-mode form: the lhs a broadcast along batch dimension 0 (through a transpose),
// which becomes a free dimension of the rhs, the result transposed back.
// CHECK-LABEL: func.func @broadcast_lhs
// CHECK: %[[P:.*]] = stablehlo.transpose %arg0, dims = [0, 2, 1] : (tensor<5x4x3xf32>) -> tensor<5x3x4xf32>
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[P]], %arg1, batching_dims = [0] x [1], contracting_dims = [1] x [2], precision = [HIGHEST, HIGHEST] : (tensor<5x3x4xf32>, tensor<6x5x3x2xf32>) -> tensor<5x4x6x2xf32>
// CHECK: %[[T:.*]] = stablehlo.transpose %[[D]], dims = [2, 0, 1, 3] : (tensor<5x4x6x2xf32>) -> tensor<6x5x4x2xf32>
// CHECK: return %[[T]]
// OFF-LABEL: func.func @broadcast_lhs
// OFF: stablehlo.broadcast_in_dim %arg0
// OFF: stablehlo.dot_general %{{.*}}, %arg1, batching_dims = [0, 1] x [0, 1]
func.func @broadcast_lhs(%p: tensor<5x4x3xf32>, %r: tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32> {
  %b = stablehlo.broadcast_in_dim %p, dims = [1, 2, 3] : (tensor<5x4x3xf32>) -> tensor<6x5x4x3xf32>
  %t = stablehlo.transpose %b, dims = [0, 1, 3, 2] : (tensor<6x5x4x3xf32>) -> tensor<6x5x3x4xf32>
  %o = stablehlo.dot_general %t, %r, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2], precision = [HIGHEST, HIGHEST] : (tensor<6x5x3x4xf32>, tensor<6x5x3x2xf32>) -> tensor<6x5x4x2xf32>
  return %o : tensor<6x5x4x2xf32>
}
