// RUN: env PYTHONPATH=%S/Inputs XLA_FLAGS=--xla_force_host_platform_device_count=8 hlopt-opt --allow-import %s -p "lower-custom-partitioning{target=gspmd}" | filecheck %s
// RUN: env PYTHONPATH=%S/Inputs XLA_FLAGS=--xla_force_host_platform_device_count=8 hlopt-opt --allow-import %s -p lower-custom-partitioning --verify-diagnostics

// A module lowered for GSPMD (jax_use_shardy_partitioner off): the operand
// shardings are read back from mhlo.sharding strings ("{devices=[2,4]<=[8]}"
// is a tiled on "x" and "y"; the transposed iota tiles b's rows on ("y", "x")).
// CHECK-LABEL: func.func public @main
// CHECK: @Sharding(%arg0) {backend_config = "", mhlo.sharding = "{devices=[2,4]<=[8]}"}
// CHECK: @SPMDFullToShardShape({{.*}}) {{.*}} : (tensor<8x16xf32>) -> tensor<4x4xf32>
// CHECK: @Sharding(%arg1) {backend_config = "", mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}
// CHECK: "stablehlo.all_reduce"
// CHECK: @SPMDShardToFullShape({{.*}}) {backend_config = "", mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"}
// CHECK-NOT: hlopt.custom_partitioning
// CHECK-NOT: sdy.

// expected-error@+2 {{the module holds GSPMD shardings (it was lowered with jax_use_shardy_partitioner off): use lower-custom-partitioning{target=gspmd}}}
func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[2,4]<=[8]}"}, %arg1: tensor<16x4xf32> {mhlo.sharding = "{devices=[8,1]<=[2,4]T(1,0)}"}) -> tensor<8x4xf32> {
  %0 = stablehlo.custom_call @hlopt.custom_partitioning(%arg0, %arg1) {api_version = 4 : i32, backend_config = {in_tree = "(0, 0)", key = "lit_partitioners:matmul", mesh = #sdy.mesh<["x"=2, "y"=4]>, out_tree = "0", static_args = "()"}, called_computations = [@matmul_body], sdy.sharding_rule = #sdy.op_sharding_rule<([i, j], [j, k])->([i, k]) {i=8, j=16, k=4} reduction={j}, custom>} : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
func.func private @matmul_body(%arg0: tensor<8x16xf32>, %arg1: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
