// RUN: hlopt-opt %s --platform cpu -p xla-cpu-column-selects --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-column-selects --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-column-selects > %t.none

// A row mask broadcast over two index columns selects between the indices and the per-column
// padding: one select per column (the padding read from its constant), stacked.
// CHECK-LABEL: func.func @split
// CHECK: %[[C0:.*]] = stablehlo.slice %arg1 [0:5, 0:1]
// CHECK: %[[R0:.*]] = stablehlo.reshape %[[C0]] : (tensor<5x1xi32>) -> tensor<5xi32>
// CHECK: %[[F0:.*]] = stablehlo.constant dense<4> : tensor<i32>
// CHECK: %[[P0:.*]] = stablehlo.broadcast_in_dim %[[F0]], dims = [] : (tensor<i32>) -> tensor<5xi32>
// CHECK: stablehlo.select %arg0, %[[R0]], %[[P0]] : tensor<5xi1>, tensor<5xi32>
// CHECK: %[[C1:.*]] = stablehlo.slice %arg1 [0:5, 1:2]
// CHECK: stablehlo.constant dense<7> : tensor<i32>
// CHECK: stablehlo.select %arg0, {{.*}} : tensor<5xi1>, tensor<5xi32>
// CHECK: %[[OUT:.*]] = stablehlo.concatenate {{.*}}, dim = 1 : (tensor<5x1xi32>, tensor<5x1xi32>) -> tensor<5x2xi32>
// CHECK-NOT: tensor<5x2xi1>
// CHECK: return %[[OUT]]
func.func @split(%ok: tensor<5xi1>, %idx: tensor<5x2xi32>) -> tensor<5x2xi32> {
  %sizes = stablehlo.constant dense<[4, 7]> : tensor<2xi32>
  %fill = stablehlo.broadcast_in_dim %sizes, dims = [1] : (tensor<2xi32>) -> tensor<5x2xi32>
  %rows = stablehlo.broadcast_in_dim %ok, dims = [0] : (tensor<5xi1>) -> tensor<5x2xi1>
  %r = stablehlo.select %rows, %idx, %fill : tensor<5x2xi1>, tensor<5x2xi32>
  return %r : tensor<5x2xi32>
}

// -----

// An and-reduce over three columns becomes a chain of ands; its result feeds nothing else.
// CHECK-LABEL: func.func @chain
// CHECK-NOT: stablehlo.reduce
// CHECK: %[[A:.*]] = stablehlo.and {{.*}} : tensor<2x4xi1>
// CHECK: %[[B:.*]] = stablehlo.and %[[A]], {{.*}} : tensor<2x4xi1>
// CHECK: return %[[B]]
func.func @chain(%x: tensor<2x4x3xi1>) -> tensor<2x4xi1> {
  %t = stablehlo.constant dense<true> : tensor<i1>
  %r = stablehlo.reduce(%x init: %t) applies stablehlo.and across dimensions = [2] : (tensor<2x4x3xi1>, tensor<i1>) -> tensor<2x4xi1>
  return %r : tensor<2x4xi1>
}

// -----

// Padding unless every flag is 0 (squeeze): a gather from the stack [idx, fill] at the or of the
// flags read unsigned; no compare, select or reduce is left.
// CHECK-LABEL: func.func @any_nonzero
// CHECK: %[[U:.*]] = stablehlo.convert %arg0 : (tensor<5x1xi32>) -> tensor<5x1xui32>
// CHECK: %[[TABLE:.*]] = stablehlo.concatenate {{.*}}, dim = 0 : (tensor<1x5x1xi32>, tensor<1x5x1xi32>) -> tensor<2x5x1xi32>
// CHECK: %[[G:.*]] = "stablehlo.gather"(%[[TABLE]], {{.*}}) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], operand_batching_dims = [1], start_indices_batching_dims = [0], start_index_map = [0], index_vector_dim = 1>
// CHECK-NOT: stablehlo.select
// CHECK-NOT: stablehlo.compare
// CHECK-NOT: stablehlo.reduce
// CHECK: return %[[G]]
func.func @any_nonzero(%flags: tensor<5x1xi32>, %idx: tensor<5x1xi32>) -> tensor<5x1xi32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %z = stablehlo.broadcast_in_dim %c0, dims = [] : (tensor<i32>) -> tensor<5x1xi32>
  %nz = stablehlo.compare NE, %flags, %z : (tensor<5x1xi32>, tensor<5x1xi32>) -> tensor<5x1xi1>
  %f = stablehlo.constant dense<false> : tensor<i1>
  %any = stablehlo.reduce(%nz init: %f) applies stablehlo.or across dimensions = [1] : (tensor<5x1xi1>, tensor<i1>) -> tensor<5xi1>
  %rows = stablehlo.broadcast_in_dim %any, dims = [0] : (tensor<5xi1>) -> tensor<5x1xi1>
  %c6 = stablehlo.constant dense<6> : tensor<i32>
  %fill = stablehlo.broadcast_in_dim %c6, dims = [] : (tensor<i32>) -> tensor<5x1xi32>
  %r = stablehlo.select %rows, %fill, %idx : tensor<5x1xi1>, tensor<5x1xi32>
  return %r : tensor<5x1xi32>
}

// -----

// Left alone: float data (dense dims, not index columns), more than 8 columns, a mask that is
// not broadcast over the trailing dim only, and a sum-reduce.
// CHECK-LABEL: func.func @kept
// CHECK: stablehlo.select {{.*}} : tensor<5x2xi1>, tensor<5x2xf32>
// CHECK: stablehlo.select {{.*}} : tensor<5x9xi1>, tensor<5x9xi32>
// CHECK: stablehlo.select {{.*}} : tensor<2x5xi1>, tensor<2x5xi32>
// CHECK: stablehlo.reduce
// CHECK-NOT: stablehlo.concatenate
func.func @kept(%ok: tensor<5xi1>, %x: tensor<5x2xf32>, %i: tensor<5x9xi32>, %j: tensor<2x5xi32>, %s: tensor<5x3xi32>) -> (tensor<5x2xf32>, tensor<5x9xi32>, tensor<2x5xi32>, tensor<5xi32>) {
  %m2 = stablehlo.broadcast_in_dim %ok, dims = [0] : (tensor<5xi1>) -> tensor<5x2xi1>
  %zf = stablehlo.constant dense<0.0> : tensor<5x2xf32>
  %a = stablehlo.select %m2, %x, %zf : tensor<5x2xi1>, tensor<5x2xf32>
  %m9 = stablehlo.broadcast_in_dim %ok, dims = [0] : (tensor<5xi1>) -> tensor<5x9xi1>
  %zi = stablehlo.constant dense<0> : tensor<5x9xi32>
  %b = stablehlo.select %m9, %i, %zi : tensor<5x9xi1>, tensor<5x9xi32>
  %lead = stablehlo.broadcast_in_dim %ok, dims = [1] : (tensor<5xi1>) -> tensor<2x5xi1>
  %zj = stablehlo.constant dense<0> : tensor<2x5xi32>
  %c = stablehlo.select %lead, %j, %zj : tensor<2x5xi1>, tensor<2x5xi32>
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %d = stablehlo.reduce(%s init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<5x3xi32>, tensor<i32>) -> tensor<5xi32>
  return %a, %b, %c, %d : tensor<5x2xf32>, tensor<5x9xi32>, tensor<2x5xi32>, tensor<5xi32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
