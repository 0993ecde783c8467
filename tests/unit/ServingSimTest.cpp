//===- ServingSimTest.cpp - serving steps and the serving simulator -------===//
//
// The step's price against the mechanisms by hand (a decode step streams
// the weights, a long prefill is compute-bound, fp8 halves the stream), and
// the simulator's shape: under a rising arrival rate TTFT's p99 climbs
// sharply near saturation while throughput levels off; vLLM preempts when
// the cache is full and TensorRT-LLM's admission never does; the decode-run
// shortcut changes nothing; bad workloads are one-line errors.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Serving.h"
#include "orrery/CostModel/ServingSim.h"
#include "orrery/CostModel/Simulator.h"
#include "TestSupport.h"

namespace orrery {
namespace {

using test::builtinWorkload;

using test::Served;

/// One request's whole prompt of `tokens`, sampling its first token.
StepBatch prompt(int64_t tokens) {
  StepBatch b;
  b.prefillTokens = tokens;
  b.prefillRequests = b.sampled = 1;
  b.addPrefill(0, double(tokens), 0);
  return b;
}

StepBatch decode(int64_t requests, int64_t context) {
  StepBatch b;
  b.decodeRequests = b.sampled = requests;
  b.decodeKeys = double(requests * context);
  return b;
}

TEST(ServingStep, DecodeStreamsTheWeightsPrefillComputes) {
  Served s("llama3-8b", "1xH100-SXM");
  StepPricer p = s.pricer(1);
  const DeviceSpec &h100 = *s.cluster.sites[0].nodeGroups[0].device;
  // One request decoding: every weight read once, at the GEMMs' share of
  // HBM bandwidth (16.06 GB at 3.35 TB/s x 0.788: 6.1 ms), plus the
  // rest of the step (norms, attention, launches, the host).
  double stream = 8030261248.0 * 2 /
                  (h100.memoryBandwidthBytesPerS *
                   KernelModel{}.gemmMemoryEfficiency);
  StepTime one = p.price(decode(1, 1024));
  EXPECT_GT(one.linearS, 0.95 * stream);
  EXPECT_LT(one.linearS, 1.15 * stream);
  // 64 requests read the same weights once; the tensor cores' work on
  // them waits on the stream (docs/costmodel.md, "A GEMM's weight
  // stream"): the step grows by the 63 more tokens' math at peak, 1.02 ms.
  StepTime many = p.price(decode(64, 1024));
  double math = 2.0 * 8030261248.0 * 63 / 989.4e12;
  EXPECT_NEAR(many.linearS - one.linearS, math, 0.15 * math);
  EXPECT_GT(many.attentionS, 20 * one.attentionS); // 64x the cache read
  // A prefill of 8,192 tokens is compute-bound: 2 x 8.03e9 x 8192 FLOPs
  // at 80 % of 989 TFLOP/s is 0.166 s for the linear layers.
  StepTime prefill = p.price(prompt(8192));
  double flops = 2.0 * 8030261248.0 * 8192;
  EXPECT_GT(prefill.linearS, 0.9 * flops / (0.8 * 989.4e12));
  EXPECT_LT(prefill.linearS, 1.3 * flops / (0.8 * 989.4e12));
  // fp8 weights halve what a decode step streams.
  StepTime fp8 = s.pricer(1, "fp8").price(decode(1, 1024));
  EXPECT_GT(fp8.linearS, 0.45 * one.linearS);
  EXPECT_LT(fp8.linearS, 0.62 * one.linearS);
  // int4 weight-only streams the repeated layers' 6.98e9 weights at 0.516
  // bytes (a 16-bit scale per 128) instead of 2, the head stays bf16, and
  // computes in bf16: a long prefill costs what bf16's does.
  StepTime int4 = s.pricer(1, "int4").price(decode(1, 1024));
  double saved = 32.0 * (218112000 - 2 * 4096) * (2 - (0.5 + 2.0 / 128)) /
                 (h100.memoryBandwidthBytesPerS *
                  KernelModel{}.gemmMemoryEfficiency);
  EXPECT_NEAR(one.linearS - int4.linearS, saved, 0.05 * saved);
  EXPECT_NEAR(s.pricer(1, "int4").price(prompt(8192)).linearS, prefill.linearS,
              0.05 * prefill.linearS);
}

TEST(ServingStep, TensorParallelDecodeIsLatencyBoundByItsAllReduces) {
  Served s("llama3-8b", "8xH100-SXM");
  StepTime one = s.pricer(1).price(decode(8, 2048));
  StepTime four = s.pricer(4).price(decode(8, 2048));
  // A quarter of the weights each (the GEMMs' launches stay: 224 of 3 us),
  // but 64 small all-reduces a step.
  EXPECT_LT(four.linearS, 0.4 * one.linearS);
  EXPECT_GT(four.linearS, 0.25 * one.linearS);
  EXPECT_GT(four.communicationS, 0);
  EXPECT_EQ(one.communicationS, 0);
  EXPECT_GT(four.latencyS, one.latencyS / 4);
  EXPECT_LT(four.latencyS, one.latencyS);
}

TEST(ServingStep, TheVocabularyParallelHeadGathersItsLogits) {
  // Each sampled position's 16-bit logits over Llama 3's 128,256-word
  // vocabulary, split over 8 ranks, gathered; a step that samples nothing
  // gathers nothing.
  Served s("llama3-8b", "8xH100-SXM");
  for (ServingEngine e : {ServingEngine::Vllm, ServingEngine::TensorRtLlm}) {
    StepPricer p = s.pricer(8, "bf16", e);
    StepBatch b = decode(256, 1024), none = b;
    none.sampled = 0;
    double gather = collectiveTime(CollectiveKind::AllGather,
                                   256 * 128256.0 * 2, p.replica().tpGroup);
    EXPECT_GT(gather, 0);
    EXPECT_NEAR(p.price(b).communicationS - p.price(none).communicationS,
                gather, 1e-12);
  }
}

ServingResult serve(const StepPricer &p, SchedulerLimits limits,
                    const std::string &workload) {
  auto w = ServingWorkload::parse(workload);
  EXPECT_TRUE(bool(w)) << (w ? "" : llvm::toString(w.takeError()));
  auto r = simulateServing(p, limits, *w, 1);
  EXPECT_TRUE(bool(r)) << (r ? "" : llvm::toString(r.takeError()));
  return *r;
}

SchedulerLimits vllmLimits(int64_t kvTokens) {
  SchedulerLimits l;
  l.maxRequests = 256;
  l.maxBatchedTokens = 2048;
  l.kvCacheTokens = kvTokens;
  return l;
}

TEST(ServingSim, TtftKneesAtSaturationWhileThroughputLevelsOff) {
  Served s("llama3-8b", "1xH100-SXM");
  StepPricer p = s.pricer(1);
  SchedulerLimits l = vllmLimits(400000);
  double capacity =
      serve(p, l, "isl=512,osl=128,requests=1500,offline").requestsPerS;
  auto at = [&](double share) {
    return serve(p, l,
                 "isl=512,osl=128,requests=1500,rate=" +
                     std::to_string(share * capacity));
  };
  ServingResult light = at(0.2), half = at(0.5), near = at(0.9),
                over = at(1.3), far = at(2.0);
  // Below saturation the system keeps up with the arrivals...
  EXPECT_NEAR(half.requestsPerS, 0.5 * capacity, 0.1 * capacity);
  // ...and the first token waits for little but a prefill.
  EXPECT_LT(light.ttft.p99S, 1.0);
  // Past it the queue grows for as long as requests come: TTFT's p99
  // rises many times over while throughput stops rising.
  EXPECT_GT(over.ttft.p99S, 10 * light.ttft.p99S);
  EXPECT_GT(far.ttft.p99S, over.ttft.p99S);
  EXPECT_LT(far.requestsPerS, 1.1 * over.requestsPerS);
  EXPECT_LT(over.requestsPerS, 1.1 * capacity);
  EXPECT_GT(near.requestsPerS, 0.75 * capacity);
}

TEST(ServingSim, CoalescedDecodeRunsMatchStepByStep) {
  Served s("llama3-8b", "1xH100-SXM");
  StepPricer p = s.pricer(1);
  SchedulerLimits l = vllmLimits(200000);
  for (const char *wl : {"isl=256,osl=400,requests=300,rate=6",
                         "isl=1000,osl=2000,requests=60,concurrency=16",
                         "isl=128,osl=300,requests=500,offline"}) {
    ServingResult fast = serve(p, l, wl);
    l.coalesceDecodeSteps = false;
    ServingResult exact = serve(p, l, wl);
    l.coalesceDecodeSteps = true;
    EXPECT_EQ(fast.steps, exact.steps) << wl;
    EXPECT_NEAR(fast.durationS, exact.durationS, 1e-3 * exact.durationS) << wl;
    EXPECT_NEAR(fast.ttft.p99S, exact.ttft.p99S, 1e-2 * exact.ttft.p99S) << wl;
    EXPECT_NEAR(fast.tpot.meanS, exact.tpot.meanS, 1e-3 * exact.tpot.meanS)
        << wl;
    // A coalesced run adds its gaps as a spread from its first step's time
    // to its last's; step by step adds each.
    EXPECT_NEAR(fast.itl.meanS, exact.itl.meanS, 1e-3 * exact.itl.meanS) << wl;
    EXPECT_NEAR(fast.itl.p99S, exact.itl.p99S, 2e-2 * exact.itl.p99S) << wl;
  }
}

TEST(ServingSim, VllmPreemptsWhenTheCacheFillsTrtllmReserves) {
  Served s("llama3-8b", "1xH100-SXM");
  // A cache of 20,000 tokens and requests that grow to 2,048 each.
  SchedulerLimits l = vllmLimits(20000);
  ServingResult v = serve(s.pricer(1), l, "isl=48,osl=2000,requests=64,offline");
  EXPECT_EQ(v.requests, 64);
  EXPECT_GT(v.preemptions, 0);
  l.blockTokens = 64;
  ServingResult t = serve(s.pricer(1, "bf16", ServingEngine::TensorRtLlm), l,
                          "isl=48,osl=2000,requests=64,offline");
  EXPECT_EQ(t.requests, 64);
  EXPECT_EQ(t.preemptions, 0);
  // Reserving whole requests runs at most 20000 / 2048 = 9 at once.
  EXPECT_LE(t.meanRequestsPerStep, 9.0);
  EXPECT_GT(v.meanRequestsPerStep, t.meanRequestsPerStep);
}

TEST(ServingSim, TrtllmBenchSizesItsEngineFromTheWorkload) {
  const DeviceSpec &h100 = *HardwareCatalog::builtin().device("H100-SXM");
  // Llama-3 8B in fp8 on one H100 (trtllm-bench's estimate: 80 GB less
  // 8 GB of weights, 0.95 of it over 64 KiB per token): 1,044,000
  // tokens, 479 requests of 128 + 2,048 -> 512 and 512 x 1.0625 -> 1,024
  // tokens... rounded as its tuning rounds them.
  SchedulerLimits l = engineDefaults(ServingEngine::TensorRtLlm, h100, 1, 1,
                                     8.03e9, 65536, 128, 2048);
  double kvRequests =
      (h100.memoryBytes - 8.03e9) * 0.95 / (65536.0 * 2176);
  double bs = kvRequests < 256 ? std::max(64.0, 32 * std::ceil(kvRequests / 32))
                               : 128 * std::ceil(kvRequests / 128);
  EXPECT_EQ(l.maxRequests, int64_t(bs));
  EXPECT_EQ(l.maxBatchedTokens, 2048); // 512 x 1.0625 is under the 2,048 floor
  SchedulerLimits v =
      engineDefaults(ServingEngine::Vllm, h100, 1, 1, 0, 0, 128, 2048);
  EXPECT_EQ(v.maxRequests, 1024);
  EXPECT_EQ(v.maxBatchedTokens, 8192);
  const DeviceSpec &a100 = *HardwareCatalog::builtin().device("A100-80G");
  v = engineDefaults(ServingEngine::Vllm, a100, 1, 1, 0, 0, 128, 2048);
  EXPECT_EQ(v.maxRequests, 256);
  EXPECT_EQ(v.maxBatchedTokens, 2048);
}

TEST(ServingSim, DisaggregationKeepsPrefillsOutOfTheDecodeSteps) {
  Served s("llama3-8b", "2xH100-SXM");
  StepPricer p = s.pricer(1);
  SchedulerLimits l = vllmLimits(300000);
  auto w = ServingWorkload::parse("isl=8192,osl=128,requests=300,rate=2");
  ASSERT_TRUE(bool(w));
  auto together = simulateServing(p, l, *w, 2);
  ASSERT_TRUE(bool(together));
  // NVLink between the two GPUs: 128 KiB a token moved in microseconds.
  KvTransfer fast{kvCacheBytesPerToken(s.w, 2), 450e9, 5e-6, 1};
  auto split = simulateDisaggregated(p, l, 1, p, l, 1, fast, *w);
  ASSERT_TRUE(bool(split)) << llvm::toString(split.takeError());
  EXPECT_EQ(split->requests, 300);
  // Decode steps no longer wait for 8K-token prompts' chunks between
  // tokens.
  EXPECT_LT(split->tpot.p99S, 0.85 * together->tpot.p99S)
      << split->tpot.p99S << " " << together->tpot.p99S;
  // Together, the few gaps a request waits out behind a prompt's chunk are
  // in ITL's tail, which TPOT (a request's mean gap) averages away; split,
  // no gap waits for a prompt. Every request has 127 gaps, so ITL's mean
  // is TPOT's.
  EXPECT_GT(together->itl.p99S, 2 * together->tpot.p99S)
      << together->itl.p99S << " " << together->tpot.p99S;
  EXPECT_LT(split->itl.p99S, 0.5 * together->itl.p99S)
      << split->itl.p99S << " " << together->itl.p99S;
  EXPECT_NEAR(together->itl.meanS, together->tpot.meanS,
              1e-2 * together->tpot.meanS);
  // A slow link delays the second token by the prompt's cache: 1 GiB at
  // 1 GB/s is 1.07 s, spread over the 127 tokens after the first.
  KvTransfer slow = fast;
  slow.bandwidthBytesPerS = 1e9;
  auto late = simulateDisaggregated(p, l, 1, p, l, 1, slow, *w);
  ASSERT_TRUE(bool(late));
  double moved = 8192.0 * kvCacheBytesPerToken(s.w, 2) / 1e9;
  EXPECT_NEAR(late->tpot.meanS - split->tpot.meanS, moved / 127,
              0.3 * moved / 127);
  EXPECT_NEAR(late->ttft.meanS, split->ttft.meanS, 1e-9);
  // Concurrency couples the pools: refused.
  auto conc = ServingWorkload::parse("isl=16,osl=8,concurrency=4");
  ASSERT_TRUE(bool(conc));
  auto refused = simulateDisaggregated(p, l, 1, p, l, 1, fast, *conc);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("not a concurrency"),
            std::string::npos);
}

void expectError(llvm::Expected<ServingWorkload> w, const std::string &part) {
  ASSERT_FALSE(bool(w));
  std::string why = llvm::toString(w.takeError());
  EXPECT_NE(why.find(part), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

TEST(ServingSim, BadWorkloadsAreOneLineErrors) {
  expectError(ServingWorkload::parse("isl=-3"),
              "isl=-3: expected a positive integer");
  expectError(ServingWorkload::parse("rate=fast"), "rate=fast");
  expectError(ServingWorkload::parse("tokens=5"), "unknown key 'tokens'");
  expectError(ServingWorkload::parseTrace("arrival_s,input_tokens,output_tokens\n"
                                          "0,100,10\n0.5,-3,4\n",
                                          "t.csv"),
              "t.csv:3: input_tokens '-3'");
  expectError(ServingWorkload::parseTrace("0,100,10\n", "t.csv"),
              "t.csv:1: expected the header");
  expectError(ServingWorkload::parseTrace("arrival_s,input_tokens,output_tokens\n"
                                          "2,100,10\n1,100,10\n",
                                          "t.csv"),
              "t.csv:3: arrival goes back in time");
  expectError(ServingWorkload::parseTrace("arrival_s,input_tokens,output_tokens\n",
                                          "t.csv"),
              "t.csv: the trace has no requests");
  // A request longer than the whole cache.
  Served s("llama3-8b", "1xH100-SXM");
  auto w = ServingWorkload::parse("isl=30000,osl=1000,requests=2");
  ASSERT_TRUE(bool(w));
  auto r = simulateServing(s.pricer(1), vllmLimits(20000), *w, 1);
  ASSERT_FALSE(bool(r));
  std::string why = llvm::toString(r.takeError());
  EXPECT_NE(why.find("a request of 31000 tokens (prompt and output) does "
                     "not fit the KV cache of one replica, 20000 tokens"),
            std::string::npos)
      << why;
}

// The engines sum a token's top-k expert outputs before the tensor-parallel
// all-reduce (vLLM's and SGLang's fused_moe, TensorRT-LLM's MoE finalize),
// and reduce the attention's output projection as a dense layer does:
// Mixtral 8x7B's layers reduce what Mistral 7B v0.1's do (the same 32
// layers of width 4096, the same attention and vocabulary), not the expert
// layer's top 2 copies.
// Attention data parallelism (adp) on Mixtral 8x7B over 8 H100: a decode
// of 8 x n requests runs each rank's attention over its n requests' keys
// at whole heads, the same work as tp=8's slice of all 8 x n; no
// all-reduce, but the tokens gathered into the experts and scattered back
// out. A batch spreads over the ranks rounded up (the busiest rank).
TEST(ServingStep, AttentionDataParallelRunsEachRanksOwnRequests) {
  StepBatch b = decode(17, 1024);
  StepBatch r = b.perRank(8);
  EXPECT_EQ(r.decodeRequests, 3);
  EXPECT_DOUBLE_EQ(r.decodeKeys, 17.0 * 1024 / 8);
  EXPECT_EQ(b.perRank(1).decodeRequests, 17);
  Served s("mixtral-8x7b", "8xH100-SXM");
  auto replica = servingReplicaOn(s.cluster.sites[0].nodeGroups[0], 8, 1, 8,
                                  /*attentionDp=*/true);
  ASSERT_TRUE(bool(replica));
  auto bf16 = ServingPrecision::parse("bf16", "auto");
  ASSERT_TRUE(bool(bf16));
  auto adp = StepPricer::create(s.w, *replica, *bf16, ServingEngine::Vllm);
  ASSERT_TRUE(bool(adp)) << llvm::toString(adp.takeError());
  StepPricer ep = s.pricer(8, "bf16", ServingEngine::Vllm, 8);
  StepTime a = adp->price(decode(64, 2048)), e = ep.price(decode(64, 2048));
  EXPECT_NEAR(a.attentionS, e.attentionS, 0.05 * e.attentionS);
  EXPECT_GT(a.communicationS, 0);
  EXPECT_NE(a.communicationS, e.communicationS);
  // It needs ep = tp > 1.
  auto noEp = servingReplicaOn(s.cluster.sites[0].nodeGroups[0], 8, 1, 1, true);
  ASSERT_FALSE(bool(noEp));
  EXPECT_NE(llvm::toString(noEp.takeError()).find("needs tp > 1 and ep=tp"),
            std::string::npos);
}

TEST(ServingStep, ExpertLayerReducesOneRowAToken) {
  Served moe("mixtral-8x7b", "8xH100-SXM"),
      dense("mistral-7b-v0.1", "8xH100-SXM");
  for (int tokens : {1, 64, 512}) {
    StepTime m = moe.pricer(8).price(decode(tokens, 1024));
    StepTime d = dense.pricer(8).price(decode(tokens, 1024));
    EXPECT_GT(d.communicationS, 0);
    EXPECT_NEAR(m.communicationS, d.communicationS, 1e-3 * d.communicationS)
        << tokens << " tokens";
  }
}

// Mixtral 8x7B on 8 H100, its 8 experts sliced 8 ways (tp) or one whole
// expert a rank (ep=8). One decoding request chooses 2 experts: under tp
// every rank reads 1/8 of each (a quarter of an expert), under ep the
// ranks holding them read a whole one, and the step waits for them. With
// thousands of tokens every expert is busy on every rank either way, and
// the ranks' loads even out: the expert layers cost about the same.
TEST(ServingStep, ExpertParallelDecodeWaitsForTheBusiestRank) {
  Served s("mixtral-8x7b", "8xH100-SXM");
  StepPricer tp = s.pricer(8), ep = s.pricer(8, "bf16", ServingEngine::Vllm, 8);
  StepTime tpOne = tp.price(decode(1, 1024)), epOne = ep.price(decode(1, 1024));
  EXPECT_GT(epOne.linearS, 2.0 * tpOne.linearS);
  EXPECT_EQ(epOne.communicationS, tpOne.communicationS); // the same all-reduces
  EXPECT_EQ(epOne.attentionS, tpOne.attentionS);
  StepTime tpPre = tp.price(prompt(8192)), epPre = ep.price(prompt(8192));
  EXPECT_LT(epPre.linearS, 1.15 * tpPre.linearS);
  EXPECT_GT(epPre.linearS, 0.85 * tpPre.linearS);
  EXPECT_LT(epPre.linearS / tpPre.linearS, 0.5 * epOne.linearS / tpOne.linearS);
  // Expert parallelism needs experts, and spans the tp ranks.
  Served dense("llama3-8b", "8xH100-SXM");
  auto replica =
      servingReplicaOn(dense.cluster.sites[0].nodeGroups[0], 8, 1, 8);
  ASSERT_TRUE(bool(replica));
  auto bf16 = ServingPrecision::parse("bf16", "auto");
  ASSERT_TRUE(bool(bf16));
  auto p = StepPricer::create(dense.w, *replica, *bf16, ServingEngine::Vllm);
  ASSERT_FALSE(bool(p));
  EXPECT_NE(llvm::toString(p.takeError()).find("no mixture-of-experts layer"),
            std::string::npos);
  auto uneven = servingReplicaOn(dense.cluster.sites[0].nodeGroups[0], 8, 1, 4);
  ASSERT_FALSE(bool(uneven));
  EXPECT_NE(llvm::toString(uneven.takeError()).find("ep=1 or ep=tp=8"),
            std::string::npos);
  // More ranks than experts: some rank would hold none (refused, not NaN).
  Served wide("mixtral-8x7b", "16xH100-SXM");
  auto sixteen =
      servingReplicaOn(wide.cluster.sites[0].nodeGroups[0], 16, 1, 16);
  ASSERT_TRUE(bool(sixteen));
  auto tooMany =
      StepPricer::create(wide.w, *sixteen, *bf16, ServingEngine::Vllm);
  ASSERT_FALSE(bool(tooMany));
  EXPECT_NE(llvm::toString(tooMany.takeError())
                .find("ep=16 is more ranks than the 8 experts"),
            std::string::npos);
}

// Mistral 7B v0.1 attends over a sliding window of 4,096 keys in every
// layer: a request's cache never holds more than the window and a block,
// a decode at 32K of context reads what one at 4K does, and a prompt's
// queries past the window each compute 4,096 query-key pairs.
TEST(ServingStep, SlidingWindowCapsTheCacheAndTheKeys) {
  Served s("mistral-7b-v0.1", "1xH100-SXM");
  StepPricer p = s.pricer(1);
  EXPECT_EQ(p.window(), 4096);
  EXPECT_DOUBLE_EQ(p.windowedKvFraction(), 1.0);
  EXPECT_DOUBLE_EQ(p.tokensHeld(1000, 16), 1000);
  EXPECT_DOUBLE_EQ(p.tokensHeld(32768, 16), 4096 + 16);
  auto decodeAt = [](double context) { // 64 requests
    StepBatch b;
    b.decodeRequests = b.sampled = 64;
    for (int i = 0; i < 64; ++i)
      b.addDecode(context, 4096);
    return b;
  };
  EXPECT_DOUBLE_EQ(p.price(decodeAt(32768)).attentionS,
                   p.price(decodeAt(4096)).attentionS);
  EXPECT_GT(p.price(decodeAt(4096)).attentionS,
            2.5 * p.price(decodeAt(1024)).attentionS);
  // A prompt of 8,192: 4,096 queries ramp up (4096·4097/2 pairs), 4,096
  // see the whole window; a later chunk of 2,048 after 6,000 cached tokens
  // sees 4,096 keys a query and reads 2,048 + 4,095 of them.
  StepBatch pre;
  pre.addPrefill(0, 8192, 4096);
  EXPECT_DOUBLE_EQ(pre.prefillPairsWindowed, 4096.0 * 4097 / 2 + 4096.0 * 4096);
  EXPECT_DOUBLE_EQ(pre.prefillPairs, 8192.0 * 8193 / 2);
  StepBatch chunk;
  chunk.addPrefill(6000, 2048, 4096);
  EXPECT_DOUBLE_EQ(chunk.prefillPairsWindowed, 2048.0 * 4096);
  EXPECT_DOUBLE_EQ(chunk.prefillKeysWindowed, 2048.0 + 4095);
  // Mistral 7B v0.3 (no window) keeps every token.
  Served full("mistral-7b", "1xH100-SXM");
  EXPECT_EQ(full.pricer(1).window(), 0);
  EXPECT_DOUBLE_EQ(full.pricer(1).tokensHeld(32768, 16), 32768);
}

TEST(ServingStep, RefusesWhatItCannotPrice) {
  Served s("llama3-8b", "1xA100-80G");
  auto replica = servingReplicaOn(s.cluster.sites[0].nodeGroups[0], 1, 1);
  ASSERT_TRUE(bool(replica));
  auto fp8 = ServingPrecision::parse("fp8", "auto");
  ASSERT_TRUE(bool(fp8));
  auto p = StepPricer::create(s.w, *replica, *fp8, ServingEngine::Vllm);
  ASSERT_FALSE(bool(p));
  EXPECT_NE(llvm::toString(p.takeError()).find("no fp8 tensor cores"),
            std::string::npos);
  auto tooWide = servingReplicaOn(s.cluster.sites[0].nodeGroups[0], 2, 1);
  ASSERT_FALSE(bool(tooWide));
  EXPECT_NE(llvm::toString(tooWide.takeError()).find("spans more than one node"),
            std::string::npos);
  auto badPrecision = ServingPrecision::parse("int3", "auto");
  ASSERT_FALSE(bool(badPrecision));
  EXPECT_NE(llvm::toString(badPrecision.takeError()).find("precision 'int3'"),
            std::string::npos);
}

} // namespace
} // namespace orrery

namespace orrery {
namespace {
// One mechanism, one place: a prefill step prices its ops through the same
// roofline as training's forward (kernelSeconds, attentionSeconds), so the
// prefill of one sample's tokens costs what the training forward of its
// layers does. They differ by design only where serving runs other work:
// the output head runs for the sampled token alone (a request's last, not
// every position), the embedding is a lookup of the tokens either way, and
// the engine's host time (StepTime::hostS) is a step's own. Dense, GQA and
// mixture-of-experts layers alike.
TEST(ServingStep, APrefillPricesLikeTheTrainingForwardOfItsTokens) {
  for (const char *model : {"llama3-8b", "gpt3-1.3b", "mixtral-8x7b"}) {
    Served s(model, "1xH100-SXM");
    StepPricer p = s.pricer(1);
    auto strategy = parseStrategy("mbs=1,gbs=1");
    ASSERT_TRUE(bool(strategy));
    auto r = simulateStep(s.w, s.cluster, *strategy, {}, /*keepTrace=*/true);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    double training = 0; // the forward of every layer but the head
    for (const LayerBreakdown &b : r->layers)
      if (b.kind != "head")
        training += b.forwardS * double(b.count);
    StepTime t = p.price(prompt(s.w.tokensPerSample));
    double prefill = t.linearS + t.attentionS + t.otherS; // no host time
    EXPECT_NEAR(prefill / training, 1.0, 0.02)
        << model << ": prefill " << prefill << " s, training forward "
        << training << " s";
    EXPECT_GT(t.hostS, 0) << model;
  }
}
} // namespace
} // namespace orrery
