// RUN: orrery-opt %s | orrery-opt | FileCheck %s
// Every kind of op prints and parses back.

// CHECK-LABEL: func.func @ops
func.func @ops(%x: tensor<2x8xf16>, %c: tensor<i1>) -> tensor<2x8xf16> {
  // CHECK: orrery.weight "w" trainable : tensor<8x8xf16>
  %w = orrery.weight "w" trainable : tensor<8x8xf16>
  // CHECK: orrery.weight "stat" : tensor<8xf16>
  %s = orrery.weight "stat" : tensor<8xf16>
  // CHECK: orrery.constant dense<[2, 8]> : tensor<2xi64>
  %k = orrery.constant dense<[2, 8]> : tensor<2xi64>
  // CHECK: orrery.none
  %n = orrery.none
  // CHECK: orrery.matmul(%{{.*}}, %{{.*}}) : (tensor<2x8xf16>, tensor<8x8xf16>) -> tensor<2x8xf16>
  %m = orrery.matmul(%x, %w) : (tensor<2x8xf16>, tensor<8x8xf16>) -> tensor<2x8xf16>
  // CHECK: orrery.onnx_op "FastGelu" "com.microsoft"
  %g = orrery.onnx_op "FastGelu" "com.microsoft" (%m) : (tensor<2x8xf16>) -> tensor<2x8xf16>
  // CHECK: orrery.if
  %r = orrery.if(%c) : (tensor<i1>) -> tensor<2x8xf16> {
    orrery.yield %g : tensor<2x8xf16>
  } else {
    orrery.yield %m : tensor<2x8xf16>
  }
  return %r : tensor<2x8xf16>
}
