// RUN: hlopt-opt %s -p 'vjp-expand{func=missing}' --verify-diagnostics

// func= naming no function of the module: the error has no location.
// expected-error@unknown {{vjp-expand: no function @missing in the module}}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
