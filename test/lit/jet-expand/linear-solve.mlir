// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file | filecheck %s

// A custom_linear_solve x = S(b) of the map v -> a * v, by its structure: order by
// order x_k = S(b_k - r_k), r_k coefficient k of the matvec's order-k jet with x_k
// left out; each solve is a linear_solve marker again (so an enclosing jet follows
// the same rule), and the markers become calls of @solve at the end.
// CHECK-LABEL: func.func @f_jet2
// CHECK-SAME: (%[[A:[^:]*]]: tensor<f32>, %[[B:[^:]*]]: tensor<3xf32>, %[[A1:[^:]*]]: tensor<f32>, %[[A2:[^:]*]]: tensor<f32>, %[[B1:[^:]*]]: tensor<3xf32>, %[[B2:[^:]*]]: tensor<3xf32>)
// CHECK: %[[X0:.*]] = call @solve(%[[A]], %[[B]])
// CHECK: %[[M1:.*]]:2 = call @matvec_jet1(%[[A]], %[[X0]], %[[A1]], %{{.*}})
// CHECK: %[[T1:.*]] = stablehlo.subtract %[[B1]], %[[M1]]#1
// CHECK: %[[X1:.*]] = call @solve(%[[A]], %[[T1]])
// CHECK: %[[M2:.*]]:3 = call @matvec_jet2(%[[A]], %[[X0]], %[[A1]], %[[A2]], %[[X1]], %{{.*}})
// CHECK: %[[T2:.*]] = stablehlo.subtract %[[B2]], %[[M2]]#2
// CHECK: %[[X2:.*]] = call @solve(%[[A]], %[[T2]])
// CHECK: return %[[X0]], %[[X1]], %[[X2]]
// CHECK-NOT: hlopt.jet.linear_solve
func.func @f(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.linear_solve(%a, %a, %b) {api_version = 4 : i32, backend_config = {}, called_computations = [@matvec, @solve]} : (tensor<f32>, tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func private @matvec(%a: tensor<f32>, %x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.multiply %0, %x : tensor<3xf32>
  return %1 : tensor<3xf32>
}
func.func private @solve(%a: tensor<f32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.divide %b, %0 : tensor<3xf32>
  return %1 : tensor<3xf32>
}
