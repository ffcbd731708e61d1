// RUN: hlopt-opt %s -p xla-cpu-triangular-inverse --split-input-file | filecheck %s
// RUN: hlopt-opt %s -p 'xla-cpu-triangular-inverse{min-rows=8}' --split-input-file | filecheck %s --check-prefix=ROWS8

// The cases below but the last have factors of fewer than 8 rows: with min-rows=8 they
// stay solves.

// Three solves with one factor's lower unit triangle, 3 + 3 + 3 right-hand sides for a
// 4x4 factor, in both spellings (StableHLO and JAX's LAPACK call), from the left plain
// and transposed and from the right transposed: one solve against the identity, then
// three batched products with the inverse (its transpose by the contracting dimensions).
// CHECK-LABEL: func.func @group
// CHECK: %[[EYE:.*]] = stablehlo.select
// CHECK: %[[INV:.*]] = "stablehlo.triangular_solve"(%arg0, %[[EYE]]) <{left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true}> : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
// CHECK-NOT: stablehlo.triangular_solve
// CHECK-NOT: lapack_strsm_ffi
// CHECK: %[[X:.*]] = stablehlo.dot_general %[[INV]], %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x4x4xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
// CHECK: %[[Y:.*]] = stablehlo.dot_general %[[INV]], %arg1, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<2x4x4xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
// CHECK: %[[Z:.*]] = stablehlo.dot_general %arg2, %[[INV]], batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x3x4xf32>, tensor<2x4x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NOT: stablehlo.triangular_solve
// CHECK-NOT: lapack_strsm_ffi
// CHECK: return %[[X]], %[[Y]], %[[Z]]
// ROWS8-LABEL: func.func @group
// ROWS8: "stablehlo.triangular_solve"(%arg0, %arg1)
// ROWS8: stablehlo.custom_call @lapack_strsm_ffi(%arg0, %arg1)
// ROWS8: "stablehlo.triangular_solve"(%arg0, %arg2)
// ROWS8-NOT: stablehlo.dot_general
func.func @group(%a: tensor<2x4x4xf32>, %b: tensor<2x4x3xf32>, %c: tensor<2x3x4xf32>) -> (tensor<2x4x3xf32>, tensor<2x4x3xf32>, tensor<2x3x4xf32>) {
  %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true} : (tensor<2x4x4xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  %1 = stablehlo.custom_call @lapack_strsm_ffi(%a, %b) {mhlo.backend_config = {diag = 85 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 76 : ui8}, mhlo.frontend_attributes = {num_batch_dims = "1"}, operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<[1, 2, 0]> : tensor<3xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 1, operand_tuple_indices = []>], result_layouts = [dense<[1, 2, 0]> : tensor<3xindex>]} : (tensor<2x4x4xf32>, tensor<2x4x3xf32>) -> tensor<2x4x3xf32>
  %2 = "stablehlo.triangular_solve"(%a, %c) {left_side = false, lower = true, transpose_a = #stablehlo<transpose TRANSPOSE>, unit_diagonal = true} : (tensor<2x4x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  return %0, %1, %2 : tensor<2x4x3xf32>, tensor<2x4x3xf32>, tensor<2x3x4xf32>
}

// -----

// Two solves of 2 columns each with a 4x4 factor: 4 columns, no more than the rows,
// so the inverse would cost as much as the solves; both stay.
// CHECK-LABEL: func.func @narrow
// CHECK: "stablehlo.triangular_solve"(%arg0, %arg1)
// CHECK: stablehlo.custom_call @lapack_dtrsm_ffi(%arg0, %arg1)
// CHECK-NOT: stablehlo.dot_general
// CHECK-NOT: stablehlo.triangular_solve
// CHECK: return
func.func @narrow(%a: tensor<4x4xf64>, %b: tensor<4x2xf64>) -> (tensor<4x2xf64>, tensor<4x2xf64>) {
  %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<4x4xf64>, tensor<4x2xf64>) -> tensor<4x2xf64>
  %1 = stablehlo.custom_call @lapack_dtrsm_ffi(%a, %b) {mhlo.backend_config = {diag = 78 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 1, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<4x4xf64>, tensor<4x2xf64>) -> tensor<4x2xf64>
  return %0, %1 : tensor<4x2xf64>, tensor<4x2xf64>
}

// -----

// A packed LU: the lower unit triangle and the upper one of one factor are two groups.
// The lower one (4 + 4 columns of a 4x4 factor) is inverted, the upper one (2 columns)
// stays a solve.
// CHECK-LABEL: func.func @lu_triangles
// CHECK: %[[INV:.*]] = "stablehlo.triangular_solve"(%arg0, %{{.*}}) <{left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true}>
// CHECK: stablehlo.dot_general %[[INV]], %arg1
// CHECK: "stablehlo.triangular_solve"(%arg0, %arg2) <{left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false}>
// CHECK: stablehlo.dot_general %[[INV]], %arg1
// CHECK-NOT: stablehlo.triangular_solve
// CHECK: return
func.func @lu_triangles(%lu: tensor<4x4xf32>, %b: tensor<4x4xf32>, %c: tensor<4x2xf32>) -> (tensor<4x4xf32>, tensor<4x2xf32>, tensor<4x4xf32>) {
  %0 = "stablehlo.triangular_solve"(%lu, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = "stablehlo.triangular_solve"(%lu, %c) {left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<4x4xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  %2 = "stablehlo.triangular_solve"(%lu, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose TRANSPOSE>, unit_diagonal = true} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0, %1, %2 : tensor<4x4xf32>, tensor<4x2xf32>, tensor<4x4xf32>
}

// -----

// Complex adjoint solves (LAPACK's trans_x = 'C' from the left, ADJOINT from the right) of
// an upper non-unit triangle: the products read the conjugated inverse.
// CHECK-LABEL: func.func @adjoint
// CHECK: %[[INV:.*]] = "stablehlo.triangular_solve"(%arg0, %{{.*}}) <{left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false}> : (tensor<3x3xcomplex<f64>>, tensor<3x3xcomplex<f64>>) -> tensor<3x3xcomplex<f64>>
// CHECK: %[[RE:.*]] = stablehlo.real %[[INV]]
// CHECK: %[[IM:.*]] = stablehlo.imag %[[INV]]
// CHECK: %[[NEG:.*]] = stablehlo.negate %[[IM]]
// CHECK: %[[CONJ:.*]] = stablehlo.complex %[[RE]], %[[NEG]]
// CHECK: stablehlo.dot_general %[[CONJ]], %arg1, contracting_dims = [0] x [0] : (tensor<3x3xcomplex<f64>>, tensor<3x2xcomplex<f64>>) -> tensor<3x2xcomplex<f64>>
// CHECK: stablehlo.dot_general %arg2, %{{.*}}, contracting_dims = [1] x [1] : (tensor<2x3xcomplex<f64>>, tensor<3x3xcomplex<f64>>) -> tensor<2x3xcomplex<f64>>
// CHECK-NOT: lapack_ztrsm_ffi
// CHECK-NOT: stablehlo.triangular_solve
// CHECK: return
func.func @adjoint(%a: tensor<3x3xcomplex<f64>>, %b: tensor<3x2xcomplex<f64>>, %c: tensor<2x3xcomplex<f64>>) -> (tensor<3x2xcomplex<f64>>, tensor<2x3xcomplex<f64>>) {
  %0 = stablehlo.custom_call @lapack_ztrsm_ffi(%a, %b) {mhlo.backend_config = {diag = 78 : ui8, side = 76 : ui8, trans_x = 67 : ui8, uplo = 85 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 1, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<3x3xcomplex<f64>>, tensor<3x2xcomplex<f64>>) -> tensor<3x2xcomplex<f64>>
  %1 = "stablehlo.triangular_solve"(%a, %c) {left_side = false, lower = false, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false} : (tensor<3x3xcomplex<f64>>, tensor<2x3xcomplex<f64>>) -> tensor<2x3xcomplex<f64>>
  return %0, %1 : tensor<3x2xcomplex<f64>>, tensor<2x3xcomplex<f64>>
}

// -----

// A LAPACK call in a layout other than JAX's is not read as a solve: it stays, and with
// it the solve beside it (its 2 columns alone do not pay for an inverse).
// CHECK-LABEL: func.func @other_layout
// CHECK: stablehlo.custom_call @lapack_strsm_ffi
// CHECK: "stablehlo.triangular_solve"
// CHECK-NOT: stablehlo.dot_general
func.func @other_layout(%a: tensor<4x4xf32>, %b: tensor<4x8xf32>, %c: tensor<4x2xf32>) -> (tensor<4x8xf32>, tensor<4x2xf32>) {
  %0 = stablehlo.custom_call @lapack_strsm_ffi(%a, %b) {mhlo.backend_config = {diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[1, 0]> : tensor<2xindex>], result_layouts = [dense<[1, 0]> : tensor<2xindex>]} : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "stablehlo.triangular_solve"(%a, %c) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<4x4xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x2xf32>
}

// -----

// Solves in different blocks are separate groups (the inverse is built in the block of
// the solves it serves): 3 columns inside the branch and 3 outside, each no more than
// the 4 rows, so both stay although 6 in all would be more.
// CHECK-LABEL: func.func @blocks
// CHECK: "stablehlo.case"
// CHECK: "stablehlo.triangular_solve"(%arg1, %arg2)
// CHECK: "stablehlo.triangular_solve"(%arg1, %arg2)
// CHECK-NOT: stablehlo.dot_general
func.func @blocks(%i: tensor<i32>, %a: tensor<4x4xf32>, %b: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %0 = "stablehlo.case"(%i) ({
    %s = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    stablehlo.return %s : tensor<4x3xf32>
  }, {
    stablehlo.return %b : tensor<4x3xf32>
  }) : (tensor<i32>) -> tensor<4x3xf32>
  %1 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %0, %1 : tensor<4x3xf32>, tensor<4x3xf32>
}

// -----

// An 8x8 factor, 5 + 5 columns: rewritten with min-rows=8 too.
// CHECK-LABEL: func.func @rows8
// ROWS8-LABEL: func.func @rows8
// ROWS8: %[[INV:.*]] = "stablehlo.triangular_solve"(%arg0, %{{.*}}) <{left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false}> : (tensor<3x8x8xf64>, tensor<3x8x8xf64>) -> tensor<3x8x8xf64>
// ROWS8: stablehlo.dot_general %[[INV]], %arg1, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<3x8x8xf64>, tensor<3x8x5xf64>) -> tensor<3x8x5xf64>
// ROWS8: stablehlo.dot_general %arg2, %[[INV]], batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<3x5x8xf64>, tensor<3x8x8xf64>) -> tensor<3x5x8xf64>
// ROWS8-NOT: stablehlo.triangular_solve
// ROWS8: return
func.func @rows8(%a: tensor<3x8x8xf64>, %b: tensor<3x8x5xf64>, %c: tensor<3x5x8xf64>) -> (tensor<3x8x5xf64>, tensor<3x5x8xf64>) {
  %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<3x8x8xf64>, tensor<3x8x5xf64>) -> tensor<3x8x5xf64>
  %1 = "stablehlo.triangular_solve"(%a, %c) {left_side = false, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<3x8x8xf64>, tensor<3x5x8xf64>) -> tensor<3x5x8xf64>
  return %0, %1 : tensor<3x8x5xf64>, tensor<3x5x8xf64>
}
