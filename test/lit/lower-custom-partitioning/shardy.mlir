// RUN: env PYTHONPATH=%S/Inputs XLA_FLAGS=--xla_force_host_platform_device_count=8 hlopt-opt --allow-import %s -p lower-custom-partitioning --split-input-file | filecheck %s

// The operand is sharded on its rows; `double` keeps that sharding, so each
// device doubles its own 1x16 rows inside a manual computation. The body is
// `lower_fn` of the partitioner (x * 2), lowered at the per-device shape.
// CHECK-LABEL: func.func public @rows
// CHECK-NOT: hlopt.custom_partitioning
// CHECK: %[[R:.*]] = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%[[L:.*]]: tensor<1x16xf32>) {
// CHECK: %[[M:.*]] = stablehlo.multiply %[[L]], %{{.*}} : tensor<1x16xf32>
// CHECK: sdy.return %[[M]] : tensor<1x16xf32>
// CHECK: } : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: return %[[R]]
// CHECK-NOT: func.func private @double_body
sdy.mesh @mesh = <["x"=8]>
func.func public @rows(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<8x16xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "lit_partitioners:double", mesh = #sdy.mesh<["x"=8]>, out_tree = "0", static_args = "()"}, called_computations = [@double_body], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=16}, custom>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
func.func private @double_body(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// A matmul whose contracting dimension is sharded on "y" (a reduction factor):
// the partitioner asks for b split on its rows too and all-reduces over "y".
// The second annotation reads a sharding constraint, which it finds after
// Shardy propagation: columns on "y" become replicated for `double`.
// CHECK-LABEL: func.func public @matmul
// CHECK: sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{"x"}, {"y"}]>, <@mesh, [{"y"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x", "y"} (%[[A:.*]]: tensor<4x4xf32>, %[[B:.*]]: tensor<4x4xf32>) {
// CHECK: %[[D:.*]] = stablehlo.dot_general %[[A]], %[[B]]
// CHECK: "stablehlo.all_reduce"(%[[D]])
// CHECK-SAME: channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>
// CHECK-SAME{LITERAL}: replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]>
// CHECK: %[[C:.*]] = sdy.sharding_constraint %arg0 <@mesh, [{}, {"y"}]>
// CHECK: sdy.manual_computation(%[[C]]) in_shardings=[<@mesh, [{}, {}]>] out_shardings=[<@mesh, [{}, {}]>] manual_axes={"x", "y"} (%{{.*}}: tensor<8x16xf32>)
// CHECK-NOT: hlopt.custom_partitioning
func.func public @matmul(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}, %arg1: tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) -> (tensor<8x4xf32>, tensor<8x16xf32>) {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0, %arg1) {api_version = 4 : i32, backend_config = {in_tree = "(0, 0)", key = "lit_partitioners:matmul", mesh = #sdy.mesh<["x"=2, "y"=4]>, out_tree = "0", static_args = "()"}, called_computations = [@matmul_body], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [j, k])->([i, k]) {i=8, j=16, k=4} reduction={j}, custom>} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %1 = sdy.sharding_constraint %arg0 <@mesh, [{}, {"y"}]> : tensor<8x16xf32>
  %2 = stablehlo.custom_call @hlopt.custom_partitioning(%1) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "lit_partitioners:double", mesh = #sdy.mesh<["x"=2, "y"=4]>, out_tree = "0", static_args = "()"}, called_computations = [@double_body], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=16}, custom>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0, %2 : tensor<8x4xf32>, tensor<8x16xf32>
}
sdy.mesh @mesh = <["x"=2, "y"=4]>
func.func private @matmul_body(%arg0: tensor<8x16xf32>, %arg1: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
func.func private @double_body(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Without a mesh (one device) there is nothing to partition: the body is called.
// CHECK-LABEL: func.func public @one_device
// CHECK: %[[R:.*]] = call @double_body(%arg0) : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: return %[[R]]
// CHECK: func.func private @double_body
func.func public @one_device(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "lit_partitioners:double", out_tree = "0", static_args = "()"}, called_computations = [@double_body]} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
func.func private @double_body(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
