// RUN: hlopt-opt %s -p check-key-reuse --verify-diagnostics

// A row of a key array picked at an index known only at run time may be any
// row: consuming it consumes each row once (scan does this every iteration,
// which is not a reuse), and any row consumed again afterwards is reported.

func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}

func.func private @draw(%key: tensor<1x2xui32>) -> tensor<ui32> {
  %s0 = stablehlo.slice %key [0:1, 0:1] : (tensor<1x2xui32>) -> tensor<1x1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1x1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [0:1, 1:2] : (tensor<1x2xui32>) -> tensor<1x1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1x1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %a:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  return %a#0 : tensor<ui32>
}

func.func @scan_then_row(%keys: tensor<3x2xui32>) -> (tensor<ui32>, tensor<ui32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %acc0 = stablehlo.constant dense<0> : tensor<ui32>
  %r:2 = stablehlo.while(%i = %zero, %acc = %acc0) : tensor<i32>, tensor<ui32>
  cond {
    %n = stablehlo.constant dense<3> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %row = stablehlo.dynamic_slice %keys, %i, %zero, sizes = [1, 2] : (tensor<3x2xui32>, tensor<i32>, tensor<i32>) -> tensor<1x2xui32>
    %d = func.call @draw(%row) : (tensor<1x2xui32>) -> tensor<ui32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.add %i, %one : tensor<i32>
    stablehlo.return %j, %d : tensor<i32>, tensor<ui32>
  }
  %k2 = stablehlo.slice %keys [2:3, 0:2] : (tensor<3x2xui32>) -> tensor<1x2xui32>
  // expected-error@+2 {{PRNG key is consumed a second time}}
  // expected-note@-7 {{the key was first consumed here}}
  %again = func.call @draw(%k2) : (tensor<1x2xui32>) -> tensor<ui32>
  return %r#1, %again : tensor<ui32>, tensor<ui32>
}

func.func @row_at_index_then_row(%keys: tensor<3x2xui32>, %i: tensor<i32>) -> (tensor<ui32>, tensor<ui32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %row = stablehlo.dynamic_slice %keys, %i, %zero, sizes = [1, 2] : (tensor<3x2xui32>, tensor<i32>, tensor<i32>) -> tensor<1x2xui32>
  %a = func.call @draw(%row) : (tensor<1x2xui32>) -> tensor<ui32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %first = stablehlo.dynamic_slice %keys, %zero, %zero, sizes = [1, 2] : (tensor<3x2xui32>, tensor<i32>, tensor<i32>) -> tensor<1x2xui32>
  // expected-error@+2 {{PRNG key is consumed a second time}}
  // expected-note@-4 {{the key was first consumed here}}
  %b = func.call @draw(%first) : (tensor<1x2xui32>) -> tensor<ui32>
  return %a, %b : tensor<ui32>, tensor<ui32>
}
