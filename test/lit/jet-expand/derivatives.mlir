// RUN: hlopt-opt %s -p 'jet-expand{func=f order=1}' --split-input-file | filecheck %s

// One case per entry of the derivative table (passes/optable/derivatives.py): the rule
// built from it names the op its formula applies (or the product / quotient).

// stablehlo.exponential: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.exponential"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.exponential_minus_one: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.exponential_minus_one"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.log: 1 / f'(x) from the derivative table builds stablehlo.divide
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.divide
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.log"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.log_plus_one: 1 / f'(x) from the derivative table builds stablehlo.divide
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.divide
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.log_plus_one"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.sqrt: 1 / f'(x) from the derivative table builds stablehlo.divide
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.divide
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.sqrt"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.rsqrt: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.rsqrt"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.cbrt: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.cbrt"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.sine: f'(x) from the derivative table builds stablehlo.cosine
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.cosine
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.sine"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.cosine: f'(x) from the derivative table builds stablehlo.sine
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.sine
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.cosine"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.tan: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.tan"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.tan: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.tan"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.tanh: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.tanh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// stablehlo.logistic: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.logistic"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.sinh: f'(x) from the derivative table builds chlo.cosh
// CHECK-LABEL: func.func @f_jet1
// CHECK: chlo.cosh
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.sinh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.cosh: f'(x) from the derivative table builds chlo.sinh
// CHECK-LABEL: func.func @f_jet1
// CHECK: chlo.sinh
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.cosh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.asin: f'(x) from the derivative table builds stablehlo.rsqrt
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.rsqrt
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.asin"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.acos: f'(x) from the derivative table builds stablehlo.rsqrt
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.rsqrt
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.acos"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.atan: 1 / f'(x) from the derivative table builds stablehlo.divide
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.divide
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.atan"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.asinh: f'(x) from the derivative table builds stablehlo.rsqrt
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.rsqrt
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.asinh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.acosh: f'(x) from the derivative table builds stablehlo.rsqrt
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.rsqrt
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.acosh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.atanh: 1 / f'(x) from the derivative table builds stablehlo.divide
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.divide
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.atanh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.erf: f'(x) from the derivative table builds stablehlo.exponential
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.exponential
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.erf"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.erfc: f'(x) from the derivative table builds stablehlo.exponential
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.exponential
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.erfc"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.erf_inv: f'(x) from the derivative table builds stablehlo.exponential
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.exponential
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.erf_inv"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.lgamma: f'(x) from the derivative table builds chlo.digamma
// CHECK-LABEL: func.func @f_jet1
// CHECK: chlo.digamma
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.lgamma"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.digamma: f'(x) from the derivative table builds chlo.polygamma
// CHECK-LABEL: func.func @f_jet1
// CHECK: chlo.polygamma
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.digamma"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.polygamma: f'(x) from the derivative table builds chlo.polygamma
// CHECK-LABEL: func.func @f_jet1
// CHECK: chlo.polygamma
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %n = stablehlo.constant dense<1.0> : tensor<4xf32>
  %0 = "chlo.polygamma"(%n, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// chlo.square: f'(x) from the derivative table builds stablehlo.multiply
// CHECK-LABEL: func.func @f_jet1
// CHECK: stablehlo.multiply
// CHECK: return
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "chlo.square"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
