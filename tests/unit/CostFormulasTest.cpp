//===- CostFormulasTest.cpp - cost interface against hand-computed values -===//
#include "TestSupport.h"
#include "orrery/Dialect/OrreryDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace orrery;

namespace {

/// Parses `body` inside a function with arguments `args` and returns the
/// cost interface of the op named `opName` (the first one).
class CostTest : public ::testing::Test {
protected:
  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;

  CostOpInterface op(const std::string &args, const std::string &body,
                     llvm::StringRef opName) {
    std::string text =
        "func.func @f(" + args + ") {\n" + body + "\n  return\n}";
    module = test::parse(ctx, text);
    EXPECT_TRUE(module) << text;
    CostOpInterface found;
    module->walk([&](Operation *o) {
      if (!found && o->getName().getStringRef() == opName)
        found = dyn_cast<CostOpInterface>(o);
    });
    EXPECT_TRUE(found) << "no " << opName.str();
    return found;
  }
};

TEST_F(CostTest, MatMulWithWeight) {
  // [2,64] x [64,12]: 2·M·N·K = 2·2·12·64 = 3072 forward, twice that backward.
  auto c = op("%x: tensor<2x64xf32>",
              "%w = orrery.weight \"w\" trainable : tensor<64x12xf32>\n"
              "%y = orrery.matmul(%x, %w) : (tensor<2x64xf32>, "
              "tensor<64x12xf32>) -> tensor<2x12xf32>",
              "orrery.matmul");
  EXPECT_EQ(c.getForwardFlops(), 3072);
  EXPECT_EQ(c.getBackwardFlops(), 6144);
  EXPECT_EQ(c.getBytesRead(), (2 * 64 + 64 * 12) * 4);
  EXPECT_EQ(c.getBytesWritten(), 2 * 12 * 4);
  // Only the activation input is kept: 2·64 floats.
  EXPECT_EQ(c.getSavedActivationBytes(), 2 * 64 * 4);
}

TEST_F(CostTest, TransposedWeightIsNotAnActivation) {
  // torch exports nn.Linear as MatMul(x, Transpose(W)): the transposed
  // weight is recomputed from W, so only x (2·64 floats) is kept.
  auto c = op("%x: tensor<2x64xf32>",
              "%w = orrery.weight \"w\" trainable : tensor<12x64xf32>\n"
              "%t = orrery.transpose(%w) {perm = array<i64: 1, 0>} : "
              "(tensor<12x64xf32>) -> tensor<64x12xf32>\n"
              "%y = orrery.matmul(%x, %t) : (tensor<2x64xf32>, "
              "tensor<64x12xf32>) -> tensor<2x12xf32>",
              "orrery.matmul");
  EXPECT_EQ(c.getSavedActivationBytes(), 2 * 64 * 4);
}

TEST_F(CostTest, BatchedMatMulOfTwoActivationsKeepsBoth) {
  // Attention scores: [8,12,128,64] x [8,12,64,128] = 2·8·12·128·128·64.
  auto c = op("%q: tensor<8x12x128x64xf16>, %k: tensor<8x12x64x128xf16>",
              "%s = orrery.matmul(%q, %k) : (tensor<8x12x128x64xf16>, "
              "tensor<8x12x64x128xf16>) -> tensor<8x12x128x128xf16>",
              "orrery.matmul");
  EXPECT_EQ(c.getForwardFlops(), int64_t(2) * 8 * 12 * 128 * 128 * 64);
  EXPECT_EQ(c.getSavedActivationBytes(), 2 * (8 * 12 * 128 * 64) * 2);
}

TEST_F(CostTest, GemmWithBiasAndTranspose) {
  // [8,4096] x [1000,4096]^T + [1000]: 2·8·1000·4096 + 8·1000.
  auto c = op(
      "%a: tensor<8x4096xf32>",
      "%b = orrery.weight \"fc.weight\" trainable : tensor<1000x4096xf32>\n"
      "%c = orrery.weight \"fc.bias\" trainable : tensor<1000xf32>\n"
      "%y = orrery.gemm(%a, %b, %c) {transB = 1 : i64} : (tensor<8x4096xf32>, "
      "tensor<1000x4096xf32>, tensor<1000xf32>) -> tensor<8x1000xf32>",
      "orrery.gemm");
  EXPECT_EQ(c.getForwardFlops(), int64_t(2) * 8 * 1000 * 4096 + 8000);
  EXPECT_EQ(c.getBackwardFlops(), int64_t(4) * 8 * 1000 * 4096);
}

TEST_F(CostTest, ConvStem) {
  // ResNet stem: 64 filters of 3x7x7 over a 112x112 output:
  // 2·(3·7·7)·(64·112·112) = 236,027,904.
  auto c = op(
      "%x: tensor<1x3x224x224xf32>",
      "%w = orrery.weight \"conv1.weight\" trainable : tensor<64x3x7x7xf32>\n"
      "%y = orrery.conv(%x, %w) {strides = array<i64: 2, 2>, pads = array<i64: "
      "3, 3, 3, 3>} : (tensor<1x3x224x224xf32>, tensor<64x3x7x7xf32>) -> "
      "tensor<1x64x112x112xf32>",
      "orrery.conv");
  EXPECT_EQ(c.getForwardFlops(), 236027904);
  EXPECT_EQ(c.getBackwardFlops(), 2 * 236027904);
  EXPECT_EQ(c.getSavedActivationBytes(), 3 * 224 * 224 * 4);
}

TEST_F(CostTest, DepthwiseConvUsesGroups) {
  // Depthwise 3x3 on 32 channels: weight [32,1,3,3]; 2·9·(32·56·56).
  auto c = op("%x: tensor<1x32x56x56xf32>",
              "%w = orrery.weight \"dw\" trainable : tensor<32x1x3x3xf32>\n"
              "%y = orrery.conv(%x, %w) {group = 32 : i64, pads = array<i64: "
              "1, 1, 1, 1>} : (tensor<1x32x56x56xf32>, tensor<32x1x3x3xf32>) "
              "-> tensor<1x32x56x56xf32>",
              "orrery.conv");
  EXPECT_EQ(c.getForwardFlops(), 2 * 9 * 32 * 56 * 56);
}

TEST_F(CostTest, ConvTransposeCountsPerInputElement) {
  // W [64,32,2,2]: each of 64·20·20 inputs feeds 32·4 outputs: 2·128·25600.
  auto c = op("%x: tensor<1x64x20x20xf32>",
              "%w = orrery.weight \"up\" trainable : tensor<64x32x2x2xf32>\n"
              "%y = orrery.conv_transpose(%x, %w) {strides = array<i64: 2, 2>} "
              ": (tensor<1x64x20x20xf32>, tensor<64x32x2x2xf32>) -> "
              "tensor<1x32x40x40xf32>",
              "orrery.conv_transpose");
  EXPECT_EQ(c.getForwardFlops(), 2 * 32 * 4 * 64 * 20 * 20);
}

TEST_F(CostTest, SoftmaxKeepsItsOutputAndDropoutAMask) {
  auto s =
      op("%x: tensor<4x128xf16>",
         "%p = orrery.softmax(%x) {axis = -1 : i64} : (tensor<4x128xf16>) -> "
         "tensor<4x128xf16>\n"
         "%d = orrery.dropout(%p) : (tensor<4x128xf16>) -> tensor<4x128xf16>",
         "orrery.softmax");
  EXPECT_EQ(s.getForwardFlops(), 5 * 512);
  EXPECT_EQ(s.getSavedActivationBytes(), 512 * 2);
  CostOpInterface d;
  module->walk([&](DropoutOp o) { d = o; });
  EXPECT_EQ(d.getSavedActivationBytes(), 512); // one byte per element
}

TEST_F(CostTest, ElementwiseBroadcastAndConstants) {
  // x * 0.5 keeps nothing (the gradient needs only the constant);
  // x * y keeps both activations; x + y keeps nothing.
  auto mulConst = op("%x: tensor<4x8xf32>",
                     "%c = orrery.constant dense<5.000000e-01> : tensor<f32>\n"
                     "%y = orrery.mul(%x, %c) : (tensor<4x8xf32>, tensor<f32>) "
                     "-> tensor<4x8xf32>",
                     "orrery.mul");
  EXPECT_EQ(mulConst.getForwardFlops(), 32);
  EXPECT_EQ(mulConst.getSavedActivationBytes(), 0);
  auto mul = op("%x: tensor<4x8xf32>, %y: tensor<8xf32>",
                "%z = orrery.mul(%x, %y) : (tensor<4x8xf32>, tensor<8xf32>) -> "
                "tensor<4x8xf32>",
                "orrery.mul");
  EXPECT_EQ(mul.getSavedActivationBytes(), (32 + 8) * 4);
  auto add = op("%x: tensor<4x8xf32>, %y: tensor<4x8xf32>",
                "%z = orrery.add(%x, %y) : (tensor<4x8xf32>, tensor<4x8xf32>) "
                "-> tensor<4x8xf32>",
                "orrery.add");
  EXPECT_EQ(add.getSavedActivationBytes(), 0);
  auto sum = op("%x: tensor<8xf32>, %y: tensor<8xf32>, %z: tensor<8xf32>",
                "%s = orrery.sum(%x, %y, %z) : (tensor<8xf32>, tensor<8xf32>, "
                "tensor<8xf32>) -> tensor<8xf32>",
                "orrery.sum");
  EXPECT_EQ(sum.getForwardFlops(), 2 * 8); // n-1 additions per element
}

TEST_F(CostTest, LstmFormula) {
  // seq 16, batch 1, input 64, hidden 128, one direction:
  // 16·(4·2·128·(64+128) + 4·4·128) = 16·(196,608 + 2,048).
  auto c =
      op("%x: tensor<16x1x64xf32>",
         "%w = orrery.weight \"W\" trainable : tensor<1x512x64xf32>\n"
         "%r = orrery.weight \"R\" trainable : tensor<1x512x128xf32>\n"
         "%y, %h = orrery.lstm(%x, %w, %r) {hidden_size = 128 : i64} : "
         "(tensor<16x1x64xf32>, tensor<1x512x64xf32>, tensor<1x512x128xf32>) "
         "-> (tensor<16x1x1x128xf32>, tensor<1x1x128xf32>)",
         "orrery.lstm");
  EXPECT_EQ(c.getForwardFlops(), 16 * (196608 + 2048));
  EXPECT_EQ(c.getBackwardFlops(), 16 * (2 * 196608 + 2048));
}

TEST_F(CostTest, WeightsCountParametersUnlessBuffers) {
  auto w = op("",
              "%w = orrery.weight \"bn.weight\" trainable : tensor<64xf32>\n"
              "%m = orrery.weight \"bn.running_mean\" : tensor<64xf32>",
              "orrery.weight");
  EXPECT_EQ(w.getParameterCount(), 64);
  int64_t total = 0;
  module->walk([&](WeightOp o) {
    total += cast<CostOpInterface>(*o).getParameterCount();
  });
  EXPECT_EQ(total, 64);
}

TEST_F(CostTest, IfTakesTheLargerBranch) {
  auto c = op("%c: tensor<i1>, %x: tensor<4x8xf32>",
              "%r = orrery.if(%c) : (tensor<i1>) -> tensor<4x8xf32> {\n"
              "  %a = orrery.relu(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"
              "  orrery.yield %a : tensor<4x8xf32>\n"
              "} else {\n"
              "  %b = orrery.tanh(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>\n"
              "  orrery.yield %b : tensor<4x8xf32>\n"
              "}",
              "orrery.if");
  EXPECT_EQ(c.getForwardFlops(), 4 * 32); // tanh: 4 FLOP per element
}

TEST_F(CostTest, ScanRunsItsBodyPerStep) {
  auto c = op("%s0: tensor<4xf32>, %xs: tensor<16x4xf32>",
              "%s, %ys = orrery.scan(%s0, %xs) {num_scan_inputs = 1 : i64} : "
              "(tensor<4xf32>, tensor<16x4xf32>) -> (tensor<4xf32>, "
              "tensor<16x4xf32>) {\n"
              "^bb0(%st: tensor<4xf32>, %x: tensor<4xf32>):\n"
              "  %n = orrery.add(%st, %x) : (tensor<4xf32>, tensor<4xf32>) -> "
              "tensor<4xf32>\n"
              "  orrery.yield %n, %n : tensor<4xf32>, tensor<4xf32>\n"
              "}",
              "orrery.scan");
  EXPECT_EQ(c.getForwardFlops(), 16 * 4);
}

} // namespace
