// RUN: hlopt-opt %s -p "jet-expand{func=svd order=2}" | filecheck %s --check-prefix=SVD
// RUN: hlopt-opt %s -p "jet-expand{func=svd_wide order=1}" | filecheck %s --check-prefix=WIDE
// The SVD modes without a rule (full matrices, values only) are in linalg-errors.mlir.

// The SVD record of passes/autodiff/linalg_rules.py (LAPACK gesdd / gesvd, thin): the primal stays the
// call; its coefficients are products in the primal singular bases, F o (...) with
// F = 1 / (s_b^2 - s_a^2) off the diagonal, and, for a tall matrix, U's part outside
// span(U_0) divided by s.

// SVD-LABEL: func.func @svd_jet2(
// SVD: stablehlo.custom_call @lapack_sgesdd_ffi
// SVD: stablehlo.multiply %0#1, %0#1
// SVD: stablehlo.divide
// SVD: stablehlo.dot_general %0#2, %arg1, contracting_dims = [0] x [0]
// SVD: stablehlo.reduce
// SVD-NOT: stablehlo.custom_call
// SVD-NOT: stablehlo.triangular_solve
// SVD: return
func.func @svd(%a: tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<3x3xf32>) {
  %0:5 = stablehlo.custom_call @lapack_sgesdd_ffi(%a) {backend_config = "", mhlo.backend_config = {mode = 83 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]} : (tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<5x3xf32>, tensor<3x3xf32>, tensor<i32>)
  return %0#2, %0#1, %0#3 : tensor<5x3xf32>, tensor<3xf32>, tensor<3x3xf32>
}

// A wide batched matrix (gesvd): V^H's part outside span(V_0) from A^H U, contracted over m.
// WIDE-LABEL: func.func @svd_wide_jet1(
// WIDE: stablehlo.custom_call @lapack_dgesvd_ffi
// WIDE: stablehlo.dot_general %arg1, %0#2, batching_dims = [0] x [0], contracting_dims = [1] x [1]
// WIDE-NOT: stablehlo.custom_call
// WIDE: return {{.*}} : tensor<2x2x2xf64>, tensor<2x2xf64>, tensor<2x2x4xf64>, tensor<2x2x2xf64>, tensor<2x2xf64>, tensor<2x2x4xf64>
func.func @svd_wide(%a: tensor<2x2x4xf64>) -> (tensor<2x2x2xf64>, tensor<2x2xf64>, tensor<2x2x4xf64>) {
  %0:5 = stablehlo.custom_call @lapack_dgesvd_ffi(%a) {backend_config = "", mhlo.backend_config = {mode = 83 : ui8}, operand_layouts = [dense<[1, 2, 0]> : tensor<3xindex>], result_layouts = [dense<[1, 2, 0]> : tensor<3xindex>, dense<[1, 0]> : tensor<2xindex>, dense<[1, 2, 0]> : tensor<3xindex>, dense<[1, 2, 0]> : tensor<3xindex>, dense<0> : tensor<1xindex>]} : (tensor<2x2x4xf64>) -> (tensor<2x2x4xf64>, tensor<2x2xf64>, tensor<2x2x2xf64>, tensor<2x2x4xf64>, tensor<2xi32>)
  return %0#2, %0#1, %0#3 : tensor<2x2x2xf64>, tensor<2x2xf64>, tensor<2x2x4xf64>
}
