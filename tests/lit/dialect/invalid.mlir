// RUN: orrery-opt %s -split-input-file -verify-diagnostics

func.func @arity(%x: tensor<4xf32>) {
  // expected-error @+1 {{'orrery.relu' op takes 1 to 1 operands, got 2}}
  %0 = orrery.relu(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @results(%x: tensor<4xf32>) {
  // expected-error @+1 {{'orrery.softmax' op gives 1 to 1 results, got 2}}
  %0:2 = orrery.softmax(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @broadcast(%x: tensor<4x8xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{'orrery.add' op operand shapes do not broadcast: dimension 1 is 8 and 3}}
  %0 = orrery.add(%x, %y) : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul(%x: tensor<4x8xf32>, %w: tensor<6x2xf32>) {
  // expected-error @+1 {{'orrery.matmul' op contraction dimensions differ: 8 vs 6}}
  %0 = orrery.matmul(%x, %w) : (tensor<4x8xf32>, tensor<6x2xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @conv(%x: tensor<1x6x8x8xf32>, %w: tensor<4x4x3x3xf32>) {
  // expected-error @+1 {{'orrery.conv' op input channels 6 differ from weight channels 4 times group 2}}
  %0 = orrery.conv(%x, %w) {group = 2 : i64} : (tensor<1x6x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x6x6xf32>
  return
}

// -----

func.func @conv_rank(%x: tensor<6x8xf32>, %w: tensor<4x4xf32>) {
  // expected-error @+1 {{'orrery.conv' op input and weight must have the same rank >= 3}}
  %0 = orrery.conv(%x, %w) : (tensor<6x8xf32>, tensor<4x4xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @yield_outside(%x: tensor<4xf32>) {
  // expected-error @+1 {{'orrery.yield' op expects parent op to be one of 'orrery.if, orrery.loop, orrery.scan'}}
  orrery.yield %x : tensor<4xf32>
}

// -----

func.func @constant_type() {
  // expected-error @+1 {{'orrery.constant' op failed to verify that all of {value, output} have same type}}
  %0 = "orrery.constant"() {value = dense<1> : tensor<2xi64>} : () -> tensor<3xi64>
  return
}
