// Every pipeline error is one line and exit status 1, also those MLIR only prints (an inline pass's
// default pipeline is parsed when the pass runs, and its errors were printed and ignored).
// A pipeline is checked before the input is read, so these are the command's errors, not
// diagnostics of the input that --verify-diagnostics could match: they are checked on stderr.

// RUN: not hlopt-opt %s -p 'inline{default-pipeline=jet-expand}' 2>&1 | filecheck %s --check-prefix=NESTED
// NESTED: hlopt-opt: error: 'jet-expand' is an hlopt pass or pipeline: it runs on the whole module and cannot be nested in 'inline{default-pipeline=jet-expand}'; put it at the top level of the pipeline
// NESTED-NOT: MLIR Textual PassPipeline Parser

// RUN: not hlopt-opt %s -p 'inline{default-pipeline=no-such-pass}' 2>&1 | filecheck %s --check-prefix=DEFAULT
// DEFAULT: hlopt-opt: error: unknown pass or pipeline 'no-such-pass' in 'inline{default-pipeline=no-such-pass}'
// DEFAULT-NOT: MLIR Textual PassPipeline Parser

// RUN: not hlopt-opt %s -p 'func.func(lower-bcoo)' 2>&1 | filecheck %s --check-prefix=FUNC
// FUNC: hlopt-opt: error: 'lower-bcoo' is an hlopt pass or pipeline

// RUN: not hlopt-opt %s -p 'canonicalize{max-iterations=99999999999999999999}' 2>&1 | filecheck %s --check-prefix=HUGE
// HUGE: hlopt-opt: error: cannot parse pipeline element 'canonicalize{max-iterations=99999999999999999999}': for the --max-iterations option: '99999999999999999999' value invalid for long argument!
// HUGE-NOT: {{.}}

// RUN: not hlopt-opt %s -p 'jet-expand{func=main order=2 order=3}' 2>&1 | filecheck %s --check-prefix=TWICE
// TWICE: hlopt-opt: error: option 'order' is given twice

// The pipelines MLIR accepts still run: an empty default pipeline, nested anchors, a builtin.module wrapper.
// RUN: hlopt-opt %s -p 'inline{default-pipeline=},builtin.module(func.func(cse)),builtin.module(canonicalize)' | filecheck %s
// CHECK-LABEL: func.func @main
// CHECK: stablehlo.add
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
