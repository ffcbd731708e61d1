// RUN: hlopt-opt %s -p 'vjp-expand{func=f}' --split-input-file | filecheck %s

// A loop with a known trip count (i < 3 from 0, step 1): the forward loop writes what
// the backward body reads into tapes: the state y each iteration starts with (for
// cos(y)) and the residual sin(y) (for v's cotangent); the integer counter and the
// loop-invariant v are not taped. The backward loop runs t = 2, 1, 0, reads the tapes
// (no sine is recomputed) and sums v's cotangent in its state.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[W:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK: %[[FWD:.*]]:6 = stablehlo.while(%[[I:[^ ]*]] = %{{.*}}, %[[Y:[^ ]*]] = %[[X]], %{{[^ ]*}} = %[[W]], %[[K:[^ ]*]] = %{{.*}}, %[[TY:[^ ]*]] = %{{.*}}, %[[TS:[^ ]*]] = %{{.*}})
// CHECK-SAME: tensor<3x4xf32>, tensor<3x4xf32>
// CHECK: } do {
// CHECK: %[[S:.*]] = stablehlo.sine %[[Y]]
// CHECK: %[[ROW:.*]] = stablehlo.reshape %[[Y]] : (tensor<4xf32>) -> tensor<1x4xf32>
// CHECK: stablehlo.dynamic_update_slice %[[TY]], %[[ROW]], %[[K]], %{{.*}}
// CHECK: %[[SROW:.*]] = stablehlo.reshape %[[S]] : (tensor<4xf32>) -> tensor<1x4xf32>
// CHECK: stablehlo.dynamic_update_slice %[[TS]], %[[SROW]], %[[K]], %{{.*}}
// CHECK: %[[LAST:.*]] = stablehlo.constant dense<2> : tensor<i32>
// CHECK: %[[BWD:.*]]:3 = stablehlo.while(%[[T:[^ ]*]] = %[[LAST]], %[[YCT:[^ ]*]] = %[[CT]], %[[VCT:[^ ]*]] = %{{.*}})
// CHECK: stablehlo.compare GE, %[[T]]
// CHECK: } do {
// CHECK-NOT: stablehlo.sine
// CHECK: %[[READ:.*]] = stablehlo.dynamic_slice %[[FWD]]#4, %[[T]], %{{.*}}, sizes = [1, 4]
// CHECK: %[[YT:.*]] = stablehlo.reshape %[[READ]]
// CHECK: stablehlo.dynamic_slice %[[FWD]]#5, %[[T]], %{{.*}}, sizes = [1, 4]
// CHECK-NOT: stablehlo.sine
// CHECK: stablehlo.cosine %[[YT]]
// CHECK: stablehlo.subtract %[[T]]
// CHECK: return %[[BWD]]#1, %[[BWD]]#2
func.func @f(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %r:3 = stablehlo.while(%i = %c0, %y = %x, %v = %w) : tensor<i32>, tensor<4xf32>, tensor<4xf32>
    cond {
      %n = stablehlo.constant dense<3> : tensor<i32>
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %c1 : tensor<i32>
      %s = stablehlo.sine %y : tensor<4xf32>
      %b = stablehlo.multiply %s, %v : tensor<4xf32>
      stablehlo.return %j, %b, %v : tensor<i32>, tensor<4xf32>, tensor<4xf32>
    }
  return %r#1 : tensor<4xf32>
}

// -----

// A data-dependent loop: the forward loop counts its iterations; backward iteration
// t recomputes the state with an inner loop of t forward steps from the start (no tape).
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[FWD:.*]]:2 = stablehlo.while(%{{[^ ]*}} = %[[X]], %[[N:[^ ]*]] = %{{.*}})
// CHECK: stablehlo.add %[[N]]
// CHECK: %[[LAST:.*]] = stablehlo.subtract %[[FWD]]#1
// CHECK: stablehlo.while(%[[T:[^ ]*]] = %[[LAST]], %{{[^ ]*}} = %[[CT]])
// CHECK: } do {
// CHECK: %[[STATE:.*]]:2 = stablehlo.while(%[[J:[^ ]*]] = %{{.*}}, %{{[^ ]*}} = %[[X]])
// CHECK: stablehlo.compare LT, %[[J]], %[[T]]
// CHECK: stablehlo.exponential %[[STATE]]#1
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = stablehlo.while(%y = %x) : tensor<4xf32>
    cond {
      %z = stablehlo.constant dense<0.0> : tensor<f32>
      %s = stablehlo.reduce(%y init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
      %n = stablehlo.constant dense<20.0> : tensor<f32>
      %p = stablehlo.compare LT, %s, %n : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %e = stablehlo.exponential %y : tensor<4xf32>
      stablehlo.return %e : tensor<4xf32>
    }
  return %r : tensor<4xf32>
}

// -----

// case: the backward case recomputes each branch and returns the cotangent of
// what the branches capture (zeros from the branch that returns a constant).
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[K:[^:]*]]: tensor<i32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[B:.*]] = "stablehlo.case"(%[[K]]) ({
// CHECK: %[[E:.*]] = stablehlo.exponential %[[X]]
// CHECK: %[[G:.*]] = stablehlo.multiply %[[CT]], %[[E]]
// CHECK: stablehlo.return %[[G]]
// CHECK: }, {
// CHECK: %[[Z:.*]] = stablehlo.broadcast_in_dim
// CHECK: stablehlo.return %[[Z]]
// CHECK: return %[[B]], %{{.*}}
func.func @f(%x: tensor<4xf32>, %k: tensor<i32>) -> tensor<4xf32> {
  %r = "stablehlo.case"(%k) ({
    %e = stablehlo.exponential %x : tensor<4xf32>
    stablehlo.return %e : tensor<4xf32>
  }, {
    %c = stablehlo.constant dense<1.0> : tensor<4xf32>
    stablehlo.return %c : tensor<4xf32>
  }) : (tensor<i32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// func.call: a vjp per callee, called once per call site; the forward call stays for
// the values the backward part reads. A small leaf callee (@h: JAX's helper wrappers)
// is differentiated in place instead: inside @g_vjp there is no call of @h.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[Y:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[H:.*]] = call @g(%[[X]], %[[Y]])
// CHECK: %[[B1:.*]]:2 = call @g_vjp(%[[H]], %[[Y]], %[[CT]])
// CHECK: %[[B2:.*]]:2 = call @g_vjp(%[[X]], %[[Y]], %[[B1]]#0)
// CHECK: %[[YCT:.*]] = stablehlo.add %[[B1]]#1, %[[B2]]#1
// CHECK: return %[[B2]]#0, %[[YCT]]
// CHECK-LABEL: func.func private @g_vjp
// CHECK-NOT: call
// CHECK: stablehlo.tanh
// CHECK-NOT: call
// CHECK: return
// CHECK-NOT: func.func private @g_vjp_1
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @g(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @g(%0, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @g(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @h(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.multiply %0, %b : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @h(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.tanh %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// sort: the forward sort carries an iota; the cotangent is sorted back by it.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[CT:[^:]*]]: tensor<4xf32>)
// CHECK: %[[IOTA:.*]] = stablehlo.iota dim = 0 : tensor<4xi32>
// CHECK: %[[S:.*]]:2 = "stablehlo.sort"(%[[X]], %[[IOTA]])
// CHECK: %[[B:.*]]:2 = "stablehlo.sort"(%[[S]]#1, %[[CT]])
// CHECK: return %[[B]]#1
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.sort"(%x) <{dimension = 0 : i64, is_stable = true}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %p = stablehlo.compare LT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// if: as case; the bool predicate gets a zero cotangent of its own type.
// CHECK-LABEL: func.func @f_vjp
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[P:[^:]*]]: tensor<i1>, %[[CT:[^:]*]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<i1>)
// CHECK: %[[B:.*]] = "stablehlo.if"(%[[P]]) ({
// CHECK: stablehlo.cosine %[[X]]
// CHECK: }, {
// CHECK: stablehlo.return %[[CT]]
// CHECK: %[[F:.*]] = stablehlo.constant dense<false> : tensor<i1>
// CHECK: return %[[B]], %[[F]]
func.func @f(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  %r = "stablehlo.if"(%p) ({
    %e = stablehlo.sine %x : tensor<4xf32>
    stablehlo.return %e : tensor<4xf32>
  }, {
    stablehlo.return %x : tensor<4xf32>
  }) : (tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
