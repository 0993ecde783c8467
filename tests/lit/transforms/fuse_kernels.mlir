// RUN: orrery-opt %s --orrery-fuse-kernels --split-input-file | FileCheck %s
// RUN: orrery-opt %s --orrery-fuse-kernels --orrery-annotate-costs --split-input-file | FileCheck %s --check-prefix=COST
// RUN: orrery-opt %s --orrery-fuse-kernels="attention=0" --split-input-file | FileCheck %s --check-prefix=NOATTN

// Causal attention as models/generate.py writes it: the scaled scores plus a
// triangle built from constants, softmax, dropout, times V. The mask leaves
// the graph; the dropout and the scale become attributes.
// CHECK-LABEL: func.func @causal
// CHECK-NOT: orrery.trilu
// CHECK-NOT: orrery.softmax
// CHECK: %[[K:.*]] = orrery.transpose(%arg1) {perm = array<i64: 0, 1, 3, 2>}
// CHECK: orrery.fused_attention(%arg0, %[[K]], %arg2)
// CHECK-SAME: batch = 1 : i64, causal, dropout = 0.1{{[0-9]*}} : f64, head_dim = 16 : i64, heads = 2 : i64, kv_heads = 2 : i64, kv_len = 256 : i64, q_len = 256 : i64, scale = 2.500000e-01 : f64, value_dim = 16 : i64
// NOATTN-LABEL: func.func @causal
// NOATTN: orrery.softmax
// NOATTN-NOT: orrery.fused_attention
// Two 128-blocks per side, three of four computed: 2·1·2·256·256·32·¾
// FLOPs forward, 2.5 times that backward; the log-sum-exp rows (2·256 fp32)
// written and kept beside Q, K, V and the output (4 x 16 KiB).
// COST-LABEL: func.func @causal
// COST: orrery.fused_attention
// COST-SAME: orrery.cost = {bwd_flops = 15728640 : i64, bytes_read = 49152 : i64, bytes_written = 18432 : i64, fwd_flops = 6291456 : i64, params = 0 : i64, saved_bytes = 67584 : i64}
func.func @causal(%q: tensor<1x2x256x16xf16>, %kt: tensor<1x2x16x256xf16>, %v: tensor<1x2x256x16xf16>) -> tensor<1x2x256x16xf16> {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x256x16xf16>, tensor<1x2x16x256xf16>) -> tensor<1x2x256x256xf16>
  %c = orrery.constant dense<2.500000e-01> : tensor<f16>
  %t = orrery.mul(%s, %c) : (tensor<1x2x256x256xf16>, tensor<f16>) -> tensor<1x2x256x256xf16>
  %shape = orrery.constant dense<256> : tensor<2xi64>
  %full = orrery.constant_of_shape(%shape) {value = dense<-6.550400e+04> : tensor<1xf16>} : (tensor<2xi64>) -> tensor<256x256xf16>
  %one = orrery.constant dense<1> : tensor<i64>
  %tri = orrery.trilu(%full, %one) {upper = 1 : i64} : (tensor<256x256xf16>, tensor<i64>) -> tensor<256x256xf16>
  %m = orrery.add(%t, %tri) : (tensor<1x2x256x256xf16>, tensor<256x256xf16>) -> tensor<1x2x256x256xf16>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x256x256xf16>) -> tensor<1x2x256x256xf16>
  %ratio = orrery.constant dense<1.000000e-01> : tensor<f32>
  %train = orrery.constant dense<true> : tensor<i1>
  %d = orrery.dropout(%p, %ratio, %train) : (tensor<1x2x256x256xf16>, tensor<f32>, tensor<i1>) -> tensor<1x2x256x256xf16>
  %o = orrery.matmul(%d, %v) : (tensor<1x2x256x256xf16>, tensor<1x2x256x16xf16>) -> tensor<1x2x256x16xf16>
  return %o : tensor<1x2x256x16xf16>
}

// -----

// Sliding-window attention as models/generate.py writes Mistral 7B v0.1's:
// the causal triangle plus the band 128 or more keys back
// (torch.tril(full, -128)). Each query sees itself and 127 keys before it:
// `window = 128`. Of the 4 x 4 blocks of 128, query block i > 0 computes
// key blocks i - 1 and i (its first row, 128i, sees keys from 128i - 127),
// block 0 its own: 7 of 16 (causal alone: 10), so 7/16 of the
// 2·1·2·512·512·32 FLOPs.
// CHECK-LABEL: func.func @sliding
// CHECK-NOT: orrery.trilu
// CHECK: orrery.fused_attention
// CHECK-SAME: causal
// CHECK-SAME: window = 128 : i64
// COST-LABEL: func.func @sliding
// COST: orrery.fused_attention
// COST-SAME: fwd_flops = 14680064 : i64
func.func @sliding(%q: tensor<1x2x512x16xf16>, %kt: tensor<1x2x16x512xf16>, %v: tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16> {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x512x16xf16>, tensor<1x2x16x512xf16>) -> tensor<1x2x512x512xf16>
  %c = orrery.constant dense<2.500000e-01> : tensor<f16>
  %t = orrery.mul(%s, %c) : (tensor<1x2x512x512xf16>, tensor<f16>) -> tensor<1x2x512x512xf16>
  %shape = orrery.constant dense<512> : tensor<2xi64>
  %full = orrery.constant_of_shape(%shape) {value = dense<-6.550400e+04> : tensor<1xf16>} : (tensor<2xi64>) -> tensor<512x512xf16>
  %one = orrery.constant dense<1> : tensor<i64>
  %tri = orrery.trilu(%full, %one) {upper = 1 : i64} : (tensor<512x512xf16>, tensor<i64>) -> tensor<512x512xf16>
  %back = orrery.constant dense<-128> : tensor<i64>
  %band = orrery.trilu(%full, %back) {upper = 0 : i64} : (tensor<512x512xf16>, tensor<i64>) -> tensor<512x512xf16>
  %mask = orrery.add(%tri, %band) : (tensor<512x512xf16>, tensor<512x512xf16>) -> tensor<512x512xf16>
  %m = orrery.add(%t, %mask) : (tensor<1x2x512x512xf16>, tensor<512x512xf16>) -> tensor<1x2x512x512xf16>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x512x512xf16>) -> tensor<1x2x512x512xf16>
  %o = orrery.matmul(%p, %v) : (tensor<1x2x512x512xf16>, tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16>
  return %o : tensor<1x2x512x16xf16>
}

// -----

// The same window as transformers writes it, a comparison of positions:
// causal `kv_idx <= q_idx` and `kv_idx > q_idx - 128` (its sliding-window
// mask), the scores kept where both hold: window 128, the FLOPs above.
// CHECK-LABEL: func.func @compared
// CHECK-NOT: orrery.greater
// CHECK: orrery.fused_attention
// CHECK-SAME: causal
// CHECK-SAME: window = 128 : i64
// COST-LABEL: func.func @compared
// COST: orrery.fused_attention
// COST-SAME: fwd_flops = 14680064 : i64
func.func @compared(%q: tensor<1x2x512x16xf16>, %kt: tensor<1x2x16x512xf16>, %v: tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16> {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x512x16xf16>, tensor<1x2x16x512xf16>) -> tensor<1x2x512x512xf16>
  %c = orrery.constant dense<2.500000e-01> : tensor<f16>
  %t = orrery.mul(%s, %c) : (tensor<1x2x512x512xf16>, tensor<f16>) -> tensor<1x2x512x512xf16>
  %zero = orrery.constant dense<0> : tensor<i64>
  %n = orrery.constant dense<512> : tensor<i64>
  %one = orrery.constant dense<1> : tensor<i64>
  %pos = orrery.range(%zero, %n, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<512xi64>
  %ax1 = orrery.constant dense<1> : tensor<1xi64>
  %ax0 = orrery.constant dense<0> : tensor<1xi64>
  %qi = orrery.unsqueeze(%pos, %ax1) : (tensor<512xi64>, tensor<1xi64>) -> tensor<512x1xi64>
  %ki = orrery.unsqueeze(%pos, %ax0) : (tensor<512xi64>, tensor<1xi64>) -> tensor<1x512xi64>
  %causal = orrery.less_or_equal(%ki, %qi) : (tensor<1x512xi64>, tensor<512x1xi64>) -> tensor<512x512xi1>
  %w = orrery.constant dense<128> : tensor<i64>
  %qw = orrery.sub(%qi, %w) : (tensor<512x1xi64>, tensor<i64>) -> tensor<512x1xi64>
  %band = orrery.greater(%ki, %qw) : (tensor<1x512xi64>, tensor<512x1xi64>) -> tensor<512x512xi1>
  %keep = orrery.and(%causal, %band) : (tensor<512x512xi1>, tensor<512x512xi1>) -> tensor<512x512xi1>
  %neg = orrery.constant dense<-6.550400e+04> : tensor<f16>
  %m = orrery.where(%keep, %t, %neg) : (tensor<512x512xi1>, tensor<1x2x512x512xf16>, tensor<f16>) -> tensor<1x2x512x512xf16>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x512x512xf16>) -> tensor<1x2x512x512xf16>
  %o = orrery.matmul(%p, %v) : (tensor<1x2x512x512xf16>, tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16>
  return %o : tensor<1x2x512x16xf16>
}

// -----

// The window as a distance, `q_idx - kv_idx < 128` (the same band), and
// `q_idx - kv_idx <= 128` one key wider; a comparison that bounds the keys
// from above (`kv_idx < q_idx + 128`) is no window.
// CHECK-LABEL: func.func @distance
// CHECK: orrery.fused_attention
// CHECK-SAME: window = 128 : i64
// CHECK-LABEL: func.func @distance_inclusive
// CHECK: orrery.fused_attention
// CHECK-SAME: window = 129 : i64
// CHECK-LABEL: func.func @ahead
// CHECK: orrery.fused_attention
// CHECK-SAME: causal
// CHECK-SAME: value_dim = 16 : i64}
func.func @distance(%q: tensor<1x2x512x16xf16>, %kt: tensor<1x2x16x512xf16>, %v: tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16> {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x512x16xf16>, tensor<1x2x16x512xf16>) -> tensor<1x2x512x512xf16>
  %zero = orrery.constant dense<0> : tensor<i64>
  %n = orrery.constant dense<512> : tensor<i64>
  %one = orrery.constant dense<1> : tensor<i64>
  %pos = orrery.range(%zero, %n, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<512xi64>
  %ax1 = orrery.constant dense<1> : tensor<1xi64>
  %ax0 = orrery.constant dense<0> : tensor<1xi64>
  %qi = orrery.unsqueeze(%pos, %ax1) : (tensor<512xi64>, tensor<1xi64>) -> tensor<512x1xi64>
  %ki = orrery.unsqueeze(%pos, %ax0) : (tensor<512xi64>, tensor<1xi64>) -> tensor<1x512xi64>
  %causal = orrery.less_or_equal(%ki, %qi) : (tensor<1x512xi64>, tensor<512x1xi64>) -> tensor<512x512xi1>
  %w = orrery.constant dense<128> : tensor<i64>
  %d = orrery.sub(%qi, %ki) : (tensor<512x1xi64>, tensor<1x512xi64>) -> tensor<512x512xi64>
  %band = orrery.less(%d, %w) : (tensor<512x512xi64>, tensor<i64>) -> tensor<512x512xi1>
  %keep = orrery.and(%causal, %band) : (tensor<512x512xi1>, tensor<512x512xi1>) -> tensor<512x512xi1>
  %neg = orrery.constant dense<-6.550400e+04> : tensor<f16>
  %m = orrery.where(%keep, %s, %neg) : (tensor<512x512xi1>, tensor<1x2x512x512xf16>, tensor<f16>) -> tensor<1x2x512x512xf16>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x512x512xf16>) -> tensor<1x2x512x512xf16>
  %o = orrery.matmul(%p, %v) : (tensor<1x2x512x512xf16>, tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16>
  return %o : tensor<1x2x512x16xf16>
}
func.func @distance_inclusive(%q: tensor<1x2x512x16xf16>, %kt: tensor<1x2x16x512xf16>, %v: tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16> {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x512x16xf16>, tensor<1x2x16x512xf16>) -> tensor<1x2x512x512xf16>
  %zero = orrery.constant dense<0> : tensor<i64>
  %n = orrery.constant dense<512> : tensor<i64>
  %one = orrery.constant dense<1> : tensor<i64>
  %pos = orrery.range(%zero, %n, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<512xi64>
  %ax1 = orrery.constant dense<1> : tensor<1xi64>
  %ax0 = orrery.constant dense<0> : tensor<1xi64>
  %qi = orrery.unsqueeze(%pos, %ax1) : (tensor<512xi64>, tensor<1xi64>) -> tensor<512x1xi64>
  %ki = orrery.unsqueeze(%pos, %ax0) : (tensor<512xi64>, tensor<1xi64>) -> tensor<1x512xi64>
  %causal = orrery.less_or_equal(%ki, %qi) : (tensor<1x512xi64>, tensor<512x1xi64>) -> tensor<512x512xi1>
  %w = orrery.constant dense<128> : tensor<i64>
  %d = orrery.sub(%qi, %ki) : (tensor<512x1xi64>, tensor<1x512xi64>) -> tensor<512x512xi64>
  %band = orrery.less_or_equal(%d, %w) : (tensor<512x512xi64>, tensor<i64>) -> tensor<512x512xi1>
  %keep = orrery.and(%causal, %band) : (tensor<512x512xi1>, tensor<512x512xi1>) -> tensor<512x512xi1>
  %neg = orrery.constant dense<-6.550400e+04> : tensor<f16>
  %m = orrery.where(%keep, %s, %neg) : (tensor<512x512xi1>, tensor<1x2x512x512xf16>, tensor<f16>) -> tensor<1x2x512x512xf16>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x512x512xf16>) -> tensor<1x2x512x512xf16>
  %o = orrery.matmul(%p, %v) : (tensor<1x2x512x512xf16>, tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16>
  return %o : tensor<1x2x512x16xf16>
}
func.func @ahead(%q: tensor<1x2x512x16xf16>, %kt: tensor<1x2x16x512xf16>, %v: tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16> {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x512x16xf16>, tensor<1x2x16x512xf16>) -> tensor<1x2x512x512xf16>
  %zero = orrery.constant dense<0> : tensor<i64>
  %n = orrery.constant dense<512> : tensor<i64>
  %one = orrery.constant dense<1> : tensor<i64>
  %pos = orrery.range(%zero, %n, %one) : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<512xi64>
  %ax1 = orrery.constant dense<1> : tensor<1xi64>
  %ax0 = orrery.constant dense<0> : tensor<1xi64>
  %qi = orrery.unsqueeze(%pos, %ax1) : (tensor<512xi64>, tensor<1xi64>) -> tensor<512x1xi64>
  %ki = orrery.unsqueeze(%pos, %ax0) : (tensor<512xi64>, tensor<1xi64>) -> tensor<1x512xi64>
  %causal = orrery.less_or_equal(%ki, %qi) : (tensor<1x512xi64>, tensor<512x1xi64>) -> tensor<512x512xi1>
  %w = orrery.constant dense<128> : tensor<i64>
  %qw = orrery.add(%qi, %w) : (tensor<512x1xi64>, tensor<i64>) -> tensor<512x1xi64>
  %band = orrery.less(%ki, %qw) : (tensor<1x512xi64>, tensor<512x1xi64>) -> tensor<512x512xi1>
  %keep = orrery.and(%causal, %band) : (tensor<512x512xi1>, tensor<512x512xi1>) -> tensor<512x512xi1>
  %neg = orrery.constant dense<-6.550400e+04> : tensor<f16>
  %m = orrery.where(%keep, %s, %neg) : (tensor<512x512xi1>, tensor<1x2x512x512xf16>, tensor<f16>) -> tensor<1x2x512x512xf16>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x512x512xf16>) -> tensor<1x2x512x512xf16>
  %o = orrery.matmul(%p, %v) : (tensor<1x2x512x512xf16>, tensor<1x2x512x16xf16>) -> tensor<1x2x512x16xf16>
  return %o : tensor<1x2x512x16xf16>
}

// -----

// Grouped-query attention: each of 2 key-value heads is repeated for 2
// query heads (Reshape, Expand, Reshape); the fused op reads the 2 heads.
// CHECK-LABEL: func.func @grouped
// CHECK-NOT: orrery.expand
// CHECK: orrery.fused_attention(%arg0, %arg1, %arg2)
// CHECK-SAME: heads = 4 : i64, kv_heads = 2 : i64
func.func @grouped(%q: tensor<1x4x32x16xf16>, %k: tensor<1x2x32x16xf16>, %v: tensor<1x2x32x16xf16>) -> tensor<1x4x32x16xf16> {
  %s5 = orrery.constant dense<[0, 2, 1, 32, 16]> : tensor<5xi64>
  %e5 = orrery.constant dense<[1, 2, 2, 32, 16]> : tensor<5xi64>
  %s4 = orrery.constant dense<[0, 4, 32, 16]> : tensor<4xi64>
  %k5 = orrery.reshape(%k, %s5) : (tensor<1x2x32x16xf16>, tensor<5xi64>) -> tensor<1x2x1x32x16xf16>
  %ke = orrery.expand(%k5, %e5) : (tensor<1x2x1x32x16xf16>, tensor<5xi64>) -> tensor<1x2x2x32x16xf16>
  %kr = orrery.reshape(%ke, %s4) : (tensor<1x2x2x32x16xf16>, tensor<4xi64>) -> tensor<1x4x32x16xf16>
  %v5 = orrery.reshape(%v, %s5) : (tensor<1x2x32x16xf16>, tensor<5xi64>) -> tensor<1x2x1x32x16xf16>
  %ve = orrery.expand(%v5, %e5) : (tensor<1x2x1x32x16xf16>, tensor<5xi64>) -> tensor<1x2x2x32x16xf16>
  %vr = orrery.reshape(%ve, %s4) : (tensor<1x2x2x32x16xf16>, tensor<4xi64>) -> tensor<1x4x32x16xf16>
  %kt = orrery.transpose(%kr) {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x32x16xf16>) -> tensor<1x4x16x32xf16>
  %s = orrery.matmul(%q, %kt) : (tensor<1x4x32x16xf16>, tensor<1x4x16x32xf16>) -> tensor<1x4x32x32xf16>
  %p = orrery.softmax(%s) {axis = -1 : i64} : (tensor<1x4x32x32xf16>) -> tensor<1x4x32x32xf16>
  %o = orrery.matmul(%p, %vr) : (tensor<1x4x32x32xf16>, tensor<1x4x32x16xf16>) -> tensor<1x4x32x16xf16>
  return %o : tensor<1x4x32x16xf16>
}

// -----

// torch's SDPA export: √scale on Q and on Kᵀ, a padding mask that depends
// on the data (kept as the bias operand), the NaN guard after softmax.
// CHECK-LABEL: func.func @sdpa
// CHECK-NOT: IsNaN
// CHECK: orrery.fused_attention(%arg0, %{{.*}}, %arg2, %arg3)
// CHECK-NOT: causal
// CHECK-SAME: scale = 0.1249{{[0-9]*}} : f64
func.func @sdpa(%q: tensor<1x2x32x64xf32>, %kt: tensor<1x2x64x32xf32>, %v: tensor<1x2x32x64xf32>, %pad: tensor<1x1x32x32xf32>) -> tensor<1x2x32x64xf32> {
  %r = orrery.constant dense<0.353553385> : tensor<f32>
  %qs = orrery.mul(%q, %r) : (tensor<1x2x32x64xf32>, tensor<f32>) -> tensor<1x2x32x64xf32>
  %ks = orrery.mul(%kt, %r) : (tensor<1x2x64x32xf32>, tensor<f32>) -> tensor<1x2x64x32xf32>
  %s = orrery.matmul(%qs, %ks) : (tensor<1x2x32x64xf32>, tensor<1x2x64x32xf32>) -> tensor<1x2x32x32xf32>
  %m = orrery.add(%s, %pad) : (tensor<1x2x32x32xf32>, tensor<1x1x32x32xf32>) -> tensor<1x2x32x32xf32>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x32x32xf32>) -> tensor<1x2x32x32xf32>
  %nan = orrery.onnx_op "IsNaN" ""(%p) : (tensor<1x2x32x32xf32>) -> tensor<1x2x32x32xi1>
  %zero = orrery.constant dense<0.0> : tensor<1xf32>
  %g = orrery.where(%nan, %zero, %p) : (tensor<1x2x32x32xi1>, tensor<1xf32>, tensor<1x2x32x32xf32>) -> tensor<1x2x32x32xf32>
  %o = orrery.matmul(%g, %v) : (tensor<1x2x32x32xf32>, tensor<1x2x32x64xf32>) -> tensor<1x2x32x64xf32>
  return %o : tensor<1x2x32x64xf32>
}

// -----

// The probabilities are also returned (a model that outputs its attention
// weights): the scores must be materialized, nothing fuses.
// CHECK-LABEL: func.func @escapes
// CHECK: orrery.softmax
// CHECK-NOT: orrery.fused_attention
func.func @escapes(%q: tensor<1x2x32x16xf16>, %kt: tensor<1x2x16x32xf16>, %v: tensor<1x2x32x16xf16>) -> (tensor<1x2x32x16xf16>, tensor<1x2x32x32xf16>) {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x32x16xf16>, tensor<1x2x16x32xf16>) -> tensor<1x2x32x32xf16>
  %p = orrery.softmax(%s) {axis = -1 : i64} : (tensor<1x2x32x32xf16>) -> tensor<1x2x32x32xf16>
  %o = orrery.matmul(%p, %v) : (tensor<1x2x32x32xf16>, tensor<1x2x32x16xf16>) -> tensor<1x2x32x16xf16>
  return %o, %p : tensor<1x2x32x16xf16>, tensor<1x2x32x32xf16>
}

// -----

// RMSNorm written out (HF Llama: fp32 statistics, cast back, then the
// scale) and LayerNorm written out (GPT-2's TorchScript export).
// CHECK-LABEL: func.func @norms
// CHECK: %[[G:.*]] = orrery.weight "g"
// CHECK: %[[B:.*]] = orrery.weight "b"
// CHECK: %[[R:.*]] = orrery.rms_normalization(%arg0, %[[G]]) {epsilon = 9.9999997473787516E-6 : f64}
// CHECK: orrery.layer_normalization(%[[R]], %[[G]], %[[B]]) {axis = -1 : i64
// CHECK-NOT: orrery.reduce_mean
// COST-LABEL: func.func @norms
// COST: orrery.rms_normalization
// COST-SAME: fwd_flops = 1024 : i64
// COST-SAME: saved_bytes = 544 : i64
func.func @norms(%x: tensor<1x8x32xf16>) -> tensor<1x8x32xf16> {
  %g = orrery.weight "g" trainable : tensor<32xf16>
  %b = orrery.weight "b" trainable : tensor<32xf16>
  %x32 = orrery.cast(%x) {to = 1 : i64} : (tensor<1x8x32xf16>) -> tensor<1x8x32xf32>
  %two = orrery.constant dense<2.0> : tensor<f32>
  %sq = orrery.pow(%x32, %two) : (tensor<1x8x32xf32>, tensor<f32>) -> tensor<1x8x32xf32>
  %ms = orrery.reduce_mean(%sq) {axes = array<i64: -1>, keepdims = 1 : i64} : (tensor<1x8x32xf32>) -> tensor<1x8x1xf32>
  %eps = orrery.constant dense<1.0e-5> : tensor<f32>
  %a = orrery.add(%ms, %eps) : (tensor<1x8x1xf32>, tensor<f32>) -> tensor<1x8x1xf32>
  %r = orrery.sqrt(%a) : (tensor<1x8x1xf32>) -> tensor<1x8x1xf32>
  %one = orrery.constant dense<1.0> : tensor<f32>
  %inv = orrery.div(%one, %r) : (tensor<f32>, tensor<1x8x1xf32>) -> tensor<1x8x1xf32>
  %n = orrery.mul(%x32, %inv) : (tensor<1x8x32xf32>, tensor<1x8x1xf32>) -> tensor<1x8x32xf32>
  %n16 = orrery.cast(%n) {to = 10 : i64} : (tensor<1x8x32xf32>) -> tensor<1x8x32xf16>
  %y = orrery.mul(%g, %n16) : (tensor<32xf16>, tensor<1x8x32xf16>) -> tensor<1x8x32xf16>
  %mu = orrery.reduce_mean(%y) {axes = array<i64: -1>, keepdims = 1 : i64} : (tensor<1x8x32xf16>) -> tensor<1x8x1xf16>
  %c = orrery.sub(%y, %mu) : (tensor<1x8x32xf16>, tensor<1x8x1xf16>) -> tensor<1x8x32xf16>
  %two16 = orrery.constant dense<2.0> : tensor<f16>
  %c2 = orrery.pow(%c, %two16) : (tensor<1x8x32xf16>, tensor<f16>) -> tensor<1x8x32xf16>
  %var = orrery.reduce_mean(%c2) {axes = array<i64: -1>, keepdims = 1 : i64} : (tensor<1x8x32xf16>) -> tensor<1x8x1xf16>
  %eps16 = orrery.constant dense<1.0e-5> : tensor<f16>
  %va = orrery.add(%var, %eps16) : (tensor<1x8x1xf16>, tensor<f16>) -> tensor<1x8x1xf16>
  %sd = orrery.sqrt(%va) : (tensor<1x8x1xf16>) -> tensor<1x8x1xf16>
  %z = orrery.div(%c, %sd) : (tensor<1x8x32xf16>, tensor<1x8x1xf16>) -> tensor<1x8x32xf16>
  %zg = orrery.mul(%z, %g) : (tensor<1x8x32xf16>, tensor<32xf16>) -> tensor<1x8x32xf16>
  %zb = orrery.add(%zg, %b) : (tensor<1x8x32xf16>, tensor<32xf16>) -> tensor<1x8x32xf16>
  return %zb : tensor<1x8x32xf16>
}

// -----

// SwiGLU and rotary embeddings.
// CHECK-LABEL: func.func @swiglu_rope
// CHECK: orrery.gated_activation(%arg0, %arg1) {activation = "silu"}
// CHECK: orrery.rotary_embedding(%arg2, %{{.*}}, %{{.*}})
// CHECK-NOT: orrery.concat
// COST-LABEL: func.func @swiglu_rope
// COST: orrery.gated_activation
// COST-SAME: saved_bytes = 1024 : i64
// COST: orrery.rotary_embedding
// COST-SAME: saved_bytes = 0 : i64
func.func @swiglu_rope(%gate: tensor<1x4x64xf16>, %up: tensor<1x4x64xf16>, %x: tensor<1x2x4x8xf16>) -> (tensor<1x4x64xf16>, tensor<1x2x4x8xf16>) {
  %cos = orrery.weight "cos" : tensor<4x8xf16>
  %sin = orrery.weight "sin" : tensor<4x8xf16>
  %sg = orrery.sigmoid(%gate) : (tensor<1x4x64xf16>) -> tensor<1x4x64xf16>
  %silu = orrery.mul(%gate, %sg) : (tensor<1x4x64xf16>, tensor<1x4x64xf16>) -> tensor<1x4x64xf16>
  %h = orrery.mul(%silu, %up) : (tensor<1x4x64xf16>, tensor<1x4x64xf16>) -> tensor<1x4x64xf16>
  %s0 = orrery.constant dense<0> : tensor<1xi64>
  %s4 = orrery.constant dense<4> : tensor<1xi64>
  %s8 = orrery.constant dense<8> : tensor<1xi64>
  %ax = orrery.constant dense<-1> : tensor<1xi64>
  %x1 = orrery.slice(%x, %s0, %s4, %ax) : (tensor<1x2x4x8xf16>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x4x4xf16>
  %x2 = orrery.slice(%x, %s4, %s8, %ax) : (tensor<1x2x4x8xf16>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x4x4xf16>
  %n2 = orrery.neg(%x2) : (tensor<1x2x4x4xf16>) -> tensor<1x2x4x4xf16>
  %rot = orrery.concat(%n2, %x1) {axis = -1 : i64} : (tensor<1x2x4x4xf16>, tensor<1x2x4x4xf16>) -> tensor<1x2x4x8xf16>
  %a = orrery.mul(%x, %cos) : (tensor<1x2x4x8xf16>, tensor<4x8xf16>) -> tensor<1x2x4x8xf16>
  %b = orrery.mul(%rot, %sin) : (tensor<1x2x4x8xf16>, tensor<4x8xf16>) -> tensor<1x2x4x8xf16>
  %y = orrery.add(%a, %b) : (tensor<1x2x4x8xf16>, tensor<1x2x4x8xf16>) -> tensor<1x2x4x8xf16>
  return %h, %y : tensor<1x4x64xf16>, tensor<1x2x4x8xf16>
}

// -----

// A mixture of experts' SwiGLU scaled by the routing weights, one a row
// (Megatron-Core's weighted SwiGLU): the scale joins the kernel, which keeps
// gate, up and the weights (2 x 4 x 8 x 16 x 2 + 4 x 8 x 2 bytes), not the
// activation.
// CHECK-LABEL: func.func @weighted_swiglu
// CHECK: orrery.gated_activation(%arg0, %arg1, %arg2) {activation = "silu"}
// CHECK-NOT: orrery.mul
// COST-LABEL: func.func @weighted_swiglu
// COST: orrery.gated_activation
// COST-SAME: fwd_flops = 3584 : i64
// COST-SAME: saved_bytes = 2112 : i64
func.func @weighted_swiglu(%gate: tensor<4x8x16xf16>, %up: tensor<4x8x16xf16>, %w: tensor<4x8x1xf16>) -> tensor<4x8x16xf16> {
  %sg = orrery.sigmoid(%gate) : (tensor<4x8x16xf16>) -> tensor<4x8x16xf16>
  %silu = orrery.mul(%gate, %sg) : (tensor<4x8x16xf16>, tensor<4x8x16xf16>) -> tensor<4x8x16xf16>
  %h = orrery.mul(%silu, %up) : (tensor<4x8x16xf16>, tensor<4x8x16xf16>) -> tensor<4x8x16xf16>
  %s = orrery.mul(%h, %w) : (tensor<4x8x16xf16>, tensor<4x8x1xf16>) -> tensor<4x8x16xf16>
  return %s : tensor<4x8x16xf16>
}

// -----

// Scalars and shapes that are not a norm or attention stay as they are.
// CHECK-LABEL: func.func @not_fused
// CHECK: orrery.reduce_mean
// CHECK: orrery.matmul
func.func @not_fused(%x: tensor<8xf32>, %a: tensor<2x3x4xf32>, %b: tensor<2x4x3xf32>) -> (tensor<1xf32>, tensor<2x3x3xf32>) {
  %sq = orrery.mul(%x, %x) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %m = orrery.reduce_mean(%sq) {axes = array<i64: 0>, keepdims = 1 : i64} : (tensor<8xf32>) -> tensor<1xf32>
  %s = orrery.matmul(%a, %b) : (tensor<2x3x4xf32>, tensor<2x4x3xf32>) -> tensor<2x3x3xf32>
  return %m, %s : tensor<1xf32>, tensor<2x3x3xf32>
}

// -----

// A constant additive mask (the importer folds one built from the positions
// of a short sequence): 0 on a band of 3 keys ending at each query, -1e4
// elsewhere: causal with window 3, and the mask leaves the graph.
// CHECK-LABEL: func.func @folded_band
// CHECK: orrery.fused_attention(%arg0, %{{.*}}, %arg2) {
// CHECK-SAME: causal
// CHECK-SAME: window = 3 : i64
func.func @folded_band(%q: tensor<1x2x8x16xf32>, %kt: tensor<1x2x16x8xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x8x16xf32>, tensor<1x2x16x8xf32>) -> tensor<1x2x8x8xf32>
  %mask = orrery.constant dense<[[0.0, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04], [0.0, 0.0, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04], [0.0, 0.0, 0.0, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04], [-1.0e+04, 0.0, 0.0, 0.0, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04], [-1.0e+04, -1.0e+04, 0.0, 0.0, 0.0, -1.0e+04, -1.0e+04, -1.0e+04], [-1.0e+04, -1.0e+04, -1.0e+04, 0.0, 0.0, 0.0, -1.0e+04, -1.0e+04], [-1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, 0.0, 0.0, 0.0, -1.0e+04], [-1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, -1.0e+04, 0.0, 0.0, 0.0]]> : tensor<8x8xf32>
  %m = orrery.add(%s, %mask) : (tensor<1x2x8x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8x8xf32>
  %p = orrery.softmax(%m) {axis = -1 : i64} : (tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %o = orrery.matmul(%p, %v) : (tensor<1x2x8x8xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// A fused attention the file states (opset 23's Attention) with is_causal 0
// and a constant boolean mask of the causal triangle: causal, the mask gone.
// CHECK-LABEL: func.func @stated_masked
// CHECK: orrery.fused_attention(%arg0, %arg1, %arg2) {
// CHECK-SAME: causal
// Without attention fusion (--kernels unfused-attention) it stays as stated.
// NOATTN-LABEL: func.func @stated_masked
// NOATTN: orrery.fused_attention(%arg0, %arg1, %arg2, %{{.*}})
func.func @stated_masked(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %mask = orrery.constant dense<[[true, false, false, false, false, false, false, false], [true, true, false, false, false, false, false, false], [true, true, true, false, false, false, false, false], [true, true, true, true, false, false, false, false], [true, true, true, true, true, false, false, false], [true, true, true, true, true, true, false, false], [true, true, true, true, true, true, true, false], [true, true, true, true, true, true, true, true]]> : tensor<8x8xi1>
  %o = orrery.fused_attention(%q, %k, %v, %mask) {batch = 1 : i64, heads = 2 : i64, kv_heads = 2 : i64, q_len = 8 : i64, kv_len = 8 : i64, head_dim = 16 : i64, value_dim = 16 : i64, scale = 0.25 : f64, dropout = 0.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<8x8xi1>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// Attention sinks as transformers 5 writes GPT-OSS's eager attention: the
// sink logits joined as a column, the row maximum subtracted (the stable
// softmax written out, as the kernel computes it anyway), softmax, the sink
// column dropped.
// CHECK-LABEL: func.func @stable_sinks
// CHECK-NOT: orrery.reduce_max
// CHECK: orrery.fused_attention
// CHECK-SAME: sinks
func.func @stable_sinks(%q: tensor<1x2x64x16xf32>, %kt: tensor<1x2x16x64xf32>, %v: tensor<1x2x64x16xf32>) -> tensor<1x2x64x16xf32> {
  %sink = orrery.weight "sinks" trainable : tensor<1x2x1x1xf32>
  %s = orrery.matmul(%q, %kt) : (tensor<1x2x64x16xf32>, tensor<1x2x16x64xf32>) -> tensor<1x2x64x64xf32>
  %shape = orrery.constant dense<[1, 2, 64, 1]> : tensor<4xi64>
  %col = orrery.expand(%sink, %shape) : (tensor<1x2x1x1xf32>, tensor<4xi64>) -> tensor<1x2x64x1xf32>
  %cat = orrery.concat(%s, %col) {axis = -1 : i64} : (tensor<1x2x64x64xf32>, tensor<1x2x64x1xf32>) -> tensor<1x2x64x65xf32>
  %last = orrery.constant dense<-1> : tensor<1xi64>
  %max = orrery.reduce_max(%cat, %last) {keepdims = 1 : i64} : (tensor<1x2x64x65xf32>, tensor<1xi64>) -> tensor<1x2x64x1xf32>
  %stable = orrery.sub(%cat, %max) : (tensor<1x2x64x65xf32>, tensor<1x2x64x1xf32>) -> tensor<1x2x64x65xf32>
  %p = orrery.softmax(%stable) {axis = -1 : i64} : (tensor<1x2x64x65xf32>) -> tensor<1x2x64x65xf32>
  %starts = orrery.constant dense<0> : tensor<1xi64>
  %ends = orrery.constant dense<64> : tensor<1xi64>
  %kept = orrery.slice(%p, %starts, %ends, %last) : (tensor<1x2x64x65xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x2x64x64xf32>
  %o = orrery.matmul(%kept, %v) : (tensor<1x2x64x64xf32>, tensor<1x2x64x16xf32>) -> tensor<1x2x64x16xf32>
  return %o : tensor<1x2x64x16xf32>
}
