// RUN: hlopt-opt %s -p jet-expand | filecheck %s

// A jet through a dynamic slice and a dynamic update: each Taylor coefficient is sliced and
// updated at the primal's (integer) start index; an integer's coefficients are ignored. Once
// with one series (@main), once batched over two directions (@directions).
// CHECK-LABEL: func.func @main
// CHECK-NOT: hlopt.jet
// CHECK: call @f_jet1(
// CHECK-LABEL: func.func @directions
// CHECK: call @f_jet1_1(
// CHECK-LABEL: func.func private @f_jet1(
// CHECK-COUNT-2: stablehlo.dynamic_slice
// CHECK: stablehlo.cosine
// CHECK-COUNT-2: stablehlo.dynamic_update_slice
// CHECK-LABEL: func.func private @f_jet1_1(
// CHECK: stablehlo.dynamic_slice {{.*}} sizes = [2, 2] : (tensor<2x4xf32>, tensor<i32>, tensor<i32>) -> tensor<2x2xf32>
// CHECK: stablehlo.dynamic_update_slice {{.*}} : (tensor<2x4xf32>, tensor<2x2xf32>, tensor<i32>, tensor<i32>) -> tensor<2x4xf32>
func.func @main(%x: tensor<4xf32>, %i: tensor<i32>, %x1: tensor<4xf32>, %i1: tensor<i32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %i, %x1, %i1) {api_version = 4 : i32, backend_config = {order = 1 : i64}, called_computations = [@f]} : (tensor<4xf32>, tensor<i32>, tensor<4xf32>, tensor<i32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>, %i: tensor<i32>) -> tensor<4xf32> {
  %0 = stablehlo.dynamic_slice %x, %i, sizes = [2] : (tensor<4xf32>, tensor<i32>) -> tensor<2xf32>
  %1 = stablehlo.sine %0 : tensor<2xf32>
  %2 = stablehlo.dynamic_update_slice %x, %1, %i : (tensor<4xf32>, tensor<2xf32>, tensor<i32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
func.func @directions(%x: tensor<4xf32>, %i: tensor<i32>, %x1: tensor<2x4xf32>, %i1: tensor<2xi32>) -> (tensor<4xf32>, tensor<2x4xf32>) {
  %0:2 = stablehlo.custom_call @hlopt.jet(%x, %i, %x1, %i1) {api_version = 4 : i32, backend_config = {order = 1 : i64, directions = 2 : i64}, called_computations = [@f]} : (tensor<4xf32>, tensor<i32>, tensor<2x4xf32>, tensor<2xi32>) -> (tensor<4xf32>, tensor<2x4xf32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<2x4xf32>
}
