// RUN: hlopt-opt --allow-import %s -p lower-custom-partitioning --verify-diagnostics

// With --allow-import, a key that is not registered is imported: here its module cannot be.
// expected-error@+3 {{cannot resolve custom partitioner: 'no_such_module_for_hlopt:op' is not registered and importing 'no_such_module_for_hlopt' failed}}
sdy.mesh @mesh = <["x"=8]>
func.func public @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> tensor<8xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "no_such_module_for_hlopt:op", mesh = #sdy.mesh<["x"=8]>, out_tree = "0", static_args = "()"}, called_computations = [@body]} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @body(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  return %arg0 : tensor<8xf32>
}
