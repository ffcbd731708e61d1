// RUN: hlopt compile %s --pipeline canonicalize,cse -o %t.hlx | filecheck %s --check-prefix=COMPILE
// RUN: hlopt inspect %t.hlx --ir | filecheck %s
// RUN: hlopt run %t.hlx --input %S/Inputs/xy.npz | filecheck %s --check-prefix=EXEC
// RUN: head -c 100 %t.hlx > %t.cut && not hlopt inspect %t.cut 2>&1 | filecheck %s --check-prefix=CUT
// A file written under another key: refused by default, compiled from its StableHLO with --trust portable.
// RUN: env HLOPT_KEY=another-machine-key-that-is-not-shared hlopt inspect %t.hlx | filecheck %s --check-prefix=FOREIGN
// RUN: env HLOPT_KEY=another-machine-key-that-is-not-shared not hlopt run %t.hlx --input %S/Inputs/xy.npz 2>&1 | filecheck %s --check-prefix=REFUSED
// RUN: env HLOPT_KEY=another-machine-key-that-is-not-shared hlopt run %t.hlx --input %S/Inputs/xy.npz --trust portable 2>&1 | filecheck %s --check-prefix=PORTABLE

// COMPILE: wrote {{.*}}.hlx ({{[0-9]+}} bytes): inspect(float32[2,3], float32[3]) -> (float32[2,3], float32[]) on 1 device(s)

// CHECK: MAC:        verified with HLOPT_KEY
// CHECK: program:    inspect
// CHECK: devices:    1
// CHECK: pipeline:   canonicalize,cse
// CHECK: inputs:
// CHECK-NEXT: 0 {{ +}}float32[2,3] {{ +}}single device
// CHECK-NEXT: 1 {{ +}}float32[3] {{ +}}single device
// CHECK: outputs:
// CHECK-NEXT: 0 {{ +}}float32[2,3]
// CHECK-NEXT: 1 {{ +}}float32[]
// CHECK: executable {{ +}}{{[0-9]+}} bytes  sha256 {{[0-9a-f]+}}
// CHECK: module {{ +}}{{[0-9]+}} bytes  sha256 {{[0-9a-f]+}}
// The module after the pipeline: cse merged the two identical multiplies.
// CHECK-LABEL: func.func @main
// CHECK: stablehlo.multiply
// CHECK-NOT: stablehlo.multiply
// CHECK: stablehlo.reduce

// EXEC: 0: float32[2, 3]
// EXEC-NEXT: {{\[\[}}0. 2. 4.]
// EXEC-NEXT: [0. 2. 4.]]
// EXEC-NEXT: 1: float32[]
// EXEC-NEXT: 12.

// CUT: hlopt: error: {{.*}}.cut: truncated: the manifest needs {{[0-9]+}} bytes but the file ends after 40
// CUT-NOT: Traceback

// FOREIGN: MAC:        DOES NOT VERIFY with HLOPT_KEY: written under another key, or changed since

// REFUSED: hlopt: error: {{.*}}.hlx: its MAC does not verify with HLOPT_KEY: it was written under another key, or changed since.
// REFUSED-SAME: load it with --trust portable
// REFUSED-NOT: Traceback

// PORTABLE: hlopt: warning: {{.*}}.hlx: not authenticated (--trust portable); compiling it from its portable artifact
// PORTABLE-NEXT: 0: float32[2, 3]
// PORTABLE-NEXT: {{\[\[}}0. 2. 4.]

func.func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<f32>) {
  %b = stablehlo.broadcast_in_dim %y, dims = [1] : (tensor<3xf32>) -> tensor<2x3xf32>
  %0 = stablehlo.multiply %x, %b : tensor<2x3xf32>
  %1 = stablehlo.multiply %x, %b : tensor<2x3xf32>
  %2 = stablehlo.add %0, %1 : tensor<2x3xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %3 = stablehlo.reduce(%2 init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<f32>
  return %2, %3 : tensor<2x3xf32>, tensor<f32>
}
