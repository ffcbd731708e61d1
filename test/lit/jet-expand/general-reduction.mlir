// RUN: hlopt-opt %s -p 'jet-expand{func=f order=1}' | filecheck %s

// A reduction with a general body (two results: a product and a max) has no rule of
// its own kind: the jet of the fold is the fold of the body's jet. The op grows by the
// coefficient of each operand and result (inits: zeros) and its body becomes the
// standard jet of the old body on scalars: accumulators (value, value, coefficient,
// coefficient), then elements in the same order.
// CHECK-LABEL: func.func @f_jet1(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4xf32>, %[[Y:[^:]*]]: tensor<4xf32>, %[[DX:[^:]*]]: tensor<4xf32>, %[[DY:[^:]*]]: tensor<4xf32>)
// CHECK: %[[R:.*]]:4 = stablehlo.reduce(%[[X]] init: %{{.*}}), (%[[Y]] init: %{{.*}}), (%[[DX]] init: %[[Z1:[^)]*]]), (%[[DY]] init: %[[Z2:[^)]*]]) across dimensions = [0]
// CHECK: reducer(%[[A0:[^:]*]]: tensor<f32>, %[[B0:[^:]*]]: tensor<f32>) (%[[A1:[^:]*]]: tensor<f32>, %[[B1:[^:]*]]: tensor<f32>) (%[[DA0:[^:]*]]: tensor<f32>, %[[DB0:[^:]*]]: tensor<f32>) (%[[DA1:[^:]*]]: tensor<f32>, %[[DB1:[^:]*]]: tensor<f32>)
// CHECK: %[[P:.*]] = stablehlo.multiply %[[A0]], %[[B0]]
// product rule: a0 db0 + da0 b0
// CHECK: %[[T1:.*]] = stablehlo.multiply %[[A0]], %[[DB0]]
// CHECK: %[[T2:.*]] = stablehlo.multiply %[[DA0]], %[[B0]]
// CHECK: %[[DP:.*]] = stablehlo.add %[[T1]], %[[T2]]
// CHECK: %[[M:.*]] = stablehlo.maximum %[[A1]], %[[B1]]
// CHECK: stablehlo.return %[[P]], %[[M]], %[[DP]], %{{.*}} : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
// d(p m) = p dm + dp m
// CHECK: stablehlo.multiply %[[R]]#0, %[[R]]#1
// CHECK: stablehlo.multiply %[[R]]#0, %[[R]]#3
// CHECK: stablehlo.multiply %[[R]]#2, %[[R]]#1
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<f32> {
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %r:2 = stablehlo.reduce(%x init: %one), (%y init: %ninf) across dimensions = [0] : (tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>)
    reducer(%a0: tensor<f32>, %b0: tensor<f32>) (%a1: tensor<f32>, %b1: tensor<f32>) {
      %p = stablehlo.multiply %a0, %b0 : tensor<f32>
      %m = stablehlo.maximum %a1, %b1 : tensor<f32>
      stablehlo.return %p, %m : tensor<f32>, tensor<f32>
    }
  %out = stablehlo.multiply %r#0, %r#1 : tensor<f32>
  return %out : tensor<f32>
}
