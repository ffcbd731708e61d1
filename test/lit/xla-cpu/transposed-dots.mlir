// RUN: hlopt-opt %s --platform cpu -p xla-cpu-transposed-dots --split-input-file | filecheck %s
// RUN: hlopt-opt %s --platform cpu -p 'xla-cpu-transposed-dots{swap=never}' --split-input-file | filecheck %s --check-prefix=NEVER
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-transposed-dots --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-transposed-dots > %t.none

// A^T B of batched 8x8 matrices (the lhs contracts its rows): the lhs is transposed, the two
// batch dimensions joined into one, and the product reshaped back; the precision is kept.
// CHECK-LABEL: func.func @atb
// CHECK: %[[AT:.*]] = stablehlo.transpose %arg0, dims = [0, 1, 3, 2] : (tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32>
// CHECK: %[[A:.*]] = stablehlo.reshape %[[AT]] : (tensor<24x128x8x8xf32>) -> tensor<3072x8x8xf32>
// CHECK: %[[B:.*]] = stablehlo.reshape %arg1 : (tensor<24x128x8x8xf32>) -> tensor<3072x8x8xf32>
// CHECK: %[[P:.*]] = stablehlo.dot_general %[[A]], %[[B]], batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [HIGHEST, HIGHEST] : (tensor<3072x8x8xf32>, tensor<3072x8x8xf32>) -> tensor<3072x8x8xf32>
// CHECK: %[[R:.*]] = stablehlo.reshape %[[P]] : (tensor<3072x8x8xf32>) -> tensor<24x128x8x8xf32>
// CHECK: return %[[R]]
func.func @atb(%a: tensor<24x128x8x8xf32>, %b: tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2], precision = [HIGHEST, HIGHEST] : (tensor<24x128x8x8xf32>, tensor<24x128x8x8xf32>) -> tensor<24x128x8x8xf32>
  return %0 : tensor<24x128x8x8xf32>
}

// -----

// One batch dimension (128) is split into its smallest prime factor and the rest (2 x 64);
// the rhs, whose batch dimension does not lead, is transposed to (batch, contracting, free)
// with its two free dimensions joined.
// CHECK-LABEL: func.func @single
// CHECK: %[[AT:.*]] = stablehlo.transpose %arg0, dims = [0, 2, 1] : (tensor<128x8x6xf64>) -> tensor<128x6x8xf64>
// CHECK: %[[A:.*]] = stablehlo.reshape %[[AT]] : (tensor<128x6x8xf64>) -> tensor<2x64x6x8xf64>
// CHECK: %[[BT:.*]] = stablehlo.transpose %arg1, dims = [1, 2, 0, 3] : (tensor<6x128x8x16xf64>) -> tensor<128x8x6x16xf64>
// CHECK: %[[B:.*]] = stablehlo.reshape %[[BT]] : (tensor<128x8x6x16xf64>) -> tensor<2x64x8x96xf64>
// CHECK: %[[P:.*]] = stablehlo.dot_general %[[A]], %[[B]], batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<2x64x6x8xf64>, tensor<2x64x8x96xf64>) -> tensor<2x64x6x96xf64>
// CHECK: stablehlo.reshape %[[P]] : (tensor<2x64x6x96xf64>) -> tensor<128x6x6x16xf64>
func.func @single(%a: tensor<128x8x6xf64>, %b: tensor<6x128x8x16xf64>) -> tensor<128x6x6x16xf64> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [1], contracting_dims = [1] x [2] : (tensor<128x8x6xf64>, tensor<6x128x8x16xf64>) -> tensor<128x6x6x16xf64>
  return %0 : tensor<128x6x6x16xf64>
}

// -----

// Kept: operands in YNNPACK's order (the rhs (batch, k, n) or (batch, n, k)), a prime batch,
// a matrix-vector product (m = 1), matrices all below 8 (xla-cpu-small-dots), no batch
// dimension, and float16.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: stablehlo.transpose
// CHECK-NOT: stablehlo.reshape
// CHECK-COUNT-7: stablehlo.dot_general
// CHECK-NOT: stablehlo.transpose
// CHECK-NOT: stablehlo.reshape
func.func @kept(%a: tensor<16x8x8xf32>, %b: tensor<16x8x8xf32>, %p: tensor<127x8x8xf32>, %v: tensor<16x8x1xf32>, %s: tensor<16x4x4xf32>, %c: tensor<8x8xf32>, %h: tensor<16x8x8xf16>) -> (tensor<16x8x8xf32>, tensor<16x8x8xf32>, tensor<127x8x8xf32>, tensor<16x1x8xf32>, tensor<16x4x4xf32>, tensor<8x8xf32>, tensor<16x8x8xf16>) {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<16x8x8xf32>, tensor<16x8x8xf32>) -> tensor<16x8x8xf32>
  %1 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<16x8x8xf32>, tensor<16x8x8xf32>) -> tensor<16x8x8xf32>
  %2 = stablehlo.dot_general %p, %p, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<127x8x8xf32>, tensor<127x8x8xf32>) -> tensor<127x8x8xf32>
  %3 = stablehlo.dot_general %v, %b, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<16x8x1xf32>, tensor<16x8x8xf32>) -> tensor<16x1x8xf32>
  %4 = stablehlo.dot_general %s, %s, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<16x4x4xf32>, tensor<16x4x4xf32>) -> tensor<16x4x4xf32>
  %5 = stablehlo.dot_general %c, %c, contracting_dims = [0] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %6 = stablehlo.dot_general %h, %h, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<16x8x8xf16>, tensor<16x8x8xf16>) -> tensor<16x8x8xf16>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<16x8x8xf32>, tensor<16x8x8xf32>, tensor<127x8x8xf32>, tensor<16x1x8xf32>, tensor<16x4x4xf32>, tensor<8x8xf32>, tensor<16x8x8xf16>
}

// -----

// Kept: a dynamic dimension (no static reshape joins it).
// CHECK-LABEL: func.func @dynamic
// CHECK-NOT: stablehlo.reshape
// CHECK: stablehlo.dot_general %arg0, %arg1, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2]
func.func @dynamic(%a: tensor<?x128x8x8xf32>, %b: tensor<?x128x8x8xf32>) -> tensor<?x128x8x8xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2] : (tensor<?x128x8x8xf32>, tensor<?x128x8x8xf32>) -> tensor<?x128x8x8xf32>
  return %0 : tensor<?x128x8x8xf32>
}

// -----

// Kept: static operands with a dynamically shaped result.
// CHECK-LABEL: func.func @dynamic_result
// CHECK-NOT: stablehlo.reshape
// CHECK: stablehlo.dot_general %arg0, %arg1
func.func @dynamic_result(%a: tensor<4x8x8xf32>, %b: tensor<4x8x8xf32>) -> tensor<?x8x8xf32> {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<4x8x8xf32>, tensor<4x8x8xf32>) -> tensor<?x8x8xf32>
  return %0 : tensor<?x8x8xf32>
}

// -----

// A weight gradient x^T g of a wide x and a narrow g (both contracting their leading
// dimensions): the operands are swapped, so that XLA copies g (18x768x6) in YNNPACK's order
// and not x (18x768x32), and the 6x32 product is transposed back behind a reshape (which XLA
// does not fold into the dot); the precision follows its operand.
// CHECK-LABEL: func.func @gradient
// CHECK: %[[P:.*]] = stablehlo.dot_general %arg1, %arg0, contracting_dims = [0, 1] x [0, 1], precision = [HIGHEST, DEFAULT] : (tensor<18x768x6xf32>, tensor<18x768x32xf32>) -> tensor<6x32xf32>
// CHECK: %[[J:.*]] = stablehlo.reshape %[[P]] : (tensor<6x32xf32>) -> tensor<1x6x32x1xf32>
// CHECK: %[[T:.*]] = stablehlo.transpose %[[J]], dims = [0, 2, 1, 3] : (tensor<1x6x32x1xf32>) -> tensor<1x32x6x1xf32>
// CHECK: %[[D:.*]] = stablehlo.reshape %[[T]] : (tensor<1x32x6x1xf32>) -> tensor<32x6xf32>
// CHECK: return %[[D]]
// With swap=never the order is kept (XLA copies x).
// NEVER-LABEL: func.func @gradient
// NEVER: stablehlo.dot_general %arg0, %arg1, contracting_dims = [0, 1] x [0, 1]
// NEVER-NOT: stablehlo.transpose
// NEVER: return
func.func @gradient(%x: tensor<18x768x32xf32>, %g: tensor<18x768x6xf32>) -> tensor<32x6xf32> {
  %0 = stablehlo.dot_general %x, %g, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, HIGHEST] : (tensor<18x768x32xf32>, tensor<18x768x6xf32>) -> tensor<32x6xf32>
  return %0 : tensor<32x6xf32>
}

// -----

// Batched, with two free dimensions on the lhs: swapped, then arranged (the batch of 6 split
// into 2 x 3), and the (batch, rhs free, lhs free) product transposed back to (batch, lhs free,
// rhs free), its free dimensions joined.
// CHECK-LABEL: func.func @batched_gradient
// CHECK: %[[GT:.*]] = stablehlo.transpose %arg1, dims = [0, 2, 1] : (tensor<6x64x2xf64>) -> tensor<6x2x64xf64>
// CHECK: %[[G:.*]] = stablehlo.reshape %[[GT]] : (tensor<6x2x64xf64>) -> tensor<2x3x2x64xf64>
// CHECK: %[[X:.*]] = stablehlo.reshape %arg0 : (tensor<6x64x8x12xf64>) -> tensor<2x3x64x96xf64>
// CHECK: %[[P:.*]] = stablehlo.dot_general %[[G]], %[[X]], batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<2x3x2x64xf64>, tensor<2x3x64x96xf64>) -> tensor<2x3x2x96xf64>
// CHECK: %[[R:.*]] = stablehlo.reshape %[[P]] : (tensor<2x3x2x96xf64>) -> tensor<6x2x8x12xf64>
// CHECK: %[[J:.*]] = stablehlo.reshape %[[R]] : (tensor<6x2x8x12xf64>) -> tensor<6x2x96x1xf64>
// CHECK: %[[T:.*]] = stablehlo.transpose %[[J]], dims = [0, 2, 1, 3] : (tensor<6x2x96x1xf64>) -> tensor<6x96x2x1xf64>
// CHECK: %[[D:.*]] = stablehlo.reshape %[[T]] : (tensor<6x96x2x1xf64>) -> tensor<6x8x12x2xf64>
// CHECK: return %[[D]]
func.func @batched_gradient(%x: tensor<6x64x8x12xf64>, %g: tensor<6x64x2xf64>) -> tensor<6x8x12x2xf64> {
  %0 = stablehlo.dot_general %x, %g, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<6x64x8x12xf64>, tensor<6x64x2xf64>) -> tensor<6x8x12x2xf64>
  return %0 : tensor<6x8x12x2xf64>
}

// -----

// Kept: the same narrow g, but x already in YNNPACK's lhs order (it contracts its last
// dimension), and a square weight gradient (swapping copies as much).
// CHECK-LABEL: func.func @gradient_kept
// CHECK-NOT: stablehlo.transpose
// CHECK: stablehlo.dot_general %arg0, %arg1
// CHECK: stablehlo.dot_general %arg2, %arg2
// CHECK-NOT: stablehlo.transpose
func.func @gradient_kept(%x: tensor<32x768xf32>, %g: tensor<768x6xf32>, %s: tensor<768x32xf32>) -> (tensor<32x6xf32>, tensor<32x32xf32>) {
  %0 = stablehlo.dot_general %x, %g, contracting_dims = [1] x [0] : (tensor<32x768xf32>, tensor<768x6xf32>) -> tensor<32x6xf32>
  %1 = stablehlo.dot_general %s, %s, contracting_dims = [0] x [0] : (tensor<768x32xf32>, tensor<768x32xf32>) -> tensor<32x32xf32>
  return %0, %1 : tensor<32x6xf32>, tensor<32x32xf32>
}

// -----

// Kept: a wide x and a narrow g batched over a prime 7, which the swapped operands leave out of
// YNNPACK's order too (no batch split joins it).
// CHECK-LABEL: func.func @prime_gradient
// CHECK-NOT: stablehlo.transpose
// CHECK: stablehlo.dot_general %arg0, %arg1
// CHECK-NOT: stablehlo.transpose
func.func @prime_gradient(%x: tensor<7x64x32xf32>, %g: tensor<7x64x2xf32>) -> tensor<7x32x2xf32> {
  %0 = stablehlo.dot_general %x, %g, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<7x64x32xf32>, tensor<7x64x2xf32>) -> tensor<7x32x2xf32>
  return %0 : tensor<7x32x2xf32>
}

// -----

// Kept: an empty product (nothing to compute), a result type with an encoding (the reshapes
// would drop it), and batch dimensions whose joined size is past int64.
// CHECK-LABEL: func.func @edges
// CHECK-NOT: stablehlo.transpose
// CHECK-NOT: stablehlo.reshape
// CHECK-COUNT-3: stablehlo.dot_general
// CHECK-NOT: stablehlo.transpose
// CHECK-NOT: stablehlo.reshape
func.func @edges(%a: tensor<0x8x16xf32>, %b: tensor<0x4x16xf32>, %x: tensor<18x768x32xf32>, %g: tensor<18x768x6xf32>, %h: tensor<4294967296x4294967296x16x8xf32>) -> (tensor<0x8x4xf32>, tensor<32x6xf32, #stablehlo.bounds<?, ?>>, tensor<4294967296x4294967296x8x8xf32>) {
  %0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<0x8x16xf32>, tensor<0x4x16xf32>) -> tensor<0x8x4xf32>
  %1 = stablehlo.dot_general %x, %g, contracting_dims = [0, 1] x [0, 1] : (tensor<18x768x32xf32>, tensor<18x768x6xf32>) -> tensor<32x6xf32, #stablehlo.bounds<?, ?>>
  %2 = stablehlo.dot_general %h, %h, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2] : (tensor<4294967296x4294967296x16x8xf32>, tensor<4294967296x4294967296x16x8xf32>) -> tensor<4294967296x4294967296x8x8xf32>
  return %0, %1, %2 : tensor<0x8x4xf32>, tensor<32x6xf32, #stablehlo.bounds<?, ?>>, tensor<4294967296x4294967296x8x8xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
