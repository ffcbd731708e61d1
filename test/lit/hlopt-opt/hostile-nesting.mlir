// Input nested deeper than MLIR's parser (or XLA) can take is refused before parsing: one line with the
// location, exit 1, never a segmentation fault (test/python/support/nesting_limits.py generates the inputs).
// Checked on stderr, not with --verify-diagnostics: the inputs are generated (no room for an
// expected-error comment in them), and the check is that the whole output is that one line.

// RUN: %PYTHON %S/../../python/support/nesting_limits.py --emit tuple 20000 > %t.types.mlir
// RUN: not hlopt-opt %t.types.mlir -p canonicalize 2>&1 | filecheck %s --check-prefix=TYPES
// RUN: not hlopt-opt %t.types.mlir -p canonicalize 2>&1 | wc -l | filecheck %s --check-prefix=ONE-LINE
// TYPES: types.mlir:1:{{[0-9]+}}: error: more than 512 levels of nesting (types, attributes, regions, locations)
// TYPES-NOT: Traceback

// RUN: %PYTHON %S/../../python/support/nesting_limits.py --emit array 100000 > %t.attrs.mlir
// RUN: not hlopt-opt %t.attrs.mlir 2>&1 | filecheck %s --check-prefix=ATTRS
// RUN: not hlopt-opt %t.attrs.mlir 2>&1 | wc -l | filecheck %s --check-prefix=ONE-LINE
// ATTRS: attrs.mlir:1:{{[0-9]+}}: error: more than 512 levels of nesting

// RUN: %PYTHON %S/../../python/support/nesting_limits.py --emit module 3000 > %t.regions.mlir
// RUN: not hlopt-opt %t.regions.mlir -p hlopt-default 2>&1 | filecheck %s --check-prefix=REGIONS
// RUN: not hlopt-opt %t.regions.mlir -p hlopt-default 2>&1 | wc -l | filecheck %s --check-prefix=ONE-LINE
// REGIONS: regions.mlir:1:{{[0-9]+}}: error: more than 100 nested regions or dictionaries

// RUN: %PYTHON %S/../../python/support/nesting_limits.py --emit array-aliases 30000 > %t.aliases.mlir
// RUN: not hlopt-opt %t.aliases.mlir 2>&1 | filecheck %s --check-prefix=ALIASES
// ALIASES: aliases.mlir:513:1: error: this alias holds more than 512 levels of nesting

// RUN: %PYTHON %S/../../python/support/nesting_limits.py --emit location-aliases 30000 > %t.locations.mlir
// RUN: not hlopt-opt %t.locations.mlir --debug-info 2>&1 | filecheck %s --check-prefix=LOCATIONS
// LOCATIONS: locations.mlir:257:1: error: this alias holds more than 512 levels of nesting

// ONE-LINE: {{^ *1$}}

// Within the bounds the same shapes parse, run and print.
// RUN: %PYTHON %S/../../python/support/nesting_limits.py --emit tuple 500 | hlopt-opt - -p hlopt-default | filecheck %s --check-prefix=WITHIN
// WITHIN: func.func @f(%arg0: tuple<tuple<tuple<
