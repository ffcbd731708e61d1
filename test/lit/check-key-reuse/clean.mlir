// RUN: hlopt-opt %s -p check-key-reuse | filecheck %s

// Correct programs pass through unchanged.

func.func private @threefry2x32(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<ui32>, %x1: tensor<ui32>) -> (tensor<ui32>, tensor<ui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %2 = stablehlo.add %x0, %k0 : tensor<ui32>
  %3 = stablehlo.add %x1, %1 : tensor<ui32>
  return %2, %3 : tensor<ui32>, tensor<ui32>
}

func.func private @threefry2x32_0(%k0: tensor<ui32>, %k1: tensor<ui32>, %x0: tensor<2xui32>, %x1: tensor<2xui32>) -> (tensor<2xui32>, tensor<2xui32>) {
  %c = stablehlo.constant dense<466688986> : tensor<ui32>
  %0 = stablehlo.xor %k0, %k1 : tensor<ui32>
  %1 = stablehlo.xor %0, %c : tensor<ui32>
  %b0 = stablehlo.broadcast_in_dim %k0, dims = [] : (tensor<ui32>) -> tensor<2xui32>
  %b1 = stablehlo.broadcast_in_dim %1, dims = [] : (tensor<ui32>) -> tensor<2xui32>
  %2 = stablehlo.add %x0, %b0 : tensor<2xui32>
  %3 = stablehlo.add %x1, %b1 : tensor<2xui32>
  return %2, %3 : tensor<2xui32>, tensor<2xui32>
}

// A split draws the next key and a subkey from the carried key each iteration.
// CHECK-LABEL: func.func @split_each_iteration
// CHECK: stablehlo.while
// CHECK: call @threefry2x32_0
// CHECK: call @threefry2x32(
func.func @split_each_iteration(%key: tensor<2xui32>, %n: tensor<i32>) -> tensor<2xui32> {
  %r:2 = stablehlo.while(%i = %n, %k = %key) : tensor<i32>, tensor<2xui32>
  cond {
    %z = stablehlo.constant dense<0> : tensor<i32>
    %p = stablehlo.compare GT, %i, %z : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %s0 = stablehlo.slice %k [0:1] : (tensor<2xui32>) -> tensor<1xui32>
    %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
    %s1 = stablehlo.slice %k [1:2] : (tensor<2xui32>) -> tensor<1xui32>
    %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
    %iota = stablehlo.iota dim = 0 : tensor<2xui32>
    %split:2 = func.call @threefry2x32_0(%k0, %k1, %iota, %iota) : (tensor<ui32>, tensor<ui32>, tensor<2xui32>, tensor<2xui32>) -> (tensor<2xui32>, tensor<2xui32>)
    %a = stablehlo.reshape %split#0 : (tensor<2xui32>) -> tensor<2x1xui32>
    %b = stablehlo.reshape %split#1 : (tensor<2xui32>) -> tensor<2x1xui32>
    %keys = stablehlo.concatenate %a, %b, dim = 1 : (tensor<2x1xui32>, tensor<2x1xui32>) -> tensor<2x2xui32>
    %next = stablehlo.slice %keys [0:1, 0:2] : (tensor<2x2xui32>) -> tensor<1x2xui32>
    %sub = stablehlo.slice %keys [1:2, 0:2] : (tensor<2x2xui32>) -> tensor<1x2xui32>
    %sw = stablehlo.transpose %sub, dims = [1, 0] : (tensor<1x2xui32>) -> tensor<2x1xui32>
    %w0 = stablehlo.slice %sw [0:1, 0:1] : (tensor<2x1xui32>) -> tensor<1x1xui32>
    %w1 = stablehlo.slice %sw [1:2, 0:1] : (tensor<2x1xui32>) -> tensor<1x1xui32>
    %u0 = stablehlo.reshape %w0 : (tensor<1x1xui32>) -> tensor<ui32>
    %u1 = stablehlo.reshape %w1 : (tensor<1x1xui32>) -> tensor<ui32>
    %c = stablehlo.constant dense<0> : tensor<ui32>
    %bits:2 = func.call @threefry2x32(%u0, %u1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
    %nk = stablehlo.reshape %next : (tensor<1x2xui32>) -> tensor<2xui32>
    %one = stablehlo.constant dense<1> : tensor<i32>
    %j = stablehlo.subtract %i, %one : tensor<i32>
    stablehlo.return %j, %nk : tensor<i32>, tensor<2xui32>
  }
  return %r#1 : tensor<2xui32>
}

// Once in each exclusive branch of an `if`, through a Sharding custom call.
// CHECK-LABEL: func.func @once_per_branch
// CHECK: stablehlo.custom_call @Sharding
// CHECK: "stablehlo.if"
func.func @once_per_branch(%key: tensor<2xui32>, %p: tensor<i1>) -> tensor<ui32> {
  %sk = stablehlo.custom_call @Sharding(%key) {mhlo.sharding = "{replicated}"} : (tensor<2xui32>) -> tensor<2xui32>
  %s0 = stablehlo.slice %sk [0:1] : (tensor<2xui32>) -> tensor<1xui32>
  %k0 = stablehlo.reshape %s0 : (tensor<1xui32>) -> tensor<ui32>
  %s1 = stablehlo.slice %sk [1:2] : (tensor<2xui32>) -> tensor<1xui32>
  %k1 = stablehlo.reshape %s1 : (tensor<1xui32>) -> tensor<ui32>
  %c = stablehlo.constant dense<0> : tensor<ui32>
  %r = "stablehlo.if"(%p) ({
    %a:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
    stablehlo.return %a#0 : tensor<ui32>
  }, {
    %b:2 = func.call @threefry2x32(%k0, %k1, %c, %c) : (tensor<ui32>, tensor<ui32>, tensor<ui32>, tensor<ui32>) -> (tensor<ui32>, tensor<ui32>)
    stablehlo.return %b#1 : tensor<ui32>
  }) : (tensor<i1>) -> tensor<ui32>
  return %r : tensor<ui32>
}

// A call of a declaration (no body) is an unknown op: its results are new keys.
// CHECK-LABEL: func.func @calls_a_declaration
// CHECK: call @external
func.func private @external(tensor<2xui32>) -> tensor<2xui32>
func.func @calls_a_declaration(%key: tensor<2xui32>) -> tensor<2xui32> {
  %0 = func.call @external(%key) : (tensor<2xui32>) -> tensor<2xui32>
  return %0 : tensor<2xui32>
}
