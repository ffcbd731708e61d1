// RUN: hlopt-opt %s -p canonicalize,cse --split-input-file | filecheck %s
// RUN: hlopt-opt %s -p hlopt-default --split-input-file | filecheck %s --check-prefix=DEFAULT
// RUN: hlopt-opt %s -p hlopt-default --platform tpu --split-input-file | filecheck %s --check-prefix=DEFAULT
// RUN: hlopt-opt %s -p hlopt-default --platform cpu --split-input-file | filecheck %s --check-prefix=CPU

// CHECK-LABEL: func.func @cse
// CHECK: %[[A:.*]] = stablehlo.add %arg0, %arg0
// CHECK-NOT: stablehlo.add
// CHECK: stablehlo.multiply %[[A]], %[[A]]
func.func @cse(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  %1 = stablehlo.add %a, %a : tensor<4xf32>
  %2 = stablehlo.multiply %0, %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// hlopt-default leaves the program's own code as it is, calls included, as jax.jit hands it to
// XLA; `inline` inlines them.
// DEFAULT-LABEL: func.func @main
// DEFAULT: call @callee
// DEFAULT: func.func private @callee
// DEFAULT: stablehlo.cosine
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @callee(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @callee(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.cosine %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// hlopt-default tunes for XLA:CPU only when the module is compiled for the cpu platform, and only
// the code an hlopt operation becomes (here the jet of @body), as the plain-JAX lowering rule does:
// the program's own sum (@main's reduce) stays a reduce, as under jax.jit. For no platform
// (portable IR) or another, the jet's sums stay reduces too.
// DEFAULT-LABEL: func.func @main
// DEFAULT-NOT: stablehlo.dot_general
// CPU-LABEL: func.func @main
// CPU: stablehlo.reduce(%arg0
// CPU: call @jet(
// CPU-LABEL: func.func private @jet(
// CPU-NOT: stablehlo.reduce
// CPU: stablehlo.dot_general
func.func @main(%x: tensor<3x4x5xf32>, %x1: tensor<3x4x5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3x4x5xf32>, tensor<f32>) -> tensor<4x5xf32>
  %r:2 = stablehlo.custom_call @hlopt.jet(%x, %x1) {api_version = 4 : i32, called_computations = [@body], backend_config = {order = 1 : i64}} : (tensor<3x4x5xf32>, tensor<3x4x5xf32>) -> (tensor<4x5xf32>, tensor<4x5xf32>)
  return %0, %r#1 : tensor<4x5xf32>, tensor<4x5xf32>
}
func.func private @body(%x: tensor<3x4x5xf32>) -> tensor<4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.sine %x : tensor<3x4x5xf32>
  %0 = stablehlo.reduce(%s init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3x4x5xf32>, tensor<f32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}
