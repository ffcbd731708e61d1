// RUN: env PYTHONPATH=%S/Inputs XLA_FLAGS=--xla_force_host_platform_device_count=8 hlopt-opt --allow-import %s -p lower-custom-partitioning --split-input-file --verify-diagnostics

// expected-error@+3 {{custom_partitioning 'lit_partitioners:broken' with operands (float32[8, 16] sharded [{"x"}, {}]): the partitioner raised ValueError: this layout is not supported}}
sdy.mesh @mesh = <["x"=8]>
func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x16xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "lit_partitioners:broken", mesh = #sdy.mesh<["x"=8]>, out_tree = "0", static_args = "()"}, called_computations = [@broken_body], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=16}, custom>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
func.func private @broken_body(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  return %arg0 : tensor<8x16xf32>
}

// -----

// The result sharding from partition does not divide the result's columns.
// expected-error@+3 {{custom_partitioning 'lit_partitioners:uneven' with operands (float32[8, 6] sharded [{"x"}, {}]): result 0 float32[8, 6] is not divisible by its sharding [(), ('x',)] on mesh #sdy.mesh<["x"=8]>}}
sdy.mesh @mesh = <["x"=8]>
func.func public @main(%arg0: tensor<8x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x6xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "lit_partitioners:uneven", mesh = #sdy.mesh<["x"=8]>, out_tree = "0", static_args = "()"}, called_computations = [@uneven_body], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=6}, custom>} : (tensor<8x6xf32>) -> tensor<8x6xf32>
  return %0 : tensor<8x6xf32>
}
func.func private @uneven_body(%arg0: tensor<8x6xf32>) -> tensor<8x6xf32> {
  return %arg0 : tensor<8x6xf32>
}
