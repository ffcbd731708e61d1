// RUN: hlopt-opt %s --split-input-file --platform tpu -p tpu-folded-solves | filecheck %s
// RUN: hlopt-opt %s --split-input-file -p tpu-folded-solves | filecheck %s --check-prefix=OFF
// RUN: hlopt-opt %s --split-input-file --platform cpu -p tpu-folded-solves | filecheck %s --check-prefix=OFF

// A solve from the left of 3 stacked right-hand sides folded into the free dimension: the
// factor's inverse (the solve of the identity), its product with the unfolded stack at
// HIGHEST precision, folded as the solve's result.
// CHECK-LABEL: func.func @left
// CHECK: %[[EYE:.*]] = stablehlo.convert %{{.*}} : (tensor<2x4x4xi1>) -> tensor<2x4x4xf32>
// CHECK: %[[INV:.*]] = "stablehlo.triangular_solve"(%arg0, %[[EYE]]) <{left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = true}>
// CHECK: %[[P:.*]] = stablehlo.dot_general %[[INV]], %[[T:.*]], batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [HIGHEST, HIGHEST] : (tensor<2x4x4xf32>, tensor<2x4x3x5xf32>) -> tensor<2x4x3x5xf32>
// CHECK: stablehlo.reshape %[[P]] : (tensor<2x4x3x5xf32>) -> tensor<2x4x15xf32>
// CHECK-NOT: stablehlo.triangular_solve
// Without a TPU target the solve stays.
// OFF-LABEL: func.func @left
// OFF: "stablehlo.triangular_solve"(%arg0, %{{.*}}) {{.*}} : (tensor<2x4x4xf32>, tensor<2x4x15xf32>)
// OFF-NOT: dot_general
func.func @left(%a: tensor<2x4x4xf32>, %c: tensor<3x2x4x5xf32>) -> tensor<2x4x15xf32> {
  %t = stablehlo.transpose %c, dims = [1, 2, 0, 3] : (tensor<3x2x4x5xf32>) -> tensor<2x4x3x5xf32>
  %r = stablehlo.reshape %t : (tensor<2x4x3x5xf32>) -> tensor<2x4x15xf32>
  %x = "stablehlo.triangular_solve"(%a, %r) {left_side = true, lower = true, unit_diagonal = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x4x4xf32>, tensor<2x4x15xf32>) -> tensor<2x4x15xf32>
  return %x : tensor<2x4x15xf32>
}

// -----

// From the right, the stack folded into the rows; the adjoint of an upper factor.
// CHECK-LABEL: func.func @right
// CHECK: %[[INV:.*]] = "stablehlo.triangular_solve"(%arg0, %{{.*}}) <{left_side = true, lower = false, transpose_a = #stablehlo<transpose ADJOINT>, unit_diagonal = false}>
// CHECK: %[[P:.*]] = stablehlo.dot_general %[[R:.*]], %[[INV]], batching_dims = [0] x [0], contracting_dims = [3] x [1], precision = [HIGHEST, HIGHEST] : (tensor<2x3x5x4xf32>, tensor<2x4x4xf32>) -> tensor<2x3x5x4xf32>
// CHECK: stablehlo.reshape %[[P]] : (tensor<2x3x5x4xf32>) -> tensor<2x15x4xf32>
// CHECK-NOT: stablehlo.triangular_solve
func.func @right(%a: tensor<2x4x4xf32>, %c: tensor<2x3x5x4xf32>) -> tensor<2x15x4xf32> {
  %r = stablehlo.reshape %c : (tensor<2x3x5x4xf32>) -> tensor<2x15x4xf32>
  %x = "stablehlo.triangular_solve"(%a, %r) {left_side = false, lower = false, unit_diagonal = false, transpose_a = #stablehlo<transpose ADJOINT>} : (tensor<2x4x4xf32>, tensor<2x15x4xf32>) -> tensor<2x15x4xf32>
  return %x : tensor<2x15x4xf32>
}

// -----

// Left alone: a right-hand side that is no fold, a float64 factor (only float32 solves are
// rewritten), a reshape that does not join two dimensions.
// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: "stablehlo.triangular_solve"
// CHECK-NOT: dot_general
func.func @kept(%a: tensor<2x4x4xf32>, %b: tensor<2x4x15xf32>, %a64: tensor<2x4x4xf64>, %c64: tensor<2x4x3x5xf64>,
                %c: tensor<2x12x5xf32>) -> (tensor<2x4x15xf32>, tensor<2x4x15xf64>, tensor<2x4x15xf32>) {
  %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x4x4xf32>, tensor<2x4x15xf32>) -> tensor<2x4x15xf32>
  %r64 = stablehlo.reshape %c64 : (tensor<2x4x3x5xf64>) -> tensor<2x4x15xf64>
  %1 = "stablehlo.triangular_solve"(%a64, %r64) {left_side = true, lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x4x4xf64>, tensor<2x4x15xf64>) -> tensor<2x4x15xf64>
  %r = stablehlo.reshape %c : (tensor<2x12x5xf32>) -> tensor<2x4x15xf32>
  %2 = "stablehlo.triangular_solve"(%a, %r) {left_side = true, lower = true, unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : (tensor<2x4x4xf32>, tensor<2x4x15xf32>) -> tensor<2x4x15xf32>
  return %0, %1, %2 : tensor<2x4x15xf32>, tensor<2x4x15xf64>, tensor<2x4x15xf32>
}
