//===- FuzzStrategy.cpp - the strategy string on arbitrary text -----------===//
//
// The parser, then what it accepts validated against a model with dense and
// mixture-of-experts layers on a 32-GPU cluster, and the step simulated
// where it is small: each answers a result or one line, never a crash or
// an overflow.
//
//===----------------------------------------------------------------------===//
#include "FuzzSupport.h"
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Simulator.h"
#include "orrery/CostModel/Strategy.h"
#include "orrery/CostModel/Workload.h"

#include <cstdint>
#include <string>

namespace {

orrery::LayerKind kind(const char *name, int64_t count, int64_t params,
                       int experts) {
  orrery::LayerKind k;
  k.name = name;
  k.count = count;
  k.numOps = 20;
  k.parameters = k.linearParameters = params;
  k.weightTensors = 8;
  k.forwardFlops = 2 * params * 2048;
  k.backwardFlops = 2 * k.forwardFlops;
  k.bytesRead = k.bytesWritten = 2 * params;
  k.savedActivationBytes = k.savedShardedBytes = 2048 * 1024 * 16;
  k.inputBytes = k.outputBytes = 2048 * 1024 * 2;
  if (count > 1) {
    k.attentionHeads = 16;
    k.attentionKvHeads = 8;
  }
  if (experts) {
    k.experts = experts;
    k.expertParameters = params / 2;
    k.expertDispatchBytes = k.inputBytes;
  }
  return k;
}

const orrery::Workload &workload() {
  static const orrery::Workload w = [] {
    orrery::Workload w;
    w.kinds = {kind("embedding", 1, 50'000'000, 0),
               kind("transformer_layer", 24, 12'000'000, 0),
               kind("moe_layer", 8, 40'000'000, 8), kind("head", 1, 1024, 0)};
    w.layers = {{0, 1}, {1, 12}, {2, 8}, {1, 12}, {3, 1}};
    w.tokensPerSample = 2048;
    return w;
  }();
  return w;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto s = orrery::parseStrategy(text);
  if (!orrery::fuzz::succeeded(s))
    return 0;
  static const orrery::Cluster cluster = std::move(*orrery::parseClusterPreset(
      "4x8xH100-SXM", orrery::HardwareCatalog::builtin()));
  orrery::Strategy v = *s;
  llvm::Error e = orrery::completeAndValidate(v, workload(), cluster);
  if (e) {
    orrery::fuzz::expectOneLine(llvm::toString(std::move(e)));
    return 0;
  }
  // Each micro-batch of each chunk is an event: keep an input quick.
  if (v.microBatches() * v.pp * v.virtualStages > 512)
    return 0;
  auto r = orrery::simulateStep(workload(), cluster, *s);
  orrery::fuzz::succeeded(r);
  return 0;
}
