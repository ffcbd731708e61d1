// RUN: hlopt-opt %s --platform cpu -p xla-cpu-ynn-fusion --split-input-file | filecheck %s
// RUN: hlopt-opt %s --platform cpu -p xla-cpu-ynn-fusion,xla-cpu-ynn-fusion --split-input-file | filecheck %s
// RUN: hlopt-opt %s --split-input-file > %t.parsed
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-ynn-fusion --platform tpu > %t.tpu
// RUN: hlopt-opt %s --split-input-file -p xla-cpu-ynn-fusion > %t.none

// A sum over rows of 3 (an electron's x, y, z): YNNPACK's reduce fusion runs it slowly, so
// the module records the option that turns that fusion off. The IR is unchanged.
// CHECK: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}} {
// CHECK-NEXT: func.func @short_rows
// CHECK: stablehlo.reduce(%{{.*}} init: %{{.*}}) applies stablehlo.add across dimensions = [3] : (tensor<24x128x8x3xf32>, tensor<f32>) -> tensor<24x128x8xf32>
func.func @short_rows(%x: tensor<24x128x8x3xf32>) -> tensor<24x128x8xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [3] : (tensor<24x128x8x3xf32>, tensor<f32>) -> tensor<24x128x8xf32>
  return %0 : tensor<24x128x8xf32>
}

// -----

// A max over rows of 1024 (a softmax's): the fusion runs it faster, the module is left alone.
// CHECK: module {
// CHECK-NEXT: func.func @long_rows
func.func @long_rows(%x: tensor<512x1024xf32>) -> tensor<512xf32> {
  %c0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.maximum across dimensions = [1] : (tensor<512x1024xf32>, tensor<f32>) -> tensor<512xf32>
  return %0 : tensor<512xf32>
}

// -----

// Rows of 16 are still short; a sum over the two trailing dimensions has rows of their product.
// CHECK: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}} {
// CHECK-NEXT: func.func @rows_of_16
func.func @rows_of_16(%x: tensor<512x4x4xf64>) -> tensor<512xf64> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f64>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1, 2] : (tensor<512x4x4xf64>, tensor<f64>) -> tensor<512xf64>
  return %0 : tensor<512xf64>
}

// -----

// CHECK: module {
// CHECK-NEXT: func.func @rows_of_32
func.func @rows_of_32(%x: tensor<512x4x8xf32>) -> tensor<512xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1, 2] : (tensor<512x4x8xf32>, tensor<f32>) -> tensor<512xf32>
  return %0 : tensor<512xf32>
}

// -----

// A sum over a leading dimension alone (one xla-cpu-sum-as-dot left): no trailing row, slow
// in the fusion.
// CHECK: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}} {
// CHECK-NEXT: func.func @leading
func.func @leading(%x: tensor<24x128x8xf32>) -> tensor<128x8xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [0] : (tensor<24x128x8xf32>, tensor<f32>) -> tensor<128x8xf32>
  return %0 : tensor<128x8xf32>
}

// -----

// Both kinds: the short rows' 12288 elements outweigh a quarter of the long rows' 32768.
// CHECK: module attributes {hlopt.compiler_options = {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}} {
// CHECK-NEXT: func.func @mixed_short
func.func @mixed_short(%x: tensor<4096x3xf32>, %y: tensor<512x64xf32>) -> (tensor<4096xf32>, tensor<512xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<4096x3xf32>, tensor<f32>) -> tensor<4096xf32>
  %1 = stablehlo.reduce(%y init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<512x64xf32>, tensor<f32>) -> tensor<512xf32>
  return %0, %1 : tensor<4096xf32>, tensor<512xf32>
}

// -----

// ... but not a quarter of 65536.
// CHECK: module {
// CHECK-NEXT: func.func @mixed_long
func.func @mixed_long(%x: tensor<4096x3xf32>, %y: tensor<1024x64xf32>) -> (tensor<4096xf32>, tensor<1024xf32>) {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<4096x3xf32>, tensor<f32>) -> tensor<4096xf32>
  %1 = stablehlo.reduce(%y init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<1024x64xf32>, tensor<f32>) -> tensor<1024xf32>
  return %0, %1 : tensor<4096xf32>, tensor<1024xf32>
}

// -----

// Reductions the fusion does not take: integers, a product, two operands at once (an argmax).
// CHECK: module {
// CHECK-NEXT: func.func @not_taken
func.func @not_taken(%i: tensor<2048x3xi32>, %x: tensor<2048x3xf32>) -> (tensor<2048xi32>, tensor<2048xf32>, tensor<2048xf32>, tensor<2048xi32>) {
  %z = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %0 = stablehlo.reduce(%i init: %z) applies stablehlo.add across dimensions = [1] : (tensor<2048x3xi32>, tensor<i32>) -> tensor<2048xi32>
  %1 = stablehlo.reduce(%x init: %one) applies stablehlo.multiply across dimensions = [1] : (tensor<2048x3xf32>, tensor<f32>) -> tensor<2048xf32>
  %2:2 = stablehlo.reduce(%x init: %ninf), (%i init: %z) across dimensions = [1] : (tensor<2048x3xf32>, tensor<2048x3xi32>, tensor<f32>, tensor<i32>) -> (tensor<2048xf32>, tensor<2048xi32>)
   reducer(%a: tensor<f32>, %c: tensor<f32>) (%b: tensor<i32>, %d: tensor<i32>) {
    %m = stablehlo.maximum %a, %c : tensor<f32>
    %n = stablehlo.maximum %b, %d : tensor<i32>
    stablehlo.return %m, %n : tensor<f32>, tensor<i32>
  }
  return %0, %1, %2#0, %2#1 : tensor<2048xi32>, tensor<2048xf32>, tensor<2048xf32>, tensor<2048xi32>
}

// -----

// A reduction of fewer than 4096 elements, which XLA:CPU keeps out of the fusion, counts for nothing.
// CHECK: module {
// CHECK-NEXT: func.func @small
func.func @small(%x: tensor<1365x3xf32>) -> tensor<1365xf32> {
  %c0 = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %c0) applies stablehlo.add across dimensions = [1] : (tensor<1365x3xf32>, tensor<f32>) -> tensor<1365xf32>
  return %0 : tensor<1365xf32>
}

// lit's own diff loses the environment of the commands after it (PYTHONPATH): diffs run last.
// The pass leaves a module compiled for another platform, or none, as it is.
// RUN: diff %t.parsed %t.tpu
// RUN: diff %t.parsed %t.none
