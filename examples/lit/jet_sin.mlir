// RUN: hlopt-opt %s -p jet-expand | filecheck %s

// The second-order jet of sin becomes a call of a generated Taylor function.
// CHECK-LABEL: func.func @main
// CHECK-NOT: hlopt.jet
// CHECK: call @f_jet2
// CHECK-LABEL: func.func private @f_jet2
// CHECK-DAG: stablehlo.sine
// CHECK-DAG: stablehlo.cosine
func.func @main(%x: tensor<f32>, %x1: tensor<f32>, %x2: tensor<f32>) -> tensor<f32> {
  %0:3 = stablehlo.custom_call @hlopt.jet(%x, %x1, %x2) {api_version = 4 : i32, backend_config = {order = 2 : i64}, called_computations = [@f]} : (tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<f32>, tensor<f32>, tensor<f32>)
  return %0#2 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}
