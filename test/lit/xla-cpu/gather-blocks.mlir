// RUN: hlopt-opt %s --split-input-file --platform cpu -p xla-cpu-gather-blocks | filecheck %s
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-gather-blocks | filecheck %s --check-prefix=OFF
// RUN: hlopt-opt %s --split-input-file --platform tpu -p xla-cpu-gather-blocks | filecheck %s --check-prefix=OFF

// SpMM as lower-bcoo emits it (20000 entries, rows of 64 floats): blocks of 1 MiB / 256 B =
// 4096 entries, 4 in the loop and the last 3616 after it, each a gather, product and scatter
// into the running sum.
// CHECK-LABEL: func.func @spmm
// CHECK: stablehlo.while
// CHECK: stablehlo.compare LT, %{{.*}}, %[[TRIPS:.*]] :
// CHECK: stablehlo.dynamic_slice %arg1, %{{.*}}, sizes = [4096, 2]
// CHECK: "stablehlo.gather"(%arg2, %{{.*}}) {{.*}} -> tensor<4096x64xf32>
// CHECK: "stablehlo.scatter"(%iterArg
// CHECK: }) : (tensor<4000x64xf32>, tensor<4096x1xi32>, tensor<4096x64xf32>)
// CHECK: "stablehlo.gather"(%arg2, %{{.*}}) {{.*}} -> tensor<3616x64xf32>
// CHECK: %[[LAST:.*]] = "stablehlo.scatter"
// CHECK-NOT: tensor<20000x64xf32>
// CHECK: return %[[LAST]]
// OFF-LABEL: func.func @spmm
// OFF-NOT: stablehlo.while
// OFF: tensor<20000x64xf32>
func.func @spmm(%data: tensor<20000xf32>, %indices: tensor<20000x2xi32>, %x: tensor<5000x64xf32>) -> tensor<4000x64xf32> {
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %cols = stablehlo.slice %indices [0:20000, 1:2] : (tensor<20000x2xi32>) -> tensor<20000x1xi32>
  %g = "stablehlo.gather"(%x, %cols) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<5000x64xf32>, tensor<20000x1xi32>) -> tensor<20000x64xf32>
  %d = stablehlo.broadcast_in_dim %data, dims = [0] : (tensor<20000xf32>) -> tensor<20000x64xf32>
  %p = stablehlo.multiply %d, %g : tensor<20000x64xf32>
  %zeros = stablehlo.broadcast_in_dim %zero, dims = [] : (tensor<f32>) -> tensor<4000x64xf32>
  %rows = stablehlo.slice %indices [0:20000, 0:1] : (tensor<20000x2xi32>) -> tensor<20000x1xi32>
  %s = "stablehlo.scatter"(%zeros, %rows, %p) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %sum = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %sum : tensor<f32>
  }) : (tensor<4000x64xf32>, tensor<20000x1xi32>, tensor<20000x64xf32>) -> tensor<4000x64xf32>
  return %s : tensor<4000x64xf32>
}

// -----

// A sum over the gathered rows (a product contracting every sparse dim): the loop carries the
// partial sum.
// CHECK-LABEL: func.func @summed
// CHECK: %[[W:.*]]:2 = stablehlo.while
// CHECK: stablehlo.reduce({{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<4096x64xf32>
// CHECK: stablehlo.add %iterArg
// CHECK: stablehlo.reduce({{.*}}) applies stablehlo.add across dimensions = [0] : (tensor<3616x64xf32>
// CHECK: %[[OUT:.*]] = stablehlo.add %[[W]]#1
// CHECK: return %[[OUT]]
func.func @summed(%cols: tensor<20000x1xi32>, %x: tensor<5000x64xf32>) -> tensor<64xf32> {
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %g = "stablehlo.gather"(%x, %cols) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<5000x64xf32>, tensor<20000x1xi32>) -> tensor<20000x64xf32>
  %r = stablehlo.reduce(%g init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<20000x64xf32>, tensor<f32>) -> tensor<64xf32>
  return %r : tensor<64xf32>
}

// -----

// SDDMM: two gathered rows of 64 floats a value; the loop writes each block of the result.
// CHECK-LABEL: func.func @sddmm
// CHECK: stablehlo.while
// CHECK: stablehlo.dot_general {{.*}} -> tensor<2048xf32>
// CHECK: stablehlo.dynamic_update_slice %iterArg
// CHECK: stablehlo.dot_general {{.*}} -> tensor<1568xf32>
// CHECK: %[[OUT:.*]] = stablehlo.dynamic_update_slice
// CHECK: return %[[OUT]]
func.func @sddmm(%rows: tensor<20000x1xi32>, %cols: tensor<20000x1xi32>, %a: tensor<4000x64xf32>, %bt: tensor<5000x64xf32>) -> tensor<20000xf32> {
  %ga = "stablehlo.gather"(%a, %rows) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<4000x64xf32>, tensor<20000x1xi32>) -> tensor<20000x64xf32>
  %gb = "stablehlo.gather"(%bt, %cols) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<5000x64xf32>, tensor<20000x1xi32>) -> tensor<20000x64xf32>
  %p = stablehlo.dot_general %ga, %gb, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<20000x64xf32>, tensor<20000x64xf32>) -> tensor<20000xf32>
  return %p : tensor<20000xf32>
}

// -----

// Fewer entries than two blocks: left as it is.
// CHECK-LABEL: func.func @small
// CHECK-NOT: stablehlo.while
// CHECK: "stablehlo.gather"{{.*}} -> tensor<5000x64xf32>
func.func @small(%cols: tensor<5000x1xi32>, %x: tensor<5000x64xf32>) -> tensor<64xf32> {
  %zero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %g = "stablehlo.gather"(%x, %cols) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, 64>}> : (tensor<5000x64xf32>, tensor<5000x1xi32>) -> tensor<5000x64xf32>
  %r = stablehlo.reduce(%g init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<5000x64xf32>, tensor<f32>) -> tensor<64xf32>
  return %r : tensor<64xf32>
}
