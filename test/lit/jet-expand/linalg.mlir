// RUN: hlopt-opt %s -p "jet-expand{func=chol order=2}" | filecheck %s --check-prefix=CHOL
// RUN: hlopt-opt %s -p "jet-expand{func=chol_stablehlo order=1}" | filecheck %s --check-prefix=CHOLHLO
// RUN: hlopt-opt %s -p "jet-expand{func=trsm order=1}" | filecheck %s --check-prefix=TRSM
// RUN: hlopt-opt %s -p "jet-expand{func=trsm_stablehlo order=1}" | filecheck %s --check-prefix=TRSMHLO
// RUN: hlopt-opt %s -p "jet-expand{func=lu order=1}" | filecheck %s --check-prefix=LU
// RUN: hlopt-opt %s -p "jet-expand{func=eigh order=1}" | filecheck %s --check-prefix=EIGH
// RUN: hlopt-opt %s -p "jet-expand{func=qr order=1}" | filecheck %s --check-prefix=QR

// The linear-algebra rules (passes/autodiff/linalg_rules.py): the LAPACK custom calls JAX emits on
// CPU and the StableHLO ops other platforms use map to one rule per operation, whose
// coefficients are plain StableHLO (triangular solves with the primal factor, products).

// Cholesky: L_k = L_0 Phi(L_0^{-1} S_k L_0^{-H}), two solves per order; the primal stays the call.
// CHOL-LABEL: func.func @chol_jet2(
// CHOL: stablehlo.custom_call @lapack_spotrf_ffi
// CHOL: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>
// CHOL: stablehlo.triangular_solve{{.*}}left_side = false, lower = true, transpose_a = #stablehlo<transpose ADJOINT>
// CHOL: stablehlo.dot_general
// CHOL: stablehlo.triangular_solve
// CHOL: stablehlo.triangular_solve
// CHOL-NOT: custom_call
// CHOL: return
func.func @chol(%a: tensor<2x3x3xf32>) -> tensor<2x3x3xf32> {
  %0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}, operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>], result_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>]} : (tensor<2x3x3xf32>) -> (tensor<2x3x3xf32>, tensor<2xi32>)
  return %0#0 : tensor<2x3x3xf32>
}

// The same rule for stablehlo.cholesky (JAX's TPU lowering).
// CHOLHLO-LABEL: func.func @chol_stablehlo_jet1(
// CHOLHLO: stablehlo.cholesky
// CHOLHLO: stablehlo.triangular_solve{{.*}}left_side = true, lower = true
// CHOLHLO: stablehlo.triangular_solve{{.*}}left_side = false, lower = true, transpose_a = #stablehlo<transpose ADJOINT>
// CHOLHLO: stablehlo.dot_general
// CHOLHLO-NOT: custom_call
// CHOLHLO: return
func.func @chol_stablehlo(%a: tensor<3x3xf64>) -> tensor<3x3xf64> {
  %0 = stablehlo.cholesky %a, lower = true : tensor<3x3xf64>
  return %0 : tensor<3x3xf64>
}

// Triangular solve X U^T = B (side R, upper, transposed, unit diagonal):
// X_1 U_0^T = B_1 - X_0 U_1^T, one solve with the op's own attributes.
// TRSM-LABEL: func.func @trsm_jet1(
// TRSM: stablehlo.custom_call @lapack_dtrsm_ffi
// TRSM: stablehlo.dot_general
// TRSM: stablehlo.subtract
// TRSM: stablehlo.triangular_solve{{.*}}left_side = false, lower = false, transpose_a = #stablehlo<transpose TRANSPOSE>, unit_diagonal = true
// TRSM: return
func.func @trsm(%a: tensor<3x3xf64>, %b: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %0 = stablehlo.custom_call @lapack_dtrsm_ffi(%a, %b) {mhlo.backend_config = {diag = 85 : ui8, side = 82 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<3x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>
  return %0 : tensor<2x3xf64>
}

// TRSMHLO-LABEL: func.func @trsm_stablehlo_jet1(
// TRSMHLO: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false
// TRSMHLO: stablehlo.dot_general
// TRSMHLO: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false
// TRSMHLO: return
func.func @trsm_stablehlo(%a: tensor<3x3xf32>, %b: tensor<3x2xf32>) -> tensor<3x2xf32> {
  %0 = "stablehlo.triangular_solve"(%a, %b) <{left_side = true, lower = true, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false}> : (tensor<3x3xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// Packed LU factors: the row permutation from the pivots (a while over the swaps), then
// X = L_0^{-1} P A_1 U_0^{-1}, L_1 = L_0 tril(X, -1), U_1 = triu(X) U_0.
// LU-LABEL: func.func @lu_jet1(
// LU: stablehlo.custom_call @lapack_dgetrf_ffi
// LU: stablehlo.while
// LU: stablehlo.dot_general
// LU: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true
// LU: stablehlo.triangular_solve{{.*}}left_side = false, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false
// LU: stablehlo.dot_general
// LU: stablehlo.dot_general
// LU: return
func.func @lu(%a: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3xi32>) {
  %0:3 = stablehlo.custom_call @lapack_dgetrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3xi32>, tensor<i32>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3xi32>
}

// eigh: w_1 = diag(V^H A_1 V), V_1 = V (F o V^H A_1 V) with F = 1 / (w_b - w_a) off the diagonal.
// EIGH-LABEL: func.func @eigh_jet1(
// EIGH: stablehlo.custom_call @lapack_dsyevd_ffi
// EIGH: stablehlo.divide
// EIGH: stablehlo.dot_general
// EIGH: stablehlo.dot_general
// EIGH: stablehlo.reduce
// EIGH: stablehlo.multiply
// EIGH: stablehlo.dot_general
// EIGH: return
func.func @eigh(%a: tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3xf64>) {
  %0:3 = stablehlo.custom_call @lapack_dsyevd_ffi(%a) {mhlo.backend_config = {mode = 86 : ui8, uplo = 76 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf64>) -> (tensor<3x3xf64>, tensor<3xf64>, tensor<i32>)
  return %0#0, %0#1 : tensor<3x3xf64>, tensor<3xf64>
}

// QR (geqrf, then the Householder product orgqr): the QR recurrence with solves by R_0,
// then the reflectors from the unpivoted LU of I - Q (unit lower V_1, upper W); orgqr's
// Q = I - V N^{-1} diag(tau) V_1^H with N unit upper.
// QR-LABEL: func.func @qr_jet1(
// QR: stablehlo.custom_call @lapack_dgeqrf_ffi
// QR: stablehlo.triangular_solve{{.*}}left_side = true, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true
// QR: stablehlo.triangular_solve{{.*}}left_side = false, lower = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false
// QR: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true
// QR: stablehlo.custom_call @lapack_dorgqr_ffi
// QR: return
func.func @qr(%a: tensor<4x3xf64>) -> (tensor<4x3xf64>, tensor<4x3xf64>) {
  %0:2 = stablehlo.custom_call @lapack_dgeqrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>]} : (tensor<4x3xf64>) -> (tensor<4x3xf64>, tensor<3xf64>)
  %1 = stablehlo.custom_call @lapack_dorgqr_ffi(%0#0, %0#1) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<4x3xf64>, tensor<3xf64>) -> tensor<4x3xf64>
  return %1, %0#0 : tensor<4x3xf64>, tensor<4x3xf64>
}
