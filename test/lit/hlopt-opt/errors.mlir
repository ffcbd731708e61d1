// RUN: hlopt-opt %s -p cse --split-input-file --verify-diagnostics | filecheck %s
// RUN: not hlopt-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: hlopt-opt --list-passes | filecheck %s --check-prefix=LIST

// The good chunk is printed, the bad one reported with its line in this file.
// CHECK-LABEL: func.func @good
// CHECK-NOT: func.func @bad
func.func @good(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
// -----
func.func @bad(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{use of undeclared SSA value name}}
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// A pipeline is checked before the input is read, so its errors are the command's, not
// diagnostics of the input: they stay on stderr.
// UNKNOWN: hlopt-opt: error: unknown pass or pipeline 'no-such-pass'
// UNKNOWN-NOT: Traceback

// LIST: Lowerings
// LIST: jet-expand
// LIST: Analyses
// LIST: check-key-reuse
// LIST: For tpu only
// LIST: tpu-folded-solves
// LIST: tpu-sparse-products
// LIST: For cpu only
// LIST: xla-cpu-
// LIST: Pipelines:
// LIST-NEXT: hlopt-default {{.*}}canonicalize,cse,symbol-dce
