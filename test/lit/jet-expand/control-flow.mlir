// RUN: hlopt-opt %s -p 'jet-expand{func=f order=1}' --split-input-file | filecheck %s

// A loop carries the coefficients of every state value that may get a series,
// found by a fixpoint: %a starts as a constant but multiplies y in the body.
// The integer counter carries none.
// CHECK-LABEL: func.func @f_jet1
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[N:[^:]*]]: tensor<i32>, %[[X1:[^:]*]]: tensor<4xf32>, %{{.*}}: tensor<i32>)
// CHECK: %[[ONE:.*]] = stablehlo.constant dense<1.0
// CHECK: %[[Z:.*]] = stablehlo.constant dense<0.0
// CHECK: %[[R:.*]]:5 = stablehlo.while(%[[I:[^ ]*]] = %{{.*}}, %[[Y:[^ ]*]] = %[[X]], %[[A:[^ ]*]] = %[[ONE]], %[[Y1:[^ ]*]] = %[[X1]], %[[A1:[^ ]*]] = %[[Z]])
// CHECK: stablehlo.compare LT, %[[I]], %[[N]]
// CHECK: } do {
// CHECK: %[[S:.*]] = stablehlo.sine %[[Y]]
// CHECK: %[[C:.*]] = stablehlo.cosine %[[Y]]
// CHECK: %[[S1:.*]] = stablehlo.multiply %[[Y1]], %[[C]]
// CHECK: %[[B:.*]] = stablehlo.multiply %[[A]], %[[Y]]
// CHECK: %[[P:.*]] = stablehlo.multiply %[[A]], %[[Y1]]
// CHECK: %[[Q:.*]] = stablehlo.multiply %[[A1]], %[[Y]]
// CHECK: %[[B1:.*]] = stablehlo.add %[[P]], %[[Q]]
// CHECK: stablehlo.return %{{.*}}, %[[S]], %[[B]], %[[S1]], %[[B1]]
// CHECK: return %[[R]]#2, %[[R]]#4
func.func @f(%x: tensor<4xf32>, %n: tensor<i32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %cst = stablehlo.constant dense<1.0> : tensor<4xf32>
  %r:3 = stablehlo.while(%i = %c0, %y = %x, %a = %cst) : tensor<i32>, tensor<4xf32>, tensor<4xf32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %i, %c1 : tensor<i32>
      %s = stablehlo.sine %y : tensor<4xf32>
      %b = stablehlo.multiply %a, %y : tensor<4xf32>
      stablehlo.return %j, %s, %b : tensor<i32>, tensor<4xf32>, tensor<4xf32>
    }
  return %r#2 : tensor<4xf32>
}

// -----

// Branches return the coefficients of results that any branch differentiates
// (zeros where a branch has none); sort carries coefficients as extra operands
// so they follow the primal's permutation.
// CHECK-LABEL: func.func @f_jet1
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4xf32>, %[[K:[^:]*]]: tensor<i32>, %[[X1:[^:]*]]: tensor<4xf32>, %{{.*}}: tensor<i32>)
// CHECK: %[[CASE:.*]]:3 = "stablehlo.case"(%[[K]])
// CHECK: %[[E:.*]] = stablehlo.exponential %[[X]]
// CHECK: %[[E1:.*]] = stablehlo.multiply %[[X1]], %[[E]]
// CHECK: stablehlo.return %[[E]], %{{.*}}, %[[E1]]
// CHECK: %[[Z:.*]] = stablehlo.constant dense<0.0
// CHECK: stablehlo.return %{{.*}}, %{{.*}}, %[[Z]]
// CHECK: %[[S:.*]]:4 = "stablehlo.sort"(%[[CASE]]#0, %[[X]], %[[CASE]]#2, %[[X1]])
// CHECK: ^bb0(%[[A:[^:]*]]: tensor<f32>, %[[B:[^:]*]]: tensor<f32>, %{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>, %{{.*}}: tensor<f32>)
// CHECK: stablehlo.compare LT, %[[A]], %[[B]]
// CHECK: return %[[S]]#1, %[[CASE]]#1, %[[S]]#3
func.func @f(%x: tensor<4xf32>, %k: tensor<i32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %cst = stablehlo.constant dense<1.0> : tensor<4xf32>
  %r:2 = "stablehlo.case"(%k) ({
    %e = stablehlo.exponential %x : tensor<4xf32>
    stablehlo.return %e, %cst : tensor<4xf32>, tensor<4xf32>
  }, {
    stablehlo.return %cst, %cst : tensor<4xf32>, tensor<4xf32>
  }) : (tensor<i32>) -> (tensor<4xf32>, tensor<4xf32>)
  %s:2 = "stablehlo.sort"(%r#0, %x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>, %c: tensor<f32>, %d: tensor<f32>):
      %lt = stablehlo.compare LT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
  }) {dimension = 0 : i64, is_stable = true} : (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %s#1, %r#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A call becomes a call of the callee's jet; the jet of a callee whose result
// has no series tells the caller, which then builds nothing for it.
// CHECK-LABEL: func.func @f_jet1
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3xf32>, %[[X1:[^:]*]]: tensor<3xf32>)
// CHECK: %[[G:.*]]:4 = call @g_jet1(%[[X]], %[[X]], %[[X1]], %[[X1]])
// CHECK: %[[M:.*]] = stablehlo.multiply %[[G]]#0, %[[G]]#1
// CHECK-NOT: %[[G]]#2
// CHECK: %[[M1:.*]] = stablehlo.multiply %[[G]]#0, %[[G]]#3
// CHECK-NOT: %[[G]]#2
// CHECK: return %[[M]], %[[M1]] :
// CHECK-LABEL: func.func private @g_jet1
// CHECK: stablehlo.floor
// CHECK: stablehlo.exponential
// CHECK: return
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0:2 = func.call @g(%x, %x) : (tensor<3xf32>, tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  %1 = stablehlo.multiply %0#0, %0#1 : tensor<3xf32>
  return %1 : tensor<3xf32>
}
func.func private @g(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = stablehlo.floor %x : tensor<3xf32>
  %1 = stablehlo.exponential %y : tensor<3xf32>
  return %0, %1 : tensor<3xf32>, tensor<3xf32>
}

// -----

// stablehlo.if: like case, with a pred; the branch without a series returns zeros.
// CHECK-LABEL: func.func @f_jet1
// CHECK-SAME: (%[[X:[^:]*]]: tensor<f32>, %[[P:[^:]*]]: tensor<i1>, %[[X1:[^:]*]]: tensor<f32>, %{{.*}}: tensor<i1>)
// CHECK: %[[R:.*]]:2 = "stablehlo.if"(%[[P]])
// CHECK: %[[T:.*]] = stablehlo.tanh %[[X]]
// CHECK: stablehlo.return %[[T]], %{{.*}} :
// CHECK: %[[Z:.*]] = stablehlo.constant dense<0.0
// CHECK: stablehlo.return %{{.*}}, %[[Z]] :
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @f(%x: tensor<f32>, %p: tensor<i1>) -> tensor<f32> {
  %c = stablehlo.constant dense<2.0> : tensor<f32>
  %r = "stablehlo.if"(%p) ({
    %t = stablehlo.tanh %x : tensor<f32>
    stablehlo.return %t : tensor<f32>
  }, {
    stablehlo.return %c : tensor<f32>
  }) : (tensor<i1>) -> tensor<f32>
  return %r : tensor<f32>
}
