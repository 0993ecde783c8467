//===- SimulatorTest.cpp - the step simulator on hand-made workloads ------===//
#include "orrery/CostModel/CommunicatorMemory.h"
#include "orrery/CostModel/Simulator.h"
#include "TestSupport.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/ModelState.h"
#include "orrery/Search/Planner.h"

#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

using namespace orrery;

namespace {

/// `layers` identical layers, each one big matmul with `params` parameters;
/// activations of `actBytes` per layer; 1 sample per workload batch.
Workload uniformModel(int layers, double flops, int64_t params,
                      int64_t actBytes) {
  Workload w;
  LayerKind k;
  k.name = "layer";
  k.count = layers;
  k.parameters = params;
  k.forwardFlops = int64_t(flops);
  k.backwardFlops = int64_t(2 * flops);
  OpCost op;
  op.name = "orrery.matmul";
  op.forwardFlops = k.forwardFlops;
  op.backwardFlops = k.backwardFlops;
  op.contraction = true;
  op.tensorParallel = true;
  k.ops = {op};
  k.savedShardedBytes = actBytes;
  k.savedActivationBytes = actBytes;
  k.inputBytes = actBytes / 10;
  k.outputBytes = actBytes / 10;
  w.kinds = {k};
  w.layers = {{0, layers}};
  w.batchSize = 1;
  w.tokensPerSample = 1024;
  return w;
}

using test::preset;

StepResult simulate(const Workload &w, const Cluster &c, const char *strategy,
                    bool trace = false) {
  auto s = parseStrategy(strategy);
  EXPECT_TRUE(bool(s));
  auto r = simulateStep(w, c, *s, {}, trace);
  EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
  return *r;
}

TEST(Simulator, OneDeviceIsComputePlusOptimizer) {
  // A 10 ms matmul at peak: with the efficiency curve e*t/(t + t_half),
  // forward = t/eff; backward twice the FLOPs.
  Assumptions a;
  const DeviceSpec &d = *HardwareCatalog::builtin().device("A100-80G");
  double t = 0.010, flops = t * d.tensorPeak(Precision::BF16);
  Workload w = uniformModel(1, flops, 1000, 1 << 20);
  StepResult r = simulate(w, preset("1xA100-80G"), "mbs=1,gbs=1");
  double eff = a.kernels.gemmEfficiency * t / (t + a.kernels.gemmHalfEfficiencyS);
  double eff2 = a.kernels.gemmEfficiency * 2 * t / (2 * t + a.kernels.gemmHalfEfficiencyS);
  double expected =
      t / eff + a.kernels.kernelLaunchS + 2 * t / eff2 + 2 * a.kernels.kernelLaunchS;
  EXPECT_NEAR(r.computeS, expected, 1e-9);
  EXPECT_NEAR(r.stepS, expected + r.optimizerS, 1e-9);
  EXPECT_EQ(r.bubbleS, 0);
}

TEST(Simulator, SeparateGradientAccumulationIsAPassPerMicroBatch) {
  // Without Megatron's fusion each micro-batch's weight gradients are added
  // into the fp32 main gradients by a kernel of their own: 4 + 2 bytes read
  // and 4 written per parameter (per tp rank), one kernel per weight tensor.
  const DeviceSpec &d = *HardwareCatalog::builtin().device("A100-80G");
  Workload w = uniformModel(4, 1e12, int64_t(1e9), 1 << 20);
  w.kinds[0].weightTensors = 3;
  auto s = parseStrategy("tp=2,mbs=1,gbs=8");
  ASSERT_TRUE(bool(s));
  Cluster c = preset("2xA100-80G");
  Assumptions fused, separate;
  separate.fusedGradientAccumulation = false;
  auto a = simulateStep(w, c, *s, fused);
  auto b = simulateStep(w, c, *s, separate);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->assumptions.fusedGradientAccumulation);
  EXPECT_FALSE(b->assumptions.fusedGradientAccumulation);
  double perPass = kernelSeconds(d, separate.kernels, Precision::BF16, 0.5e9,
                                 0.5e9 * 10, KernelClass::Pointwise, 3);
  EXPECT_NEAR(b->computeS - a->computeS, 4 * 8 * perPass, 1e-9);
  EXPECT_NEAR(b->stepS - a->stepS, 4 * 8 * perPass, 1e-9);
}

TEST(Simulator, GradientsReducedInTheirWireBytes) {
  // DeepSpeed's fp32_allreduce: 16-bit gradients kept, all-reduced in
  // fp32. The reduction moves twice the bytes; memory keeps 2 per element.
  Workload w = uniformModel(4, 1e12, int64_t(1e9), 1 << 20);
  auto s = parseStrategy("dp=8,mbs=1,gbs=8,overlap=none");
  ASSERT_TRUE(bool(s));
  Cluster c = preset("8xA100-80G");
  Assumptions kept16, wire32;
  kept16.gradBytesPerParam = wire32.gradBytesPerParam = 2;
  wire32.gradReduceBytesPerParam = 4;
  auto a = simulateStep(w, c, *s, kept16);
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  auto b = simulateStep(w, c, *s, wire32);
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  GroupShape g = groupShapeIn(c.groupOf(0), 1, 8);
  EXPECT_NEAR(a->exposedDpCommS,
              collectiveTime(CollectiveKind::AllReduce, 4e9 * 2, g), 1e-12);
  EXPECT_NEAR(b->exposedDpCommS,
              collectiveTime(CollectiveKind::AllReduce, 4e9 * 4, g), 1e-12);
  EXPECT_EQ(a->stages[0].memory.gradientsBytes,
            b->stages[0].memory.gradientsBytes);
  EXPECT_EQ(a->assumptions.gradReduceBytes(), 2);
  EXPECT_EQ(b->assumptions.gradReduceBytes(), 4);
}

TEST(Simulator, AMeasuredKernelProfileReplacesTheAssumptions) {
  // On an H200 (which has a measured profile) the same step is priced with
  // the profile's rates unless told not to; on an A100 (none) both agree.
  Workload w = uniformModel(2, 1e13, 1000, 1 << 20);
  auto s = parseStrategy("mbs=1,gbs=1");
  ASSERT_TRUE(bool(s));
  Assumptions datasheet;
  datasheet.useMeasuredKernels = false;
  for (const char *device : {"1xH200", "1xA100-80G"}) {
    auto measured = simulateStep(w, preset(device), *s);
    auto stated = simulateStep(w, preset(device), *s, datasheet);
    ASSERT_TRUE(measured && stated);
    if (std::string(device) == "1xH200")
      EXPECT_GT(measured->computeS, stated->computeS * 1.05);
    else
      EXPECT_EQ(measured->computeS, stated->computeS);
  }
  // kernelSeconds: a memory-bound kernel at its class's rate.
  const DeviceSpec &h200 = *HardwareCatalog::builtin().device("H200");
  const KernelModel &k = *h200.measuredKernels;
  double bytes = 1e9;
  EXPECT_NEAR(kernelSeconds(h200, k, Precision::BF16, 0, bytes,
                            KernelClass::Reduction, 1),
              bytes / (h200.memoryBandwidthBytesPerS *
                       k.reductionMemoryEfficiency) +
                  k.kernelLaunchS,
              1e-12);
}

TEST(Simulator, AGemmsWeightStreamAndItsMathAddUp) {
  // docs/costmodel.md, "A GEMM's weight stream": the H200's own 512 x
  // 4096 x 4096 bf16 GEMM (bench/measured: 30.8 us) reads a 32 MiB weight,
  // then computes; the same bytes as a product of two activations overlap.
  const DeviceSpec &h200 = *HardwareCatalog::builtin().device("H200");
  const KernelModel &k = *h200.measuredKernels;
  double m = 512, n = 4096, kk = 4096;
  double flops = 2 * m * n * kk, weight = 2 * kk * n,
         bytes = weight + 2 * (m * kk + m * n);
  double stream = weight / (h200.memoryBandwidthBytesPerS *
                            k.gemmMemoryEfficiency),
         math = flops / h200.tensorPeak(Precision::BF16);
  double withWeight = kernelSeconds(h200, k, Precision::BF16, flops, bytes,
                                    KernelClass::Gemm, 1, weight);
  double activations = kernelSeconds(h200, k, Precision::BF16, flops, bytes,
                                     KernelClass::Gemm, 1);
  EXPECT_NEAR(withWeight, std::max(stream + math,
                                   activations - k.kernelLaunchS) +
                              k.kernelLaunchS,
              1e-12);
  EXPECT_GT(withWeight, activations);
  EXPECT_NEAR(withWeight, 30.8e-6, 0.1 * 30.8e-6);
  // A compute-bound GEMM (training's) is priced as before.
  double big = 2 * 8192.0 * 8192 * 8192, w8 = 2 * 8192.0 * 8192;
  EXPECT_EQ(kernelSeconds(h200, k, Precision::BF16, big, 3 * w8,
                          KernelClass::Gemm, 1, w8),
            kernelSeconds(h200, k, Precision::BF16, big, 3 * w8,
                          KernelClass::Gemm, 1));
}

TEST(Simulator, FullRecomputeSparesLayersThatOccurOnce) {
  // Megatron-LM checkpoints its transformer layers; the embedding and the
  // head (with its loss) keep their activations. A head that keeps 1 GB is
  // neither recomputed nor reduced to its input.
  Workload w = uniformModel(4, 1e12, 1000, 1 << 20);
  LayerKind head = w.kinds[0];
  head.name = "head";
  head.count = 1;
  head.savedShardedBytes = int64_t(1) << 30;
  head.savedActivationBytes = head.savedShardedBytes;
  w.kinds.push_back(head);
  w.layers.push_back({1, 1});
  StepResult none = simulate(w, preset("1xA100-80G"), "mbs=1,gbs=1");
  StepResult full =
      simulate(w, preset("1xA100-80G"), "mbs=1,gbs=1,recompute=full");
  // Recompute re-runs the four repeated layers' forward only.
  EXPECT_NEAR(full.computeS - none.computeS, 4 * none.kindSecondsPerMicroBatch[0] / 3,
              1e-3 * none.computeS);
  EXPECT_GT(full.stages[0].memory.activationsBytes, double(int64_t(1) << 30));
}

TEST(Simulator, OneFOneBBubbleIsPMinusOneOverMPlusPMinusOne) {
  Workload w = uniformModel(8, 1e14, 1000, 1 << 20);
  for (int m : {4, 8, 32}) {
    std::string s = "pp=4,mbs=1,gbs=" + std::to_string(m);
    StepResult r = simulate(w, preset("4xA100-80G"), s.c_str());
    double expected = 3.0 / (m + 3);
    double busy = r.computeS + r.bubbleS + r.exposedPpCommS;
    EXPECT_NEAR(r.bubbleS / busy, expected, 0.01) << "m=" << m;
  }
}

// A straggler's stage computes `stragglerSlowdown` times slower: alone on
// one device the step's compute grows by that factor (the optimizer step
// is not a layer's); in a pipeline, by less (the others' waits absorb
// some), wherever the straggler sits.
TEST(Simulator, AStragglerSlowsItsStage) {
  Workload w = uniformModel(8, 1e13, 1000, 1 << 20);
  auto s = parseStrategy("mbs=1,gbs=4");
  ASSERT_TRUE(bool(s));
  Assumptions a;
  auto base = simulateStep(w, preset("1xA100-80G"), *s, a);
  a.stragglerStage = 0;
  a.stragglerSlowdown = 1.1;
  auto slow = simulateStep(w, preset("1xA100-80G"), *s, a);
  ASSERT_TRUE(base && slow);
  EXPECT_NEAR(slow->computeS, 1.1 * base->computeS, 1e-9);
  EXPECT_NEAR(slow->stepS - slow->optimizerS,
              1.1 * (base->stepS - base->optimizerS), 1e-9);
  auto p = parseStrategy("pp=4,mbs=1,gbs=16");
  ASSERT_TRUE(bool(p));
  Assumptions none;
  auto piped = simulateStep(w, preset("4xA100-80G"), *p, none);
  ASSERT_TRUE(bool(piped));
  for (int stage = 0; stage < 4; ++stage) {
    a.stragglerStage = stage;
    auto r = simulateStep(w, preset("4xA100-80G"), *p, a);
    ASSERT_TRUE(bool(r));
    EXPECT_GT(r->stepS, piped->stepS * 1.05) << stage;
    EXPECT_LE(r->stepS, piped->stepS * 1.1 + 1e-9) << stage;
  }
}

TEST(Simulator, InterleavingShrinksTheBubble) {
  Workload w = uniformModel(16, 1e14, 1000, 1 << 20);
  StepResult plain = simulate(w, preset("4xA100-80G"), "pp=4,mbs=1,gbs=8");
  StepResult inter =
      simulate(w, preset("4xA100-80G"), "pp=4,vpp=2,mbs=1,gbs=8");
  EXPECT_LT(inter.bubbleS, plain.bubbleS * 0.6);
  EXPECT_LT(inter.stepS, plain.stepS);
}

// DualPipe on pp ranks is DualPipeV on pp/2 stages with the mirrored
// ranks' replicas (Strategy::dualPipeFolded): the same compute and memory
// per device, a step longer only by the turn's transfer, and the stages
// unfolded so that rank r and rank pp-1-r report alike.
TEST(Simulator, DualPipeIsDualPipeVOnMirroredRanks) {
  Workload w = uniformModel(16, 1e13, int64_t(1e8), 1 << 26);
  Cluster c = preset("8xA100-80G");
  StepResult dual = simulate(w, c, "pp=8,dp=1,mbs=1,gbs=32,schedule=dualpipe");
  StepResult v = simulate(w, c, "pp=4,dp=2,mbs=1,gbs=32,schedule=dualpipev");
  ASSERT_EQ(dual.stages.size(), 8u);
  ASSERT_EQ(v.stages.size(), 4u);
  EXPECT_EQ(dual.strategy.pp, 8);
  EXPECT_EQ(dual.strategy.dp, 1);
  for (int r = 0; r < 8; ++r) {
    int h = std::min(r, 7 - r);
    EXPECT_DOUBLE_EQ(dual.stages[r].memory.weightsBytes,
                     v.stages[h].memory.weightsBytes);
    EXPECT_DOUBLE_EQ(dual.stages[r].memory.activationsBytes,
                     v.stages[h].memory.activationsBytes);
    EXPECT_EQ(dual.stages[r].devices, 1);
  }
  EXPECT_DOUBLE_EQ(dual.computeS, v.computeS);
  EXPECT_GE(dual.stepS, v.stepS);
  EXPECT_LT(dual.stepS, v.stepS * 1.01);
  // Half the micro-batches enter from each end: the mirror's tasks.
  StepResult traced = simulate(w, c, "pp=8,dp=1,mbs=1,gbs=32,schedule=dualpipe",
                               /*keepTrace=*/true);
  size_t on0 = 0, on7 = 0;
  for (const TraceEvent &e : traced.trace) {
    on0 += e.track == 0;
    on7 += e.track == 7;
  }
  EXPECT_GT(on0, 0u);
  EXPECT_EQ(on0, on7);
}

TEST(Simulator, ZeroShardsOptimizerGradientsWeights) {
  Workload w = uniformModel(4, 1e12, int64_t(1e9), 1 << 20);
  Cluster c = preset("8xA100-80G");
  MemoryBreakdown m0 =
      simulate(w, c, "dp=8,mbs=1,gbs=8,zero=0").stages[0].memory;
  MemoryBreakdown m1 =
      simulate(w, c, "dp=8,mbs=1,gbs=8,zero=1").stages[0].memory;
  MemoryBreakdown m2 =
      simulate(w, c, "dp=8,mbs=1,gbs=8,zero=2").stages[0].memory;
  MemoryBreakdown m3 =
      simulate(w, c, "dp=8,mbs=1,gbs=8,zero=3").stages[0].memory;
  EXPECT_DOUBLE_EQ(m0.optimizerBytes, 4e9 * 12);
  EXPECT_DOUBLE_EQ(m1.optimizerBytes, m0.optimizerBytes / 8);
  EXPECT_DOUBLE_EQ(m1.gradientsBytes, m0.gradientsBytes);
  EXPECT_DOUBLE_EQ(m2.gradientsBytes, m0.gradientsBytes / 8);
  EXPECT_DOUBLE_EQ(m3.weightsBytes, m0.weightsBytes / 8);
}

TEST(Simulator, OneFOneBHoldsPMicroBatchesOnTheFirstStage) {
  Workload w = uniformModel(8, 1e12, 1000, 1 << 30);
  StepResult r = simulate(w, preset("4xA100-80G"), "pp=4,mbs=1,gbs=16");
  // 2 layers per stage, 1 GiB each, 4 micro-batches in flight on stage 0,
  // 1 on the last; plus the fragmentation allowance.
  Assumptions a;
  EXPECT_NEAR(r.stages[0].memory.activationsBytes,
              4 * 2.0 * (1 << 30) * (1 + a.fragmentation), 1);
  EXPECT_NEAR(r.stages[3].memory.activationsBytes,
              1 * 2.0 * (1 << 30) * (1 + a.fragmentation), 1);
}

TEST(Simulator, DoesNotFitNamesTheStage) {
  Workload w = uniformModel(2, 1e12, int64_t(20e9), 1 << 20);
  StepResult r = simulate(w, preset("1xA100-80G"), "mbs=1,gbs=1");
  EXPECT_FALSE(r.fits);
  EXPECT_NE(r.doesNotFit.find("stage 0 needs"), std::string::npos)
      << r.doesNotFit;
  EXPECT_NE(r.doesNotFit.find("A100-80G"), std::string::npos);
}

TEST(Simulator, TraceHasOneTrackPerStage) {
  Workload w = uniformModel(8, 1e13, 1000, 1 << 20);
  StepResult r =
      simulate(w, preset("2x4xA100-80G"), "pp=4,dp=2,mbs=1,gbs=8", true);
  auto j = nlohmann::json::parse(chromeTraceJson(r));
  std::set<int> named, used;
  for (const auto &e : j["traceEvents"]) {
    if (e["ph"] == "M")
      named.insert(e["tid"].get<int>());
    if (e["ph"] == "X") {
      used.insert(e["tid"].get<int>());
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
  }
  EXPECT_EQ(named, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(used, named);
}

TEST(Simulator, PipelineSendsHoldTheStageAndShardsAreGathered) {
  // Megatron-LM waits for each pipeline send and receive before the stage
  // goes on; without sequence parallelism the 1/tp shards sent are
  // all-gathered at the receiver before use.
  Workload w = uniformModel(8, 1e13, 1000, int64_t(1) << 31);
  StepResult r =
      simulate(w, preset("2x2xA100-80G"), "tp=2,pp=2,mbs=1,gbs=4", true);
  std::map<std::string, TraceEvent> span[2];
  for (const TraceEvent &e : r.trace)
    if (e.track < 2)
      span[e.track][e.name] = e;
  for (int mb = 0; mb < 4; ++mb) {
    std::string f = "F" + std::to_string(mb), b = "B" + std::to_string(mb);
    // Stage 0 sends each activation when its forward ends and is busy
    // until the send is done; stage 1 starts with the gather after it.
    ASSERT_TRUE(span[0].count(f + " send")) << f;
    const TraceEvent &send = span[0][f + " send"];
    EXPECT_GT(send.durationS, 0);
    EXPECT_DOUBLE_EQ(send.startS, span[0][f].startS + span[0][f].durationS);
    ASSERT_TRUE(span[1].count(f + " gather")) << f;
    EXPECT_GE(span[1][f + " gather"].startS, send.startS + send.durationS);
    EXPECT_DOUBLE_EQ(span[1][f].startS, span[1][f + " gather"].startS +
                                            span[1][f + " gather"].durationS);
    // And the gradients the other way.
    ASSERT_TRUE(span[1].count(b + " send")) << b;
    ASSERT_TRUE(span[0].count(b + " gather")) << b;
    EXPECT_GE(span[0][b + " gather"].startS,
              span[1][b + " send"].startS + span[1][b + " send"].durationS);
    EXPECT_FALSE(span[1].count(f + " send")); // the last stage sends no activation
    EXPECT_FALSE(span[0].count(b + " send")); // nor the first a gradient
  }
  EXPECT_GT(r.exposedPpCommS, 4 * span[0]["F0 send"].durationS);
  // With sequence parallelism each rank keeps its own shard: no gather.
  StepResult sp = simulate(w, preset("2x2xA100-80G"),
                           "tp=2,pp=2,sp=1,mbs=1,gbs=4", true);
  for (const TraceEvent &e : sp.trace)
    EXPECT_EQ(e.name.find("gather"), std::string::npos) << e.name;
}

TEST(Simulator, DeepSpeedPipelinesSendWholeGradientsAndTheMask) {
  // DeepSpeed's pipeline engine with grad_partitioned false (DeepSpeed
  // 0.3): every tp rank sends the whole gradient back, not its shard; its
  // GPT pipelines pass the [s, s] causal mask in fp16 beside every
  // activation, from every tp rank. Across two nodes a send takes latency
  // + bytes / bandwidth, so what each adds is in proportion to its bytes.
  Workload w = uniformModel(8, 1e13, 1000, int64_t(1) << 31);
  struct Sends {
    double forward = 0, backward = 0, step = 0, boundaryBytes = 0;
  };
  auto run = [&](const char *strategy, bool whole, bool mask) {
    Assumptions a;
    a.pipelineWholeGradients = whole;
    a.pipelineAttentionMask = mask;
    auto s = parseStrategy(strategy);
    EXPECT_TRUE(bool(s));
    auto r = simulateStep(w, preset("2x2xA100-80G"), *s, a, true);
    EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
    Sends out;
    out.step = r->stepS;
    out.boundaryBytes = r->boundaryBytesPerMicroBatch.at(0);
    for (const TraceEvent &e : r->trace) {
      if (e.track == 0 && e.name == "F0 send")
        out.forward = e.durationS;
      if (e.track == 1 && e.name == "B0 send")
        out.backward = e.durationS;
    }
    EXPECT_TRUE(r->assumptions.pipelineWholeGradients == whole &&
                r->assumptions.pipelineAttentionMask == mask);
    return out;
  };
  const char *tp2 = "tp=2,pp=2,mbs=1,gbs=4";
  Sends base = run(tp2, false, false), whole = run(tp2, true, false),
        mask = run(tp2, false, true);
  ASSERT_GT(base.forward, 0);
  EXPECT_DOUBLE_EQ(base.forward, base.backward); // a shard each way
  // Each rank's shard S = (2^31 / 10, whole bytes) / 2; the whole
  // gradient 2S, so the gradient's send grows by S / bandwidth; the mask
  // adds 2 x 1024^2.
  double shard = double((int64_t(1) << 31) / 10) / 2,
         maskBytes = 2.0 * 1024 * 1024;
  double perByte = (whole.backward - base.backward) / shard;
  EXPECT_GT(perByte, 0);
  EXPECT_DOUBLE_EQ(whole.forward, base.forward);
  EXPECT_NEAR(mask.forward - base.forward, maskBytes * perByte,
              1e-9 * base.forward);
  EXPECT_DOUBLE_EQ(mask.backward, base.backward);
  EXPECT_GT(whole.step, base.step);
  EXPECT_GT(mask.step, base.step);
  // Both ways over the boundary, both tp ranks (what a WAN carries).
  EXPECT_NEAR(base.boundaryBytes, 4 * shard, 1);
  EXPECT_NEAR(whole.boundaryBytes, 6 * shard, 1);
  EXPECT_NEAR(mask.boundaryBytes, 4 * shard + 2 * maskBytes, 1);
  // Without tensor parallelism the shard is the whole gradient.
  const char *tp1 = "tp=1,pp=2,mbs=1,gbs=4";
  EXPECT_DOUBLE_EQ(run(tp1, true, false).step, run(tp1, false, false).step);
  // No token ids, no [s, s] mask: a one-line error, not a silent price.
  Workload images = w;
  images.tokensPerSample = 0;
  Assumptions a;
  a.pipelineAttentionMask = true;
  auto r = simulateStep(images, preset("2x2xA100-80G"), *parseStrategy(tp2), a);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError()).find("pipeline mask"),
            std::string::npos);
  // DeepSpeed's engine has one tp on every stage: stages of tp 2 and 1
  // (a heterogeneous pipeline) with its sends are refused, not priced.
  Cluster c = preset("2x2xA100-80G");
  const NodeGroup &g = c.sites[0].nodeGroups[0];
  auto placed = [&](int tp) {
    StagePlacement p = stageOn(g, tp);
    p.toNext = groupShapeIn(g, 2, 2);
    return p;
  };
  Strategy uneven = *parseStrategy(tp2);
  uneven.dp = 1;
  Assumptions sends;
  sends.pipelineWholeGradients = true;
  auto even = simulatePipeline(w, uneven, {placed(2), placed(2)}, sends);
  EXPECT_TRUE(bool(even)) << (even ? "" : llvm::toString(even.takeError()));
  auto refused = simulatePipeline(w, uneven, {placed(2), placed(1)}, sends);
  ASSERT_FALSE(bool(refused));
  EXPECT_EQ(llvm::toString(refused.takeError()),
            "pipeline gradients whole: DeepSpeed's pipeline sends are those "
            "of one tensor-parallel size on every stage, and these stages "
            "have tp 2 and 1");
}

TEST(Simulator, EachPipelineBoundaryCrossesItsOwnLink) {
  // tp=4, pp=4 on nodes of 8: stages 0 and 1 share node 0, 2 and 3 node 1.
  // The 1 -> 2 boundary crosses the nodes' InfiniBand; 0 -> 1 and 2 -> 3
  // stay on NVLink. (Every boundary was once priced as the first.)
  Workload w = uniformModel(8, 1e12, 1000, int64_t(1) << 30);
  StepResult r =
      simulate(w, preset("2x8xA100-80G"), "tp=4,pp=4,mbs=1,gbs=8", true);
  double send[4] = {0, 0, 0, 0};
  for (const TraceEvent &e : r.trace)
    if (e.track < 4 && e.name == "F0 send")
      send[e.track] = e.durationS;
  ASSERT_GT(send[0], 0);
  ASSERT_GT(send[1], 0);
  ASSERT_GT(send[2], 0);
  EXPECT_NEAR(send[0], send[2], 1e-12);
  EXPECT_GT(send[1], 3 * send[0]);
  // With pp outermost of 8 ranks a stage (tp=8), every boundary crosses.
  StepResult wide =
      simulate(w, preset("4x8xA100-80G"), "tp=8,pp=4,mbs=1,gbs=8", true);
  double first = 0, second = 0;
  for (const TraceEvent &e : wide.trace) {
    if (e.track == 0 && e.name == "F0 send")
      first = e.durationS;
    if (e.track == 1 && e.name == "F0 send")
      second = e.durationS;
  }
  EXPECT_GT(first, 0);
  EXPECT_NEAR(first, second, 1e-12);
}

TEST(Simulator, InterleavedStepsSendBothWaysAtOnce) {
  // Megatron-LM's interleaved 1F1B runs a forward and a backward, then one
  // communication that sends both results: in the steady state no send
  // follows a forward, and the pair's send is one transfer long, not two.
  Workload w = uniformModel(16, 1e13, 1000, int64_t(1) << 31);
  for (int pp : {4, 8})
    for (int v : {2, 4}) {
      std::string cluster = std::to_string(pp) + "x1xA100-80G";
      for (int m : {pp, 2 * pp, 4 * pp}) {
        std::string s = "pp=" + std::to_string(pp) + ",vpp=" +
                        std::to_string(v) + ",mbs=1,gbs=" + std::to_string(m);
        if (16 % (pp * v))
          continue;
        StepResult r = simulate(w, preset(cluster.c_str()), s.c_str(), true);
        ASSERT_GT(r.stepS, 0) << s;
        std::map<int, std::vector<TraceEvent>> byStage;
        for (const TraceEvent &e : r.trace)
          if (e.category != "dp" && e.category != "optimizer")
            byStage[e.track].push_back(e);
        int pairs = 0;
        for (auto &[stage, ev] : byStage)
          for (size_t k = 0; k + 2 < ev.size(); ++k) {
            // Never a forward's own send between it and the backward (but
            // with every micro-batch in the warm-up there is no steady state:
            // the last warm-up forward sends alone).
            EXPECT_FALSE(m > pp && ev[k].category == "forward" &&
                         ev[k + 1].category == "p2p" &&
                         ev[k + 2].category == "backward")
                << s << " stage " << stage << " " << ev[k + 1].name;
            if (stage + 1 < pp && ev[k].category == "forward" &&
                ev[k + 1].category == "backward") {
              ++pairs; // the pair's one send carries the gradient's name
              EXPECT_EQ(ev[k + 2].category, "p2p") << s;
              EXPECT_EQ(ev[k + 2].name.front(), 'B') << s;
            }
          }
        if (m > pp) {
          EXPECT_GT(pairs, 0) << s;
        }
      }
    }
}

TEST(Simulator, ATiedHeadOnAnotherStageKeepsACopy) {
  // Embedding (owns a 1e9-parameter table), body layers, and a head that
  // uses the table: on one stage nothing changes; on two, the head's stage
  // holds a copy (weights, gradients, optimizer state) and both stages
  // all-reduce its gradient after the backward.
  Workload w = uniformModel(4, 1e12, int64_t(1e6), 1 << 20);
  LayerKind emb = w.kinds[0], head = w.kinds[0];
  emb.name = "embedding";
  emb.count = head.count = 1;
  emb.parameters = int64_t(1e9);
  head.name = "head";
  head.parameters = 0;
  head.tiedParameters = int64_t(1e9);
  head.tiedWithKind = 1;
  w.kinds = {w.kinds[0], emb, head};
  w.layers = {{1, 1}, {0, 4}, {2, 1}};
  Cluster c = preset("2x1xA100-80G");
  StepResult one = simulate(w, c, "dp=2,mbs=1,gbs=4");
  StepResult two = simulate(w, c, "pp=2,mbs=1,gbs=4");
  double copyBytes = 1e9 * (2 + 4 + 12);
  EXPECT_NEAR(two.stages[1].memory.weightsBytes +
                  two.stages[1].memory.gradientsBytes +
                  two.stages[1].memory.optimizerBytes,
              copyBytes + 2e6 * 18, 1);
  EXPECT_NEAR(two.stages[0].memory.weightsBytes, (1e9 + 2e6) * 2, 1);
  // The all-reduce of 4 GB of gradients between the stages is exposed.
  EXPECT_GT(two.exposedDpCommS, 4e9 / 30e9);
  EXPECT_EQ(one.stages.size(), 1u);
  EXPECT_NEAR(one.stages[0].memory.weightsBytes, (1e9 + 4e6) * 2, 1);
  // The two stages reduce the gradient in the bytes it is kept in: fp16
  // gradients reduced in fp32 across data parallelism (DeepSpeed's
  // fp32_allreduce) still cross between the stages in fp16, as
  // allreduce_tied_weight_gradients reduces weight.grad itself.
  auto s = parseStrategy("pp=2,mbs=1,gbs=4");
  ASSERT_TRUE(bool(s));
  Assumptions kept16, wire32;
  kept16.gradBytesPerParam = wire32.gradBytesPerParam = 2;
  wire32.gradReduceBytesPerParam = 4;
  auto a = simulateStep(w, c, *s, kept16);
  auto b = simulateStep(w, c, *s, wire32);
  ASSERT_TRUE(a && b);
  EXPECT_GT(a->exposedDpCommS, 2e9 / 30e9);
  EXPECT_LT(a->exposedDpCommS, 0.6 * two.exposedDpCommS);
  EXPECT_DOUBLE_EQ(b->exposedDpCommS, a->exposedDpCommS);
}

TEST(Simulator, DeviceOrderPutsTensorParallelismAcrossNodes) {
  Workload w = uniformModel(4, 1e13, 1000, 1 << 20);
  w.kinds[0].ops[0].tpAllReduceForwardBytes = 64 << 20;
  Cluster c = preset("2x8xA100-80G");
  StepResult inside = simulate(w, c, "tp=8,dp=2,mbs=1,gbs=2");
  StepResult across = simulate(w, c, "tp=8,dp=2,mbs=1,gbs=2,order=dp-tp-cp-pp");
  // 4 ranks per node and a 2-node hop (two-level ring): about twice the cost.
  EXPECT_GT(across.exposedTpCommS, 2 * inside.exposedTpCommS);
  EXPECT_NE(across.strategy.str().find("order=dp-tp-cp-pp"), std::string::npos);
  auto bad = parseStrategy("order=tp-dp");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError())
                .find("order must list tp, cp, dp and pp once each"),
            std::string::npos);
}

TEST(Simulator, RefusesClustersItCannotPrice) {
  Workload w = uniformModel(4, 1e12, 1000, 1 << 20);
  auto mixed = parseClusterJson(R"({"sites": [{"nodes": [
      {"count": 1, "device": "A100-80G"}, {"count": 1, "device": "V100-32G"}]}]})",
                                "mixed.json", HardwareCatalog::builtin());
  ASSERT_TRUE(bool(mixed));
  auto s = parseStrategy("dp=16,mbs=1,gbs=16");
  auto r = simulateStep(w, *mixed, *s);
  ASSERT_FALSE(bool(r));
  EXPECT_NE(llvm::toString(r.takeError())
                .find("mixes device types (A100-80G, V100-32G)"),
            std::string::npos);
}

TEST(Collective, RingAllReduceFormula) {
  // 8 ranks on NVSwitch: NCCL's base latency + 2(n-1)/n * S / B + 2(n-1)
  // per-step latencies (tuning.cc: 8.4 us base, 3.4 us per NVLink step).
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  GroupShape g;
  g.ranks = g.ranksPerNode = 8;
  g.intraLink = cat.link("NVLink3");
  // 12 links x 20 GB/s = 240 GB/s, capped at NCCL's 235 GB/s for A100.
  double bw = 235e9, bytes = 1e9;
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, bytes, g),
              8.4e-6 + 2.0 * 7 / 8 * bytes / bw + 14 * 3.4e-6, 1e-12);
  EXPECT_EQ(collectiveTime(CollectiveKind::AllReduce, bytes, GroupShape{}), 0);
}

TEST(Collective, NvlinkSharpInsideAnH100Node) {
  // 8 H100 on NVSwitch: NVLS moves (n+1)/n of the message each way at
  // NCCL's 0.85 of the link's 370 GB/s after NCCL's 25 us NVLS latency;
  // the ring moves 2(n-1)/n at 370.
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  GroupShape g;
  g.ranks = g.ranksPerNode = 8;
  g.intraLink = cat.link("NVLink4");
  double bw = 450e9 * 20.6 / 25, bytes = 2.0 * (1 << 30);
  double nvls = 25e-6 + 9.0 / 8 * bytes / (bw * 0.85);
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, bytes, g), nvls,
              1e-12);
  // Below 64 loops of 16 channels x 8 heads of 128 KiB chunks (1 GiB) NCCL
  // halves the chunk, below 8 loops of 64 KiB (64 MiB) again, and each
  // chunk step costs what moving the link's 9515 bytes would: 16 MiB moves
  // in 32 KiB chunks, (32 KiB + 9515) / 32 KiB slower than in 128 KiB ones.
  double mid = 16.0 * (1 << 20), step = 9515, full = 128 * 1024,
         chunk = 32 * 1024;
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, mid, g),
              25e-6 + 9.0 / 8 * mid / (bw * 0.85) * (chunk + step) / chunk *
                          full / (full + step),
              1e-12);
  GroupShape ring = g;
  ring.nvls = false;
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, bytes, ring),
              8.4e-6 + 2.0 * 7 / 8 * bytes / bw + 14 * 3.4e-6, 1e-12);
  // Two ranks: the ring (one S each way) beats NVLS ((3/2)S at 0.85).
  g.ranks = 2;
  ring.ranks = 2;
  EXPECT_EQ(collectiveTime(CollectiveKind::AllReduce, bytes, g),
            collectiveTime(CollectiveKind::AllReduce, bytes, ring));
  // Across nodes there is no NVLS (it needs one NVSwitch domain); nor on
  // A100's NVLink3.
  GroupShape twoNodes = ring;
  twoNodes.ranks = 16;
  twoNodes.ranksPerNode = 8;
  twoNodes.nic = cat.link("IB-NDR");
  GroupShape twoNodesNvls = twoNodes;
  twoNodesNvls.nvls = true;
  EXPECT_EQ(collectiveTime(CollectiveKind::AllReduce, bytes, twoNodes),
            collectiveTime(CollectiveKind::AllReduce, bytes, twoNodesNvls));
  EXPECT_EQ(cat.link("NVLink3")->ncclNvlsEfficiency, 0);
}

TEST(Collective, SmallMessagesTakeNcclsLowLatencyProtocols) {
  // NCCL's tuning model (src/graph/tuning.cc) on 8 A100 (NVLink3, no
  // NVLS): LL at 6.6 us + 0.6 us a step and half the bus bandwidth, capped
  // at Ampere's 87.7 GB/s; LL128 at 14 us + 1.9 us a step and 0.92 of it;
  // Simple at 8.4 us + 3.4 us a step and all of it (235 GB/s, NCCL's cap).
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  GroupShape g;
  g.ranks = g.ranksPerNode = 8;
  g.intraLink = cat.link("NVLink3");
  auto at = [&](double bytes) {
    return collectiveTime(CollectiveKind::AllReduce, bytes, g);
  };
  double moved = 2.0 * 7 / 8, bus = 235e9;
  double small = 64e3, mid = 8e6, large = 1e9;
  EXPECT_NEAR(at(small), 6.6e-6 + 14 * 0.6e-6 + moved * small / 87.7e9,
              1e-12);
  EXPECT_NEAR(at(mid), 14e-6 + 14 * 1.9e-6 + moved * mid / (0.92 * bus),
              1e-12);
  EXPECT_NEAR(at(large), 8.4e-6 + 14 * 3.4e-6 + moved * large / bus, 1e-12);
  // Over PCIe NCCL has no LL128; LL still wins on small messages.
  GroupShape pcie = g;
  pcie.intraLink = cat.link("PCIe4");
  double pcieBus = 31.5e9 * 12 / 15.75;
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, small, pcie),
              6.6e-6 + 14 * 1.0e-6 + moved * small / (0.5 * pcieBus), 1e-12);
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllReduce, mid, pcie),
              8.4e-6 + 14 * 5.7e-6 + moved * mid / pcieBus, 1e-12);
  // All-gather: n-1 steps and (n-1)/n of the bytes.
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllGather, small, g),
              6.6e-6 + 7 * 0.6e-6 + 7.0 / 8 * small / 87.7e9, 1e-12);
}

TEST(Collective, RingsAcrossNodesUseTheNodesCards) {
  // 2 nodes of 8 A100 with 4 HDR cards each (NCCL statement: ~88 GB/s bus
  // bandwidth): the rings spread over the 4 cards, 4 x 24 GB/s; of the 15
  // all-gather steps one crosses the network.
  const HardwareCatalog &cat = HardwareCatalog::builtin();
  GroupShape g;
  g.ranks = 16;
  g.ranksPerNode = 8;
  g.intraLink = cat.link("NVLink3");
  g.nic = cat.link("IB-HDR");
  g.nicSharePerRank = 0.5;
  double bw = 4 * 25e9 * 12.0 / 12.5, bytes = 1e9;
  EXPECT_NEAR(ringBusBandwidth(g), bw, 1);
  EXPECT_NEAR(collectiveTime(CollectiveKind::AllGather, bytes, g),
              8.4e-6 + 15.0 / 16 * bytes / bw + 14 * 3.4e-6 + 9.6e-6, 1e-12);
  // One rank per node: each rank's own card.
  g.ranksPerNode = 1;
  EXPECT_NEAR(ringBusBandwidth(g), 0.5 * 25e9 * 12.0 / 12.5, 1);
}

TEST(Collective, Dgx1RingsFollowTheCubeMesh) {
  // DGX-1 (V100): 1 link between GPUs 0 and 1, 2 rings over 0-1-2 (one each
  // way), 4 over the first quad, 6 over all eight (6 links per GPU).
  const auto &links =
      HardwareCatalog::builtin().link("NVLink2")->linkMultiplicity;
  EXPECT_EQ(ringsInTopology(links, 2), 1);
  EXPECT_EQ(ringsInTopology(links, 3), 2);
  EXPECT_EQ(ringsInTopology(links, 4), 4);
  // GPU 4 reaches only GPU 0 (2 links): no ring of direct links, so rings
  // enter or leave GPU 4 through GPU 0 (NVB); its two links to GPU 4 carry
  // two such rings.
  EXPECT_EQ(ringsInTopology(links, 5), 2);
  EXPECT_EQ(ringsInTopology(links, 8), 6);
  // Two GPUs with no link at all and no third to relay through: no ring.
  EXPECT_EQ(ringsInTopology({{0, 0, 0}, {0, 0, 1}, {0, 1, 0}}, 3), 0);
  // A star (0 linked to 1 and 2 only): the ring 0->1->(0)->2->0 uses each
  // link direction once, so k links per pair carry k such rings.
  EXPECT_EQ(ringsInTopology({{0, 1, 1}, {1, 0, 0}, {1, 0, 0}}, 3), 1);
  EXPECT_EQ(ringsInTopology({{0, 2, 2}, {2, 0, 0}, {2, 0, 0}}, 3), 2);
}

// A search's bar: a step bounded below its own lower bound is not run
// event by event, and the bounds it states hold: stepS under this step,
// stepS - bubbleS under every split of its layers and its zero-bubble
// schedules; the memory is the step's own. Below even the stages' mean
// busy time without recompute, the layout is not priced either (boundOnly)
// and that bound holds under every split, schedule and recompute.
TEST(Simulator, ABoundedStepStatesLowerBounds) {
  Workload w = uniformModel(16, 1e13, int64_t(1e8), 1 << 24);
  LayerKind head = w.kinds[0];
  head.name = "head";
  head.count = 1;
  head.forwardFlops *= 3;
  head.backwardFlops *= 3;
  head.ops[0].forwardFlops = head.forwardFlops;
  head.ops[0].backwardFlops = head.backwardFlops;
  w.kinds.push_back(head);
  w.layers = {{0, 16}, {1, 1}};
  Cluster c = preset("8xA100-80G");
  auto step = [&](const std::string &text, double bound) {
    auto s = parseStrategy(text);
    EXPECT_TRUE(bool(s)) << text;
    auto r = simulateStep(w, c, *s, {}, false, Detail::StepTime, bound);
    EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
    return *r;
  };
  // Each step, and the splits and schedules of the same work its
  // any-split bound must stay under.
  std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"pp=4,dp=2,mbs=1,gbs=16",
       {"layers=1:4:4:8", "layers=7:4:3:3", "schedule=zb-h1",
        "vpp=2,schedule=zb-v"}},
      {"pp=4,dp=2,mbs=2,gbs=64", {"layers=2:5:5:5", "schedule=zb-h1"}},
      {"tp=2,pp=4,mbs=1,gbs=8", {"layers=5:4:4:4", "vpp=2,schedule=zb-v"}},
      {"pp=4,dp=2,mbs=1,gbs=16,schedule=gpipe", {"layers=1:4:4:8"}},
      {"pp=4,dp=2,vpp=2,mbs=1,gbs=16", {"layers=2:2:2:2:2:2:2:3"}},
      {"pp=8,mbs=1,gbs=32,layers=1:2:2:2:2:2:2:4", {"layers=3:2:2:2:2:2:2:2"}},
  };
  for (const auto &[text, variants] : cases) {
    StepResult full = step(text, std::numeric_limits<double>::infinity());
    ASSERT_FALSE(full.pruned) << text;
    EXPECT_FALSE(step(text, full.stepS).pruned) << text; // bound <= step
    StepResult least = step(text, 0);
    ASSERT_TRUE(least.pruned && least.boundOnly) << text;
    EXPECT_GT(least.stepS, 0) << text;
    EXPECT_LE(least.stepS, full.stepS) << text;
    // Just above the least bound: the layout priced, the schedule not.
    StepResult bounded = step(text, least.stepS);
    ASSERT_TRUE(bounded.pruned) << text;
    EXPECT_FALSE(bounded.boundOnly) << text;
    EXPECT_LE(least.stepS, bounded.stepS - bounded.bubbleS + 1e-9) << text;
    EXPECT_LE(bounded.stepS, full.stepS) << text;
    EXPECT_GE(bounded.bubbleS, 0) << text;
    EXPECT_EQ(bounded.peakMemoryBytes, full.peakMemoryBytes) << text;
    EXPECT_EQ(bounded.fits, full.fits) << text;
    // 1F1B's own bound is its step but for the transfers and the gradient
    // reduction.
    if (text == "pp=4,dp=2,mbs=1,gbs=16") {
      EXPECT_GT(bounded.stepS, 0.8 * full.stepS);
    }
    double anySplit = bounded.stepS - bounded.bubbleS;
    for (const std::string &v : variants) {
      std::string other = text.substr(0, text.find(",layers")) + "," + v;
      double otherS =
          step(other, std::numeric_limits<double>::infinity()).stepS;
      EXPECT_LE(anySplit, otherS) << other;
      EXPECT_LE(least.stepS, otherS) << other;
    }
  }
  // DualPipeV and DualPipe (no bound before the layout: their pairs
  // overlap) and an
  // interleaved schedule whose stages end on a backward: this split's
  // bound, the fill and the backwards after the last, is under the step.
  for (const char *text :
       {"pp=4,dp=2,mbs=1,gbs=32,schedule=dualpipe",
        "pp=4,dp=2,vpp=2,mbs=1,gbs=16,schedule=dualpipev",
        "pp=4,dp=2,vpp=2,mbs=1,gbs=32,schedule=dualpipev,recompute=full",
        "pp=4,dp=2,vpp=2,mbs=1,gbs=32,layers=1:2:2:2:2:2:2:4"}) {
    StepResult full = step(text, std::numeric_limits<double>::infinity());
    StepResult bounded = step(text, 0);
    if (bounded.boundOnly) // above the least bound, under this split's
      bounded = step(text, bounded.stepS);
    ASSERT_TRUE(bounded.pruned && !bounded.boundOnly) << text;
    EXPECT_LE(bounded.stepS, full.stepS) << text;
    EXPECT_GE(bounded.bubbleS, 0) << text;
    EXPECT_EQ(bounded.peakMemoryBytes, full.peakMemoryBytes) << text;
  }
  // Recomputing every layer: the least bound leaves the recompute out, so
  // it holds under every partial recompute and none.
  const double inf = std::numeric_limits<double>::infinity();
  StepResult least = step("pp=4,dp=2,mbs=1,gbs=16,recompute=full", 0);
  ASSERT_TRUE(least.boundOnly);
  for (const char *other :
       {"pp=4,dp=2,mbs=1,gbs=16", "pp=4,dp=2,mbs=1,gbs=16,recompute=full",
        "pp=4,dp=2,mbs=1,gbs=16,recompute=full,recompute_layers=2",
        "pp=4,dp=2,mbs=1,gbs=16,recompute=selective"})
    EXPECT_LE(least.stepS, step(other, inf).stepS) << other;
  EXPECT_LT(least.stepS,
            step("pp=4,dp=2,mbs=1,gbs=16,recompute=full", inf).stepS * 0.9);
}

// The planner's bound prunes without changing what it finds: the best
// plan with one plan kept (the bar set early) is the best of a search
// that keeps them all (no bar).
TEST(Planner, TheStepBoundKeepsTheBestPlan) {
  Workload w = uniformModel(16, 1e13, int64_t(1e9), 1 << 26);
  Cluster c = preset("2x8xA100-80G");
  PlanOptions one;
  one.globalBatch = 256;
  one.topK = 1;
  PlanOptions all = one;
  all.topK = 100000;
  auto bounded = searchPlans(w, c, one);
  auto unbounded = searchPlans(w, c, all);
  ASSERT_TRUE(bool(bounded)) << llvm::toString(bounded.takeError());
  ASSERT_TRUE(bool(unbounded)) << llvm::toString(unbounded.takeError());
  EXPECT_GT(bounded->candidatesPruned, unbounded->candidatesPruned);
  EXPECT_LT(bounded->candidatesPriced, unbounded->candidatesPriced);
  EXPECT_EQ(bounded->top.front().strategy.str(),
            unbounded->top.front().strategy.str());
  EXPECT_EQ(bounded->top.front().stepS, unbounded->top.front().stepS);
}

// A layer profile: the measured forward of the repeated layer, less what
// the device model prices for it at the profile's micro-batch, is host
// time every such layer adds, forward and twice in backward, at any
// micro-batch; other layers keep their price; a device or tp it does not
// measure is an error.
TEST(Simulator, ALayerProfileAddsTheHostTimeItMeasures) {
  Workload w = uniformModel(8, 1e11, int64_t(1e8), 1 << 22);
  LayerKind head = w.kinds[0];
  head.name = "head";
  head.count = 1;
  w.kinds.push_back(head);
  w.layers = {{0, 8}, {1, 1}};
  Cluster c = preset("2xA100-80G");
  auto run = [&](const char *text, const Assumptions &a) {
    auto s = parseStrategy(text);
    EXPECT_TRUE(bool(s));
    auto r = simulateStep(w, c, *s, a, true);
    EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
    return *r;
  };
  Assumptions plain;
  StepResult one = run("pp=2,mbs=1,gbs=8", plain);
  StepResult four = run("pp=2,mbs=4,gbs=8", plain);
  double modelled = one.layers[0].forwardS;
  double hostS = 2e-3;
  LayerProfile profile;
  profile.entries.push_back({"A100-80G", 1, 1, modelled + hostS});
  Assumptions measured;
  measured.layerProfile = std::make_shared<const LayerProfile>(profile);
  StepResult withHost = run("pp=2,mbs=4,gbs=8", measured);
  EXPECT_NEAR(withHost.layers[0].forwardS, four.layers[0].forwardS + hostS,
              1e-12);
  EXPECT_NEAR(withHost.layers[0].backwardS,
              four.layers[0].backwardS + 2 * hostS, 1e-12);
  EXPECT_EQ(withHost.layers[1].forwardS, four.layers[1].forwardS);
  // 1F1B over two stages and two micro-batches: three slots of a stage's
  // forward and backward, four repeated layers a stage, 3 x host each.
  EXPECT_NEAR(withHost.stepS - four.stepS, 3 * 4 * 3 * hostS,
              0.05 * 3 * 4 * 3 * hostS);
  // Measured faster than modelled: nothing to add.
  profile.entries[0].forwardS = modelled / 2;
  measured.layerProfile = std::make_shared<const LayerProfile>(profile);
  EXPECT_EQ(run("pp=2,mbs=4,gbs=8", measured).stepS, four.stepS);
  // Not measured at tp 2.
  auto s = parseStrategy("tp=2,mbs=4,gbs=8");
  ASSERT_TRUE(bool(s));
  auto r = simulateStep(w, c, *s, measured);
  ASSERT_FALSE(bool(r));
  EXPECT_EQ(llvm::toString(r.takeError()),
            "layer profile: no entry for A100-80G at tp 2 (it measures "
            "A100-80G tp 1)");
}

} // namespace

namespace {
// A search reads a strategy that does not apply as a candidate to skip, and
// an internal error of the simulator as the end of the search (it is a bug,
// not "does not fit").
TEST(Simulator, SearchesStopOnInternalErrorsOnly) {
  std::string internal;
  EXPECT_FALSE(stopsSearch(inputError("strategy: tp=5 does not divide"),
                           internal));
  EXPECT_TRUE(internal.empty());
  EXPECT_TRUE(stopsSearch(internalError("simulator: deadlock"), internal));
  EXPECT_EQ(internal, "simulator: deadlock");
  // The first is kept.
  EXPECT_TRUE(stopsSearch(internalError("simulator: another"), internal));
  EXPECT_EQ(internal, "simulator: deadlock");
}
} // namespace

namespace {
// One model-state function for every caller: each ZeRO stage shards one
// more part (optimizer state, gradients, weights) over the ranks, the
// experts over the ranks that hold them; frozen weights carry no gradient
// or optimizer state and are sharded only by ZeRO-3; offload moves the
// optimizer state off the device.
TEST(Simulator, ModelStateShardsOnePartMorePerZeroStage) {
  Assumptions a; // 2 + 4 + 12 bytes per parameter
  ModelShare m{1e9, 4e8, 1e8, 0, 8, 2, false};
  double dense = 6e8, experts = 4e8;
  double shard = dense / 8 + experts / 2;
  ModelState z0 = modelState(m, a);
  EXPECT_DOUBLE_EQ(z0.weightsBytes, 1.1e9 * 2);
  EXPECT_DOUBLE_EQ(z0.gradientsBytes, 1e9 * 4);
  EXPECT_DOUBLE_EQ(z0.optimizerBytes, 1e9 * 12);
  m.zeroStage = 1;
  ModelState z1 = modelState(m, a);
  EXPECT_DOUBLE_EQ(z1.optimizerBytes, shard * 12);
  EXPECT_DOUBLE_EQ(z1.gradientsBytes, z0.gradientsBytes);
  m.zeroStage = 2;
  ModelState z2 = modelState(m, a);
  EXPECT_DOUBLE_EQ(z2.gradientsBytes, shard * 4);
  EXPECT_DOUBLE_EQ(z2.weightsBytes, z0.weightsBytes);
  m.zeroStage = 3;
  ModelState z3 = modelState(m, a);
  EXPECT_DOUBLE_EQ(z3.weightsBytes, (shard + 1e8 / 8) * 2);
  m.offloadOptimizer = true;
  EXPECT_EQ(modelState(m, a).optimizerBytes, 0);
  EXPECT_DOUBLE_EQ(modelState(m, a).weightsBytes, z3.weightsBytes);
}
} // namespace

/// An MLP of `layers` d x d linear layers, its ops stated at `batch`
/// samples of one token: a weighted GEMM reads its weight once, whatever
/// the batch.
static Workload mlpAtBatch(int layers, int64_t d, int64_t batch) {
  Workload w = uniformModel(layers, 2.0 * d * d * batch, d * d, 2 * d * batch);
  OpCost &op = w.kinds[0].ops[0];
  op.weighted = true;
  op.tensorParallel = false;
  op.activationInputBytes = 2 * d * batch;
  op.outputBytes = 2 * d * batch;
  op.bytesRead = 2 * d * d + op.activationInputBytes;
  op.bytesWritten = op.outputBytes;
  w.batchSize = batch;
  w.tokensPerSample = 1;
  return w;
}

TEST(Simulator, OpsArePricedAtTheMicroBatchTheyRunAt) {
  Cluster c = preset("1xA100-80G");
  Workload one = mlpAtBatch(8, 4096, 1), sixtyFour = mlpAtBatch(8, 4096, 64);
  StepResult m1 = simulate(one, c, "dp=1,mbs=1,gbs=1");
  StepResult m64 = simulate(one, c, "dp=1,mbs=64,gbs=64");
  StepResult bound = simulate(sixtyFour, c, "dp=1,mbs=64,gbs=64");
  // The weights are read once per kernel: 64 samples cost far less than 64
  // steps of one (memory-bound at one sample, compute-bound at 64)...
  EXPECT_LT(m64.stepS - m64.optimizerS, 0.25 * 64 * (m1.stepS - m1.optimizerS));
  // ... and the batch-1 workload prices mbs=64 as the batch-64 one does.
  EXPECT_NEAR(m64.stepS, bound.stepS, 1e-3 * bound.stepS);
}

TEST(Simulator, EachCommunicatorAddsNcclBuffers) {
  // One more communicator (the data-parallel ring of two ranks on one
  // node) adds NCCL's buffers for its 16 channels, 10 MiB received and
  // 2 MiB sent each, and nothing else per device (ZeRO-0: the same model
  // state; the same micro-batch).
  Workload w = uniformModel(4, 1e12, 100'000'000, 1 << 28);
  StepResult one = simulate(w, preset("1xA100-80G"), "dp=1,mbs=1,gbs=1,zero=0");
  StepResult two = simulate(w, preset("2xA100-80G"), "dp=2,mbs=1,gbs=2,zero=0");
  const MemoryBreakdown &a = one.stages[0].memory, &b = two.stages[0].memory;
  EXPECT_DOUBLE_EQ(b.workspaceBytes - a.workspaceBytes,
                   16 * (kNcclRecvBytesPerConnection +
                         kNcclSendBytesPerConnection));
  EXPECT_DOUBLE_EQ(b.weightsBytes + b.gradientsBytes + b.optimizerBytes +
                       b.activationsBytes,
                   a.weightsBytes + a.gradientsBytes + a.optimizerBytes +
                       a.activationsBytes);
  // Across nodes a ring has 8 channels; a pipeline's neighbours 2 a peer.
  GroupShape across;
  across.ranks = 4;
  across.ranksPerNode = 1;
  EXPECT_DOUBLE_EQ(communicatorBytes(across, {}),
                   8 * (kNcclRecvBytesPerConnection +
                        kNcclSendBytesPerConnection));
  EXPECT_DOUBLE_EQ(communicatorBytes(across, {false, 2}),
                   2 * 2 * (kNcclRecvBytesPerConnection +
                            kNcclSendBytesPerConnection));
}

TEST(Simulator, TheMemoryHeadroomIsHeldBack) {
  // A step that fits the whole device but not the device less the
  // headroom does not fit; with no headroom it does.
  Workload w = uniformModel(4, 1e12, 1'000'000'000, 1 << 28);
  Cluster c = preset("1xA100-80G");
  auto s = parseStrategy("dp=1,mbs=1,gbs=1");
  ASSERT_TRUE(bool(s));
  Assumptions none, some;
  none.memoryHeadroom = 0;
  auto r0 = simulateStep(w, c, *s, none);
  ASSERT_TRUE(bool(r0));
  double used = r0->stages[0].memory.total() / r0->stages[0].capacityBytes;
  ASSERT_LT(used, 1.0);
  some.memoryHeadroom = (1 - used) + 0.01;
  auto r1 = simulateStep(w, c, *s, some);
  ASSERT_TRUE(bool(r1));
  EXPECT_TRUE(r0->fits);
  EXPECT_FALSE(r1->fits);
  EXPECT_NE(r1->doesNotFit.find("held back: --memory-headroom"),
            std::string::npos)
      << r1->doesNotFit;
  EXPECT_DOUBLE_EQ(r1->peakMemoryBytes, r0->peakMemoryBytes);
}
