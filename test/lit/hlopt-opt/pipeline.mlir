// RUN: hlopt-opt %s -p canonicalize,cse --split-input-file | filecheck %s
// RUN: hlopt-opt %s -p hlopt-default --split-input-file | filecheck %s --check-prefix=DEFAULT

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
