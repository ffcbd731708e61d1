// RUN: hlopt-opt %s -p 'vjp-expand{func=potrf}' | filecheck %s --check-prefix=POTRF
// RUN: hlopt-opt %s -p 'vjp-expand{func=heevd}' | filecheck %s --check-prefix=HEEVD
// RUN: hlopt-opt %s -p 'vjp-expand{func=ungqr}' | filecheck %s --check-prefix=UNGQR
// RUN: hlopt-opt %s -p 'vjp-expand{func=gesvd}' | filecheck %s --check-prefix=GESVD

// Reverse mode of the LAPACK kinds linalg.mlir and linalg-svd.mlir leave out, as jax.jit
// lowers them on CPU: jnp.linalg.cholesky (potrf), eigh and qr of complex64 matrices
// (heevd; geqrf then ungqr) and lax.linalg.svd with SvdAlgorithm.QR (gesvd). The primal
// call stays; its adjoint is plain StableHLO (triangular solves and products).

// POTRF-LABEL: func.func @potrf_vjp(
// POTRF: stablehlo.custom_call @lapack_spotrf_ffi
// POTRF: stablehlo.triangular_solve
// POTRF-NOT: stablehlo.custom_call
// POTRF: return
func.func @potrf(%arg0: tensor<3x3xf32>) -> (tensor<3x3xf32> ) {
  %0 = call @cholesky(%arg0) : (tensor<3x3xf32>) -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}
func.func private @cholesky(%arg0: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<3x3xf32>) -> tensor<3x3xf32>
  %1 = stablehlo.add %arg0, %0 : tensor<3x3xf32>
  %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
  %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<3x3xf32>
  %3 = stablehlo.divide %1, %2 : tensor<3x3xf32>
  %4:2 = stablehlo.custom_call @lapack_spotrf_ffi(%3) {backend_config = "", mhlo.backend_config = {uplo = 76 : ui8}, mhlo.frontend_attributes = {num_batch_dims = "0"}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([k, l], []) {i=3, j=3, k=3, l=3}, custom>} : (tensor<3x3xf32>) -> (tensor<3x3xf32>, tensor<i32>)
  %c = stablehlo.constant dense<0> : tensor<i32>
  %5 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<i32>
  %6 = stablehlo.compare EQ, %4#1, %5, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %7 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<i1>) -> tensor<1x1xi1>
  %cst_0 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %8 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<3x3xf32>
  %9 = stablehlo.broadcast_in_dim %7, dims = [0, 1] : (tensor<1x1xi1>) -> tensor<3x3xi1>
  %10 = stablehlo.select %9, %4#0, %8 : tensor<3x3xi1>, tensor<3x3xf32>
  %11 = stablehlo.iota dim = 0 : tensor<3x3xi32>
  %c_1 = stablehlo.constant dense<0> : tensor<i32>
  %12 = stablehlo.broadcast_in_dim %c_1, dims = [] : (tensor<i32>) -> tensor<3x3xi32>
  %13 = stablehlo.add %11, %12 : tensor<3x3xi32>
  %14 = stablehlo.iota dim = 1 : tensor<3x3xi32>
  %15 = stablehlo.compare GE, %13, %14, SIGNED : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
  %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %16 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<3x3xf32>
  %17 = stablehlo.select %15, %10, %16 : tensor<3x3xi1>, tensor<3x3xf32>
  return %17 : tensor<3x3xf32>
}

// HEEVD-LABEL: func.func @heevd_vjp(
// HEEVD: stablehlo.custom_call @lapack_cheevd_ffi
// HEEVD: stablehlo.dot_general
// HEEVD-NOT: stablehlo.custom_call
// HEEVD: return
func.func @heevd(%arg0: tensor<3x3xcomplex<f32>>) -> (tensor<3xf32> , tensor<3x3xcomplex<f32>> ) {
  %0:2 = call @eigh(%arg0) : (tensor<3x3xcomplex<f32>>) -> (tensor<3xf32>, tensor<3x3xcomplex<f32>>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x3xcomplex<f32>>
}
func.func private @eigh(%arg0: tensor<3x3xcomplex<f32>>) -> (tensor<3xf32>, tensor<3x3xcomplex<f32>>) {
  %0 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<3x3xcomplex<f32>>) -> tensor<3x3xcomplex<f32>>
  %1 = stablehlo.real %0 : (tensor<3x3xcomplex<f32>>) -> tensor<3x3xf32>
  %2 = stablehlo.imag %0 : (tensor<3x3xcomplex<f32>>) -> tensor<3x3xf32>
  %3 = stablehlo.negate %2 : tensor<3x3xf32>
  %4 = stablehlo.complex %1, %3 : tensor<3x3xcomplex<f32>>
  %5 = stablehlo.add %arg0, %4 : tensor<3x3xcomplex<f32>>
  %cst = stablehlo.constant dense<(2.000000e+00,0.000000e+00)> : tensor<complex<f32>>
  %6 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<complex<f32>>) -> tensor<3x3xcomplex<f32>>
  %7 = stablehlo.divide %5, %6 : tensor<3x3xcomplex<f32>>
  %8:3 = stablehlo.custom_call @lapack_cheevd_ffi(%7) {backend_config = "", mhlo.backend_config = {mode = 86 : ui8, uplo = 76 : ui8}, mhlo.frontend_attributes = {num_batch_dims = "0"}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<> : tensor<0xindex>], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([k, l], [m], []) {i=3, j=3, k=3, l=3, m=3}, custom>} : (tensor<3x3xcomplex<f32>>) -> (tensor<3x3xcomplex<f32>>, tensor<3xf32>, tensor<i32>)
  %c = stablehlo.constant dense<0> : tensor<i32>
  %9 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<i32>
  %10 = stablehlo.compare EQ, %8#2, %9, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %11 = stablehlo.broadcast_in_dim %10, dims = [] : (tensor<i1>) -> tensor<1x1xi1>
  %cst_0 = stablehlo.constant dense<(0x7FC00000,0x7FC00000)> : tensor<complex<f32>>
  %12 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<complex<f32>>) -> tensor<3x3xcomplex<f32>>
  %13 = stablehlo.broadcast_in_dim %11, dims = [0, 1] : (tensor<1x1xi1>) -> tensor<3x3xi1>
  %14 = stablehlo.select %13, %8#0, %12 : tensor<3x3xi1>, tensor<3x3xcomplex<f32>>
  %15 = stablehlo.broadcast_in_dim %10, dims = [] : (tensor<i1>) -> tensor<1xi1>
  %cst_1 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %16 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %17 = stablehlo.broadcast_in_dim %15, dims = [0] : (tensor<1xi1>) -> tensor<3xi1>
  %18 = stablehlo.select %17, %8#1, %16 : tensor<3xi1>, tensor<3xf32>
  return %18, %14 : tensor<3xf32>, tensor<3x3xcomplex<f32>>
}

// UNGQR-LABEL: func.func @ungqr_vjp(
// UNGQR: stablehlo.custom_call @lapack_cgeqrf_ffi
// UNGQR: stablehlo.custom_call @lapack_cungqr_ffi
// UNGQR: stablehlo.triangular_solve
// UNGQR: return
func.func @ungqr(%arg0: tensor<3x3xcomplex<f32>>) -> (tensor<3x3xcomplex<f32>> , tensor<3x3xcomplex<f32>> ) {
  %0:2 = call @qr(%arg0) : (tensor<3x3xcomplex<f32>>) -> (tensor<3x3xcomplex<f32>>, tensor<3x3xcomplex<f32>>)
  return %0#0, %0#1 : tensor<3x3xcomplex<f32>>, tensor<3x3xcomplex<f32>>
}
func.func private @qr(%arg0: tensor<3x3xcomplex<f32>>) -> (tensor<3x3xcomplex<f32>>, tensor<3x3xcomplex<f32>>) {
  %0:2 = stablehlo.custom_call @lapack_cgeqrf_ffi(%arg0) {backend_config = "", mhlo.backend_config = {}, mhlo.frontend_attributes = {num_batch_dims = "0"}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([k, l], [m]) {i=3, j=3, k=3, l=3, m=3}, custom>} : (tensor<3x3xcomplex<f32>>) -> (tensor<3x3xcomplex<f32>>, tensor<3xcomplex<f32>>)
  %1 = stablehlo.custom_call @lapack_cungqr_ffi(%0#0, %0#1) {backend_config = "", mhlo.backend_config = {}, mhlo.frontend_attributes = {num_batch_dims = "0"}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [k])->([l, m]) {i=3, j=3, k=3, l=3, m=3}, custom>} : (tensor<3x3xcomplex<f32>>, tensor<3xcomplex<f32>>) -> tensor<3x3xcomplex<f32>>
  %2 = stablehlo.iota dim = 0 : tensor<3x3xi32>
  %c = stablehlo.constant dense<-1> : tensor<i32>
  %3 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<3x3xi32>
  %4 = stablehlo.add %2, %3 : tensor<3x3xi32>
  %5 = stablehlo.iota dim = 1 : tensor<3x3xi32>
  %6 = stablehlo.compare GE, %4, %5, SIGNED : (tensor<3x3xi32>, tensor<3x3xi32>) -> tensor<3x3xi1>
  %cst = stablehlo.constant dense<(0.000000e+00,0.000000e+00)> : tensor<complex<f32>>
  %7 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<complex<f32>>) -> tensor<3x3xcomplex<f32>>
  %8 = stablehlo.select %6, %7, %0#0 : tensor<3x3xi1>, tensor<3x3xcomplex<f32>>
  return %1, %8 : tensor<3x3xcomplex<f32>>, tensor<3x3xcomplex<f32>>
}

// GESVD-LABEL: func.func @gesvd_vjp(
// GESVD: stablehlo.custom_call @lapack_sgesvd_ffi
// GESVD: stablehlo.dot_general
// GESVD-NOT: stablehlo.custom_call
// GESVD: return
func.func @gesvd(%arg0: tensor<4x3xf32>) -> (tensor<4x3xf32> , tensor<3xf32> , tensor<3x3xf32> ) {
  %0:5 = stablehlo.custom_call @lapack_sgesvd_ffi(%arg0) {backend_config = "", mhlo.backend_config = {mode = 83 : ui8}, mhlo.frontend_attributes = {num_batch_dims = "0"}, operand_layouts = [dense<[0, 1]> : tensor<2xindex>], output_operand_aliases = [#stablehlo.output_operand_alias<output_tuple_indices = [0], operand_index = 0, operand_tuple_indices = []>], result_layouts = [dense<[0, 1]> : tensor<2xindex>, dense<0> : tensor<1xindex>, dense<[0, 1]> : tensor<2xindex>, dense<[0, 1]> : tensor<2xindex>, dense<> : tensor<0xindex>], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([k, l], [m], [n, o], [p, q], []) {i=4, j=3, k=4, l=3, m=3, n=4, o=3, p=3, q=3}, custom>} : (tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3x3xf32>, tensor<i32>)
  %c = stablehlo.constant dense<0> : tensor<i32>
  %1 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i32>) -> tensor<i32>
  %2 = stablehlo.compare EQ, %0#4, %1, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
  %3 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<i1>) -> tensor<1xi1>
  %cst = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %4 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<3xf32>
  %5 = stablehlo.broadcast_in_dim %3, dims = [0] : (tensor<1xi1>) -> tensor<3xi1>
  %6 = stablehlo.select %5, %0#1, %4 : tensor<3xi1>, tensor<3xf32>
  %7 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<i1>) -> tensor<1x1xi1>
  %cst_0 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %8 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4x3xf32>
  %9 = stablehlo.broadcast_in_dim %7, dims = [0, 1] : (tensor<1x1xi1>) -> tensor<4x3xi1>
  %10 = stablehlo.select %9, %0#2, %8 : tensor<4x3xi1>, tensor<4x3xf32>
  %11 = stablehlo.broadcast_in_dim %2, dims = [] : (tensor<i1>) -> tensor<1x1xi1>
  %cst_1 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %12 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<3x3xf32>
  %13 = stablehlo.broadcast_in_dim %11, dims = [0, 1] : (tensor<1x1xi1>) -> tensor<3x3xi1>
  %14 = stablehlo.select %13, %0#3, %12 : tensor<3x3xi1>, tensor<3x3xf32>
  return %10, %6, %14 : tensor<4x3xf32>, tensor<3xf32>, tensor<3x3xf32>
}
