// RUN: hlopt-opt %s -p jet-expand --split-input-file | filecheck %s

// A convolution in a collapsed jet: coefficient 1 (3 directions) joins the batch
// dimension of the input, one convolution over 3 x 1 images; the collapsed K-th is one
// more convolution of a single image.
// CHECK-LABEL: func.func private @c_jet2
// CHECK: %[[B:.*]] = stablehlo.reshape %{{.*}} : (tensor<3x1x1x4xf32>) -> tensor<3x1x4xf32>
// CHECK: %[[C:.*]] = stablehlo.convolution(%[[B]], %{{.*}}){{.*}} : (tensor<3x1x4xf32>, tensor<2x1x3xf32>) -> tensor<3x2x4xf32>
// CHECK: stablehlo.reshape %[[C]] : (tensor<3x2x4xf32>) -> tensor<3x1x2x4xf32>
// CHECK: stablehlo.convolution({{.*}} : (tensor<1x1x4xf32>, tensor<2x1x3xf32>) -> tensor<1x2x4xf32>
func.func @conv(%x: tensor<1x1x4xf32>, %v: tensor<3x1x1x4xf32>, %z: tensor<1x1x4xf32>) -> (tensor<3x1x2x4xf32>, tensor<1x2x4xf32>) {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@c], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<1x1x4xf32>, tensor<3x1x1x4xf32>, tensor<1x1x4xf32>) -> (tensor<1x2x4xf32>, tensor<3x1x2x4xf32>, tensor<1x2x4xf32>)
  return %r#1, %r#2 : tensor<3x1x2x4xf32>, tensor<1x2x4xf32>
}
func.func private @c(%x: tensor<1x1x4xf32>) -> tensor<1x2x4xf32> {
  %k = stablehlo.constant dense<0.5> : tensor<2x1x3xf32>
  %0 = stablehlo.tanh %x : tensor<1x1x4xf32>
  %1 = stablehlo.convolution(%0, %k) dim_numbers = [b, f, 0]x[o, i, 0]->[b, f, 0], window = {pad = [[1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x1x4xf32>, tensor<2x1x3xf32>) -> tensor<1x2x4xf32>
  return %1 : tensor<1x2x4xf32>
}

// -----

// A multiply reduction (prod) in a collapsed jet: the primal is broadcast along the 3
// directions, the collapsed K-th input rides as direction 0 (padded with zeros), one
// variadic reduce over the non-directions dimension carries the series, and its K-th
// result is summed over the directions.
// CHECK-LABEL: func.func private @p_jet2
// CHECK: %[[K:.*]] = stablehlo.pad %{{.*}}, low = [0, 0], high = [2, 0], interior = [0, 0] : (tensor<1x4xf32>, tensor<f32>) -> tensor<3x4xf32>
// CHECK: %[[R:.*]]:3 = stablehlo.reduce(%{{.*}} init: %{{.*}}), (%{{.*}} init: %{{.*}}), (%[[K]] init: %{{.*}}) across dimensions = [1] : (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<f32>, tensor<f32>, tensor<f32>)
// CHECK: stablehlo.reduce(%[[R]]#2 init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<3xf32>, tensor<f32>) -> tensor<f32>
func.func @prod(%x: tensor<4xf32>, %v: tensor<3x4xf32>, %z: tensor<4xf32>) -> tensor<f32> {
  %r:3 = stablehlo.custom_call @hlopt.jet(%x, %v, %z) {api_version = 4 : i32, called_computations = [@p], backend_config = {order = 2 : i64, collapsed = true}} : (tensor<4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<f32>)
  return %r#2 : tensor<f32>
}
func.func private @p(%x: tensor<4xf32>) -> tensor<f32> {
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %0 = stablehlo.sine %x : tensor<4xf32>
  %1 = stablehlo.reduce(%0 init: %one) applies stablehlo.multiply across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}
