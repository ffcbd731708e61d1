// RUN: not hlopt-opt %s -p cse --split-input-file 2>&1 | filecheck %s
// RUN: not hlopt-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: hlopt-opt --list-passes | filecheck %s --check-prefix=LIST

// The good chunk is printed, the bad one reported with its line in this file.
// CHECK: errors.mlir:[[# @LINE + 8]]:{{[0-9]+}}: error: use of undeclared SSA value name
// CHECK-LABEL: func.func @good
// CHECK-NOT: Traceback
func.func @good(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
// -----
func.func @bad(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// UNKNOWN: hlopt-opt: error: unknown pass or pipeline 'no-such-pass'
// UNKNOWN-NOT: Traceback

// LIST: Passes:
// LIST: Pipelines:
// LIST-NEXT: hlopt-default {{.*}}canonicalize,cse,symbol-dce
