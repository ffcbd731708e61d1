// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file | filecheck %s
// RUN: hlopt-opt %s -p 'jet-expand{func=f order=1}' --split-input-file | filecheck %s --check-prefix=ONE

// A `custom_jvp` function in a jet body arrives as the `hlopt.jet.custom_jvp` marker
// calling [@primal, @tangents]. Its series follows its own JVP rule: y' = tangents(x, x'),
// so y_k = [t^(k-1)] tangents(x(t), x'(t)) / k, from an order-(K-1) jet of @tangents
// (@tangents itself at order 1). Left-over markers become calls of @primal.

// CHECK-NOT: hlopt.jet.custom_jvp
// CHECK-LABEL: func.func @f(
// CHECK-NEXT:    call @primal(%arg0)
// CHECK-LABEL: func.func @f_jet2(
// CHECK-SAME:      %[[X:[^:]*]]: tensor<4xf32>, %[[X1:[^:]*]]: tensor<4xf32>, %[[X2:[^:]*]]: tensor<4xf32>)
// CHECK-NEXT:    %[[Y0:.*]] = call @primal(%[[X]])
// CHECK-NEXT:    %[[TWO:.*]] = stablehlo.constant dense<2.0
// x' = x1 + 2 x2 t: the jet of @tangents at (x, x'), series (x1), (2 x2)
// CHECK-NEXT:    %[[DX1:.*]] = stablehlo.multiply %[[X2]], %[[TWO]]
// CHECK-NEXT:    %[[G:.*]]:2 = call @tangents_jet1(%[[X]], %[[X1]], %[[X1]], %[[DX1]])
// CHECK-NEXT:    %[[HALF:.*]] = stablehlo.constant dense<5.0
// CHECK-NEXT:    %[[Y2:.*]] = stablehlo.multiply %[[G]]#1, %[[HALF]]
// CHECK-NEXT:    return %[[Y0]], %[[G]]#0, %[[Y2]]
// CHECK-LABEL: func.func private @tangents_jet1(
// CHECK-NOT: hlopt.jet.custom_jvp

// ONE-LABEL: func.func @f_jet1(
// ONE-NEXT:    %[[Y0:.*]] = call @primal(%arg0)
// ONE-NEXT:    %[[Y1:.*]] = call @tangents(%arg0, %arg1)
// ONE-NEXT:    return %[[Y0]], %[[Y1]]
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @primal(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func private @tangents(%x: tensor<4xf32>, %dx: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.cosine %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %dx : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// Integer operands take no tangent and integer results get a zero series.
// CHECK-LABEL: func.func @f_jet2(
// CHECK:         call @primal(%arg0, %arg1)
// CHECK:         call @tangents_jet1(%arg0, %arg1,
// CHECK:         %[[Z1:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT:    %[[Z2:.*]] = stablehlo.constant dense<0> : tensor<i32>
// CHECK-NEXT:    return {{.*}}, %[[Z1]], %[[Z2]] :
func.func @f(%x: tensor<4xf32>, %n: tensor<i32>) -> (tensor<4xf32>, tensor<i32>) {
  %0:2 = stablehlo.custom_call @hlopt.jet.custom_jvp(%x, %n) {api_version = 4 : i32, backend_config = {}, called_computations = [@primal, @tangents]} : (tensor<4xf32>, tensor<i32>) -> (tensor<4xf32>, tensor<i32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<i32>
}
func.func private @primal(%x: tensor<4xf32>, %n: tensor<i32>) -> (tensor<4xf32>, tensor<i32>) {
  %0 = stablehlo.exponential %x : tensor<4xf32>
  return %0, %n : tensor<4xf32>, tensor<i32>
}
func.func private @tangents(%x: tensor<4xf32>, %n: tensor<i32>, %dx: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %dx : tensor<4xf32>
  return %1 : tensor<4xf32>
}
