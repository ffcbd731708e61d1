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

// DEFAULT-LABEL: func.func @main
// DEFAULT-NOT: call @callee
// DEFAULT: stablehlo.cosine
// DEFAULT-NOT: func.func private @callee
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @callee(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @callee(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.cosine %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// hlopt-default tunes for XLA:CPU only when the module is compiled for the cpu platform; for
// no platform (portable IR) or another, a plain sum stays a reduce.
// DEFAULT-LABEL: func.func @sum
// DEFAULT: stablehlo.reduce
// DEFAULT-NOT: stablehlo.dot_general
// CPU-LABEL: func.func @sum
// CPU-NOT: stablehlo.reduce
// CPU: stablehlo.dot_general
func.func @sum(%x: tensor<3x4x5xf32>) -> tensor<4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3x4x5xf32>, tensor<f32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}
