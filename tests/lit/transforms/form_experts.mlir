// RUN: orrery-opt %s --orrery-form-experts --split-input-file | FileCheck %s
// RUN: orrery-opt %s --orrery-form-experts --orrery-annotate-costs --split-input-file | FileCheck %s --check-prefix=COST

// transformers' batched_mm experts as torch.export writes them (GatherND of
// the [E, 2f, d] experts by the TopK indices, the expert matrix first): 64
// tokens, top 2 of 8 experts. The 128 copies of a 32x16 matrix become one
// [8, 16, 16] x [8, 16, 32] grouped GEMM over the 16 tokens each expert gets.
// CHECK-LABEL: func.func @gather_nd
// CHECK-NOT: GatherND
// CHECK: %[[X:.*]] = orrery.reshape(%{{.*}}, %{{.*}}) : (tensor<128x16xf16>, tensor<3xi64>) -> tensor<8x16x16xf16>
// CHECK: %[[W:.*]] = orrery.transpose(%{{.*}}) {perm = array<i64: 0, 2, 1>} : (tensor<8x32x16xf16>) -> tensor<8x16x32xf16>
// CHECK: %[[Y:.*]] = orrery.matmul(%[[X]], %[[W]]) : (tensor<8x16x16xf16>, tensor<8x16x32xf16>) -> tensor<8x16x32xf16>
// CHECK: orrery.reshape(%{{.*}}, %{{.*}}) : (tensor<128x32xf16>, tensor<3xi64>) -> tensor<128x32x1xf16>
// The grouped GEMM's FLOPs: 2 x 128 tokens x 16 x 32, what the 128
// matrix-vector products did; only the experts' weights are read, once.
// COST-LABEL: func.func @gather_nd
// COST: orrery.transpose
// COST-NEXT: orrery.matmul
// COST-SAME: fwd_flops = 131072
func.func @gather_nd(%h: tensor<64x16xf16>) -> tensor<128x32x1xf16> {
  %router = orrery.weight "router" trainable : tensor<16x8xf16>
  %experts = orrery.weight "experts.gate_up_proj" trainable : tensor<8x32x16xf16>
  %logits = orrery.matmul(%h, %router) : (tensor<64x16xf16>, tensor<16x8xf16>) -> tensor<64x8xf16>
  %k = orrery.constant dense<2> : tensor<1xi64>
  %top:2 = orrery.onnx_op "TopK" ""(%logits, %k) {axis = -1 : i64} : (tensor<64x8xf16>, tensor<1xi64>) -> (tensor<64x2xf16>, tensor<64x2xi64>)
  %flat = orrery.constant dense<[128, 1]> : tensor<2xi64>
  %ids = orrery.reshape(%top#1, %flat) : (tensor<64x2xi64>, tensor<2xi64>) -> tensor<128x1xi64>
  %sel = orrery.onnx_op "GatherND" ""(%experts, %ids) {batch_dims = 0 : i64} : (tensor<8x32x16xf16>, tensor<128x1xi64>) -> tensor<128x32x16xf16>
  %rep = orrery.constant dense<[64, 2, 16]> : tensor<3xi64>
  %one = orrery.constant dense<1> : tensor<1xi64>
  %h3 = orrery.unsqueeze(%h, %one) : (tensor<64x16xf16>, tensor<1xi64>) -> tensor<64x1x16xf16>
  %hk = orrery.expand(%h3, %rep) : (tensor<64x1x16xf16>, tensor<3xi64>) -> tensor<64x2x16xf16>
  %rows = orrery.constant dense<[128, 16, 1]> : tensor<3xi64>
  %x = orrery.reshape(%hk, %rows) : (tensor<64x2x16xf16>, tensor<3xi64>) -> tensor<128x16x1xf16>
  %y = orrery.matmul(%sel, %x) : (tensor<128x32x16xf16>, tensor<128x16x1xf16>) -> tensor<128x32x1xf16>
  return %y : tensor<128x32x1xf16>
}

// -----

// The transposed layout (GPT-OSS's experts_are_transposed: [E, d, f], the
// token first) selected with Gather, 5 experts that do not divide the 12
// routed tokens: 3 rows per expert gathered in, the 12 gathered back.
// CHECK-LABEL: func.func @gather_uneven
// CHECK: %[[X:.*]] = orrery.gather(%{{.*}}, %{{.*}}) {axis = 0 : i64} : (tensor<12x16xf16>, tensor<5x3xi64>) -> tensor<5x3x16xf16>
// CHECK: %[[Y:.*]] = orrery.matmul(%[[X]], %{{.*}}) : (tensor<5x3x16xf16>, tensor<5x16x24xf16>) -> tensor<5x3x24xf16>
// CHECK: orrery.gather(%{{.*}}, %{{.*}}) {axis = 0 : i64} : (tensor<15x24xf16>, tensor<12xi64>) -> tensor<12x24xf16>
func.func @gather_uneven(%x: tensor<12x1x16xf16>, %scores: tensor<6x5xf16>) -> tensor<12x1x24xf16> {
  %experts = orrery.weight "experts.down_proj" trainable : tensor<5x16x24xf16>
  %k = orrery.constant dense<2> : tensor<1xi64>
  %top:2 = orrery.onnx_op "TopK" ""(%scores, %k) {axis = -1 : i64} : (tensor<6x5xf16>, tensor<1xi64>) -> (tensor<6x2xf16>, tensor<6x2xi64>)
  %flat = orrery.constant dense<12> : tensor<1xi64>
  %ids = orrery.reshape(%top#1, %flat) : (tensor<6x2xi64>, tensor<1xi64>) -> tensor<12xi64>
  %sel = orrery.gather(%experts, %ids) {axis = 0 : i64} : (tensor<5x16x24xf16>, tensor<12xi64>) -> tensor<12x16x24xf16>
  %y = orrery.matmul(%x, %sel) : (tensor<12x1x16xf16>, tensor<12x16x24xf16>) -> tensor<12x1x24xf16>
  return %y : tensor<12x1x24xf16>
}

// -----

// A table gathered by indices that are not a router's choice (an embedding
// of positions, say) stays as written.
// CHECK-LABEL: func.func @not_routed
// CHECK: orrery.gather(%{{.*}}, %arg1) {axis = 0 : i64} : (tensor<4x16x24xf16>, tensor<12xi64>)
// CHECK: orrery.matmul(%arg0, %{{.*}}) : (tensor<12x1x16xf16>, tensor<12x16x24xf16>)
func.func @not_routed(%x: tensor<12x1x16xf16>, %ids: tensor<12xi64>) -> tensor<12x1x24xf16> {
  %table = orrery.weight "table" trainable : tensor<4x16x24xf16>
  %sel = orrery.gather(%table, %ids) {axis = 0 : i64} : (tensor<4x16x24xf16>, tensor<12xi64>) -> tensor<12x16x24xf16>
  %y = orrery.matmul(%x, %sel) : (tensor<12x1x16xf16>, tensor<12x16x24xf16>) -> tensor<12x1x24xf16>
  return %y : tensor<12x1x24xf16>
}

// -----

// transformers 4.x's eager loop, traced: per expert the NonZero of its
// one-hot mask (the importer sizes it as balanced routing would: 4 of the 8
// tokens here), its rows gathered, its own weight, the result scattered
// back and added up. The two iterations become one over stacked weights,
// the rows dispatched by one gather, the scatters the per-token sum.
// CHECK-LABEL: func.func @loop
// CHECK-NOT: NonZero
// CHECK-NOT: ScatterElements
// CHECK: %[[X:.*]] = orrery.gather(%arg0, %{{.*}}) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// CHECK: %[[W:.*]] = orrery.weight "experts.{0..1}.w" trainable : tensor<2x16x16xf32>
// CHECK: %[[T:.*]] = orrery.transpose(%[[W]]) {perm = array<i64: 0, 2, 1>}
// CHECK: %[[Y:.*]] = orrery.matmul(%[[X]], %[[T]]) : (tensor<2x4x16xf32>, tensor<2x16x16xf32>) -> tensor<2x4x16xf32>
// CHECK: orrery.sigmoid(%[[Y]]) : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK: orrery.reduce_sum(%{{.*}}, %{{.*}}) {keepdims = 0 : i64} : (tensor<8x1x16xf32>, tensor<1xi64>) -> tensor<8x16xf32>
// CHECK-NOT: orrery.weight "experts.0.w"
// CHECK: return
func.func @loop(%h: tensor<8x16xf32>, %scores: tensor<8x2xf32>) -> tensor<8x16xf32> {
  %w0 = orrery.weight "experts.0.w" trainable : tensor<16x16xf32>
  %w1 = orrery.weight "experts.1.w" trainable : tensor<16x16xf32>
  %k = orrery.constant dense<1> : tensor<1xi64>
  %top:2 = orrery.onnx_op "TopK" ""(%scores, %k) {axis = -1 : i64} : (tensor<8x2xf32>, tensor<1xi64>) -> (tensor<8x1xf32>, tensor<8x1xi64>)
  %depth = orrery.constant dense<2> : tensor<i64>
  %values = orrery.constant dense<[0, 1]> : tensor<2xi64>
  %onehot = orrery.onnx_op "OneHot" ""(%top#1, %depth, %values) {axis = -1 : i64} : (tensor<8x1xi64>, tensor<i64>, tensor<2xi64>) -> tensor<8x1x2xi64>
  %mask = orrery.transpose(%onehot) {perm = array<i64: 2, 1, 0>} : (tensor<8x1x2xi64>) -> tensor<2x1x8xi64>
  %zeros = orrery.constant dense<0.000000e+00> : tensor<8x16xf32>
  %one = orrery.constant dense<1> : tensor<i64>
  %axis1 = orrery.constant dense<1> : tensor<1xi64>
  %wide = orrery.constant dense<[4, 16]> : tensor<2xi64>
  %e0 = orrery.constant dense<0> : tensor<i64>
  %m0 = orrery.gather(%mask, %e0) {axis = 0 : i64} : (tensor<2x1x8xi64>, tensor<i64>) -> tensor<1x8xi64>
  %b0 = orrery.cast(%m0) {to = 9 : i64} : (tensor<1x8xi64>) -> tensor<1x8xi1>
  %p0 = orrery.onnx_op "NonZero" ""(%b0) : (tensor<1x8xi1>) -> tensor<2x4xi64>
  %rows0 = orrery.gather(%p0, %one) {axis = 0 : i64} : (tensor<2x4xi64>, tensor<i64>) -> tensor<4xi64>
  %x0 = orrery.gather(%h, %rows0) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %t0 = orrery.transpose(%w0) {perm = array<i64: 1, 0>} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %y0 = orrery.matmul(%x0, %t0) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a0 = orrery.sigmoid(%y0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %u0 = orrery.unsqueeze(%rows0, %axis1) : (tensor<4xi64>, tensor<1xi64>) -> tensor<4x1xi64>
  %i0 = orrery.expand(%u0, %wide) : (tensor<4x1xi64>, tensor<2xi64>) -> tensor<4x16xi64>
  %s0 = orrery.onnx_op "ScatterElements" ""(%zeros, %i0, %a0) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4x16xi64>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %acc0 = orrery.add(%zeros, %s0) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %e1 = orrery.constant dense<1> : tensor<i64>
  %m1 = orrery.gather(%mask, %e1) {axis = 0 : i64} : (tensor<2x1x8xi64>, tensor<i64>) -> tensor<1x8xi64>
  %b1 = orrery.cast(%m1) {to = 9 : i64} : (tensor<1x8xi64>) -> tensor<1x8xi1>
  %p1 = orrery.onnx_op "NonZero" ""(%b1) : (tensor<1x8xi1>) -> tensor<2x4xi64>
  %rows1 = orrery.gather(%p1, %one) {axis = 0 : i64} : (tensor<2x4xi64>, tensor<i64>) -> tensor<4xi64>
  %x1 = orrery.gather(%h, %rows1) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %t1 = orrery.transpose(%w1) {perm = array<i64: 1, 0>} : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %y1 = orrery.matmul(%x1, %t1) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a1 = orrery.sigmoid(%y1) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %u1 = orrery.unsqueeze(%rows1, %axis1) : (tensor<4xi64>, tensor<1xi64>) -> tensor<4x1xi64>
  %i1 = orrery.expand(%u1, %wide) : (tensor<4x1xi64>, tensor<2xi64>) -> tensor<4x16xi64>
  %s1 = orrery.onnx_op "ScatterElements" ""(%zeros, %i1, %a1) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4x16xi64>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %acc1 = orrery.add(%acc0, %s1) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %acc1 : tensor<8x16xf32>
}

// -----

// Iterations that differ (the second expert's activation is not the
// first's) are not one loop body: the layer stays as written.
// CHECK-LABEL: func.func @unlike
// CHECK: orrery.onnx_op "NonZero"
// CHECK: orrery.sigmoid
// CHECK: orrery.tanh
// CHECK: orrery.onnx_op "ScatterElements"
func.func @unlike(%h: tensor<8x16xf32>, %scores: tensor<8x2xf32>) -> tensor<8x16xf32> {
  %w0 = orrery.weight "experts.0.w" trainable : tensor<16x16xf32>
  %w1 = orrery.weight "experts.1.w" trainable : tensor<16x16xf32>
  %k = orrery.constant dense<1> : tensor<1xi64>
  %top:2 = orrery.onnx_op "TopK" ""(%scores, %k) {axis = -1 : i64} : (tensor<8x2xf32>, tensor<1xi64>) -> (tensor<8x1xf32>, tensor<8x1xi64>)
  %depth = orrery.constant dense<2> : tensor<i64>
  %values = orrery.constant dense<[0, 1]> : tensor<2xi64>
  %onehot = orrery.onnx_op "OneHot" ""(%top#1, %depth, %values) {axis = -1 : i64} : (tensor<8x1xi64>, tensor<i64>, tensor<2xi64>) -> tensor<8x1x2xi64>
  %mask = orrery.transpose(%onehot) {perm = array<i64: 2, 1, 0>} : (tensor<8x1x2xi64>) -> tensor<2x1x8xi64>
  %zeros = orrery.constant dense<0.000000e+00> : tensor<8x16xf32>
  %one = orrery.constant dense<1> : tensor<i64>
  %axis1 = orrery.constant dense<1> : tensor<1xi64>
  %wide = orrery.constant dense<[4, 16]> : tensor<2xi64>
  %e0 = orrery.constant dense<0> : tensor<i64>
  %m0 = orrery.gather(%mask, %e0) {axis = 0 : i64} : (tensor<2x1x8xi64>, tensor<i64>) -> tensor<1x8xi64>
  %b0 = orrery.cast(%m0) {to = 9 : i64} : (tensor<1x8xi64>) -> tensor<1x8xi1>
  %p0 = orrery.onnx_op "NonZero" ""(%b0) : (tensor<1x8xi1>) -> tensor<2x4xi64>
  %rows0 = orrery.gather(%p0, %one) {axis = 0 : i64} : (tensor<2x4xi64>, tensor<i64>) -> tensor<4xi64>
  %x0 = orrery.gather(%h, %rows0) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %y0 = orrery.matmul(%x0, %w0) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a0 = orrery.sigmoid(%y0) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %u0 = orrery.unsqueeze(%rows0, %axis1) : (tensor<4xi64>, tensor<1xi64>) -> tensor<4x1xi64>
  %i0 = orrery.expand(%u0, %wide) : (tensor<4x1xi64>, tensor<2xi64>) -> tensor<4x16xi64>
  %s0 = orrery.onnx_op "ScatterElements" ""(%zeros, %i0, %a0) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4x16xi64>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %acc0 = orrery.add(%zeros, %s0) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %e1 = orrery.constant dense<1> : tensor<i64>
  %m1 = orrery.gather(%mask, %e1) {axis = 0 : i64} : (tensor<2x1x8xi64>, tensor<i64>) -> tensor<1x8xi64>
  %b1 = orrery.cast(%m1) {to = 9 : i64} : (tensor<1x8xi64>) -> tensor<1x8xi1>
  %p1 = orrery.onnx_op "NonZero" ""(%b1) : (tensor<1x8xi1>) -> tensor<2x4xi64>
  %rows1 = orrery.gather(%p1, %one) {axis = 0 : i64} : (tensor<2x4xi64>, tensor<i64>) -> tensor<4xi64>
  %x1 = orrery.gather(%h, %rows1) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4xi64>) -> tensor<4x16xf32>
  %y1 = orrery.matmul(%x1, %w1) : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %a1 = orrery.tanh(%y1) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %u1 = orrery.unsqueeze(%rows1, %axis1) : (tensor<4xi64>, tensor<1xi64>) -> tensor<4x1xi64>
  %i1 = orrery.expand(%u1, %wide) : (tensor<4x1xi64>, tensor<2xi64>) -> tensor<4x16xi64>
  %s1 = orrery.onnx_op "ScatterElements" ""(%zeros, %i1, %a1) {axis = 0 : i64} : (tensor<8x16xf32>, tensor<4x16xi64>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %acc1 = orrery.add(%acc0, %s1) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %acc1 : tensor<8x16xf32>
}
