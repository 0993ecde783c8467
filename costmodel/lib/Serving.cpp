//===- Serving.cpp - what serving a model holds in memory -----------------===//

#include "orrery/CostModel/Serving.h"

#include <algorithm>
#include <cmath>

namespace orrery {

double kvHeadsPerRank(const OpCost &attention, int tp) {
  tp = std::max(1, tp);
  // A latent cache serves every head: each rank keeps it whole.
  if (attention.attentionLatentDim > 0)
    return 1.0;
  return attention.attentionKvHeads >= tp
             ? double(attention.attentionKvHeads) / tp
             : 1.0;
}

KvCachePerToken kvCachePerToken(const Workload &w, double bytesPerElement,
                                int tp) {
  KvCachePerToken kv;
  for (const LayerKind &k : w.kinds)
    for (const OpCost &op : k.ops) {
      if (op.attentionKvHeads <= 0)
        continue;
      double bytes = k.count * kvHeadsPerRank(op, tp) *
                     double(op.attentionCacheWidth()) * bytesPerElement;
      kv.bytes += bytes;
      if (op.attentionWindow > 0)
        kv.windowedBytes += bytes;
    }
  return kv;
}

double kvCacheBytesPerToken(const Workload &w, double bytesPerElement, int tp) {
  return kvCachePerToken(w, bytesPerElement, tp).bytes;
}

namespace {
/// The forward pass's largest live set per token on one rank: the biggest
/// op output of a repeated layer with its input (the head's logits are
/// computed only for the sequences sampled, and are left out).
double activationBytesPerToken(const Workload &w, int tp) {
  if (w.tokensPerSample <= 0 || w.batchSize <= 0)
    return 0;
  double largest = 0;
  for (const LayerKind &k : w.kinds) {
    if (k.count < 2)
      continue;
    for (const OpCost &op : k.ops)
      largest = std::max(largest, double(op.bytesWritten));
  }
  return 2 * largest / double(w.tokensPerSample * w.batchSize) /
         std::max(1, tp);
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}
} // namespace

llvm::Expected<ServingMemory> servingMemory(const Workload &w,
                                            const DeviceSpec &device,
                                            const ServingMemoryOptions &o) {
  auto error = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
  };
  if (o.tp < 1 || o.pp < 1)
    return error("serving: tp and pp must be at least 1");
  if (!(o.memoryUtilization > 0 && o.memoryUtilization <= 1))
    return error("serving: memory utilization must be in (0, 1]");
  ServingMemory m;
  if (o.freeMemoryFraction < 0 || o.freeMemoryFraction > 1)
    return error("serving: the free-memory fraction must be in [0, 1]");
  m.budgetBytes = o.freeMemoryFraction > 0
                      ? device.memoryBytes
                      : o.memoryUtilization * device.memoryBytes;
  // The layers split evenly over the stages; each rank holds its share of
  // the split weights and the replicated ones whole.
  // The embedding and the output head are vocabulary-parallel in vLLM,
  // SGLang and TensorRT-LLM (each rank holds 1/tp of the vocabulary).
  double once = o.onceOnlyBytesPerParam > 0 ? o.onceOnlyBytesPerParam
                                             : o.weightBytesPerParam;
  // Under attention DP only the experts split (whole, E/tp a rank).
  int split = o.attentionDp ? 1 : o.tp;
  double bytes = 0;
  for (const LayerKind &k : w.kinds) {
    double perRank = k.trainablePerRank(split) + k.frozenPerRank(split);
    if (o.attentionDp && k.experts > 1)
      perRank -= double(k.expertParameters) * (1 - 1.0 / o.tp);
    bytes += k.count == 1
                 ? double(k.parameters + k.frozenParameters) / split * once
                 : k.count * perRank * o.weightBytesPerParam;
  }
  m.weightBytes = bytes / o.pp;
  for (const LayerKind &k : w.kinds)
    m.weightBytes += double(k.count) * k.bufferBytes / o.pp;
  int draft = o.drafter == Speculation::Method::None ||
                      o.drafter == Speculation::Method::Ngram
                  ? -1
                  : draftLayerKind(w, o.drafter);
  double draftKv = 0;
  if (draft >= 0) {
    const LayerKind &k = w.kinds[size_t(draft)];
    m.weightBytes += (k.trainablePerRank(split) + k.frozenPerRank(split)) *
                     o.draftWeightBytesPerParam;
    Workload one;
    one.kinds.push_back(k);
    one.kinds.back().count = 1;
    draftKv = kvCacheBytesPerToken(one, o.kvBytesPerElement, split);
  }
  m.activationBytes =
      double(o.maxBatchedTokens) * activationBytesPerToken(w, split);
  m.workspaceBytes = o.workspaceBytes > 0        ? o.workspaceBytes
                     : device.workspaceBytes > 0 ? device.workspaceBytes
                                                 : 1.5 * (1ull << 30);
  m.kvBytesPerToken =
      kvCacheBytesPerToken(w, o.kvBytesPerElement, split) / o.pp + draftKv;
  if (m.weightBytes > m.budgetBytes)
    return error("serving: the weights need " + gib(m.weightBytes) +
                 " per device, more than the " + gib(m.budgetBytes) +
                 " the engine takes of the " + device.name +
                 "'s memory (split over more devices: tp or pp)");
  m.kvCacheBytes =
      m.budgetBytes - m.weightBytes - m.activationBytes - m.workspaceBytes;
  if (o.freeMemoryFraction > 0)
    m.kvCacheBytes *= o.freeMemoryFraction;
  if (m.kvBytesPerToken <= 0)
    return error("serving: the model has no attention op keeping a KV cache");
  m.maxTokens = m.kvCacheBytes > 0
                    ? int64_t(std::floor(m.kvCacheBytes / m.kvBytesPerToken))
                    : 0;
  if (m.maxTokens < 1)
    return error("serving: no room for the KV cache on the " + device.name +
                 ": weights " + gib(m.weightBytes) + ", activations " +
                 gib(m.activationBytes) + " and workspace " +
                 gib(m.workspaceBytes) + " fill the " + gib(m.budgetBytes) +
                 " the engine takes");
  return m;
}

} // namespace orrery
