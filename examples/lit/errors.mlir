// RUN: not hlopt-opt %s -p jet-expand 2>&1 | filecheck %s

// A jet of order 0 is refused at the annotation, with the file and line.
// CHECK: errors.mlir:6:{{[0-9]+}}: error:
func.func @main(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.custom_call @hlopt.jet(%x) {api_version = 4 : i32, backend_config = {order = 0 : i64}, called_computations = [@f]} : (tensor<f32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func private @f(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}
