// RUN: hlopt-opt %s -p 'vjp-expand{func=chol}' | filecheck %s --check-prefix=CHOL
// RUN: hlopt-opt %s -p 'vjp-expand{func=trsm}' | filecheck %s --check-prefix=TRSM
// RUN: hlopt-opt %s -p 'vjp-expand{func=lu}' | filecheck %s --check-prefix=LU
// RUN: hlopt-opt %s -p 'vjp-expand{func=eigh}' | filecheck %s --check-prefix=EIGH
// RUN: hlopt-opt %s -p 'vjp-expand{func=qr}' | filecheck %s --check-prefix=QR

// Reverse mode of the linear-algebra rules (passes/autodiff/linalg_rules.py), whichever spelling.

// Cholesky: Abar from G = L^{-H} Phi(L^H Lbar) L^{-1}: a product, then two solves.
// CHOL-LABEL: func.func @chol_vjp(
// CHOL: stablehlo.cholesky
// CHOL: stablehlo.dot_general
// CHOL: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose ADJOINT>
// CHOL: stablehlo.triangular_solve{{.*}}left_side = false, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>
// CHOL: return
func.func @chol(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = stablehlo.cholesky %a, lower = true : tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// Triangular solve: Bbar = op(A)^{-H} Xbar (the adjoint solve), Abar = -(Bbar X^H) on the triangle.
// TRSM-LABEL: func.func @trsm_vjp(
// TRSM: stablehlo.custom_call @lapack_strsm_ffi
// TRSM: stablehlo.triangular_solve{{.*}}left_side = true, lower = false, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false
// TRSM: stablehlo.dot_general
// TRSM: stablehlo.negate
// TRSM: return
func.func @trsm(%a: tensor<3x3xf32>, %b: tensor<3x2xf32>) -> tensor<3x2xf32> {
  %0 = stablehlo.custom_call @lapack_strsm_ffi(%a, %b) {mhlo.backend_config = {diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 85 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<3x3xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// Packed LU factors: Abar = P^T L^{-H} Xbar U^{-H}.
// LU-LABEL: func.func @lu_vjp(
// LU: stablehlo.custom_call @lapack_sgetrf_ffi
// LU: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = true
// LU: stablehlo.triangular_solve{{.*}}left_side = false, lower = false, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false
// LU: stablehlo.while
// LU: stablehlo.dot_general
// LU: return
func.func @lu(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xi32>, tensor<i32>)
  return %0#0 : tensor<3x3xf32>
}

// eigh: Abar from G = V (diag(wbar) + F o (V^H Vbar)) V^H.
// EIGH-LABEL: func.func @eigh_vjp(
// EIGH: stablehlo.custom_call @lapack_ssyevd_ffi
// EIGH: stablehlo.divide
// EIGH: stablehlo.dot_general
// EIGH: stablehlo.multiply
// EIGH: stablehlo.dot_general
// EIGH: stablehlo.dot_general
// EIGH: return
func.func @eigh(%a: tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xf32>) {
  %0:3 = stablehlo.custom_call @lapack_ssyevd_ffi(%a) {mhlo.backend_config = {mode = 86 : ui8, uplo = 76 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xf32>, tensor<i32>)
  return %0#0, %0#1 : tensor<3x3xf32>, tensor<3xf32>
}

// QR and the Householder product: the adjoints of the same steps.
// QR-LABEL: func.func @qr_vjp(
// QR: stablehlo.custom_call @lapack_dgeqrf_ffi
// QR: stablehlo.custom_call @lapack_dorgqr_ffi
// QR: stablehlo.triangular_solve{{.*}}left_side = true, lower = false, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = true
// QR: stablehlo.triangular_solve{{.*}}left_side = true, lower = true, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = true
// QR: stablehlo.triangular_solve{{.*}}left_side = false, lower = false, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false
// QR: return
func.func @qr(%a: tensor<4x3xf64>) -> (tensor<4x3xf64>, tensor<4x3xf64>) {
  %0:2 = stablehlo.custom_call @lapack_dgeqrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>]} : (tensor<4x3xf64>) -> (tensor<4x3xf64>, tensor<3xf64>)
  %1 = stablehlo.custom_call @lapack_dorgqr_ffi(%0#0, %0#1) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>]} : (tensor<4x3xf64>, tensor<3xf64>) -> tensor<4x3xf64>
  return %1, %0#0 : tensor<4x3xf64>, tensor<4x3xf64>
}
