// RUN: hlopt compile %s --mesh x=2 -o %t.hlx | filecheck %s --check-prefix=COMPILE
// RUN: hlopt inspect %t.hlx | filecheck %s
// RUN: hlopt run %t.hlx --input %S/Inputs/xy.npz | filecheck %s --check-prefix=EXEC
// RUN: not hlopt compile %s -o %t.bad 2>&1 | filecheck %s --check-prefix=NOMESH

// COMPILE: wrote {{.*}}: sharded(float32[2,3], float32[3]) -> (float32[2,3], float32[]) on 2 device(s)

// CHECK: devices:    2, mesh x=2 (Auto), device ids [0, 1]
// CHECK: partitioner: shardy
// CHECK: inputs:
// CHECK-NEXT: 0 {{ +}}float32[2,3] {{ +}}P('x')
// CHECK-NEXT: 1 {{ +}}float32[3] {{ +}}P()
// CHECK: outputs:
// CHECK-NEXT: 0 {{ +}}float32[2,3] {{ +}}P('x')
// CHECK-NEXT: 1 {{ +}}float32[] {{ +}}P()

// EXEC: 0: float32[2, 3]
// EXEC-NEXT: {{\[\[}}0. 1. 2.]
// EXEC-NEXT: [0. 1. 2.]]
// EXEC-NEXT: 1: float32[]
// EXEC-NEXT: 6.

// NOMESH: hlopt: error: {{.*}}sharded.mlir is partitioned for 2 device(s): give a --mesh of that size

module @sharded attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%x: tensor<2x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>},
                         %y: tensor<3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>})
      -> (tensor<2x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {
    %b = stablehlo.broadcast_in_dim %y, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
    %0 = stablehlo.multiply %x, %b : tensor<2x3xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<f32>
    return %0, %1 : tensor<2x3xf32>, tensor<f32>
  }
}
