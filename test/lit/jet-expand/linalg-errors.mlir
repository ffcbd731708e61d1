// RUN: not hlopt-opt %s -p "jet-expand{func=row_major order=1}" 2>&1 | filecheck %s --check-prefix=LAYOUT
// RUN: not hlopt-opt %s -p "jet-expand{func=wide_lu order=1}" 2>&1 | filecheck %s --check-prefix=WIDE
// RUN: not hlopt-opt %s -p "jet-expand{func=eigenvalues_only order=1}" 2>&1 | filecheck %s --check-prefix=MODE
// RUN: not hlopt-opt %s -p "jet-expand{func=wide_qr order=1}" 2>&1 | filecheck %s --check-prefix=WIDEQR

// What the linear-algebra rules refuse, with one line at the op's location.

// LAYOUT: linalg-errors.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: jet-expand: @lapack_spotrf_ffi operand_layouts[0] is [1, 0]; the linear-algebra rules take JAX's column-major layout [0, 1]
func.func @row_major(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<i32>)
  return %0#0 : tensor<3x3xf32>
}

// WIDE: linalg-errors.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: jet-expand: the LU rules take square matrices; @lapack_sgetrf_ffi factors 2x3 ones
func.func @wide_lu(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xi32>, tensor<i32>)
  return %0#0 : tensor<2x3xf32>
}

// MODE: linalg-errors.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: jet-expand: @lapack_ssyevd_ffi without eigenvectors (mode 'N') has no rule here
func.func @eigenvalues_only(%a: tensor<3x3xf32>) -> tensor<3xf32> {
  %0:3 = stablehlo.custom_call @lapack_ssyevd_ffi(%a) {mhlo.backend_config = {mode = 78 : ui8, uplo = 76 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xf32>, tensor<i32>)
  return %0#1 : tensor<3xf32>
}

// WIDEQR: linalg-errors.mlir:[[# @LINE + 2]]:{{[0-9]+}}: error: jet-expand: the QR rules take m x n matrices with m >= n; @lapack_sgeqrf_ffi factors 2x3 ones
func.func @wide_qr(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0:2 = stablehlo.custom_call @lapack_sgeqrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>]} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xf32>)
  return %0#0 : tensor<2x3xf32>
}
