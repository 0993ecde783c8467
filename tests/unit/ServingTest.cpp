//===- ServingTest.cpp - KV cache and serving memory ----------------------===//
//
// Llama-3 8B and 70B (GQA: 8 kv heads of 128) from the generator's graphs,
// against KV-cache bytes and batch sizes computed by hand.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Serving.h"
#include "TestSupport.h"

namespace orrery {
namespace {

using test::builtinWorkload;

TEST(Serving, KvCacheBytesPerTokenOfLlama3) {
  mlir::MLIRContext ctx;
  Workload l8 = builtinWorkload(ctx, "llama3-8b"), l70 = builtinWorkload(ctx, "llama3-70b");
  // layers x kv heads x (K dim + V dim) x 2 bytes.
  EXPECT_EQ(kvCacheBytesPerToken(l8, 2), 32.0 * 8 * (128 + 128) * 2); // 128 KiB
  EXPECT_EQ(kvCacheBytesPerToken(l70, 2), 80.0 * 8 * 256 * 2);        // 320 KiB
  EXPECT_EQ(kvCacheBytesPerToken(l70, 1), 80.0 * 8 * 256);            // fp8 KV
  // tp splits the 8 kv heads; past 8 ranks each keeps one head whole.
  EXPECT_EQ(kvCacheBytesPerToken(l70, 2, 8), 80.0 * 1 * 256 * 2);
  EXPECT_EQ(kvCacheBytesPerToken(l70, 2, 16), 80.0 * 1 * 256 * 2);
  EXPECT_EQ(kvCacheBytesPerToken(l70, 2, 2), 80.0 * 4 * 256 * 2);
}

// DeepSeek-V2-Lite's multi-head latent attention: the engines cache one
// latent of 512 and a rotary key of 64 a token for all 16 heads (vLLM's and
// TensorRT-LLM's MLA cache), not 16 heads of 192 + 128; tp does not split
// it, every rank keeps the whole latent.
TEST(Serving, LatentAttentionCachesTheLatentWholeOnEveryRank) {
  mlir::MLIRContext ctx;
  Workload w = builtinWorkload(ctx, "deepseek-v2-lite");
  EXPECT_EQ(kvCacheBytesPerToken(w, 2), 27.0 * (512 + 64) * 2); // 30.4 KiB
  EXPECT_EQ(kvCacheBytesPerToken(w, 1), 27.0 * 576);
  EXPECT_EQ(kvCacheBytesPerToken(w, 2, 8), 27.0 * 576 * 2);
  // The training shape is the heads': 16 of 192 (128 + 64 rope), values 128.
  for (const LayerKind &k : w.kinds)
    for (const OpCost &op : k.ops)
      if (op.attentionKvHeads > 0) {
        EXPECT_EQ(op.attentionKvHeads, 16);
        EXPECT_EQ(op.attentionHeadDim, 192);
        EXPECT_EQ(op.attentionValueDim, 128);
        EXPECT_EQ(op.attentionLatentDim, 512);
        EXPECT_EQ(op.attentionRopeDim, 64);
      }
}

TEST(Serving, TheBatchThatFitsOnOneH100) {
  mlir::MLIRContext ctx;
  Workload l8 = builtinWorkload(ctx, "llama3-8b"), l70 = builtinWorkload(ctx, "llama3-70b");
  const DeviceSpec &h100 = *HardwareCatalog::builtin().device("H100-SXM");
  ServingMemoryOptions o; // bf16 weights and cache, vLLM's defaults
  auto m = servingMemory(l8, h100, o);
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  // By hand: 0.9 of 80 GiB; 8,030,261,248 bf16 weights; the profiling pass
  // of 8,192 tokens holds the SwiGLU's 14,336-wide output and its input
  // (bf16); 1.5 GiB of CUDA context and library buffers.
  double budget = 0.9 * 80 * double(1ull << 30);
  double weights = 8030261248.0 * 2;
  double activations = 8192.0 * 2 * 14336 * 2;
  double workspace =
      h100.workspaceBytes > 0 ? h100.workspaceBytes : 1.5 * double(1ull << 30);
  double kv = 131072;
  EXPECT_EQ(l8.parameters(), 8030261248);
  EXPECT_DOUBLE_EQ(m->weightBytes, weights);
  EXPECT_DOUBLE_EQ(m->activationBytes, activations);
  int64_t tokens = int64_t((budget - weights - activations - workspace) / kv);
  EXPECT_EQ(m->maxTokens, tokens); // 451,000 tokens: 59 GB of cache
  EXPECT_EQ(m->maxSequences(2048), tokens / 2048);
  EXPECT_EQ(m->maxSequences(2048), 220);
  EXPECT_EQ(m->maxSequences(32768), 13);

  // 70B in bf16 is 141 GB (131.4 GiB): it does not fit one H100, and the
  // error says so.
  auto none = servingMemory(l70, h100, o);
  ASSERT_FALSE(bool(none));
  std::string why = llvm::toString(none.takeError());
  EXPECT_NE(why.find("the weights need 131.4 GiB"), std::string::npos) << why;
  // In fp8 (70.6 GB) the weights fit with 4.2 GB to spare for the
  // cache: 12,900 tokens, six sequences of 2K.
  o.weightBytesPerParam = 1;
  auto fp8 = servingMemory(l70, h100, o);
  ASSERT_TRUE(bool(fp8)) << llvm::toString(fp8.takeError());
  double left = budget - 70553706496.0 - 8192.0 * 2 * 28672 * 2 - workspace;
  EXPECT_EQ(fp8->maxTokens, int64_t(left / 327680));
  EXPECT_EQ(fp8->maxSequences(2048), 6);
  EXPECT_EQ(fp8->maxSequences(32768), 0);
  EXPECT_EQ(l70.parameters(), 70553706496);
}

TEST(Serving, BadOptionsAndNoAttentionAreOneLineErrors) {
  const DeviceSpec &h100 = *HardwareCatalog::builtin().device("H100-SXM");
  Workload noAttention = test::moeModel(2, 1000, 1000);
  auto expectError = [&](const Workload &w, const ServingMemoryOptions &o,
                         const std::string &part) {
    auto m = servingMemory(w, h100, o);
    ASSERT_FALSE(bool(m));
    std::string why = llvm::toString(m.takeError());
    EXPECT_NE(why.find(part), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  };
  expectError(noAttention, {}, "no attention op keeping a KV cache");
  ServingMemoryOptions o;
  o.tp = 0;
  expectError(noAttention, o, "tp and pp must be at least 1");
  o = {};
  o.memoryUtilization = 1.5;
  expectError(noAttention, o, "memory utilization must be in (0, 1]");
}

} // namespace
} // namespace orrery
