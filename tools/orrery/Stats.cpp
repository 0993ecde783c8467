//===- Stats.cpp - the `orrery stats` report ------------------------------===//
//
// Training FLOPs are forward + backward as the ops' cost formulas state them
// (backward = 2× forward for contractions, 1× for the rest); the optimizer
// step is not included. Per-token figures divide by batch × tokens/sample.
//
//===----------------------------------------------------------------------===//
#include "Stats.h"
#include "orrery/CostModel/Serving.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

namespace orrery {

static std::string withUnit(double v, const char *unit) {
  static const char *prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (std::abs(v) >= 1000 && i < 6) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g %s%s", v, prefixes[i], unit);
  return buf;
}

/// Binary units: MiB below a GiB, GiB above.
static std::string mib(double bytes) {
  char buf[64];
  double m = bytes / (1024.0 * 1024.0);
  if (m >= 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", m / 1024);
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", m);
  return buf;
}

static std::string grouped(int64_t v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it, ++n) {
    if (n && n % 3 == 0 && *it != '-')
      out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
  }
  return out;
}

nlohmann::ordered_json statsJson(const Workload &w,
                                 const std::map<std::string, int64_t> &dims) {
  nlohmann::ordered_json j;
  double samples = double(w.batchSize);
  double tokens = samples * double(w.tokensPerSample);
  j["model"] = w.source;
  j["dims"] = dims;
  j["batch_size_samples"] = w.batchSize;
  j["tokens_per_sample"] = w.tokensPerSample;
  j["ops"] = w.totalOps();
  j["parameters"] = w.parameters();
  if (w.experts() > 1 && w.activeParameters() >= 0)
    j["active_parameters"] = w.activeParameters();
  j["buffers"] = w.buffers();
  j["tied_weights"] = w.tiedWeights;
  j["forward_flops_per_sample"] = double(w.forwardFlops()) / samples;
  j["training_flops_per_sample"] =
      (double(w.forwardFlops()) + double(w.backwardFlops())) / samples;
  if (w.tokensPerSample > 0) {
    j["forward_flops_per_token"] = double(w.forwardFlops()) / tokens;
    j["training_flops_per_token"] =
        (double(w.forwardFlops()) + double(w.backwardFlops())) / tokens;
  }
  j["activation_bytes_per_sample"] = double(w.savedActivationBytes()) / samples;
  // Serving: the K and V one token keeps, at 16-bit elements (0 without an
  // attention op).
  j["kv_cache_bytes_per_token_16bit"] = kvCacheBytesPerToken(w, 2);
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerRun &run : w.layers) {
    const LayerKind &k = w.kinds[run.kind];
    nlohmann::ordered_json layer = {{"kind", k.name}};
    if (!k.variantOf.empty())
      layer["variant_of"] = k.variantOf;
    layer.update(
        nlohmann::ordered_json{{"count", run.count},
                               {"ops_per_layer", k.numOps},
                               {"parameters_per_layer", k.parameters},
                               {"forward_flops_per_layer_per_sample",
                                double(k.forwardFlops) / samples},
                               {"activation_bytes_per_layer_per_sample",
                                double(k.savedActivationBytes) / samples}});
    layers.push_back(layer);
  }
  j["layers"] = layers;
  j["op_histogram"] = w.opHistogram;
  j["ops_without_cost_formula"] = w.opsWithoutCostFormula;
  return j;
}

void printStats(std::ostream &os, const Workload &w,
                const std::map<std::string, int64_t> &dims) {
  double samples = double(w.batchSize);
  std::string dimText;
  for (const auto &[k, v] : dims)
    dimText += (dimText.empty() ? "" : ", ") + k + "=" + std::to_string(v);
  os << "model        " << w.source << "\n";
  if (!dimText.empty())
    os << "dims         " << dimText << "\n";
  os << "batch        " << w.batchSize << " sample(s)";
  if (w.tokensPerSample)
    os << " x " << w.tokensPerSample << " tokens";
  os << "\n";
  os << "ops          " << grouped(w.totalOps()) << "\n";
  os << "parameters   " << grouped(w.parameters()) << " ("
     << withUnit(double(w.parameters()), "") << ")";
  if (w.buffers())
    os << ", buffers " << grouped(w.buffers());
  if (w.experts() > 1 && w.activeParameters() >= 0)
    os << ", " << grouped(w.activeParameters()) << " ("
       << withUnit(double(w.activeParameters()), "")
       << ") active a token (top-k of the experts)";
  os << "\n";
  for (const std::string &tie : w.tiedWeights)
    os << "tied         " << tie << " (one table, counted once)\n";
  double fwd = double(w.forwardFlops()),
         train = (double(w.forwardFlops()) + double(w.backwardFlops()));
  os << "forward      " << withUnit(fwd / samples, "FLOP") << " per sample";
  if (w.tokensPerSample)
    os << ", " << withUnit(fwd / samples / w.tokensPerSample, "FLOP")
       << " per token";
  os << "\n";
  os << "training     " << withUnit(train / samples, "FLOP") << " per sample";
  if (w.tokensPerSample)
    os << ", " << withUnit(train / samples / w.tokensPerSample, "FLOP")
       << " per token";
  os << " (forward + backward)\n";
  os << "activations  " << mib(double(w.savedActivationBytes()) / samples)
     << " per sample kept for backward\n";
  if (double kv = kvCacheBytesPerToken(w, 2); kv > 0) {
    char buf[64];
    if (kv >= 1024 * 1024)
      std::snprintf(buf, sizeof buf, "%.1f MiB", kv / (1024 * 1024));
    else
      std::snprintf(buf, sizeof buf, "%.1f KiB", kv / 1024);
    os << "kv cache     " << buf << " per token (16-bit, serving)\n";
  }
  os << "\n";

  os << "layers (model order)\n";
  os << "  " << std::left << std::setw(22) << "kind" << std::right
     << std::setw(7) << "count" << std::setw(8) << "ops" << std::setw(16)
     << "params/layer" << std::setw(16) << "fwd/layer" << std::setw(14)
     << "act/layer"
     << "\n";
  for (const LayerRun &run : w.layers) {
    const LayerKind &k = w.kinds[run.kind];
    os << "  " << std::left << std::setw(22) << k.name << std::right
       << std::setw(7) << run.count << std::setw(8) << k.numOps << std::setw(16)
       << grouped(k.parameters) << std::setw(16)
       << withUnit(double(k.forwardFlops) / samples, "FLOP") << std::setw(14)
       << mib(double(k.savedActivationBytes) / samples) << "\n";
  }
  for (const LayerKind &k : w.kinds)
    if (!k.variantOf.empty())
      os << "  (" << k.name << " is " << k.variantOf
         << " in other float types, priced at its own)\n";
  os << "\nop histogram\n ";
  std::vector<std::pair<int64_t, std::string>> ops;
  for (const auto &[name, count] : w.opHistogram)
    ops.push_back({-count, name});
  std::sort(ops.begin(), ops.end());
  int col = 0;
  for (const auto &[negCount, name] : ops) {
    std::ostringstream item;
    item << " " << name << " " << -negCount;
    std::string s = item.str();
    if (col + s.size() > 78) {
      os << "\n ";
      col = 0;
    }
    os << s;
    col += s.size();
  }
  os << "\n";
  if (!w.opsWithoutCostFormula.empty()) {
    os << "\nops without a cost formula (FLOPs counted as 0):";
    for (const auto &[name, count] : w.opsWithoutCostFormula)
      os << " " << name << " x" << count;
    os << "\n";
  }
}

} // namespace orrery
