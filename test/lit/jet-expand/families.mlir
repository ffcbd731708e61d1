// RUN: hlopt-opt %s -p 'jet-expand{func=f order=2}' --split-input-file | filecheck %s
// RUN: hlopt-opt %s --platform cpu -p 'jet-expand{func=f order=2},xla-cpu-stack-dots' --split-input-file | filecheck %s --check-prefix=STACK

// Linear ops apply themselves to each coefficient; the primal ops are kept.
// CHECK-LABEL: func.func @f_jet2
// CHECK-SAME: (%[[X:.*]]: tensor<3xf32>, %[[X1:.*]]: tensor<3xf32>, %[[X2:.*]]: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
// CHECK: %[[N:.*]] = stablehlo.negate %[[X]]
// CHECK: %[[N1:.*]] = stablehlo.negate %[[X1]]
// CHECK: %[[N2:.*]] = stablehlo.negate %[[X2]]
// CHECK: %[[B:.*]] = stablehlo.broadcast_in_dim %[[N]], dims = [1]
// CHECK: %[[B1:.*]] = stablehlo.broadcast_in_dim %[[N1]], dims = [1]
// CHECK: %[[B2:.*]] = stablehlo.broadcast_in_dim %[[N2]], dims = [1]
// CHECK: return %[[B]], %[[B1]], %[[B2]]
func.func @f(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.negate %x : tensor<3xf32>
  %1 = stablehlo.broadcast_in_dim %0, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}

// -----

// Zero family: floor has no series, so the add passes x's coefficients through
// and no op is built for the floor's (absent) coefficients.
// CHECK-LABEL: func.func @f_jet2
// CHECK-SAME: (%[[X:.*]]: tensor<3xf32>, %[[X1:.*]]: tensor<3xf32>, %[[X2:.*]]: tensor<3xf32>)
// CHECK: %[[F:.*]] = stablehlo.floor %[[X]]
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[X]], %[[F]]
// CHECK-NEXT: return %[[S]], %[[X1]], %[[X2]]
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.floor %x : tensor<3xf32>
  %1 = stablehlo.add %x, %0 : tensor<3xf32>
  return %1 : tensor<3xf32>
}

// -----

// Bilinear: the Cauchy product u0 w2 + u1 w1 + u2 w0; the constant operand has no
// series, so x * c costs one multiply per order.
// CHECK-LABEL: func.func @f_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3xf32>, %[[Y:[^:]*]]: tensor<3xf32>, %[[X1:[^:]*]]: tensor<3xf32>, %[[X2:[^:]*]]: tensor<3xf32>, %[[Y1:[^:]*]]: tensor<3xf32>, %[[Y2:[^:]*]]: tensor<3xf32>)
// CHECK: %[[C:.*]] = stablehlo.constant dense<2.5
// CHECK: %[[P:.*]] = stablehlo.multiply %[[X]], %[[C]]
// CHECK: %[[P1:.*]] = stablehlo.multiply %[[X1]], %[[C]]
// CHECK: %[[P2:.*]] = stablehlo.multiply %[[X2]], %[[C]]
// CHECK: %[[Q:.*]] = stablehlo.multiply %[[P]], %[[Y]]
// CHECK: %[[A:.*]] = stablehlo.multiply %[[P]], %[[Y1]]
// CHECK: %[[B:.*]] = stablehlo.multiply %[[P1]], %[[Y]]
// CHECK: %[[Q1:.*]] = stablehlo.add %[[A]], %[[B]]
// CHECK: %[[D:.*]] = stablehlo.multiply %[[P]], %[[Y2]]
// CHECK: %[[E:.*]] = stablehlo.multiply %[[P1]], %[[Y1]]
// CHECK: %[[F:.*]] = stablehlo.multiply %[[P2]], %[[Y]]
// CHECK: %[[G:.*]] = stablehlo.add %[[D]], %[[E]]
// CHECK: %[[Q2:.*]] = stablehlo.add %[[G]], %[[F]]
// CHECK: return %[[Q]], %[[Q1]], %[[Q2]]
func.func @f(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %c = stablehlo.constant dense<2.5> : tensor<3xf32>
  %0 = stablehlo.multiply %x, %c : tensor<3xf32>
  %1 = stablehlo.multiply %0, %y : tensor<3xf32>
  return %1 : tensor<3xf32>
}

// -----

// ODE recurrence: y = exp(x), y1 = x1 y0, y2 = (x1 y1) / 2 + x2 y0 (the j = k term of
// y_k = 1/k sum_j j x_j y_{k-j} is x_k y0, without a multiply by k and by 1/k).
// CHECK-LABEL: func.func @f_jet2
// CHECK-SAME: (%[[X:.*]]: tensor<f32>, %[[X1:.*]]: tensor<f32>, %[[X2:.*]]: tensor<f32>)
// CHECK: %[[Y:.*]] = stablehlo.exponential %[[X]]
// CHECK: %[[Y1:.*]] = stablehlo.multiply %[[X1]], %[[Y]]
// CHECK: %[[A:.*]] = stablehlo.multiply %[[X1]], %[[Y1]]
// CHECK: %[[HALF:.*]] = stablehlo.constant dense<5.0
// CHECK: %[[H:.*]] = stablehlo.multiply %[[A]], %[[HALF]]
// CHECK: %[[B:.*]] = stablehlo.multiply %[[X2]], %[[Y]]
// CHECK: %[[Y2:.*]] = stablehlo.add %[[H]], %[[B]]
// CHECK-NOT: stablehlo.constant dense<2.0
// CHECK: return %[[Y]], %[[Y1]], %[[Y2]]
func.func @f(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.exponential %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Coupled ODE: sine needs the cosine of the primal; the cosine series stops at order K-1.
// CHECK-LABEL: func.func @f_jet2
// CHECK: stablehlo.sine
// CHECK: stablehlo.cosine
// CHECK-COUNT-1: stablehlo.negate
// CHECK-NOT: stablehlo.negate
// CHECK: return
func.func @f(%x: tensor<f32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Composition (Faa di Bruno) for x^y with a constant exponent: the derivatives
// y (y-1) ... x^(y-m) / m!, masked where the falling factorial vanishes.
// CHECK-LABEL: func.func @f_jet2
// CHECK: %[[P:.*]] = stablehlo.power %arg0, %[[E:.*]] :
// CHECK: stablehlo.power %arg0
// CHECK: stablehlo.compare EQ
// CHECK: stablehlo.select
// CHECK: stablehlo.power %arg0
// CHECK: stablehlo.compare EQ
// CHECK: stablehlo.select
// CHECK: return %[[P]]
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %c = stablehlo.constant dense<3.0> : tensor<3xf32>
  %0 = stablehlo.power %x, %c : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// Ties in max average the tied terms, as JAX does.
// CHECK-LABEL: func.func @f_jet2
// CHECK: %[[GT:.*]] = stablehlo.compare GT, %arg0, %arg1
// CHECK: %[[EQ:.*]] = stablehlo.compare EQ, %arg0, %arg1
// CHECK: %[[S:.*]] = stablehlo.add %arg2, %arg4
// CHECK: %[[H:.*]] = stablehlo.multiply %[[S]]
// CHECK: %[[W:.*]] = stablehlo.select %[[GT]], %arg2, %arg4
// CHECK: stablehlo.select %[[EQ]], %[[H]], %[[W]]
func.func @f(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.maximum %x, %y : tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// Sharding annotations (GSPMD custom calls) are linear: each coefficient is annotated too.
// CHECK-LABEL: func.func @f_jet2
// CHECK: stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.custom_call @Sharding(%arg1) {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.custom_call @Sharding(%arg2) {mhlo.sharding = "{replicated}"}
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{replicated}"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// dot_general with a series on one side only (x @ constant): one dot_general per
// coefficient, which xla-cpu-stack-dots (the STACK run) makes one dot_general of the
// K coefficients stacked along a free dimension, then sliced apart (the primal's joins
// the products that share x with it).
// With series on both sides (x @ w) it is the Cauchy product.
// STACK: func.func @f_jet2(%[[X:[^:]*]]: tensor<3x4xf32>, %[[W:[^:]*]]: tensor<4x6xf32>, %[[X1:[^:]*]]: tensor<3x4xf32>, %[[X2:[^:]*]]: tensor<3x4xf32>, %[[W1:[^:]*]]: tensor<4x6xf32>, %[[W2:[^:]*]]: tensor<4x6xf32>)
// STACK: %[[C:.*]] = stablehlo.constant
// STACK: %[[S:.*]] = stablehlo.concatenate %[[X1]], %[[X2]], dim = 0 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<6x4xf32>
// STACK: %[[B:.*]] = stablehlo.dot_general %[[S]], %[[C]], contracting_dims = [1] x [0] : (tensor<6x4xf32>, tensor<4x6xf32>) -> tensor<6x6xf32>
// STACK: stablehlo.slice %[[B]] [0:3, 0:6]
// STACK: stablehlo.slice %[[B]] [3:6, 0:6]
// STACK: %[[T:.*]] = stablehlo.concatenate %[[C]], %[[W]], %[[W1]], dim = 1 : (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x18xf32>
// STACK: stablehlo.dot_general %[[X]], %[[T]], contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x18xf32>) -> tensor<3x18xf32>
// STACK: stablehlo.dot_general %[[X1]], %[[W]]
// STACK: stablehlo.dot_general %[[X]], %[[W2]]
// STACK: stablehlo.dot_general %[[X1]], %[[W1]]
// STACK: stablehlo.dot_general %[[X2]], %[[W]]
// STACK-NOT: stablehlo.dot_general
// STACK: return
// CHECK-LABEL: func.func @f_jet2
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3x4xf32>, %[[W:[^:]*]]: tensor<4x6xf32>, %[[X1:[^:]*]]: tensor<3x4xf32>, %[[X2:[^:]*]]: tensor<3x4xf32>, %[[W1:[^:]*]]: tensor<4x6xf32>, %[[W2:[^:]*]]: tensor<4x6xf32>)
// CHECK: %[[C:.*]] = stablehlo.constant
// CHECK: stablehlo.dot_general %[[X]], %[[C]]
// CHECK: stablehlo.dot_general %[[X1]], %[[C]]
// CHECK: stablehlo.dot_general %[[X2]], %[[C]]
// CHECK-NOT: stablehlo.concatenate
// CHECK: return
func.func @f(%x: tensor<3x4xf32>, %w: tensor<4x6xf32>) -> tensor<3x6xf32> {
  %c = stablehlo.constant dense<1.0> : tensor<4x6xf32>
  %0 = stablehlo.dot_general %x, %c, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x6xf32>) -> tensor<3x6xf32>
  %1 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x6xf32>) -> tensor<3x6xf32>
  %2 = stablehlo.add %0, %1 : tensor<3x6xf32>
  return %2 : tensor<3x6xf32>
}
