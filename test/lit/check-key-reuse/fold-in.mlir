// RUN: hlopt-opt %s -p check-key-reuse{fold-in-consumes=true} --verify-diagnostics
// RUN: hlopt-opt %s -p check-key-reuse | filecheck %s --check-prefix=JAX
// JAX-LABEL: func.func @fold_in_twice

// fold_in hashes the key with data (a function argument): JAX does not count it
// as consuming; fold-in-consumes=true does.
func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}
func.func @fold_in_twice(%key: tensor<2xui32>, %d: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %s0 = stablehlo.slice %key [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %a:2 = func.call @threefry2x32(%k0, %k1, %d, %d) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  %b:2 = func.call @threefry2x32(%k0, %k1, %d, %d) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-3 {{the key was first consumed here}}
  return %a#0, %b#0 : tensor<ui32>, tensor<ui32>
}
