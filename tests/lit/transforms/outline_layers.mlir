// RUN: orrery-opt %s --orrery-outline-layers -split-input-file | FileCheck %s

// Three identical layers (matmul, relu) chained: one function, three calls;
// the first op on a weight-free input stays a stem, the last a head.
// CHECK-LABEL: func.func @main
// CHECK: %[[S:.*]] = call @stem(%arg0)
// CHECK: %[[L0:.*]] = call @mlp_block(%[[S]], %{{.*}}) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
// CHECK: %[[L1:.*]] = call @mlp_block(%[[L0]], %{{.*}})
// CHECK: %[[L2:.*]] = call @mlp_block(%[[L1]], %{{.*}})
// CHECK: call @head(%[[L2]])
// CHECK: func.func private @stem
// CHECK: func.func private @mlp_block(%arg0: tensor<4x16xf32>, %arg1: tensor<16x16xf32> {orrery.weight = true}) -> tensor<4x16xf32>
// CHECK-NEXT: orrery.matmul
// CHECK-NEXT: orrery.relu
// CHECK-NEXT: return
func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %w0 = orrery.weight "l0" trainable : tensor<16x16xf32>
  %w1 = orrery.weight "l1" trainable : tensor<16x16xf32>
  %w2 = orrery.weight "l2" trainable : tensor<16x16xf32>
  %in = orrery.tanh(%x) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %a0 = orrery.matmul(%in, %w0) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %r0 = orrery.relu(%a0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %a1 = orrery.matmul(%r0, %w1) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %r1 = orrery.relu(%a1) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %a2 = orrery.matmul(%r1, %w2) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %r2 = orrery.relu(%a2) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %out = orrery.softmax(%r2) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  return %out : tensor<4x16xf32>
}

// -----

// Parallel branches repeat but do not chain: not layers.
// CHECK-LABEL: func.func @main
// CHECK-NOT: call @mlp_block
// CHECK: call @stem
func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %w0 = orrery.weight "a" trainable : tensor<16x16xf32>
  %w1 = orrery.weight "b" trainable : tensor<16x16xf32>
  %a0 = orrery.matmul(%x, %w0) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %r0 = orrery.relu(%a0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %a1 = orrery.matmul(%x, %w1) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %r1 = orrery.relu(%a1) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %s = orrery.add(%r0, %r1) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %s : tensor<4x16xf32>
}
