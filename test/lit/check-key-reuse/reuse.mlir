// RUN: hlopt-opt %s -p check-key-reuse --split-input-file --verify-diagnostics
// RUN: hlopt-opt %s -p check-key-reuse{fold-in-consumes=true} --split-input-file --verify-diagnostics
// Whether fold_in consumes its key changes nothing here; fold-in.mlir has the case where it does.

// Each function holds the threefry2x32 kernel as JAX emits it, abbreviated: the
// analysis recognises it by its key schedule (k0 ^ k1 ^ 0x1BD11BDA), not its name.

func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}
func.func @bits_twice(%key: tensor<2xui32>) -> (tensor<ui32>, tensor<ui32>) {
  %s0 = stablehlo.slice %key [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %a:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  %b:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-3 {{the key was first consumed here}}
  return %a#0, %b#0 : tensor<ui32>, tensor<ui32>
}

// -----

// A split draws two new keys from the parent; the children are fine, the parent is not.
func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}
func.func @split_then_reuse_parent(%key: tensor<2xui32>) -> (tensor<ui32>, tensor<ui32>, tensor<ui32>) {
  %s0 = stablehlo.slice %key [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %i = stablehlo.iota dim = 0 : tensor<2xui32>
  %lo = stablehlo.slice %i [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %x = stablehlo.reshape %lo : (tensor<1xui32>) -> tensor<ui32>
  %split:2 = func.call @threefry2x32(%k0, %k1, %x, %x) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  %w0 = stablehlo.broadcast_in_dim %split#0, dims = [] : (tensor<ui32>) -> tensor<1xui32>
  %w1 = stablehlo.broadcast_in_dim %split#1, dims = [] : (tensor<ui32>) -> tensor<1xui32>
  %child = stablehlo.concatenate %w0, %w1, dim = 0 : (tensor<1xui32>, tensor<1xui32>) -> tensor<2xui32>
  %c0 = stablehlo.slice %child [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %c1 = stablehlo.slice %child [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %ck0 = stablehlo.reshape %c0 : (tensor<1xui32>) -> tensor<ui32>
  %ck1 = stablehlo.reshape %c1 : (tensor<1xui32>) -> tensor<ui32>
  %a:2 = func.call @threefry2x32(%ck0, %ck1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  %b:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-11 {{the key was first consumed here}}
  return %a#0, %b#0, %split#0 : tensor<ui32>, tensor<ui32>, tensor<ui32>
}

// -----

// Keys are followed into calls and through reshapes of key data; the report is
// at the calls, which name the user's lines when the callee is shared.
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
func.func @through_calls(%key: tensor<2xui32>) -> (tensor<ui32>, tensor<ui32>) {
  %a = func.call @draw(%key) : (tensor<2xui32>) -> tensor<ui32>
  %r = stablehlo.reshape %key : (tensor<2xui32>) -> tensor<1x2xui32>
  %s = stablehlo.reshape %r : (tensor<1x2xui32>) -> tensor<2xui32>
  %b = func.call @draw(%s) : (tensor<2xui32>) -> tensor<ui32>
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-5 {{the key was first consumed here}}
  return %a, %b : tensor<ui32>, tensor<ui32>
}

// -----

// A key captured by a loop body and consumed there is consumed in every iteration.
func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}
func.func @loop_over_captured_key(%key: tensor<2xui32>, %n: tensor<i32>) -> tensor<ui32> {
  %s0 = stablehlo.slice %key [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %r:2 = stablehlo.while(%i = %n, %acc = %c) : tensor<i32>, tensor<ui32>
  cond {
    %z = stablehlo.constant dense<0> : tensor<i32>
    %p = stablehlo.compare GT, %i, %z : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %a:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  // expected-error@-1 {{PRNG key is consumed in every iteration of a loop without being split}}
  // expected-note@-8 {{in this loop}}
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.subtract %i, %one : tensor<i32>
    stablehlo.return %j, %a#0 : tensor<i32>, tensor<ui32>
  }
  return %r#1 : tensor<ui32>
}

// -----

// Once in each of two exclusive branches is fine; once more after the case is not.
func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}
func.func @after_branches(%key: tensor<2xui32>, %which: tensor<i32>) -> tensor<ui32> {
  %s0 = stablehlo.slice %key [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %r = "stablehlo.case"(%which) ({
    %a:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
    stablehlo.return %a#0 : tensor<ui32>
  }, {
    %b:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
    stablehlo.return %b#1 : tensor<ui32>
  }) : (tensor<i32>) -> tensor<ui32>
  %after:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-8 {{the key was first consumed here}}
  return %after#0 : tensor<ui32>
}

// -----

// The kernel inlined (after `inline`) and the GPU custom call are consumers too.
func.func @inlined_and_custom_call(%key: tensor<2xui32>) -> (tensor<ui32>, tensor<ui32>, tensor<ui32>) {
  %s0 = stablehlo.slice %key [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %key [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %parity = stablehlo.constant dense<466688986> : tensor<ui32>
  %x0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %ks0 = stablehlo.xor %x0, %parity : tensor<ui32>
  %add0 = stablehlo.add %c, %k0 : tensor<ui32>
  %x1 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %ks1 = stablehlo.xor %parity, %x1 : tensor<ui32>
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-5 {{the key was first consumed here}}
  %g:2 = stablehlo.custom_call @cu_threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-8 {{the key was first consumed here}}
  %h:2 = stablehlo.custom_call @cu_threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
  // expected-error@-1 {{PRNG key is consumed a second time}}
  // expected-note@-11 {{the key was first consumed here}}
  return %ks0, %ks1, %g#0 : tensor<ui32>, tensor<ui32>, tensor<ui32>
}
