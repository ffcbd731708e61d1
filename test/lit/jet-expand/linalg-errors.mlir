// RUN: hlopt-opt %s -p "jet-expand{func=f order=1}" --split-input-file --verify-diagnostics

// What the linear-algebra rules refuse, with one line at the op's location: one
// function @f a chunk.

// Cholesky of a row-major operand
// expected-error@+2 {{jet-expand: @lapack_spotrf_ffi operand_layouts[0] is [1, 0]; the linear-algebra rules take JAX's column-major layout [0, 1]}}
func.func @f(%a: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}, operand_layouts = [dense<[1, 0]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<i32>)
  return %0#0 : tensor<3x3xf32>
}

// -----

// LU of a wide matrix
// expected-error@+2 {{jet-expand: the LU rules take square matrices; @lapack_sgetrf_ffi factors 2x3 ones}}
func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xi32>, tensor<i32>)
  return %0#0 : tensor<2x3xf32>
}

// -----

// eigh without eigenvectors
// expected-error@+2 {{jet-expand: @lapack_ssyevd_ffi without eigenvectors (mode 'N') has no rule here}}
func.func @f(%a: tensor<3x3xf32>) -> tensor<3xf32> {
  %0:3 = stablehlo.custom_call @lapack_ssyevd_ffi(%a) {mhlo.backend_config = {mode = 78 : ui8, uplo = 76 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>]} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<3xf32>, tensor<i32>)
  return %0#1 : tensor<3xf32>
}

// -----

// QR of a wide matrix
// expected-error@+2 {{jet-expand: the QR rules take m x n matrices with m >= n; @lapack_sgeqrf_ffi factors 2x3 ones}}
func.func @f(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0:2 = stablehlo.custom_call @lapack_sgeqrf_ffi(%a) {mhlo.backend_config = {}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>]} : (tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2xf32>)
  return %0#0 : tensor<2x3xf32>
}

// -----

// SVD with full matrices
// expected-error@+2 {{jet-expand: @lapack_sgesdd_ffi with full matrices (full_matrices=True) has no rule here: the rules take the thin decomposition with its vectors, jnp.linalg.svd(a, full_matrices=False)}}
func.func @f(%a: tensor<5x3xf32>) -> tensor<5x5xf32> {
  %0:5 = stablehlo.custom_call @lapack_sgesdd_ffi(%a) {mhlo.backend_config = {mode = 65 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]} : (tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<5x5xf32>, tensor<3x3xf32>, tensor<i32>)
  return %0#2 : tensor<5x5xf32>
}

// -----

// SVD without singular vectors
// expected-error@+2 {{jet-expand: @lapack_sgesdd_ffi without singular vectors (compute_uv=False) has no rule here}}
func.func @f(%a: tensor<5x3xf32>) -> tensor<3xf32> {
  %0:5 = stablehlo.custom_call @lapack_sgesdd_ffi(%a) {mhlo.backend_config = {mode = 78 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]} : (tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<5x5xf32>, tensor<3x3xf32>, tensor<i32>)
  return %0#1 : tensor<3xf32>
}
