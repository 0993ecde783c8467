//===- Workload.cpp - totals over layers ----------------------------------===//
#include "orrery/CostModel/Workload.h"

#include <algorithm>
#include <cstdint>

namespace orrery {

// Saturates at INT64_MAX rather than overflowing (shapes are untrusted).
template <typename F>
static int64_t sumOverLayers(const Workload &w, F field,
                             bool weights = false) {
  int64_t total = 0;
  for (const LayerKind &k : w.kinds) {
    int64_t term;
    int64_t count = weights && k.instancesShareWeights ? 1 : k.count;
    if (__builtin_mul_overflow(count, field(k), &term) ||
        __builtin_add_overflow(total, term, &total))
      return INT64_MAX;
  }
  return total;
}

const char *kernelFusionName(KernelFusion k) {
  switch (k) {
  case KernelFusion::Fused:
    return "fused";
  case KernelFusion::UnfusedAttention:
    return "unfused-attention";
  case KernelFusion::Eager:
    return "eager";
  }
  return "fused";
}

bool parseKernelFusion(const std::string &name, KernelFusion &out) {
  for (KernelFusion k : {KernelFusion::Fused, KernelFusion::UnfusedAttention,
                         KernelFusion::Eager})
    if (name == kernelFusionName(k)) {
      out = k;
      return true;
    }
  return false;
}

int64_t Workload::totalOps() const {
  int64_t n = 0;
  for (const auto &[name, count] : opHistogram)
    n += count;
  return n;
}
int64_t Workload::totalLayers() const {
  int64_t n = 0;
  for (const LayerRun &run : layers)
    n += run.count;
  return n;
}

int Workload::attentionHeads() const {
  int heads = 0;
  for (const LayerKind &k : kinds)
    heads = std::max(heads, k.attentionHeads);
  return heads;
}

int Workload::experts() const {
  int n = 0;
  for (const LayerKind &k : kinds)
    n = std::max(n, k.experts);
  return n;
}

int64_t Workload::parameters() const {
  return sumOverLayers(
      *this, [](const LayerKind &k) { return k.parameters; }, true);
}
int64_t Workload::buffers() const {
  return sumOverLayers(
      *this, [](const LayerKind &k) { return k.buffers; }, true);
}
int64_t Workload::forwardFlops() const {
  return sumOverLayers(*this,
                       [](const LayerKind &k) { return k.forwardFlops; });
}
int64_t Workload::backwardFlops() const {
  return sumOverLayers(*this,
                       [](const LayerKind &k) { return k.backwardFlops; });
}
int64_t Workload::savedActivationBytes() const {
  return sumOverLayers(
      *this, [](const LayerKind &k) { return k.savedActivationBytes; });
}

} // namespace orrery
