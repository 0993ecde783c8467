// RUN: orrery-opt %s --orrery-annotate-costs | FileCheck %s
// Costs in the IR: MatMul [2,64]x[64,12] = 2·2·12·64 = 3072 FLOPs forward,
// 6144 backward, 3584 bytes read, 96 written, its 512-byte input kept.

// CHECK-LABEL: func.func @mlp
func.func @mlp(%x: tensor<2x64xf32>) -> tensor<2x12xf32> {
  // CHECK: orrery.weight "w"
  // CHECK-SAME: orrery.cost = {bwd_flops = 0 : i64, bytes_read = 0 : i64, bytes_written = 0 : i64, fwd_flops = 0 : i64, params = 768 : i64, saved_bytes = 0 : i64}
  %w = orrery.weight "w" trainable : tensor<64x12xf32>
  // CHECK: orrery.matmul
  // CHECK-SAME: orrery.cost = {bwd_flops = 6144 : i64, bytes_read = 3584 : i64, bytes_written = 96 : i64, fwd_flops = 3072 : i64, params = 0 : i64, saved_bytes = 512 : i64}
  %y = orrery.matmul(%x, %w) : (tensor<2x64xf32>, tensor<64x12xf32>) -> tensor<2x12xf32>
  // Relu: 1 FLOP per element, keeps its input.
  // CHECK: orrery.relu
  // CHECK-SAME: orrery.cost = {bwd_flops = 24 : i64, bytes_read = 96 : i64, bytes_written = 96 : i64, fwd_flops = 24 : i64, params = 0 : i64, saved_bytes = 96 : i64}
  %r = orrery.relu(%y) : (tensor<2x12xf32>) -> tensor<2x12xf32>
  return %r : tensor<2x12xf32>
}
