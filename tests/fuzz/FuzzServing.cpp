//===- FuzzServing.cpp - serving workloads and traces on arbitrary text --===//
//
// The first byte picks the reader: a `--workload` spec or a `--trace` (CSV
// or JSON Lines), whether the model's attention slides a window of 64 keys,
// whether speculative decoding (EAGLE-3, 2 drafts) runs, and whether the
// prefix cache has a host tier. What
// parses and is small enough is served on a two-layer model with
// grouped-query attention, on a cache small enough that requests queue,
// preempt, or do not fit: every path of the scheduler, each error one line.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"
#include "orrery/CostModel/ServingSim.h"

#include <cstdint>
#include <string>

namespace {

orrery::Workload twoLayers(int64_t window) {
  using namespace orrery;
  Workload w;
  w.batchSize = 1;
  w.tokensPerSample = 128;
  LayerKind k;
  k.name = "layer";
  k.count = 2;
  k.parameters = 256 * 256;
  OpCost linear;
  linear.name = "proj";
  linear.contraction = linear.weighted = true;
  linear.gemmBatch = 1;
  linear.gemmM = 128;
  linear.gemmN = linear.gemmK = 256;
  linear.forwardFlops = 2 * 128 * 256 * 256;
  linear.activationInputBytes = linear.outputBytes = 128 * 256 * 2;
  OpCost attention;
  attention.name = "attention";
  attention.kernelClass = KernelClass::Attention;
  attention.attentionQueryHeads = 4;
  attention.attentionKvHeads = 2;
  attention.attentionHeadDim = attention.attentionValueDim = 64;
  attention.forwardFlops = 4 * 128 * 128 * 4 * 64;
  attention.attentionCausal = true;
  attention.attentionWindow = window;
  k.ops = {linear, attention};
  w.kinds.push_back(k);
  w.layers.push_back({0, 2});
  // The output head, run once (a drafter's passes use it).
  LayerKind head;
  head.name = "head";
  head.count = 1;
  head.parameters = 256 * 512;
  OpCost logits = linear;
  logits.name = "logits";
  logits.gemmN = 512;
  logits.forwardFlops = 2 * 128 * 256 * 512;
  logits.outputBytes = 128 * 512 * 2;
  head.ops = {logits};
  w.kinds.push_back(head);
  w.layers.push_back({1, 1});
  return w;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace orrery;
  if (size == 0)
    return 0;
  std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);
  auto w = data[0] & 1 ? ServingWorkload::parseTrace(text, "trace.csv")
                       : ServingWorkload::parse(text);
  if (!fuzz::succeeded(w))
    return 0;
  // Serve only what is small enough to finish quickly.
  double tokens = 0;
  for (const ServingRequest &r : w->requestsToServe()) {
    tokens += double(r.inputTokens) + double(r.outputTokens);
    if (tokens > 2e5)
      return 0;
  }
  static const Workload full = twoLayers(0), sliding = twoLayers(64);
  const Workload &model = data[0] & 2 ? sliding : full;
  NodeGroup g;
  g.device = HardwareCatalog::builtin().device("H100-SXM");
  g.devicesPerNode = 2;
  // Prefill on one replica shape, decode on another, the cache moved
  // between them.
  auto one = servingReplicaOn(g, 1, 1), two = servingReplicaOn(g, 2, 1);
  if (one && two) {
    auto pre = StepPricer::create(model, *one, ServingPrecision{},
                                  ServingEngine::Vllm);
    auto dec = StepPricer::create(model, *two, ServingPrecision{},
                                  ServingEngine::Vllm);
    if (pre && dec) {
      SchedulerLimits limits;
      limits.maxRequests = 8;
      limits.maxBatchedTokens = 512;
      limits.kvCacheTokens = 4096;
      KvTransfer t{4096, 50e9, 5e-6, 1};
      auto r = simulateDisaggregated(*pre, limits, 2, *dec, limits, 1, t, *w);
      fuzz::succeeded(r);
    }
    fuzz::succeeded(pre);
    fuzz::succeeded(dec);
  }
  fuzz::succeeded(one);
  fuzz::succeeded(two);
  for (int tp : {1, 2}) {
    auto replica = servingReplicaOn(g, tp, 1);
    if (!fuzz::succeeded(replica))
      continue;
    for (ServingEngine e : {ServingEngine::Vllm, ServingEngine::TensorRtLlm}) {
      auto pricer = StepPricer::create(model, *replica, ServingPrecision{}, e);
      if (!fuzz::succeeded(pricer))
        continue;
      if (data[0] & 4) {
        auto spec = Speculation::parse("eagle3,k=2,acceptance=0.7/0.4");
        if (!fuzz::succeeded(spec))
          continue;
        llvm::Error err = pricer->setSpeculation(model, *spec);
        if (err) {
          llvm::consumeError(std::move(err));
          continue;
        }
      }
      SchedulerLimits limits;
      limits.maxRequests = 8;
      limits.maxBatchedTokens = 512;
      limits.kvCacheTokens = 4096;
      limits.blockTokens = e == ServingEngine::Vllm ? 16 : 64;
      if (data[0] & 8) {
        limits.hostCacheBlocks = 64;
        limits.hostLoadSecondsPerBlock = 1e-5;
      }
      auto r = simulateServing(*pricer, limits, *w, 2);
      fuzz::succeeded(r);
    }
  }
  return 0;
}
