//===- Workload.cpp - totals over layers ----------------------------------===//
#include "orrery/CostModel/Workload.h"

#include <cstdlib>

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
  case KernelFusion::Sdpa:
    return "sdpa";
  case KernelFusion::Compiled:
    return "compiled";
  }
  return "fused";
}

bool parseKernelFusion(const std::string &name, KernelFusion &out) {
  for (KernelFusion k : {KernelFusion::Fused, KernelFusion::UnfusedAttention,
                         KernelFusion::Eager, KernelFusion::Sdpa,
                         KernelFusion::Compiled})
    if (name == kernelFusionName(k)) {
      out = k;
      return true;
    }
  return false;
}

std::vector<int> Workload::layersPerChunk(int chunks) const {
  std::vector<int> sizes;
  if (chunks < 1)
    return sizes;
  size_t bodyRun = 0;
  int64_t total = 0;
  for (size_t r = 0; r < layers.size(); ++r) {
    total += layers[r].count;
    if (layers[r].count > layers[bodyRun].count)
      bodyRun = r;
  }
  int64_t before = 0, after = 0,
          body = layers.empty() ? 0 : layers[bodyRun].count;
  for (size_t r = 0; r < layers.size(); ++r)
    (r < bodyRun ? before : after) += r == bodyRun ? 0 : layers[r].count;
  if (body < chunks) { // too few repeats: split all layers evenly
    body = total;
    before = after = 0;
  }
  for (int i = 0; i < chunks; ++i)
    sizes.push_back(int(body / chunks + (i < body % chunks ? 1 : 0)));
  sizes.front() += int(before);
  sizes.back() += int(after);
  return sizes;
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

int Workload::repeatedKind() const {
  int best = -1;
  for (size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i].count > 1 && (best < 0 || kinds[i].count > kinds[best].count))
      best = int(i);
  return best;
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
int64_t Workload::activeParameters() const {
  for (const LayerKind &k : kinds)
    if (k.experts > 1 && k.expertTopK < 1)
      return -1;
  return sumOverLayers(
      *this,
      [](const LayerKind &k) {
        if (k.experts < 2)
          return k.parameters;
        return k.parameters - k.expertParameters +
               k.expertParameters / k.experts * k.expertTopK;
      },
      true);
}
int64_t Workload::buffers() const {
  return sumOverLayers(
      *this, [](const LayerKind &k) { return k.buffers; }, true);
}
int64_t Workload::frozenParameters() const {
  return sumOverLayers(
      *this, [](const LayerKind &k) { return k.frozenParameters; }, true);
}
int64_t Workload::tiedParameters() const {
  return sumOverLayers(
      *this, [](const LayerKind &k) { return k.tiedParameters; }, true);
}
int64_t Workload::adapterParameters() const {
  return sumOverLayers(
      *this, [](const LayerKind &k) { return k.adapterParameters; }, true);
}

std::string FineTuning::str() const {
  std::string out;
  if (loraRank > 0) {
    out = "lora=rank=" + std::to_string(loraRank) + ",targets=";
    for (size_t i = 0; i < loraTargets.size(); ++i)
      out += (i ? "+" : "") + loraTargets[i];
  }
  if (!freeze.empty()) {
    out += std::string(out.empty() ? "" : ";") + "freeze=";
    for (size_t i = 0; i < freeze.size(); ++i)
      out += (i ? "+" : "") + freeze[i];
  }
  return out;
}

llvm::Expected<FineTuning> parseLora(const std::string &text, FineTuning base) {
  auto err = [&](const std::string &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--lora " + text + ": " + msg);
  };
  base.loraRank = 0;
  base.loraTargets.clear();
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    std::string item =
        text.substr(at, comma == std::string::npos ? std::string::npos
                                                   : comma - at);
    at = comma == std::string::npos ? text.size() + 1 : comma + 1;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return err("'" + item + "': expected key=value (rank=R, targets=T+T)");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "rank") {
      char *end = nullptr;
      long r = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end || r < 1 || r > 65536)
        return err("rank: expected an integer from 1 to 65536, got '" +
                   value + "'");
      base.loraRank = int(r);
    } else if (key == "targets") {
      size_t from = 0;
      while (from <= value.size()) {
        size_t plus = value.find('+', from);
        std::string t = value.substr(
            from, plus == std::string::npos ? std::string::npos : plus - from);
        from = plus == std::string::npos ? value.size() + 1 : plus + 1;
        if (t.empty())
          return err("targets: an empty target");
        base.loraTargets.push_back(t);
      }
    } else {
      return err("unknown key '" + key + "' (known: rank, targets)");
    }
  }
  if (base.loraRank == 0)
    return err("rank: missing (e.g. rank=16)");
  if (base.loraTargets.empty())
    base.loraTargets = {"attention"};
  return base;
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
