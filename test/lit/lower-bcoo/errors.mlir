// RUN: hlopt-opt %s -p lower-bcoo --split-input-file --verify-diagnostics

// Every annotation is checked against its operand and result types before anything is
// rewritten; each bad one is reported at the op (hlopt-opt/errors.mlir pins the one-line
// form, the exit status and the absence of a traceback).

// A shape that disagrees with the operand types.
// expected-error@+2 {{@hlopt.bcoo.todense: backend_config does not fit the operands: indices shape (3, 2) does not fit an array of shape (4,)}}
func.func @bad_shape(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.frobnicate: unknown sparse op (known: bcsr_dot_general, broadcast_in_dim, concatenate, conv, dot_general, dot_general_sampled, dynamic_slice, extract, fromdense,}}
func.func @unknown(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.frobnicate(%data, %indices) {api_version = 4 : i32, backend_config = {shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// A negative size.
// expected-error@+2 {{@hlopt.bcoo.multiply_dense: backend_config 'shape' must be an i64 array of non-negative sizes, got (-4, 5)}}
func.func @negative_shape(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<5xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: -4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<5xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// n_batch and n_dense must describe the operands: -1, 100, and n_dense = 5.
// expected-error@+2 {{@hlopt.bcoo.multiply_dense: backend_config does not fit the operands: n_batch=-1 and n_dense=0 do not describe the operands: indices of shape (3, 2) in an array of shape (4, 5) have n_batch=0, n_dense=0}}
func.func @n_batch_negative(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<5xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = -1 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<5xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.multiply_dense: backend_config does not fit the operands: n_batch=100 and n_dense=0 do not describe the operands}}
func.func @n_batch_large(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<5xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 100 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<5xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.multiply_dense: backend_config does not fit the operands: n_batch=0 and n_dense=5 do not describe the operands}}
func.func @n_dense_large(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<5xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 5 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<5xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// The declared result type must be the one the config gives.
// expected-error@+2 {{@hlopt.bcoo.todense: result 0 has type tensor<4x6xf32>, but the config and operands give shape [4, 5]}}
func.func @result_shape(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x6xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

// Missing fields are named (with their kind).
// expected-error@+2 {{@hlopt.bcoo.sum_duplicates: backend_config has no 'nse' (an integer)}}
func.func @missing_nse(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<2xf32>, tensor<2x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.sum_duplicates(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<2xf32>, tensor<2x2xi32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<2x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.todense: backend_config has no 'shape' (an i64 array of non-negative sizes)}}
func.func @missing_shape(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// Fields of the wrong kind.
// expected-error@+2 {{@hlopt.bcoo.transpose: backend_config 'permutation' must be an i64 array, got 1}}
func.func @wrong_kind(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.transpose(%data, %indices) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, permutation = 1 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.todense: backend_config 'n_batch' must be an integer, got True}}
func.func @bool_for_int(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = true, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.todense: backend_config holds an attribute hlopt cannot read: 1.500000e+00 : f64}}
func.func @float_field(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, scale = 1.5, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.todense: needs a dictionary backend_config}}
func.func @string_config(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 2 : i32, backend_config = "shape=4,5"} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// Operand and result counts and types.
// expected-error@+2 {{@hlopt.bcoo.todense: takes 2 operands (data, indices) and returns 1 result, got 3 operands and 1 result}}
func.func @operand_count(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices, %data) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<3xf32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.sort_indices: takes 2 operands (data, indices) and returns 2 results, got 2 operands and 1 result}}
func.func @result_count(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.sort_indices(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.todense: operand 1 (indices) must have an integer element type, got f32}}
func.func @float_indices(%data: tensor<3xf32>, %indices: tensor<3x2xf32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xf32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.todense: operand 1 must be a statically shaped tensor}}
func.func @dynamic(%data: tensor<3xf32>, %indices: tensor<?x2xi32>) -> tensor<4x5xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<?x2xi32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.todense: result 0 has element type i32, not f32 like operand 0}}
func.func @result_elem(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> tensor<4x5xi32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xi32>
  return %0 : tensor<4x5xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.multiply_dense: operand 2 (dense) has element type f16, not f32 like operand 0}}
func.func @dense_elem(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<5xf16>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<5xf16>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// The op's own parameters are checked too.
// expected-error@+2 {{@hlopt.bcoo.slice: backend_config does not fit the operands: invalid slice start=(0, 3), limit=(4, 2), strides=(1, 0) for shape (4, 5)}}
func.func @bad_slice(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.slice(%data, %indices) {api_version = 4 : i32, backend_config = {limit_indices = array<i64: 4, 2>, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, start_indices = array<i64: 0, 3>, strides = array<i64: 1, 0>}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.squeeze: backend_config does not fit the operands: squeeze dimensions (-1,) must be distinct dimensions in [0, 2)}}
func.func @bad_squeeze(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x1xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.squeeze(%data, %indices) {api_version = 4 : i32, backend_config = {dimensions = array<i64: -1>, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 1>}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x1xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x1xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.transpose: backend_config does not fit the operands: transpose permutation (0, 0) is not a permutation of 2 dimensions}}
func.func @bad_permutation(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.transpose(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, permutation = array<i64: 0, 0>, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.reduce_sum: backend_config does not fit the operands: reduce_sum axes (2,) must be distinct dimensions in [0, 2)}}
func.func @bad_axes(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.reduce_sum(%data, %indices) {api_version = 4 : i32, backend_config = {axes = array<i64: 2>, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.update_layout: backend_config does not fit the operands: invalid layout n_batch=7, n_dense=0 for shape (4, 5)}}
func.func @bad_target(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.update_layout(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 7 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.multiply_sparse: backend_config does not fit the operands: driver must be 'lhs', 'rhs' or 'pairs', got 'both'}}
func.func @bad_driver(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.multiply_sparse(%data, %indices, %data, %indices) {api_version = 4 : i32, backend_config = {driver = "both", n_batch = 0 : i64, n_dense = 0 : i64, rhs_shape = array<i64: 4, 5>, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<3xf32>, tensor<3x2xi32>) -> (tensor<3xf32>, tensor<3x2xi32>)
  return %0#0, %0#1 : tensor<3xf32>, tensor<3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.gather: backend_config does not fit the operands: gather start indices must have shape (windows, 2), got (6,)}}
func.func @bad_starts(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %starts: tensor<6xi32>) -> (tensor<2x3xf32>, tensor<2x3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.gather(%data, %indices, %starts) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, slice_sizes = array<i64: 1, 5>}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<6xi32>) -> (tensor<2x3xf32>, tensor<2x3x2xi32>)
  return %0#0, %0#1 : tensor<2x3xf32>, tensor<2x3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.gather: operand 2 (starts) must have an integer element type, got f32}}
func.func @float_starts(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %starts: tensor<2x2xf32>) -> (tensor<2x3xf32>, tensor<2x3x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.gather(%data, %indices, %starts) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, slice_sizes = array<i64: 1, 5>}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<2x2xf32>) -> (tensor<2x3xf32>, tensor<2x3x2xi32>)
  return %0#0, %0#1 : tensor<2x3xf32>, tensor<2x3x2xi32>
}

// -----

// expected-error@+2 {{@hlopt.bcoo.fromdense: backend_config does not fit the operands: nse must be non-negative, got -2}}
func.func @negative_nse(%x: tensor<4x5xf32>) -> (tensor<2xf32>, tensor<2x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.fromdense(%x) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, nse = -2 : i64, shape = array<i64: 4, 5>}} : (tensor<4x5xf32>) -> (tensor<2xf32>, tensor<2x2xi32>)
  return %0#0, %0#1 : tensor<2xf32>, tensor<2x2xi32>
}

// -----

// Bad dimension numbers are reported at the op.
// expected-error@+2 {{}}
func.func @mismatch(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<4x2xf32>) -> tensor<4x2xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.dot_general(%data, %indices, %v) {api_version = 4 : i32, backend_config = {dimension_numbers = [[array<i64: 1>, array<i64: 0>], [array<i64>, array<i64>]], indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<4x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

// A concatenate with fewer operand sizes than operands.
// expected-error@+2 {{@hlopt.bcoo.concatenate: backend_config does not fit the operands: concatenate: 1 operand sizes for 2 operands}}
func.func @concatenate_bad_sizes(%d0: tensor<3xf32>, %i0: tensor<3x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>) {
  %0:2 = stablehlo.custom_call @hlopt.bcoo.concatenate(%d0, %i0, %d0, %i0) {api_version = 4 : i32, backend_config = {dimension = 1 : i64, indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>, sizes = array<i64: 5>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<3xf32>, tensor<3x2xi32>) -> (tensor<6xf32>, tensor<6x2xi32>)
  return %0#0, %0#1 : tensor<6xf32>, tensor<6x2xi32>
}

// -----

// A shape far larger than its operands: 2^40 x 2^40 has more elements than an int64 numbers.
// expected-error@+2 {{@hlopt.bcoo.multiply_dense: shape [1099511627776, 1099511627776] has 1208925819614629174706176 elements, more than the 2^63 - 1 an int64 index numbers}}
func.func @huge_shape(%data: tensor<3xf32>, %indices: tensor<3x2xi64>, %v: tensor<1x1xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 1099511627776, 1099511627776>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi64>, tensor<1x1xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// int32 indices cannot address a dimension of 2^40 (nor mark its padding).
// expected-error@+2 {{@hlopt.bcoo.multiply_dense: sparse dimension 1 of shape [4, 1099511627776] is 1099511627776, more than i32 indices can address (2147483647): use int64 indices}}
func.func @int32_indices_of_a_huge_dimension(%data: tensor<3xf32>, %indices: tensor<3x2xi32>, %v: tensor<1x1xf32>) -> tensor<3xf32> {
  %0 = stablehlo.custom_call @hlopt.bcoo.multiply_dense(%data, %indices, %v) {api_version = 4 : i32, backend_config = {indices_sorted = false, n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 1099511627776>, unique_indices = false}} : (tensor<3xf32>, tensor<3x2xi32>, tensor<1x1xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

// A bad op after a good one is found before the good one is rewritten.
// expected-error@+3 {{@hlopt.bcoo.todense: backend_config has no 'n_dense' (an integer)}}
func.func @second_op_bad(%data: tensor<3xf32>, %indices: tensor<3x2xi32>) -> (tensor<4x5xf32>, tensor<4x5xf32>) {
  %0 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, n_dense = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  %1 = stablehlo.custom_call @hlopt.bcoo.todense(%data, %indices) {api_version = 4 : i32, backend_config = {n_batch = 0 : i64, shape = array<i64: 4, 5>}} : (tensor<3xf32>, tensor<3x2xi32>) -> tensor<4x5xf32>
  return %0, %1 : tensor<4x5xf32>, tensor<4x5xf32>
}
