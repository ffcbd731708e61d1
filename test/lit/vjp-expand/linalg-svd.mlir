// RUN: hlopt-opt %s -p 'vjp-expand{func=svd}' | filecheck %s

// Reverse mode of the SVD record (passes/autodiff/linalg_rules.py): Abar = U G V^H plus, for a tall
// matrix, (I - U U^H) Ubar S^{-1} V^H; products and elementwise scalings, no solve.
// CHECK-LABEL: func.func @svd_vjp(
// CHECK: stablehlo.custom_call @lapack_sgesdd_ffi
// CHECK: stablehlo.divide
// CHECK: stablehlo.dot_general
// CHECK-NOT: stablehlo.custom_call
// CHECK-NOT: stablehlo.triangular_solve
// CHECK: return {{.*}} : tensor<5x3xf32>
func.func @svd(%a: tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<3x3xf32>) {
  %0:5 = stablehlo.custom_call @lapack_sgesdd_ffi(%a) {backend_config = "", mhlo.backend_config = {mode = 83 : ui8}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>]} : (tensor<5x3xf32>) -> (tensor<5x3xf32>, tensor<3xf32>, tensor<5x3xf32>, tensor<3x3xf32>, tensor<i32>)
  return %0#2, %0#1, %0#3 : tensor<5x3xf32>, tensor<3xf32>, tensor<3x3xf32>
}
