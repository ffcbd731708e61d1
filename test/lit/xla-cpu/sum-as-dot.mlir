// RUN: hlopt-opt %s --platform cpu -p xla-cpu-sum-as-dot --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-sum-as-dot --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-sum-as-dot > %t.none

// A sum over the leading axis (a collapsed jet's sum over its directions) becomes a
// product with a vector of ones.
// CHECK-LABEL: func.func @leading
// CHECK: %[[ONES:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<3xf32>
// CHECK: %[[S:.*]] = stablehlo.dot_general %[[ONES]], %arg0, contracting_dims = [0] x [0] : (tensor<3xf32>, tensor<3x4x5xf32>) -> tensor<4x5xf32>
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[S]]
func.func @leading(%x: tensor<3x4x5xf32>) -> tensor<4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3x4x5xf32>, tensor<f32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// A weighted sum: the product with the weights broadcast along the axis is the
// product with the weights, and the broadcast goes.
// CHECK-LABEL: func.func @weighted
// CHECK: %[[W:.*]] = stablehlo.constant dense<[2.000000e+00, 0.000000e+00, 5.000000e-01]> : tensor<3xf64>
// CHECK-NOT: stablehlo.broadcast_in_dim
// CHECK: %[[S:.*]] = stablehlo.dot_general %[[W]], %arg0, contracting_dims = [0] x [0] : (tensor<3xf64>, tensor<3x4xf64>) -> tensor<4xf64>
// CHECK-NOT: stablehlo.multiply
// CHECK: return %[[S]]
func.func @weighted(%x: tensor<3x4xf64>) -> tensor<4xf64> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f64>
  %w = stablehlo.constant dense<[2.0, 0.0, 0.5]> : tensor<3xf64>
  %wb = stablehlo.broadcast_in_dim %w, dims = [0] : (tensor<3xf64>) -> tensor<3x4xf64>
  %p = stablehlo.multiply %x, %wb : tensor<3x4xf64>
  %0 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf64>, tensor<f64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

// Complex weights come converted from real ones; the sum keeps its element type.
// CHECK-LABEL: func.func @complex
// CHECK: %[[W:.*]] = stablehlo.convert %{{.*}} : (tensor<2xf32>) -> tensor<2xcomplex<f32>>
// CHECK: stablehlo.dot_general %[[W]], %arg0, contracting_dims = [0] x [0] : (tensor<2xcomplex<f32>>, tensor<2x3xcomplex<f32>>) -> tensor<3xcomplex<f32>>
func.func @complex(%x: tensor<2x3xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
  %r0 = stablehlo.constant dense<0.0> : tensor<f32>
  %c0 = stablehlo.convert %r0 : (tensor<f32>) -> tensor<complex<f32>>
  %w = stablehlo.constant dense<[1.0, 3.0]> : tensor<2xf32>
  %wc = stablehlo.convert %w : (tensor<2xf32>) -> tensor<2xcomplex<f32>>
  %wb = stablehlo.broadcast_in_dim %wc, dims = [0] : (tensor<2xcomplex<f32>>) -> tensor<2x3xcomplex<f32>>
  %p = stablehlo.multiply %wb, %x : tensor<2x3xcomplex<f32>>
  %0 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<2x3xcomplex<f32>>, tensor<complex<f32>>) -> tensor<3xcomplex<f32>>
  return %0 : tensor<3xcomplex<f32>>
}

// -----

// A sum over an inner axis of more than 8 terms is the operand's product with ones
// contracting that axis; the other axes keep their order.
// CHECK-LABEL: func.func @inner
// CHECK: %[[ONES:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<9xf32>
// CHECK: %[[S:.*]] = stablehlo.dot_general %arg0, %[[ONES]], contracting_dims = [1] x [0] : (tensor<2x9x4x5xf32>, tensor<9xf32>) -> tensor<2x4x5xf32>
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[S]]
func.func @inner(%x: tensor<2x9x4x5xf32>) -> tensor<2x4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<2x9x4x5xf32>, tensor<f32>) -> tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// -----

// A sum of at most 8 terms over either directions axis of nested directions (rank 4:
// outer, inner, batch, width) of an elementwise product adds the product's slices: no
// dot_general, which would hold the whole product in memory (and, over the inner axis,
// a transposed copy of it), and no reduce.
// CHECK-LABEL: func.func @nested_inner
// CHECK: %[[P:.*]] = stablehlo.multiply %arg0, %arg1 : tensor<2x3x4x5xf32>
// CHECK-NOT: stablehlo.dot_general
// CHECK-NOT: stablehlo.reduce
// CHECK: %[[S0:.*]] = stablehlo.slice %[[P]] [0:2, 0:1, 0:4, 0:5]
// CHECK: %[[T0:.*]] = stablehlo.reshape %[[S0]] : (tensor<2x1x4x5xf32>) -> tensor<2x4x5xf32>
// CHECK: %[[S1:.*]] = stablehlo.slice %[[P]] [0:2, 1:2, 0:4, 0:5]
// CHECK: %[[T1:.*]] = stablehlo.reshape %[[S1]] : (tensor<2x1x4x5xf32>) -> tensor<2x4x5xf32>
// CHECK: %[[S2:.*]] = stablehlo.slice %[[P]] [0:2, 2:3, 0:4, 0:5]
// CHECK: %[[T2:.*]] = stablehlo.reshape %[[S2]] : (tensor<2x1x4x5xf32>) -> tensor<2x4x5xf32>
// CHECK: %[[A0:.*]] = stablehlo.add %[[T0]], %[[T1]] : tensor<2x4x5xf32>
// CHECK: %[[A1:.*]] = stablehlo.add %[[A0]], %[[T2]] : tensor<2x4x5xf32>
// CHECK-NOT: stablehlo.dot_general
// CHECK: return %[[A1]]
func.func @nested_inner(%x: tensor<2x3x4x5xf32>, %y: tensor<2x3x4x5xf32>) -> tensor<2x4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %p = stablehlo.multiply %x, %y : tensor<2x3x4x5xf32>
  %0 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<2x3x4x5xf32>, tensor<f32>) -> tensor<2x4x5xf32>
  return %0 : tensor<2x4x5xf32>
}

// CHECK-LABEL: func.func @nested_outer
// CHECK-NOT: stablehlo.dot_general
// CHECK-NOT: stablehlo.reduce
// CHECK: %[[S0:.*]] = stablehlo.slice %arg0 [0:1, 0:3, 0:4, 0:5]
// CHECK: %[[T0:.*]] = stablehlo.reshape %[[S0]] : (tensor<1x3x4x5xf32>) -> tensor<3x4x5xf32>
// CHECK: %[[S1:.*]] = stablehlo.slice %arg0 [1:2, 0:3, 0:4, 0:5]
// CHECK: %[[T1:.*]] = stablehlo.reshape %[[S1]] : (tensor<1x3x4x5xf32>) -> tensor<3x4x5xf32>
// CHECK: %[[A0:.*]] = stablehlo.add %[[T0]], %[[T1]] : tensor<3x4x5xf32>
// CHECK-NOT: stablehlo.dot_general
// CHECK: return %[[A0]]
func.func @nested_outer(%x: tensor<2x3x4x5xf32>) -> tensor<3x4x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<2x3x4x5xf32>, tensor<f32>) -> tensor<3x4x5xf32>
  return %0 : tensor<3x4x5xf32>
}

// A sum of at most 8 terms over an inner axis of any rank (the mean over a few particles
// in a vmapped function, [walkers, particles, width]) adds the operand's slices too: a
// dot would copy the product transposed.
// CHECK-LABEL: func.func @few_inner
// CHECK: %[[P:.*]] = stablehlo.multiply %arg0, %arg1 : tensor<6x4x5xf32>
// CHECK-NOT: stablehlo.dot_general
// CHECK: %[[S0:.*]] = stablehlo.slice %[[P]] [0:6, 0:1, 0:5]
// CHECK: %[[T0:.*]] = stablehlo.reshape %[[S0]] : (tensor<6x1x5xf32>) -> tensor<6x5xf32>
// CHECK-COUNT-3: stablehlo.slice %[[P]]
// CHECK: %[[A:.*]] = stablehlo.add
// CHECK: %[[B:.*]] = stablehlo.add %[[A]]
// CHECK: %[[C:.*]] = stablehlo.add %[[B]]
// CHECK-NOT: stablehlo.dot_general
// CHECK: return %[[C]]
func.func @few_inner(%x: tensor<6x4x5xf32>, %y: tensor<6x4x5xf32>) -> tensor<6x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %p = stablehlo.multiply %x, %y : tensor<6x4x5xf32>
  %0 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<6x4x5xf32>, tensor<f32>) -> tensor<6x5xf32>
  return %0 : tensor<6x5xf32>
}

// A weighted sum over the outer directions stays a product with the weights; a sum of
// 9 terms over them, a product with ones.
// CHECK-LABEL: func.func @nested_outer_kept
// CHECK: stablehlo.dot_general %{{.*}}, %arg0, contracting_dims = [0] x [0] : (tensor<2xf32>, tensor<2x3x4x5xf32>) -> tensor<3x4x5xf32>
// CHECK: stablehlo.dot_general %{{.*}}, %arg1, contracting_dims = [0] x [0] : (tensor<9xf32>, tensor<9x3x4x5xf32>) -> tensor<3x4x5xf32>
// CHECK-NOT: stablehlo.slice
func.func @nested_outer_kept(%x: tensor<2x3x4x5xf32>, %z: tensor<9x3x4x5xf32>) -> (tensor<3x4x5xf32>, tensor<3x4x5xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %w = stablehlo.constant dense<[2.0, 0.5]> : tensor<2xf32>
  %wb = stablehlo.broadcast_in_dim %w, dims = [0] : (tensor<2xf32>) -> tensor<2x3x4x5xf32>
  %p = stablehlo.multiply %x, %wb : tensor<2x3x4x5xf32>
  %0 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<2x3x4x5xf32>, tensor<f32>) -> tensor<3x4x5xf32>
  %1 = stablehlo.reduce(%z init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<9x3x4x5xf32>, tensor<f32>) -> tensor<3x4x5xf32>
  return %0, %1 : tensor<3x4x5xf32>, tensor<3x4x5xf32>
}

// -----

// Sums over a last axis of more than 8 terms, integer sums, sums from another init value and
// other reductions stay as they are.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: stablehlo.dot_general
// CHECK-COUNT-4: stablehlo.reduce
// CHECK-NOT: stablehlo.dot_general
func.func @kept(%x: tensor<3x4xf32>, %i: tensor<3x4xi32>, %r: tensor<3x16xf32>) -> (tensor<3xf32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %c1 = stablehlo.constant dense<1.0> : tensor<f32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %0 = stablehlo.reduce(%r init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<3x16xf32>, tensor<f32>) -> tensor<3xf32>
  %1 = stablehlo.reduce(%i init: %i0) applies stablehlo.add across dimensions = [0] : (tensor<3x4xi32>, tensor<i32>) -> tensor<4xi32>
  %2 = stablehlo.reduce(%x init: %c1) applies stablehlo.add across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
  %3 = stablehlo.reduce(%x init: %c0) applies stablehlo.maximum across dimensions = [0] : (tensor<3x4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0, %1, %2, %3 : tensor<3xf32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A sum over a last axis of at most 8 terms (a point's x, y, z) adds the operand's slices:
// YNNPACK's reduce fusion runs such short rows slowly, XLA:CPU fuses the adds with their operands.
// CHECK-LABEL: func.func @short_rows
// CHECK: %[[S0:.*]] = stablehlo.slice %arg0 [0:4096, 0:1]
// CHECK: %[[T0:.*]] = stablehlo.reshape %[[S0]] : (tensor<4096x1xf32>) -> tensor<4096xf32>
// CHECK-COUNT-2: stablehlo.slice %arg0
// CHECK: %[[A:.*]] = stablehlo.add %[[T0]]
// CHECK: %[[B:.*]] = stablehlo.add %[[A]]
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[B]]
func.func @short_rows(%x: tensor<4096x3xf32>) -> tensor<4096xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<4096x3xf32>, tensor<f32>) -> tensor<4096xf32>
  return %0 : tensor<4096xf32>
}

// -----

// An empty inner axis: no terms to add, so the product with (no) ones, which gives zeros.
// CHECK-LABEL: func.func @empty_inner
// CHECK: stablehlo.dot_general %arg0, %{{.*}}, contracting_dims = [1] x [0] : (tensor<3x0x5xf32>, tensor<0xf32>) -> tensor<3x5xf32>
// CHECK-NOT: stablehlo.reduce
func.func @empty_inner(%x: tensor<3x0x5xf32>) -> tensor<3x5xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<3x0x5xf32>, tensor<f32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// -----

// Opt-in, the KEEP prefix below (reduce-max-bytes=1048576 split-large-sums=true
// reduce-max-square-terms=24); by default every such sum is a product with ones and nothing is
// recorded.
// RUN: hlopt-opt %s --platform cpu -p 'xla-cpu-sum-as-dot{reduce-max-bytes=1048576 split-large-sums=true reduce-max-square-terms=24}' --split-input-file | filecheck %s --check-prefix=KEEP
// Kept: a sum over 12 leading terms of a 12x4096 operand (192 KiB, at most reduce-max-bytes)
// in a module whose reductions are then all ones YNNPACK's reduce fusion runs slowly: the
// pass records that the module is compiled without that fusion. The 24-term sum beside it
// (more than 16 terms) is summed within 2 runs of 12 consecutive terms by a reduce, then the
// 2 run sums by a product with ones. With reduce-max-bytes=0 the 12-term sum is summed within 2
// runs of 6 likewise; with split-large-sums=false too, both are products with ones and nothing is
// recorded.
// RUN: hlopt-opt %s --platform cpu -p 'xla-cpu-sum-as-dot{split-large-sums=true reduce-max-square-terms=24}' --split-input-file | filecheck %s --check-prefix=NOKEEP
// RUN: hlopt-opt %s --platform cpu -p 'xla-cpu-sum-as-dot{reduce-max-square-terms=24}' --split-input-file | filecheck %s --check-prefix=NORUNS
// Run again, the pass leaves its output as it is (the diff at the end of the file).
// RUN: hlopt-opt %s --platform cpu -p 'xla-cpu-sum-as-dot{reduce-max-bytes=1048576 split-large-sums=true reduce-max-square-terms=24}' --split-input-file > %t.once
// RUN: hlopt-opt %t.once --platform cpu -p 'xla-cpu-sum-as-dot{reduce-max-bytes=1048576 split-large-sums=true reduce-max-square-terms=24}' --split-input-file > %t.twice
// KEEP: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}}
// KEEP-LABEL: func.func @small_leading
// KEEP: stablehlo.reduce(%arg0 init: {{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<12x4096xf32>, tensor<f32>) -> tensor<4096xf32>
// KEEP: %[[B:.*]] = stablehlo.reshape %arg1 : (tensor<24x4096xf32>) -> tensor<2x12x4096xf32>
// KEEP: %[[P:.*]] = stablehlo.reduce(%[[B]] init: {{.*}}) applies stablehlo.add across dimensions = [1] : (tensor<2x12x4096xf32>, tensor<f32>) -> tensor<2x4096xf32>
// KEEP: %[[ONES:.*]] = stablehlo.constant dense<1.000000e+00> : tensor<2xf32>
// KEEP: stablehlo.dot_general %[[ONES]], %[[P]], contracting_dims = [0] x [0] : (tensor<2xf32>, tensor<2x4096xf32>) -> tensor<4096xf32>
// NOKEEP: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}}
// NOKEEP-LABEL: func.func @small_leading
// NOKEEP: stablehlo.reshape %arg0 : (tensor<12x4096xf32>) -> tensor<2x6x4096xf32>
// NOKEEP: stablehlo.reduce({{.*}}) applies stablehlo.add across dimensions = [1] : (tensor<2x6x4096xf32>, tensor<f32>) -> tensor<2x4096xf32>
// NOKEEP: stablehlo.dot_general {{.*}} : (tensor<2xf32>, tensor<2x4096xf32>) -> tensor<4096xf32>
// NOKEEP: stablehlo.reshape %arg1 : (tensor<24x4096xf32>) -> tensor<2x12x4096xf32>
// NORUNS-NOT: hlopt.compiler_options
// NORUNS-LABEL: func.func @small_leading
// NORUNS-NOT: stablehlo.reduce
// NORUNS: stablehlo.dot_general {{.*}}, %arg0, contracting_dims = [0] x [0] : (tensor<12xf32>, tensor<12x4096xf32>) -> tensor<4096xf32>
// NORUNS: stablehlo.dot_general {{.*}}, %arg1, contracting_dims = [0] x [0] : (tensor<24xf32>, tensor<24x4096xf32>) -> tensor<4096xf32>
// NORUNS-NOT: stablehlo.reduce
// NORUNS: return
func.func @small_leading(%x: tensor<12x4096xf32>, %y: tensor<24x4096xf32>) -> (tensor<4096xf32>, tensor<4096xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<12x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %1 = stablehlo.reduce(%y init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<24x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  return %0, %1 : tensor<4096xf32>, tensor<4096xf32>
}

// -----

// Summed within runs: the fewest runs that leave at most 16 terms each (50 terms: 5 runs of
// 10, not 2 of 25), and a larger operand above reduce-max-bytes (16 terms, 1 MiB + 64 KiB: 2
// runs of 8), in float64 too. 17 terms (prime, more than 16) and 289 = 17 x 17 have no split:
// products with ones. A weighted sum stays the product with its weights.
// KEEP: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}}
// KEEP-LABEL: func.func @runs
// KEEP: stablehlo.reshape %arg0 : (tensor<50x4096xf32>) -> tensor<5x10x4096xf32>
// KEEP: stablehlo.dot_general {{.*}} : (tensor<5xf32>, tensor<5x4096xf32>) -> tensor<4096xf32>
// KEEP: stablehlo.dot_general {{.*}}, %arg1, contracting_dims = [0] x [0] : (tensor<4xf64>, tensor<4x4096xf64>) -> tensor<4096xf64>
// KEEP: stablehlo.reshape %arg2 : (tensor<16x17408xf64>) -> tensor<2x8x17408xf64>
// KEEP: stablehlo.dot_general {{.*}} : (tensor<2xf64>, tensor<2x17408xf64>) -> tensor<17408xf64>
// KEEP: stablehlo.dot_general {{.*}}, %arg3, contracting_dims = [0] x [0] : (tensor<17xf32>, tensor<17x4096xf32>) -> tensor<4096xf32>
// KEEP: stablehlo.dot_general {{.*}}, %arg4, contracting_dims = [0] x [0] : (tensor<289xf32>, tensor<289x16xf32>) -> tensor<16xf32>
func.func @runs(%x: tensor<50x4096xf32>, %y: tensor<4x4096xf64>, %z: tensor<16x17408xf64>, %p: tensor<17x4096xf32>,
                %q: tensor<289x16xf32>) -> (tensor<4096xf32>, tensor<4096xf64>, tensor<17408xf64>, tensor<4096xf32>, tensor<16xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %d0 = stablehlo.constant dense<0.0> : tensor<f64>
  %w = stablehlo.constant dense<[2.0, 0.0, 0.5, 1.0]> : tensor<4xf64>
  %wb = stablehlo.broadcast_in_dim %w, dims = [0] : (tensor<4xf64>) -> tensor<4x4096xf64>
  %wy = stablehlo.multiply %y, %wb : tensor<4x4096xf64>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<50x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %1 = stablehlo.reduce(%wy init: %d0) applies stablehlo.add across dimensions = [0] : (tensor<4x4096xf64>, tensor<f64>) -> tensor<4096xf64>
  %2 = stablehlo.reduce(%z init: %d0) applies stablehlo.add across dimensions = [0] : (tensor<16x17408xf64>, tensor<f64>) -> tensor<17408xf64>
  %3 = stablehlo.reduce(%p init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<17x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %4 = stablehlo.reduce(%q init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<289x16xf32>, tensor<f32>) -> tensor<16xf32>
  return %0, %1, %2, %3, %4 : tensor<4096xf32>, tensor<4096xf64>, tensor<17408xf64>, tensor<4096xf32>, tensor<16xf32>
}

// -----

// Nested sums: a 9-term sum over an inner axis (a product with ones) feeds a 16-term
// leading-axis sum of a 16x256 operand (16 KiB), which stays a reduce, as decided before the
// walk, though the sum it reads was rewritten first (and changed its operand).
// KEEP: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}}
// KEEP-LABEL: func.func @nested_sums
// KEEP: %[[S:.*]] = stablehlo.dot_general %arg0, %{{.*}}, contracting_dims = [1] x [0] : (tensor<16x9x256xf32>, tensor<9xf32>) -> tensor<16x256xf32>
// KEEP-NEXT: stablehlo.reduce(%[[S]] init: %{{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<16x256xf32>, tensor<f32>) -> tensor<256xf32>
func.func @nested_sums(%x: tensor<16x9x256xf32>) -> tensor<256xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<16x9x256xf32>, tensor<f32>) -> tensor<16x256xf32>
  %1 = stablehlo.reduce(%0 init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<16x256xf32>, tensor<f32>) -> tensor<256xf32>
  return %1 : tensor<256xf32>
}

// -----

// Kept whatever its size: a sum of squares (a collapsed jet's sum over its directions of
// squared first coefficients) of at most reduce-max-square-terms (24) terms, here of a 3 MiB operand,
// which XLA:CPU then fuses into its consumer; the module is compiled without YNNPACK's reduce
// fusion. 25 squared terms, and 24 terms of a product of two values, are summed within runs;
// 24 squared float16 terms are a product with ones (which XLA:CPU accumulates in float32).
// With reduce-max-square-terms=0 the 24 squared terms are summed within 2 runs of 12 too.
// RUN: hlopt-opt %s --platform cpu -p 'xla-cpu-sum-as-dot{reduce-max-bytes=1048576 split-large-sums=true}' --split-input-file | filecheck %s --check-prefix=NOSQUARES
// KEEP: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}}
// KEEP-LABEL: func.func @squares
// KEEP: %[[SQ:.*]] = stablehlo.multiply %arg0, %arg0 : tensor<24x128x8x32xf32>
// KEEP: stablehlo.reduce(%[[SQ]] init: {{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<24x128x8x32xf32>, tensor<f32>) -> tensor<128x8x32xf32>
// KEEP: stablehlo.reshape {{.*}} : (tensor<25x4096xf32>) -> tensor<5x5x4096xf32>
// KEEP: stablehlo.reshape {{.*}} : (tensor<24x4096xf32>) -> tensor<2x12x4096xf32>
// KEEP: stablehlo.dot_general {{.*}} : (tensor<24xf16>, tensor<24x4096xf16>) -> tensor<4096xf16>
// KEEP-NOT: stablehlo.dot_general {{.*}} : (tensor<24xf32>, tensor<24x128x8x32xf32>)
// NOSQUARES-LABEL: func.func @squares
// NOSQUARES: stablehlo.reshape {{.*}} : (tensor<24x128x8x32xf32>) -> tensor<2x12x128x8x32xf32>
// NOSQUARES: stablehlo.reshape {{.*}} : (tensor<25x4096xf32>) -> tensor<5x5x4096xf32>
func.func @squares(%x: tensor<24x128x8x32xf32>, %y: tensor<25x4096xf32>, %p: tensor<24x4096xf32>, %q: tensor<24x4096xf32>,
                    %h: tensor<24x4096xf16>) -> (tensor<128x8x32xf32>, tensor<4096xf32>, tensor<4096xf32>, tensor<4096xf16>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %h0 = stablehlo.constant dense<0.0> : tensor<f16>
  %xx = stablehlo.multiply %x, %x : tensor<24x128x8x32xf32>
  %yy = stablehlo.multiply %y, %y : tensor<25x4096xf32>
  %pq = stablehlo.multiply %p, %q : tensor<24x4096xf32>
  %hh = stablehlo.multiply %h, %h : tensor<24x4096xf16>
  %0 = stablehlo.reduce(%xx init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<24x128x8x32xf32>, tensor<f32>) -> tensor<128x8x32xf32>
  %1 = stablehlo.reduce(%yy init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<25x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %2 = stablehlo.reduce(%pq init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<24x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %3 = stablehlo.reduce(%hh init: %h0) applies stablehlo.add across dimensions = [0] : (tensor<24x4096xf16>, tensor<f16>) -> tensor<4096xf16>
  return %0, %1, %2, %3 : tensor<128x8x32xf32>, tensor<4096xf32>, tensor<4096xf32>, tensor<4096xf16>
}

// -----

// Not summed within runs: complex and float16 sums (whose products with ones XLA:CPU accumulates
// in float32) and sums over a dynamically shaped operand (a kept 12-term sum beside them turns
// YNNPACK's reduce fusion off).
// KEEP-LABEL: func.func @not_in_runs
// KEEP: stablehlo.dot_general {{.*}}, %arg0, contracting_dims = [0] x [0] : (tensor<24xcomplex<f32>>, tensor<24x4096xcomplex<f32>>) -> tensor<4096xcomplex<f32>>
// KEEP: stablehlo.dot_general {{.*}}, %arg1, contracting_dims = [0] x [0] : (tensor<24xf16>, tensor<24x4096xf16>) -> tensor<4096xf16>
// KEEP: stablehlo.dot_general {{.*}}, %arg2, contracting_dims = [0] x [0] : (tensor<24xf32>, tensor<24x?xf32>) -> tensor<?xf32>
// KEEP-NOT: stablehlo.reshape
func.func @not_in_runs(%x: tensor<24x4096xcomplex<f32>>, %h: tensor<24x4096xf16>, %f: tensor<24x?xf32>,
                       %big: tensor<12x4096xf32>) -> (tensor<4096xcomplex<f32>>, tensor<4096xf16>, tensor<?xf32>, tensor<4096xf32>) {
  %r0 = stablehlo.constant dense<0.0> : tensor<f32>
  %h0 = stablehlo.constant dense<0.0> : tensor<f16>
  %c0 = stablehlo.convert %r0 : (tensor<f32>) -> tensor<complex<f32>>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<24x4096xcomplex<f32>>, tensor<complex<f32>>) -> tensor<4096xcomplex<f32>>
  %1 = stablehlo.reduce(%h init: %h0) applies stablehlo.add across dimensions = [0] : (tensor<24x4096xf16>, tensor<f16>) -> tensor<4096xf16>
  %2 = stablehlo.reduce(%f init: %r0) applies stablehlo.add across dimensions = [0] : (tensor<24x?xf32>, tensor<f32>) -> tensor<?xf32>
  %3 = stablehlo.reduce(%big init: %r0) applies stablehlo.add across dimensions = [0] : (tensor<12x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  return %0, %1, %2, %3 : tensor<4096xcomplex<f32>>, tensor<4096xf16>, tensor<?xf32>, tensor<4096xf32>
}

// -----

// Left as they are: a sum annotated with a sharding and frontend attributes, a sum over a
// dynamically sized dimension, and a float16 sum accumulated in float32 (its result's
// element type is not its operand's).
// CHECK-LABEL: func.func @left
// CHECK-NOT: stablehlo.dot_general
// CHECK: stablehlo.reduce(%arg0 {{.*}} {mhlo.frontend_attributes = {foo = "bar"}, mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.reduce(%arg1 {{.*}} : (tensor<?x4096xf32>, tensor<f32>) -> tensor<4096xf32>
// CHECK: stablehlo.reduce(%arg2 {{.*}} : (tensor<24x4096xf16>, tensor<f32>) -> tensor<4096xf32>
// CHECK-NOT: stablehlo.dot_general
func.func @left(%x: tensor<24x4096xf32>, %d: tensor<?x4096xf32>, %h: tensor<24x4096xf16>)
    -> (tensor<4096xf32>, tensor<4096xf32>, tensor<4096xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] {mhlo.frontend_attributes = {foo = "bar"}, mhlo.sharding = "{replicated}"} : (tensor<24x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %1 = stablehlo.reduce(%d init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<?x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %2 = stablehlo.reduce(%h init: %c0) across dimensions = [0] : (tensor<24x4096xf16>, tensor<f32>) -> tensor<4096xf32>
   reducer(%a: tensor<f32>, %b: tensor<f32>) {
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }
  return %0, %1, %2 : tensor<4096xf32>, tensor<4096xf32>, tensor<4096xf32>
}

// -----

// Not kept: beside a sum over long rows (1024 elements, which YNNPACK's reduce fusion runs
// faster) that outweighs it, the module keeps that fusion, which would run the leading sum
// slowly, so it becomes a product with ones and nothing is recorded.
// CHECK-NOT: hlopt.compiler_options
// KEEP-NOT: hlopt.compiler_options
// CHECK-LABEL: func.func @fusion_stays
// KEEP-LABEL: func.func @fusion_stays
// CHECK: stablehlo.dot_general {{.*}}, %arg0, contracting_dims = [0] x [0] : (tensor<12xf32>, tensor<12x4096xf32>) -> tensor<4096xf32>
// KEEP: stablehlo.dot_general {{.*}}, %arg0, contracting_dims = [0] x [0] : (tensor<12xf32>, tensor<12x4096xf32>) -> tensor<4096xf32>
// CHECK: stablehlo.reduce(%arg1 init: {{.*}}) applies stablehlo.add across dimensions = [1]
// KEEP: stablehlo.reduce(%arg1 init: {{.*}}) applies stablehlo.add across dimensions = [1]
func.func @fusion_stays(%x: tensor<12x4096xf32>, %rows: tensor<1024x1024xf32>) -> (tensor<4096xf32>, tensor<1024xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<12x4096xf32>, tensor<f32>) -> tensor<4096xf32>
  %1 = stablehlo.reduce(%rows init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<1024x1024xf32>, tensor<f32>) -> tensor<1024xf32>
  return %0, %1 : tensor<4096xf32>, tensor<1024xf32>
}

// -----

// An empty sum is not kept (nothing to keep), so nothing is recorded for it.
// CHECK-NOT: hlopt.compiler_options
// KEEP-NOT: hlopt.compiler_options
// CHECK-LABEL: func.func @empty_sum
// KEEP-LABEL: func.func @empty_sum
func.func @empty_sum(%x: tensor<3x0x5xf32>, %s: tensor<24x128x8x3xf32>) -> (tensor<3x5xf32>, tensor<24x128x8xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<3x0x5xf32>, tensor<f32>) -> tensor<3x5xf32>
  %1 = stablehlo.reduce(%s init: %c0) applies stablehlo.add across dimensions = [3] : (tensor<24x128x8x3xf32>, tensor<f32>) -> tensor<24x128x8xf32>
  return %0, %1 : tensor<3x5xf32>, tensor<24x128x8xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
// RUN: diff %t.once %t.twice
