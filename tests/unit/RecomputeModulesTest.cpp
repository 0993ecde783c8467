//===- RecomputeModulesTest.cpp - Megatron's selective-recompute modules --===//
//
// What each of --recompute-modules drops, on the generator's Qwen3 and
// DeepSeek graphs (4,096 tokens, batch 1), against the tensors by hand.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Simulator.h"
#include "orrery/CostModel/Strategy.h"
#include "TestSupport.h"

#include <gtest/gtest.h>

namespace orrery {
namespace {

using test::builtinWorkload;

/// Bytes a repeated kind drops when `modules` are recomputed (all its
/// values, unsplit).
int64_t dropped(const LayerKind &k, unsigned modules) {
  int64_t b = 0;
  for (const LayerKind::ModuleSaved &m : k.savedByModules)
    if (m.modules & modules)
      b += m.replicatedBytes + m.shardedBytes;
  return b;
}

const LayerKind &repeated(const Workload &w) {
  for (const LayerKind &k : w.kinds)
    if (k.count > 1)
      return k;
  return w.kinds.front();
}

// Qwen3-30B-A3B: 4,096 tokens each routed to 8 experts of ffn 768. moe_act
// drops the SwiGLU's output, fc2's input, and keeps fc1's and fc3's
// outputs: 4,096 x 8 x 768 x 2 bytes a layer. The whole MoE module drops
// that and more (the dispatched tokens, fc1's outputs, ...).
TEST(RecomputeModules, MoeActDropsTheExpertActivationOutput) {
  mlir::MLIRContext ctx;
  Workload w = builtinWorkload(ctx, "qwen3-30b-a3b");
  const LayerKind &k = repeated(w);
  EXPECT_EQ(dropped(k, kRecomputeMoeAct), 4096LL * 8 * 768 * 2);
  int64_t fc1 = 2 * 4096LL * 8 * 768 * 2, dispatched = 4096LL * 8 * 2048 * 2;
  EXPECT_GE(dropped(k, kRecomputeMoe),
            dropped(k, kRecomputeMoeAct) + fc1 + dispatched);
  // Qwen3 has no shared experts and no latent attention.
  EXPECT_EQ(dropped(k, kRecomputeSharedExperts), 0);
  EXPECT_EQ(dropped(k, kRecomputeMlaUpProj), 0);
}

// DeepSeek-V2-Lite's latent attention: mla_up_proj drops Q and K (16 heads
// of 192) and V (16 of 128), which its up-projections make, and keeps the
// latents they read (512 and the hidden state's q projection's input).
// Its MoE layers' two shared experts are a SwiGLU of 2 x 1,408.
TEST(RecomputeModules, MlaUpProjDropsQueriesKeysAndValues) {
  mlir::MLIRContext ctx;
  Workload w = builtinWorkload(ctx, "deepseek-v2-lite");
  const LayerKind &k = repeated(w);
  int64_t qkv = 4096LL * 16 * (192 + 192 + 128) * 2;
  int64_t mla = dropped(k, kRecomputeMlaUpProj);
  EXPECT_GE(mla, qkv);
  // Nothing of the MLP, and no more than the up-projections' own outputs
  // beside Q, K and V (q's and kv's, 16 x (192 + 256) a token).
  EXPECT_LE(mla, qkv + 4096LL * 16 * (192 + 256) * 2);
  int64_t shared = dropped(k, kRecomputeSharedExperts);
  EXPECT_GE(shared, 4096LL * 2816 * 2 * 2); // gate and up outputs
  EXPECT_LT(shared, dropped(k, kRecomputeMoe));
  // The dense first layer is the embedding's kind (once): no repeated mlp.
  auto strategy =
      parseStrategy("dp=8,mbs=1,recompute=selective,recompute_modules=mlp");
  ASSERT_TRUE(bool(strategy));
  Cluster c = test::preset("8xH100-SXM");
  std::string why =
      llvm::toString(completeAndValidate(*strategy, w, c));
  EXPECT_NE(why.find("mlp checkpoints a dense MLP layer"), std::string::npos)
      << why;
}

// Recomputing a module keeps less and re-runs its forward: the step grows
// by at most the module's forward, the memory shrinks by what it drops.
TEST(RecomputeModules, TheStepPaysTheForwardTheMemoryDropsTheTensors) {
  mlir::MLIRContext ctx;
  Workload w = builtinWorkload(ctx, "deepseek-v2-lite");
  Cluster c = test::preset("8xH100-SXM");
  auto run = [&](const char *text) {
    auto s = parseStrategy(text);
    EXPECT_TRUE(bool(s));
    auto r = simulateStep(w, c, *s, {}, false);
    EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
    return *r;
  };
  StepResult none = run("dp=8,ep=8,mbs=1,gbs=64,recompute=none");
  StepResult core = run("dp=8,ep=8,mbs=1,gbs=64,recompute=selective");
  StepResult mla = run("dp=8,ep=8,mbs=1,gbs=64,recompute=selective,"
                       "recompute_modules=mla_up_proj");
  StepResult moe = run("dp=8,ep=8,mbs=1,gbs=64,recompute=selective,"
                       "recompute_modules=moe");
  StepResult full = run("dp=8,ep=8,mbs=1,gbs=64,recompute=full");
  double mem = none.stages.front().memory.activationsBytes;
  EXPECT_LT(mla.stages.front().memory.activationsBytes, core.stages.front().memory.activationsBytes);
  EXPECT_LT(moe.stages.front().memory.activationsBytes, mla.stages.front().memory.activationsBytes);
  EXPECT_LT(full.stages.front().memory.activationsBytes, moe.stages.front().memory.activationsBytes);
  EXPECT_LT(core.stages.front().memory.activationsBytes, mem);
  EXPECT_GT(mla.stepS, none.stepS);
  EXPECT_GT(moe.stepS, mla.stepS);
  EXPECT_GT(full.stepS, moe.stepS);
}

} // namespace
} // namespace orrery
