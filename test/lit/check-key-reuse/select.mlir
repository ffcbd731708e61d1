// RUN: hlopt-opt %s -p check-key-reuse --verify-diagnostics

// A select is followed when the choice is known: a constant predicate, or both
// sides the same key. Otherwise its result is a new key. Two draws from one key
// that only meet as the two sides of selects (one draw per element, as in JAX's
// poisson and binomial) are not a reuse; combined in any other op, they are.

func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}

func.func private @draw(%key: tensor<2xui32>) -> tensor<ui32> {
  %s0 = stablehlo.slice %key [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %a:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  return %a#0 : tensor<ui32>
}

func.func @select_known(%key: tensor<2xui32>, %other: tensor<2xui32>, %p: tensor<i1>) -> (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) {
  %true = stablehlo.constant dense<true> : tensor<i1>
  %chosen = stablehlo.select %true, %key, %other : tensor<i1>, tensor<2xui32>
  %same = stablehlo.select %p, %other, %other : tensor<i1>, tensor<2xui32>
  %a = func.call @draw(%key) : (tensor<2xui32>) -> tensor<ui32>
  // expected-note@above {{the key was first consumed here}}
  // expected-error@below {{PRNG key is consumed a second time}}
  %b = func.call @draw(%chosen) : (tensor<2xui32>) -> tensor<ui32>
  %c = func.call @draw(%other) : (tensor<2xui32>) -> tensor<ui32>
  // expected-note@above {{the key was first consumed here}}
  // expected-error@below {{PRNG key is consumed a second time}}
  %d = func.call @draw(%same) : (tensor<2xui32>) -> tensor<ui32>
  return %a, %b, %c, %d : tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>
}

func.func @select_unknown(%key: tensor<2xui32>, %other: tensor<2xui32>, %p: tensor<i1>) -> (tensor<ui32>, tensor<ui32>) {
  %either = stablehlo.select %p, %key, %other : tensor<i1>, tensor<2xui32>
  %a = func.call @draw(%key) : (tensor<2xui32>) -> tensor<ui32>
  %b = func.call @draw(%either) : (tensor<2xui32>) -> tensor<ui32>
  return %a, %b : tensor<ui32>, tensor<ui32>
}

func.func @draws_meet_in_a_select(%key: tensor<2xui32>, %p: tensor<i1>) -> tensor<ui32> {
  %a = func.call @draw(%key) : (tensor<2xui32>) -> tensor<ui32>
  %b = func.call @draw(%key) : (tensor<2xui32>) -> tensor<ui32>
  %s = stablehlo.select %p, %a, %b : tensor<i1>, tensor<ui32>
  %z = stablehlo.constant dense<0> : tensor<ui32>
  %t = stablehlo.select %p, %z, %s : tensor<i1>, tensor<ui32>
  return %t : tensor<ui32>
}

func.func @draws_mixed_after_a_select(%key: tensor<2xui32>, %p: tensor<i1>) -> tensor<ui32> {
  %a = func.call @draw(%key) : (tensor<2xui32>) -> tensor<ui32>
  // expected-note@above {{the key was first consumed here}}
  // expected-error@below {{PRNG key is consumed a second time}}
  %b = func.call @draw(%key) : (tensor<2xui32>) -> tensor<ui32>
  %s = stablehlo.select %p, %a, %b : tensor<i1>, tensor<ui32>
  %m = stablehlo.add %s, %a : tensor<ui32>
  return %m : tensor<ui32>
}
