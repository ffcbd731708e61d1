// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file | filecheck %s

// A scatter multiply is one variadic scatter of the series of the operand and the updates
// whose body is the Cauchy product: exact when indices repeat (here 1).
// CHECK-LABEL: func.func @f_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<5xf32>, %[[U:[^:]*]]: tensor<3xf32>, %[[X1:[^:]*]]: tensor<5xf32>, %[[X2:[^:]*]]: tensor<5xf32>, %[[U1:[^:]*]]: tensor<3xf32>, %[[U2:[^:]*]]: tensor<3xf32>)
// CHECK: %[[S:.*]]:3 = "stablehlo.scatter"(%[[X]], %[[X1]], %[[X2]], %{{.*}}, %[[U]], %[[U1]], %[[U2]])
// CHECK-NEXT: ^bb0(%[[A0:[^:]*]]: tensor<f32>, %[[A1:[^:]*]]: tensor<f32>, %[[A2:[^:]*]]: tensor<f32>, %[[B0:[^:]*]]: tensor<f32>, %[[B1:[^:]*]]: tensor<f32>, %[[B2:[^:]*]]: tensor<f32>):
// CHECK-NEXT: %[[P0:.*]] = stablehlo.multiply %[[A0]], %[[B0]]
// CHECK-NEXT: %[[P01:.*]] = stablehlo.multiply %[[A0]], %[[B1]]
// CHECK-NEXT: %[[P10:.*]] = stablehlo.multiply %[[A1]], %[[B0]]
// CHECK-NEXT: %[[P1:.*]] = stablehlo.add %[[P01]], %[[P10]]
// CHECK: stablehlo.return %[[P0]], %[[P1]], %{{.*}}
// CHECK: return %[[S]]#0, %[[S]]#1, %[[S]]#2
func.func @f(%x: tensor<5xf32>, %u: tensor<3xf32>) -> tensor<5xf32> {
  %idx = stablehlo.constant dense<[[1], [3], [1]]> : tensor<3x1xi32>
  %0 = "stablehlo.scatter"(%x, %idx, %u) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.multiply %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) : (tensor<5xf32>, tensor<3x1xi32>, tensor<3xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

// A scatter max carries (value, coefficients, count): the body keeps the winner's and sums
// them on ties; the coefficients are divided by the counts (ties averaged, as JAX).
// CHECK-LABEL: func.func @f_jet2
// CHECK: %[[S:.*]]:4 = "stablehlo.scatter"
// CHECK: %[[W:.*]] = stablehlo.compare GT
// CHECK: %[[T:.*]] = stablehlo.compare EQ
// CHECK: stablehlo.return
// CHECK: %[[C1:.*]] = stablehlo.divide %[[S]]#1, %[[S]]#3
// CHECK: %[[C2:.*]] = stablehlo.divide %[[S]]#2, %[[S]]#3
// CHECK: return %[[S]]#0, %[[C1]], %[[C2]]
func.func @f(%x: tensor<5xf32>, %u: tensor<3xf32>) -> tensor<5xf32> {
  %idx = stablehlo.constant dense<[[1], [3], [1]]> : tensor<3x1xi32>
  %0 = "stablehlo.scatter"(%x, %idx, %u) <{scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.maximum %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) : (tensor<5xf32>, tensor<3x1xi32>, tensor<3xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}
