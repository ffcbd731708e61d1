// RUN: hlopt-opt %s -p 'vjp-expand{func=f}' --split-input-file | filecheck %s

// reduce add broadcasts the cotangent back; max splits it among the elements equal
// to the maximum; multiply multiplies it by the product of the other elements (a
// prefix product from each side: exact at zeros).
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3x4xf32>, %[[CTS:[^:]*]]: tensor<3xf32>, %[[CTM:[^:]*]]: tensor<4xf32>, %[[CTP:[^:]*]]: tensor<3xf32>)
// CHECK: %[[MAX:.*]] = stablehlo.reduce(%[[X]] init: %{{.*}}) applies stablehlo.maximum across dimensions = [0]
// CHECK: stablehlo.broadcast_in_dim %[[CTP]], dims = [0]
// CHECK: stablehlo.reverse %[[X]], dims = [1]
// CHECK: %[[AT:.*]] = stablehlo.broadcast_in_dim %[[MAX]], dims = [1]
// CHECK: %[[HIT:.*]] = stablehlo.compare EQ, %[[X]], %[[AT]]
// CHECK: %[[HITF:.*]] = stablehlo.convert %[[HIT]]
// CHECK: %[[COUNT:.*]] = stablehlo.reduce(%[[HITF]] init: %{{.*}}) applies stablehlo.add across dimensions = [0]
// CHECK: stablehlo.divide %[[CTM]], %[[COUNT]]
// CHECK: %[[SUM:.*]] = stablehlo.broadcast_in_dim %[[CTS]], dims = [0]
// CHECK: %[[R:.*]] = stablehlo.add %{{.*}}, %[[SUM]]
// CHECK: return %[[R]]
func.func @f(%x: tensor<3x4xf32>) -> (tensor<3xf32>, tensor<4xf32>, tensor<3xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %m = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.reduce(%x init: %m) applies stablehlo.maximum across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
  %2 = stablehlo.reduce(%x init: %one) applies stablehlo.multiply across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
  return %0, %1, %2 : tensor<3xf32>, tensor<4xf32>, tensor<3xf32>
}

// -----

// reduce_window add (cumsum): the cotangent padded and summed over windows again;
// reduce_window max: select_and_scatter (the first maximum of each window).
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<6xf32>, %[[CT0:[^:]*]]: tensor<6xf32>, %[[CT1:[^:]*]]: tensor<5xf32>)
// CHECK: %[[SS:.*]] = "stablehlo.select_and_scatter"(%[[X]], %[[CT1]], %{{.*}})
// CHECK: stablehlo.compare GE
// CHECK: stablehlo.add
// CHECK: %[[P:.*]] = stablehlo.pad %[[CT0]], %{{.*}}, low = [0], high = [5], interior = [0]
// CHECK: %[[W:.*]] = "stablehlo.reduce_window"(%[[P]], %{{.*}})
// CHECK-SAME: window_dimensions = array<i64: 6>
// CHECK: %[[R:.*]] = stablehlo.add %[[SS]], %[[W]]
// CHECK: return %[[R]]
func.func @f(%x: tensor<6xf32>) -> (tensor<6xf32>, tensor<5xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %m = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %0 = "stablehlo.reduce_window"(%x, %z) <{padding = dense<[[5, 0]]> : tensor<1x2xi64>, window_dimensions = array<i64: 6>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<6xf32>, tensor<f32>) -> tensor<6xf32>
  %1 = "stablehlo.reduce_window"(%x, %m) <{window_dimensions = array<i64: 2>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.maximum %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<6xf32>, tensor<f32>) -> tensor<5xf32>
  return %0, %1 : tensor<6xf32>, tensor<5xf32>
}
