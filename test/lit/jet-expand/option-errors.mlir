// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=0}' 2>&1 | filecheck %s --check-prefix=ORDER
// RUN: not hlopt-opt %s -p 'jet-expand{order=2}' 2>&1 | filecheck %s --check-prefix=NOFUNC
// Option errors are the command's (the pipeline is checked before the input is read), not
// diagnostics of the input that --verify-diagnostics could match: they are checked on stderr.
// ORDER: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '0'{{$}}
// NOFUNC: hlopt-opt: error: pass 'jet-expand': option 'order' needs 'func' (jet-expand{func=NAME order=K}){{$}}
// The order is bounded: 1000 used to run for minutes, 10^23 to abort with std::bad_alloc.
// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=1000}' 2>&1 | filecheck %s --check-prefix=BIG
// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=100000000000000000000000}' 2>&1 | filecheck %s --check-prefix=HUGE
// RUN: not hlopt-opt %s -p 'jet-expand{func=f order=-1}' 2>&1 | filecheck %s --check-prefix=NEGATIVE
// BIG: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '1000'{{$}}
// HUGE: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '100000000000000000000000'{{$}}
// NEGATIVE: hlopt-opt: error: pass 'jet-expand': option 'order' must be between 1 and 64, got '-1'{{$}}

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
