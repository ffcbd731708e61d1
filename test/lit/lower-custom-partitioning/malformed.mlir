// RUN: hlopt-opt %s -p lower-custom-partitioning --split-input-file --verify-diagnostics
// RUN: hlopt-opt %s -p hlopt-default --split-input-file --verify-diagnostics
// --verify-diagnostics checks lines, not columns: the column (8, the custom_call after
// `%0 = `, not its function at 1) is checked on stderr, one error a chunk.
// RUN: not hlopt-opt %s -p lower-custom-partitioning --split-input-file 2>&1 | filecheck %s --check-prefix=COLUMN
// COLUMN-COUNT-10: malformed.mlir:{{[0-9]+}}:8: error:
// COLUMN-NOT: error:

// Every malformed annotation is refused at its own line, one line each, never
// silently treated as a one-device call.

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: no 'key'; no 'static_args'; no 'in_tree'; no 'out_tree'; expected backend_config = {key, static_args, in_tree, out_tree[, mesh]} and called_computations = [@body], as hlopt.custom_partitioning writes them}}
func.func @empty_config(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {}, called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: backend_config is "key=op", not a dictionary}}
func.func @string_config(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {backend_config = "key=op", called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: backend_config is none, not a dictionary}}
func.func @no_config(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: 'key' is 7 : i64, not a string}}
func.func @key_not_a_string(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = 7, out_tree = "0", static_args = "()"}, called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: unknown field 'mesh_axes'}}
func.func @misspelled_mesh(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "m:op", out_tree = "0", static_args = "()", mesh_axes = "x=8"}, called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: 'mesh' is 8 : i64, not a #sdy.mesh}}
func.func @mesh_not_a_mesh(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "m:op", mesh = 8, out_tree = "0", static_args = "()"}, called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: called_computations names @missing, which is not a function of this module}}
func.func @missing_body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "m:op", out_tree = "0", static_args = "()"}, called_computations = [@missing]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: called_computations is empty, not one function}}
func.func @no_body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "m:op", out_tree = "0", static_args = "()"}} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// expected-error@+2 {{malformed @hlopt.custom_partitioning annotation: @body has type (tensor<4xf32>) -> tensor<4xf32> but the annotation is (tensor<8xf32>) -> tensor<8xf32>}}
func.func @body_of_another_type(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "m:op", out_tree = "0", static_args = "()"}, called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

// expected-error@+3 {{custom_partitioning 'm:op': operand 0 has type tensor<?xf32>; a partitioner is shown statically shaped tensors}}
sdy.mesh @mesh = <["x"=8]>
func.func @dynamic(%arg0: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "m:op", mesh = #sdy.mesh<["x"=8]>, out_tree = "0", static_args = "()"}, called_computations = [@body]} : (tensor<?xf32>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}
func.func private @body(%arg0: tensor<?xf32>) -> tensor<?xf32> {
  return %arg0 : tensor<?xf32>
}
