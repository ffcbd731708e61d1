// RUN: env PYTHONPATH=%S/Inputs XLA_FLAGS=--xla_force_host_platform_device_count=8 hlopt-opt --allow-import %s -p "lower-custom-partitioning{target=gspmd}" --split-input-file | filecheck %s

// GSPMD form: the operand is resharded with @Sharding, cut to its per-device
// shape, the body runs in manual mode, and the result is put back together.
// Argument and result shardings become mhlo.sharding strings; no sdy remains.
// CHECK-NOT: sdy.
// CHECK-LABEL: func.func public @rows(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"}) -> (tensor<8x16xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"})
// CHECK: %[[S:.*]] = stablehlo.custom_call @Sharding(%arg0) {backend_config = "", mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[L:.*]] = stablehlo.custom_call @SPMDFullToShardShape(%[[S]]) {backend_config = "", mhlo.sharding = "{manual}"} : (tensor<8x16xf32>) -> tensor<1x16xf32>
// CHECK: %[[M:.*]] = stablehlo.multiply %[[L]], %{{.*}} : tensor<1x16xf32>
// CHECK: %[[MS:.*]] = stablehlo.custom_call @Sharding(%[[M]]) {backend_config = "", mhlo.sharding = "{manual}"} : (tensor<1x16xf32>) -> tensor<1x16xf32>
// CHECK: %[[F:.*]] = stablehlo.custom_call @SPMDShardToFullShape(%[[MS]]) {backend_config = "", mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<1x16xf32>) -> tensor<8x16xf32>
// CHECK: return %[[F]]
// CHECK-NOT: sdy.
sdy.mesh @mesh = <["x"=8]>
func.func public @rows(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0) {api_version = 4 : i32, backend_config = {in_tree = "(0,)", key = "lit_partitioners:double", mesh = #sdy.mesh<["x"=8]>, out_tree = "0", static_args = "()"}, called_computations = [@double_body], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j])->([i, j]) {i=8, j=16}, custom>} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
func.func private @double_body(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Two mesh axes: "x" tiles dimension 0 and "y" dimension 1; b is tiled on
// "y" and replicated over "x" (the transposed iota form), the result is tiled
// on "x" and replicated over "y". A sharding constraint becomes @Sharding.
// CHECK-LABEL: func.func public @matmul
// CHECK-SAME: {mhlo.sharding = "{devices=[2,4]<=[8]}"}
// CHECK-SAME: {mhlo.sharding = "{replicated}"}
// CHECK: stablehlo.custom_call @Sharding(%arg0) {backend_config = "", mhlo.sharding = "{devices=[2,4]<=[8]}"}
// CHECK: stablehlo.custom_call @Sharding(%arg1) {backend_config = "", mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}
// CHECK: stablehlo.dot_general {{.*}} -> tensor<4x4xf32>
// CHECK: "stablehlo.all_reduce"
// CHECK: @SPMDShardToFullShape({{.*}}) {backend_config = "", mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"} : (tensor<4x4xf32>) -> tensor<8x4xf32>
// CHECK: stablehlo.custom_call @Sharding(%arg0) {backend_config = "", mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: @SPMDShardToFullShape({{.*}}) {backend_config = "", mhlo.sharding = "{replicated}"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
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
