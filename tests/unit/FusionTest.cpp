//===- FusionTest.cpp - fused kernels, kernel modes and overlap ----------===//
//
// The tiny GPT fixture (2 layers, d 64, 4 heads, 32 tokens, fp16) priced as
// the stacks run it: fused attention keeps Q, K, V, O and the log-sum-exp
// rows (Korthikanti et al.'s 34·s·b·h per layer), eager PyTorch pays the
// host's dispatch per kernel, and every strategy field moves the price or
// is refused.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Simulator.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace orrery;

namespace {

using test::moeModel;
using test::preset;
using test::tinyGpt;

const LayerKind &layerKind(const Workload &w) {
  for (const LayerKind &k : w.kinds)
    if (k.count > 1)
      return k;
  ADD_FAILURE() << "no repeated layer";
  return w.kinds.front();
}

llvm::Expected<StepResult> run(const Workload &w, const Cluster &c,
                               const std::string &strategy,
                               Assumptions a = Assumptions()) {
  auto s = parseStrategy(strategy);
  if (!s)
    return s.takeError();
  a.fusion = w.kernels;
  return simulateStep(w, c, *s, a);
}

StepResult simulate(const Workload &w, const Cluster &c,
                    const std::string &strategy,
                    Assumptions a = Assumptions()) {
  auto r = run(w, c, strategy, a);
  EXPECT_TRUE(bool(r)) << strategy << ": "
                       << (r ? "" : llvm::toString(r.takeError()));
  return r ? *r : StepResult{};
}

TEST(Fusion, AttentionIsOneKernelKeepingQKVAndItsOutput) {
  MLIRContext ctx;
  Workload fused = tinyGpt(ctx, KernelFusion::Fused, 2);
  const LayerKind &k = layerKind(fused);
  int attention = 0, softmax = 0;
  for (const OpCost &op : k.ops) {
    attention += op.kernelClass == KernelClass::Attention;
    softmax += op.name == "orrery.softmax";
  }
  EXPECT_EQ(attention, 1);
  EXPECT_EQ(softmax, 0);
  EXPECT_EQ(k.attentionHeads, 4);
  // s = 32, b = 2, h = 64, 2-byte activations: 34·s·b·h, plus the fp32
  // log-sum-exp of 4 heads x 32 rows x 2 samples.
  int64_t sbh = 32 * 2 * 64;
  EXPECT_EQ(k.savedActivationBytes, 34 * sbh + 4 * 4 * 32 * 2);
  // With the scores in memory: Korthikanti's 5·a·s/h term on top.
  Workload unfused = tinyGpt(ctx, KernelFusion::UnfusedAttention, 2);
  EXPECT_EQ(layerKind(unfused).savedActivationBytes,
            34 * sbh + 5 * 4 * 32 * 32 * 2);
}

TEST(Fusion, SelectiveRecomputeRerunsTheAttentionKernelOnly) {
  MLIRContext ctx;
  Workload w = tinyGpt(ctx, KernelFusion::Fused, 1);
  Cluster c = preset("1xH100-SXM");
  StepResult none = simulate(w, c, "mbs=8,gbs=8,recompute=none");
  StepResult sel = simulate(w, c, "mbs=8,gbs=8,recompute=selective");
  EXPECT_GT(sel.stepS, none.stepS);
  // Only the log-sum-exp rows are dropped: 2 layers x 4 heads x 32 rows x
  // 8 samples x 4 bytes (x the fragmentation allowance).
  double dropped = none.stages[0].memory.activationsBytes -
                   sel.stages[0].memory.activationsBytes;
  EXPECT_NEAR(dropped, 2 * 4 * 32 * 8 * 4 * 1.05, 1.0);
}

TEST(Fusion, EagerKernelsWaitForTheHost) {
  MLIRContext ctx;
  Workload fused = tinyGpt(ctx, KernelFusion::Fused);
  Workload eager = tinyGpt(ctx, KernelFusion::Eager);
  Cluster c = preset("1xH100-SXM");
  StepResult f = simulate(fused, c, "mbs=1,gbs=1");
  StepResult e = simulate(eager, c, "mbs=1,gbs=1");
  // The tiny model's kernels all last less than the 10 µs dispatch: the
  // step is at least the host's time for every forward and backward kernel.
  int kernels = 0;
  for (const LayerRun &run : eager.layers)
    for (const OpCost &op : eager.kinds[run.kind].ops)
      if (!op.view)
        kernels += int(run.count) * (1 + std::max(0, op.backwardKernels));
  EXPECT_GE(e.computeS, kernels * Assumptions().hostDispatchS * 0.99);
  EXPECT_GT(e.stepS, 2 * f.stepS);
  // A workload priced as another stack than it was built for is refused.
  auto s = parseStrategy("mbs=1,gbs=1");
  ASSERT_TRUE(bool(s));
  Assumptions a;
  a.fusion = KernelFusion::Eager;
  auto wrong = simulateStep(fused, c, *s, a);
  ASSERT_FALSE(bool(wrong));
  EXPECT_EQ(llvm::toString(wrong.takeError()),
            "simulator: the model was built for --kernels fused but is "
            "priced as eager");
}

TEST(Overlap, EachOverlapMovesItsCommunication) {
  MLIRContext ctx;
  Workload w = tinyGpt(ctx, KernelFusion::Fused);
  Cluster c = preset("4x8xH100-SXM");
  const std::string base =
      "tp=2,pp=2,dp=8,mbs=4,gbs=256,sp=1,vpp=2,zero=1,";
  // Buckets smaller than the tiny model, as a real model is to Megatron's
  // 40M-parameter ones (one bucket holding a whole stage has nothing to
  // overlap with: the next test).
  Assumptions small;
  small.gradBucketParams = small.gradBucketParamsPerRank = 1000;
  StepResult none = simulate(w, c, base + "overlap=none", small);
  StepResult grad = simulate(w, c, base + "overlap=grad", small);
  StepResult param = simulate(w, c, base + "overlap=grad+param", small);
  StepResult tp = simulate(w, c, base + "overlap=grad+param+tp", small);
  StepResult p2p = simulate(w, c, base + "overlap=grad+param+tp+p2p", small);
  EXPECT_LT(grad.exposedDpCommS, none.exposedDpCommS);
  EXPECT_LT(param.exposedDpCommS, grad.exposedDpCommS);
  EXPECT_LT(tp.exposedTpCommS, param.exposedTpCommS);
  EXPECT_LT(p2p.stepS, tp.stepS);
  // The default is what the exporters write for Megatron-LM.
  StepResult dflt = simulate(w, c, base.substr(0, base.size() - 1), small);
  EXPECT_DOUBLE_EQ(dflt.stepS, param.stepS);
  // In one bucket (Megatron's 40M parameters hold this model whole) the
  // reduction waits for the end of the backward, and the gather holds up
  // the first forward: the overlaps hide nothing.
  StepResult oneNone = simulate(w, c, base + "overlap=none");
  StepResult oneBoth = simulate(w, c, base + "overlap=grad+param");
  EXPECT_DOUBLE_EQ(oneNone.exposedDpCommS, oneBoth.exposedDpCommS);
  EXPECT_EQ(dflt.strategy.str().find("overlap"), std::string::npos);
  EXPECT_NE(p2p.strategy.str().find("overlap=grad+param+tp+p2p"),
            std::string::npos);
}

TEST(Overlap, OverlapsTheFrameworksDoNotOfferAreRefused) {
  MLIRContext ctx;
  Workload w = tinyGpt(ctx, KernelFusion::Fused);
  Cluster c = preset("2x8xH100-SXM");
  auto message = [&](const std::string &s) {
    auto r = run(w, c, s);
    return r ? std::string("no error") : llvm::toString(r.takeError());
  };
  EXPECT_EQ(message("tp=2,dp=8,overlap=tp"),
            "strategy: overlap=tp needs sp=1 (Megatron-Core overlaps the "
            "sequence-parallel all-gathers and reduce-scatters with the "
            "GEMMs; it has no overlap for tensor parallelism alone)");
  EXPECT_EQ(message("pp=2,dp=8,mbs=1,gbs=16,overlap=p2p"),
            "strategy: overlap=p2p needs the interleaved schedule (vpp > 1): "
            "Megatron-Core overlaps pipeline sends only there");
  EXPECT_EQ(message("dp=16,overlap=grad+bucket"),
            "--strategy 'overlap=grad+bucket': overlap takes none or grad, "
            "param, tp, p2p and ep joined by '+', not 'bucket'");
}

// Every strategy field moves the step time or the memory, or is refused
// with one line: a field that parses and prices nothing is a wrong plan.
TEST(Strategy, EveryFieldMovesThePriceOrIsRefused) {
  MLIRContext ctx;
  Workload w = tinyGpt(ctx, KernelFusion::Fused);
  Workload eager = tinyGpt(ctx, KernelFusion::Eager);
  Cluster c = preset("2x8xH100-SXM");
  const std::string base = "tp=2,pp=2,dp=4,mbs=2,gbs=64,zero=0";
  // Gradient buckets smaller than the tiny model (as Megatron's are to a
  // real one), so that overlapping the reduction can hide some of it.
  Assumptions small;
  small.gradBucketParams = small.gradBucketParamsPerRank = 1000;
  StepResult ref = simulate(w, c, base, small);
  auto moves = [&](const std::string &flip, const Workload &model) {
    auto r = run(model, c, flip, small);
    if (!r) {
      std::string e = llvm::toString(r.takeError());
      EXPECT_EQ(e.find('\n'), std::string::npos) << flip;
      return "refused: " + e;
    }
    bool changed = r->stepS != ref.stepS ||
                   r->peakMemoryBytes != ref.peakMemoryBytes;
    return std::string(changed ? "moves" : "prices nothing");
  };
  struct Flip {
    const char *field;
    std::string strategy;
  };
  std::vector<Flip> flips = {
      {"tp", "tp=4,pp=2,dp=2,mbs=2,gbs=64,zero=0"},
      {"pp", "tp=2,pp=1,dp=8,mbs=2,gbs=64,zero=0"},
      {"dp", "tp=2,pp=2,dp=2,mbs=2,gbs=64,zero=0"},
      {"sp", base + ",sp=1"},
      {"vpp", base + ",vpp=2"},
      {"schedule", base + ",schedule=gpipe"},
      {"schedule zb-h1", base + ",schedule=zb-h1"},
      {"mbs", "tp=2,pp=2,dp=4,mbs=4,gbs=64,zero=0"},
      {"gbs", "tp=2,pp=2,dp=4,mbs=2,gbs=128,zero=0"},
      {"zero", "tp=2,pp=2,dp=4,mbs=2,gbs=64,zero=1"},
      {"recompute", base + ",recompute=full"},
      {"offload", base + ",offload=optimizer"},
      {"precision", base + ",precision=fp8"},
      {"order", base + ",order=dp-pp-tp-cp"},
      {"layers", base + ",layers=1:3"},
      {"overlap grad", base + ",overlap=param"},
      {"overlap tp", base + ",sp=1,overlap=grad+param+tp"},
      {"overlap p2p", base + ",vpp=2,overlap=grad+param+p2p"},
      {"ep", base + ",ep=2"},
      {"etp", base + ",sp=1,ep=2,etp=1"},
      {"cp", "tp=2,pp=2,dp=2,cp=2,mbs=2,gbs=64,zero=0"},
      {"cp_comm", "tp=2,pp=2,dp=2,cp=2,mbs=2,gbs=64,zero=0,cp_comm=all-to-all"},
      {"moe_imbalance", base + ",moe_imbalance=1.5"},
      {"moe_capacity", base + ",moe_capacity=1.25"},
  };
  for (const Flip &f : flips) {
    std::string outcome = moves(f.strategy, w);
    EXPECT_NE(outcome, "prices nothing") << f.field << ": " << f.strategy;
  }
  // The kernels are a property of the workload (--kernels).
  EXPECT_EQ(moves(base, eager), "moves");
  // On a mixture of experts, folding the experts' tp moves the price.
  Workload moe = moeModel(4, 400'000'000, 16 << 20);
  moe.kinds[0].expertReplicatedParameters = 0;
  moe.kinds[0].replicatedParameters = 0;
  moe.kinds[0].ops[0].tensorParallel = true;
  StepResult split = simulate(moe, c, "tp=2,pp=2,dp=4,sp=1,mbs=2,gbs=64,ep=4");
  StepResult folded =
      simulate(moe, c, "tp=2,pp=2,dp=4,sp=1,mbs=2,gbs=64,ep=4,etp=1");
  EXPECT_NE(split.peakMemoryBytes, folded.peakMemoryBytes);
  EXPECT_NE(split.stepS, folded.stepS);
  // And the routing's imbalance and the experts' capacity.
  for (const char *moeField : {",moe_imbalance=1.5", ",moe_capacity=1.25"}) {
    StepResult r = simulate(
        moe, c,
        std::string("tp=2,pp=2,dp=4,sp=1,mbs=2,gbs=64,ep=4") + moeField);
    EXPECT_NE(r.stepS, split.stepS) << moeField;
  }
}

TEST(ExpertParallel, TheBusiestRankSetsThePace) {
  // moe_imbalance=1.5: the busiest of the ep ranks gets 1.5 times the mean
  // tokens; its grouped GEMM runs 1.5 times the FLOPs, its all-to-alls move
  // 1.5 times the bytes, it keeps 1.5 times the experts' inputs, and every
  // rank waits for it.
  const int layers = 4;
  const int64_t dispatch = 64 << 20, kept = 32 << 20;
  Workload w = moeModel(layers, 1'000'000'000, dispatch);
  w.kinds[0].ops[0].activationInputBytes = kept;
  w.kinds[0].savedReplicatedBytes = kept;
  Cluster c = preset("8xH100-SXM");
  const std::string base = "dp=8,mbs=1,gbs=16,zero=1,ep=8";
  StepResult even = simulate(w, c, base);
  StepResult skewed = simulate(w, c, base + ",moe_imbalance=1.5");
  GroupShape g = groupShapeIn(c.groupOf(0), 1, 8);
  EXPECT_NEAR(skewed.exposedEpCommS,
              layers * 2 * 4 *
                  collectiveTime(CollectiveKind::AllToAll, 1.5 * dispatch, g),
              1e-9);
  EXPECT_GT(skewed.stepS, even.stepS);
  // What the layers keep is the experts' input alone here: half as much
  // again on the busiest device.
  EXPECT_GT(even.stages[0].memory.activationsBytes, 0);
  EXPECT_NEAR(skewed.stages[0].memory.activationsBytes /
                  even.stages[0].memory.activationsBytes,
              1.5, 1e-9);
  // Capacity 1 pads every expert to the balanced mean: as dropless and
  // balanced. Capacity 2 doubles every expert's buffer, even with all the
  // experts on one device, where an imbalance changes nothing (one device
  // runs every token wherever it was routed).
  EXPECT_EQ(simulate(w, c, base + ",moe_capacity=1").stepS, even.stepS);
  const std::string one = "dp=8,mbs=1,gbs=16,zero=1,ep=1";
  StepResult all = simulate(w, c, one);
  EXPECT_EQ(simulate(w, c, one + ",moe_imbalance=2").stepS, all.stepS);
  EXPECT_GT(simulate(w, c, one + ",moe_capacity=2").stepS, all.stepS);
  // A dense model has no experts to balance; bad values are refused.
  MLIRContext ctx;
  auto dense = run(tinyGpt(ctx, KernelFusion::Fused), preset("2xH100-SXM"),
                   "dp=2,moe_imbalance=1.2");
  ASSERT_FALSE(bool(dense));
  EXPECT_EQ(llvm::toString(dense.takeError()),
            "strategy: moe_imbalance: the model has no mixture-of-experts "
            "layers");
  auto low = parseStrategy("dp=8,moe_imbalance=0.5");
  ASSERT_FALSE(bool(low));
  EXPECT_NE(llvm::toString(low.takeError()).find("from 1 to 64"),
            std::string::npos);
  auto zero = parseStrategy("dp=8,moe_capacity=0");
  ASSERT_FALSE(bool(zero));
  llvm::consumeError(zero.takeError());
  auto parsed = parseStrategy(base + ",moe_imbalance=1.5,moe_capacity=1.25");
  ASSERT_TRUE(bool(parsed));
  EXPECT_NE(parsed->str().find("moe_imbalance=1.5,moe_capacity=1.25"),
            std::string::npos);
}

TEST(Precision, Fp8AsTransformerEngineRunsIt) {
  MLIRContext ctx;
  Workload w = tinyGpt(ctx, KernelFusion::Fused, 1);
  Cluster h100 = preset("1xH100-SXM");
  StepResult bf16 = simulate(w, h100, "mbs=64,gbs=64");
  StepResult fp8 = simulate(w, h100, "mbs=64,gbs=64,precision=fp8");
  const LayerKind &k = layerKind(w);
  // Each linear weight of the repeated layers gets an fp8 copy and its
  // transpose; their inputs are kept in one byte for the backward.
  EXPECT_GT(k.linearParameters, 0);
  EXPECT_NEAR(fp8.stages[0].memory.weightsBytes -
                  bf16.stages[0].memory.weightsBytes,
              2.0 * k.count * k.linearParameters, 1.0);
  EXPECT_LT(fp8.stages[0].memory.activationsBytes,
            bf16.stages[0].memory.activationsBytes);
  EXPECT_GT(k.savedLinearInputReplicatedBytes + k.savedLinearInputShardedBytes,
            0);
  // No fp8 tensor cores: refused. No bf16 ones: the fp32 rate, said so.
  auto r = run(w, preset("1xA100-80G"), "mbs=1,gbs=1,precision=fp8");
  ASSERT_FALSE(bool(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            "strategy: precision=fp8: A100-80G has no fp8 tensor cores "
            "(Transformer Engine runs fp8 on Hopper, Ada and later)");
  Cluster v100 = preset("1xV100-32G");
  StepResult bf16v = simulate(w, v100, "mbs=64,gbs=64,precision=bf16");
  StepResult fp16v = simulate(w, v100, "mbs=64,gbs=64,precision=fp16");
  EXPECT_EQ(bf16v.precisionFallbackDevices,
            std::vector<std::string>{"V100-32G"});
  EXPECT_TRUE(fp16v.precisionFallbackDevices.empty());
  EXPECT_GT(bf16v.computeS, fp16v.computeS);
}

TEST(ExpertParallel, ExpertsSplitAndTokensMoveByAllToAll) {
  const int layers = 4;
  const int64_t expertParams = 1'000'000'000, dispatch = 64 << 20;
  Workload w = moeModel(layers, expertParams, dispatch);
  Cluster c = preset("8xH100-SXM");
  StepResult one = simulate(w, c, "dp=8,mbs=1,gbs=16,zero=1,ep=1");
  StepResult eight = simulate(w, c, "dp=8,mbs=1,gbs=16,zero=1,ep=8");
  // Each device holds 1/8 of the experts: weights and fp32 gradients
  // shrink eightfold; ZeRO-1 shards their optimizer state over the dp / ep
  // ranks that hold the same experts, the same bytes per device as before.
  EXPECT_NEAR(eight.stages[0].memory.weightsBytes,
              one.stages[0].memory.weightsBytes / 8, 1.0);
  EXPECT_NEAR(eight.stages[0].memory.gradientsBytes,
              one.stages[0].memory.gradientsBytes / 8, 1.0);
  EXPECT_NEAR(eight.stages[0].memory.optimizerBytes,
              one.stages[0].memory.optimizerBytes, 1.0);
  // The all-to-all by hand: per layer and micro-batch, dispatch and combine
  // forward and their gradients backward, each moving 7/8 of the 64 MiB of
  // tokens over the node's NVLink at the ring's bus bandwidth, with NCCL's
  // 8.4 µs base and 7 link latencies: 2 micro-batches per replica.
  GroupShape g = groupShapeIn(c.groupOf(0), 1, 8);
  double b = ringBusBandwidth(g);
  double a2a = 8.4e-6 + 7.0 / 8 * double(dispatch) / b +
               7 * c.groupOf(0).intraNodeLink->latencyS;
  EXPECT_NEAR(a2a, collectiveTime(CollectiveKind::AllToAll, dispatch, g),
              1e-12);
  EXPECT_NEAR(eight.exposedEpCommS, layers * 2 * 4 * a2a, 1e-9);
  EXPECT_EQ(one.exposedEpCommS, 0);
  EXPECT_NE(one.stepS, eight.stepS);
  // fp8 copies (the weight and its transpose, a byte each) of the experts
  // a device holds, not of all of them.
  StepResult one8 =
      simulate(w, c, "dp=8,mbs=1,gbs=16,zero=1,ep=1,precision=fp8");
  StepResult eight8 =
      simulate(w, c, "dp=8,mbs=1,gbs=16,zero=1,ep=8,precision=fp8");
  EXPECT_NEAR(one8.stages[0].memory.weightsBytes -
                  one.stages[0].memory.weightsBytes,
              2.0 * layers * expertParams, 1.0);
  EXPECT_NEAR(eight8.stages[0].memory.weightsBytes -
                  eight.stages[0].memory.weightsBytes,
              2.0 * layers * expertParams / 8, 1.0);
  // ep must divide the experts and dp x cp; a model without experts has
  // nothing to split.
  auto r = run(w, c, "dp=8,mbs=1,gbs=16,ep=16");
  ASSERT_FALSE(bool(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            "strategy: ep=16 does not divide the 8 experts of moe_layer");
  MLIRContext ctx;
  auto dense = run(tinyGpt(ctx, KernelFusion::Fused), preset("2xH100-SXM"),
                   "dp=2,ep=2");
  ASSERT_FALSE(bool(dense));
  EXPECT_EQ(llvm::toString(dense.takeError()),
            "strategy: ep=2: the model has no mixture-of-experts layers to "
            "split");
}

TEST(ExpertParallel, FoldedExpertsRunWholeOnTheTpAndDpRanks) {
  // Megatron-Core's MoE parallel folding (etp=1): each device holds E/ep
  // whole experts, the ep group is drawn from the tp x dp ranks, the tp
  // ranks dispatch their own (sequence-parallel) tokens and no tp
  // collective surrounds the experts.
  const int layers = 2;
  const int64_t expertParams = 800'000'000, dispatch = 64 << 20;
  Workload w = moeModel(layers, expertParams, dispatch);
  LayerKind &k = w.kinds[0];
  k.expertReplicatedParameters = k.replicatedParameters = 0; // tp splits them
  k.linearReplicatedParameters = 0;
  k.ops[0].tensorParallel = true;
  k.ops[0].tpAllReduceForwardBytes = 32 << 20;
  Cluster c = preset("8xH100-SXM");
  const char *common = "tp=2,dp=4,sp=1,mbs=2,gbs=16,zero=1";
  StepResult split = simulate(w, c, std::string(common) + ",ep=4");
  StepResult folded = simulate(w, c, std::string(common) + ",ep=4,etp=1");
  EXPECT_TRUE(folded.strategy.expertsFolded());
  // Weights: E/ep whole experts against E/ep experts split over tp.
  EXPECT_NEAR(split.stages[0].memory.weightsBytes,
              2.0 * layers * expertParams / (2 * 4), 1.0);
  EXPECT_NEAR(folded.stages[0].memory.weightsBytes,
              2.0 * layers * expertParams / 4, 1.0);
  // No tp collective around the folded experts.
  EXPECT_GT(split.exposedTpCommS, 0);
  EXPECT_EQ(folded.exposedTpCommS, 0);
  // The all-to-all of the folded group by hand: ep adjacent ranks inside
  // the node, each dispatching its tp share of a micro-batch's tokens (2
  // samples of one), four times per layer and micro-batch (2 per replica).
  GroupShape g = groupShapeIn(c.groupOf(0), 1, 4);
  double a2a = collectiveTime(CollectiveKind::AllToAll, 2.0 * dispatch / 2, g);
  EXPECT_NEAR(folded.exposedEpCommS, layers * 2 * 4 * a2a, 1e-9);
  // Folded, ep may take the tp ranks too (ep 8 of dp 4 x tp 2).
  StepResult wide = simulate(w, c, std::string(common) + ",ep=8,etp=1");
  EXPECT_NEAR(wide.stages[0].memory.weightsBytes,
              2.0 * layers * expertParams / 8, 1.0);
  for (auto [strategy, message] :
       std::initializer_list<std::pair<const char *, const char *>>{
           {",ep=8", "strategy: ep=8 must divide dp x cp = 4"},
           {",ep=4,etp=3", "strategy: etp=3: expert tensor parallelism is "
                           "priced equal to tp (2) or folded to 1"},
           {",ep=1,etp=1", "strategy: etp=1 folds the experts' tensor "
                           "parallelism into expert parallelism: it needs "
                           "ep > 1"}}) {
    auto r = run(w, c, std::string(common) + strategy);
    ASSERT_FALSE(bool(r)) << strategy;
    EXPECT_EQ(llvm::toString(r.takeError()), message);
  }
  auto nosp = run(w, c, "tp=2,dp=4,sp=0,mbs=2,gbs=16,ep=4,etp=1");
  ASSERT_FALSE(bool(nosp));
  EXPECT_EQ(llvm::toString(nosp.takeError()),
            "strategy: etp=1 with tp=2 needs sequence parallelism (sp=1): the "
            "tp ranks dispatch their own tokens");
}

TEST(ContextParallel, RingAndAllToAllPriceTheirExchange) {
  MLIRContext ctx;
  Workload w = tinyGpt(ctx, KernelFusion::Fused);
  Cluster one = preset("1xH100-SXM"), two = preset("2xH100-SXM");
  StepResult whole = simulate(w, one, "mbs=1,gbs=1");
  StepResult ring = simulate(w, two, "cp=2,mbs=1,gbs=1");
  StepResult a2a = simulate(w, two, "cp=2,mbs=1,gbs=1,cp_comm=all-to-all");
  // Each rank keeps half the sequence's activations.
  EXPECT_NEAR(ring.stages[0].memory.activationsBytes,
              whole.stages[0].memory.activationsBytes / 2,
              0.02 * whole.stages[0].memory.activationsBytes);
  // The tiny attention cannot hide the ring's sends (latency-bound), and
  // Ulysses' all-to-all is never hidden: both cost, and both show.
  EXPECT_GT(ring.exposedCpCommS, 0);
  EXPECT_GT(a2a.exposedCpCommS, 0);
  EXPECT_GT(ring.cpTransferS, 0);
  // Half the work per rank, plus the exchange and the gradients the two
  // ranks (the same weights) reduce together.
  EXPECT_GT(ring.stepS, whole.stepS * 0.5);
  EXPECT_GT(simulate(w, two, "cp=2,mbs=1,gbs=1,overlap=none").exposedDpCommS,
            0);
  // Ulysses scatters heads: 4 heads do not split over 8 ranks.
  auto r = run(w, preset("8xH100-SXM"), "cp=8,mbs=1,gbs=1,cp_comm=all-to-all");
  ASSERT_FALSE(bool(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            "strategy: cp=8,cp_comm=all-to-all needs the 4 heads per tp rank "
            "divisible by cp (Ulysses scatters heads); use cp_comm=ring");
}

} // namespace
