// RUN: hlopt-opt %s --platform cpu --split-input-file -p 'xla-cpu-sparse-kernels' | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-sparse-kernels --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-sparse-kernels > %t.none

// Row-sorted SpMM: one kernel call, no gather or scatter.
// CHECK-LABEL: func.func @spmm
// CHECK: %[[R:.*]] = stablehlo.custom_call @hlopt_bcoo_spmm(%arg0, %arg1, %arg2) {api_version = 4 : i32, backend_config = {}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT: return %[[R]]
// Without a CPU target (hlopt-opt's default), the annotation stays for lower-bcoo.
func.func @spmm(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %x: tensor<5x3xf32>) -> tensor<4x3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = true}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// SpMV in float64.
// CHECK-LABEL: func.func @spmv
// CHECK: stablehlo.custom_call @hlopt_bcoo_spmm(%arg0, %arg1, %arg2) {{.*}} : (tensor<6xf64>, tensor<6x2xi32>, tensor<5xf64>) -> tensor<4xf64>
func.func @spmv(%data: tensor<6xf64>, %indices: tensor<6x2xi32>, %x: tensor<5xf64>) -> tensor<4xf64> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf64>, tensor<6x2xi32>, tensor<5xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

// -----

// Not rewritten: rows not known sorted, A^T @ x (contracting the rows), int64 indices, mixed types.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: hlopt_bcoo_spmm
// CHECK-COUNT-4: stablehlo.custom_call @hlopt.bcoo.dot_general(
// CHECK-NOT: hlopt_bcoo_spmm
func.func @kept(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %x: tensor<5xf32>, %y: tensor<4xf32>, %i64: tensor<6x2xi64>, %x64: tensor<5xf64>) -> (tensor<4xf32>, tensor<5xf32>, tensor<4xf32>, tensor<4xf64>) {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5xf32>) -> tensor<4xf32>
  %1 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %y) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 0>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<4xf32>) -> tensor<5xf32>
  %2 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %i64, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi64>, tensor<5xf32>) -> tensor<4xf32>
  %3 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x64) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5xf64>) -> tensor<4xf64>
  return %0, %1, %2, %3 : tensor<4xf32>, tensor<5xf32>, tensor<4xf32>, tensor<4xf64>
}

// -----

// SDDMM: Q is transposed so the kernel reads both factors by rows.
// CHECK-LABEL: func.func @sddmm
// CHECK: %[[QT:.*]] = stablehlo.transpose %arg1, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
// CHECK: stablehlo.custom_call @hlopt_bcoo_sddmm(%arg0, %[[QT]], %arg2) {api_version = 4 : i32, backend_config = {}} : (tensor<4x3xf32>, tensor<5x3xf32>, tensor<6x2xi32>) -> tensor<6xf32>
func.func @sddmm(%p: tensor<4x3xf32>, %q: tensor<3x5xf32>, %indices: tensor<6x2xi32>) -> tensor<6xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general_sampled(%p, %q, %indices) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<6x2xi32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// A product inside a function an hlopt.vjp annotation differentiates stays for lower-bcoo.
// CHECK-LABEL: func.func @under_vjp
// CHECK: stablehlo.custom_call @hlopt.vjp
// CHECK-LABEL: func.func private @body
// CHECK: stablehlo.custom_call @hlopt.bcoo.dot_general(
func.func @under_vjp(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %x: tensor<5xf32>, %ct: tensor<4xf32>) -> tensor<6xf32> {
  %0 = stablehlo.custom_call @hlopt.vjp(%data, %indices, %x, %ct) {api_version = 4 : i32, backend_config = {}, called_computations = [@body]} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5xf32>, tensor<4xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}
func.func private @body(%data: tensor<6xf32>, %indices: tensor<6x2xi32>, %x: tensor<5xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %x) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6x2xi32>, tensor<5xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// BCSR SpMM and SpMV: one hlopt_csr_spmm call each, the operands as they are.
// CHECK-LABEL: func.func @csr
// CHECK: %[[A:.*]] = stablehlo.custom_call @hlopt_csr_spmm(%arg0, %arg1, %arg2, %arg3) {api_version = 4 : i32, backend_config = {}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
// CHECK: %[[B:.*]] = stablehlo.custom_call @hlopt_csr_spmm(%arg0, %arg1, %arg2, %arg4) {api_version = 4 : i32, backend_config = {}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5xf32>) -> tensor<4xf32>
// CHECK-NEXT: return %[[A]], %[[B]]
func.func @csr(%data: tensor<6xf32>, %indices: tensor<6xi32>, %indptr: tensor<5xi32>, %x: tensor<5x3xf32>, %v: tensor<5xf32>) -> (tensor<4x3xf32>, tensor<4xf32>) {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {indices_sorted = true, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5x3xf32>) -> tensor<4x3xf32>
  %1 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4x3xf32>, tensor<4xf32>
}

// -----

// Not rewritten: int64 indices, mixed types, complex (the kernel takes f32 or f64, i32).
// CHECK-LABEL: func.func @csr_kept
// CHECK-NOT: hlopt_csr_spmm
// CHECK-COUNT-3: stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(
// CHECK-NOT: hlopt_csr_spmm
func.func @csr_kept(%data: tensor<6xf32>, %i64: tensor<6xi64>, %p64: tensor<5xi64>, %indices: tensor<6xi32>, %indptr: tensor<5xi32>, %x: tensor<5xf32>, %x64: tensor<5xf64>, %c: tensor<6xcomplex<f32>>) -> (tensor<4xf32>, tensor<4xf64>, tensor<4xcomplex<f32>>) {
  %0 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %i64, %p64, %x) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<6xf32>, tensor<6xi64>, tensor<5xi64>, tensor<5xf32>) -> tensor<4xf32>
  %1 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%data, %indices, %indptr, %x64) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<6xf32>, tensor<6xi32>, tensor<5xi32>, tensor<5xf64>) -> tensor<4xf64>
  %2 = stablehlo.custom_call @hlopt.bcoo.bcsr_dot_general(%c, %indices, %indptr, %x) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<6xcomplex<f32>>, tensor<6xi32>, tensor<5xi32>, tensor<5xf32>) -> tensor<4xcomplex<f32>>
  return %0, %1, %2 : tensor<4xf32>, tensor<4xf64>, tensor<4xcomplex<f32>>
}

// -----

// SpGEMM of two matrices: the count phase, then the fill phase reading its counts (one count a run
// of 64 rows: 1 for 4 rows). The rhs contracts its dim 1: its index columns are swapped first;
// the i32 data become the f32 result's.
// CHECK-LABEL: func.func @spgemm
// CHECK-NOT: hlopt.bcoo
// CHECK: %[[RI:.*]] = stablehlo.reverse %arg3, dims = [1] : tensor<4x2xi32>
// CHECK: %[[RD:.*]] = stablehlo.convert %arg2 : (tensor<4xi32>) -> tensor<4xf32>
// CHECK: %[[N:.*]] = stablehlo.custom_call @hlopt_spgemm_count(%arg1, %[[RI]]) {{.*}}backend_config = {cols = 3 : i64, inner = 5 : i64, rows = 4 : i64}} : (tensor<3x2xi32>, tensor<4x2xi32>) -> tensor<1xi32>
// CHECK: stablehlo.custom_call @hlopt_spgemm_fill(%{{.*}}, %arg1, %[[RD]], %[[RI]], %[[N]]) {{.*}} -> (tensor<12xf32>, tensor<12x2xi32>)
func.func @spgemm(%ld: tensor<3xf32>, %li: tensor<3x2xi32>, %rd: tensor<4xi32>, %ri: tensor<4x2xi32>) -> (tensor<12xf32>, tensor<12x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.spdot_general(%ld, %li, %rd, %ri) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 1>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, nse = 12 : i64, rhs_shape = array<i64: 3, 5>, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<4xi32>, tensor<4x2xi32>) -> (tensor<12xf32>, tensor<12x2xi32>)
  return %0#0, %0#1 : tensor<12xf32>, tensor<12x2xi32>
}

// -----

// Not rewritten: a batch dim (the kernels multiply two matrices), or integer results.
// CHECK-LABEL: func.func @spgemm_kept
// CHECK-NOT: hlopt_spgemm
// CHECK-COUNT-2: stablehlo.custom_call @hlopt.bcoo.spdot_general(
// CHECK-NOT: hlopt_spgemm
func.func @spgemm_kept(%ld: tensor<2x3xf32>, %li: tensor<2x3x2xi32>, %rd: tensor<2x4xf32>, %ri: tensor<2x4x2xi32>, %id: tensor<3xi32>, %ii: tensor<3x2xi32>) -> (tensor<2x12xf32>, tensor<2x12x2xi32>, tensor<5xi32>, tensor<5x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.spdot_general(%ld, %li, %rd, %ri) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 2>, array<i64: 1>], [array<i64: 0>, array<i64: 0>]], indices_sorted = false, n_batch = 1 : i64, n_dense = 0 : i64, nse = 12 : i64, rhs_shape = array<i64: 2, 5, 3>, shape = array<i64: 2, 4, 5>, unique_indices = false}} : (tensor<2x3xf32>, tensor<2x3x2xi32>, tensor<2x4xf32>, tensor<2x4x2xi32>) -> (tensor<2x12xf32>, tensor<2x12x2xi32>)
  %1:2 = stablehlo.custom_call @hlopt.bcoo.spdot_general(%id, %ii, %id, %ii) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, nse = 5 : i64, rhs_shape = array<i64: 4, 4>, shape = array<i64: 4, 4>, unique_indices = false}} : (tensor<3xi32>, tensor<3x2xi32>, tensor<3xi32>, tensor<3x2xi32>) -> (tensor<5xi32>, tensor<5x2xi32>)
  return %0#0, %0#1, %1#0, %1#1 : tensor<2x12xf32>, tensor<2x12x2xi32>, tensor<5xi32>, tensor<5x2xi32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
