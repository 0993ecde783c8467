//===- Uncertainty.cpp - the band a prediction carries -------------------===//
#include "orrery/CostModel/Uncertainty.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/Hetero.h"
#include "orrery/CostModel/Simulator.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace orrery {

extern const char *const kBuiltinValidationErrorsJson;

namespace {

/// One published run bench/validate.py priced: its regime and what it
/// measured over what the simulator predicted (0: not stated).
struct ErrorRow {
  std::string source; ///< the publication: its group up to the first '_'
  std::string deviceFamily, kernels;
  std::vector<std::string> mechanisms;
  double stepRatio = 0, memoryRatio = 0;
};

using Basis = std::vector<ErrorRow>;

/// At least this many runs make a regime's own basis; fewer fall back to
/// the device family's, then to every run.
constexpr size_t kMinRows = 5;

/// What nearly every published run uses: part of the regime's own basis,
/// checked for having been validated at all, but not adding every run
/// that used them (which would be every run).
bool baseline(const std::string &mechanism) {
  return mechanism == "pipeline" || mechanism == "tensor-parallel" ||
         mechanism == "full-recompute" || mechanism == "selective-recompute";
}

llvm::Expected<Basis> parseBasis(const std::string &text,
                                 const std::string &what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return inputError(what + ": not a JSON object");
  if (j.value("schema", "") != "orrery-validation-errors")
    return inputError(what + ": schema: must be \"orrery-validation-errors\"");
  if (!j.contains("rows") || !j["rows"].is_array())
    return inputError(what + ": rows: must be an array");
  Basis out;
  for (size_t i = 0; i < j["rows"].size(); ++i) {
    const nlohmann::json &r = j["rows"][i];
    std::string at = what + ": rows[" + std::to_string(i) + "]";
    if (!r.is_object() || !r.contains("device_family") ||
        !r["device_family"].is_string() || !r.contains("kernels") ||
        !r["kernels"].is_string() || !r.contains("mechanisms") ||
        !r["mechanisms"].is_array())
      return inputError(at + ": needs device_family, kernels (strings) and "
                             "mechanisms (an array of strings)");
    std::string group = r.value("group", "");
    ErrorRow row{group.substr(0, group.find('_')), r["device_family"],
                 r["kernels"], {}, 0, 0};
    for (const nlohmann::json &m : r["mechanisms"]) {
      if (!m.is_string())
        return inputError(at + ".mechanisms: must hold strings");
      row.mechanisms.push_back(m);
    }
    for (auto [key, out] :
         {std::pair<const char *, double *>{"measured_over_predicted_step",
                                            &row.stepRatio},
          {"measured_over_predicted_peak_memory", &row.memoryRatio}}) {
      if (!r.contains(key))
        continue;
      if (!r[key].is_number() || !(r[key].get<double>() > 0) ||
          r[key].get<double>() > 1e3)
        return inputError(at + "." + key + ": must be a number in (0, 1000]");
      *out = r[key];
    }
    out.push_back(std::move(row));
  }
  return out;
}

/// A file given by setUncertaintyBasis (set before any search starts).
std::shared_ptr<const Basis> &basisOverride() {
  static std::shared_ptr<const Basis> basis;
  return basis;
}

const Basis &basis() {
  if (const std::shared_ptr<const Basis> &b = basisOverride())
    return *b;
  static const Basis builtin = [] {
    auto parsed = parseBasis(kBuiltinValidationErrorsJson,
                             "built-in validation errors");
    if (!parsed) { // a unit test parses it; never a crash
      llvm::consumeError(parsed.takeError());
      return Basis{};
    }
    return std::move(*parsed);
  }();
  return builtin;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double at = q * double(v.size() - 1);
  size_t lo = size_t(at);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - double(lo)) * (v[hi] - v[lo]);
}

/// The runs a band rests on, and how far it must widen.
struct Selection {
  std::vector<double> ratios;
  /// The regime's own runs were too few: the band borrows from runs of
  /// other stacks or devices.
  bool borrowed = false;
};

/// The runs the band of `regime` rests on: its regime's — the device family
/// and kernels, among runs whose less common mechanisms the prediction uses
/// too (a ZeRO-3 run's error says nothing of a plan without it) — or, while
/// fewer than kMinRows, its device family's, then any device's, then every
/// run; and every run that used one of the prediction's less common
/// mechanisms. The mechanisms no run used go to `unvalidated`.
Selection select(const Regime &regime, bool memory,
                 std::vector<std::string> *unvalidated) {
  const Basis &rows = basis();
  auto ratio = [&](const ErrorRow &r) {
    return memory ? r.memoryRatio : r.stepRatio;
  };
  std::vector<char> chosen(rows.size(), 0);
  auto pick = [&](auto &&keep) {
    size_t n = 0;
    for (size_t i = 0; i < rows.size(); ++i)
      if (ratio(rows[i]) > 0 && keep(rows[i]))
        chosen[i] = 1, ++n;
    return n;
  };
  auto within = [&](const ErrorRow &r) {
    return llvm::all_of(r.mechanisms, [&](const std::string &m) {
      return baseline(m) || llvm::is_contained(regime.mechanisms, m);
    });
  };
  auto family = [&](const ErrorRow &r) {
    return within(r) && r.deviceFamily == regime.deviceFamily;
  };
  auto stack = [&](const ErrorRow &r) {
    return family(r) && r.kernels == regime.kernels;
  };
  Selection out;
  if (pick(stack) < kMinRows) {
    out.borrowed = true;
    std::fill(chosen.begin(), chosen.end(), 0);
    if (pick(family) < kMinRows) {
      std::fill(chosen.begin(), chosen.end(), 0);
      if (pick(within) < kMinRows) {
        std::fill(chosen.begin(), chosen.end(), 0);
        pick([](const ErrorRow &) { return true; });
      }
    }
  }
  for (const std::string &m : regime.mechanisms) {
    auto uses = [&](const ErrorRow &r) {
      return ratio(r) > 0 && llvm::is_contained(r.mechanisms, m);
    };
    if (!llvm::any_of(rows, uses)) {
      if (unvalidated)
        unvalidated->push_back(m);
      continue;
    }
    if (!baseline(m))
      pick(uses);
  }
  for (size_t i = 0; i < rows.size(); ++i)
    if (chosen[i])
      out.ratios.push_back(ratio(rows[i]));
  return out;
}

/// How far one publication's stack sits from the model, each way: the 80th
/// percentile over the publications in the basis of their median measured
/// over predicted above 1 (upwards) and below 1 (downwards), as factors.
/// A band that borrows runs, or leans on a mechanism no run checks, widens
/// by them: what a stack the basis does not hold may cost is what the
/// stacks it holds did.
std::pair<double, double> publicationSpread(bool memory) {
  std::map<std::string, std::vector<double>> bySource;
  for (const ErrorRow &r : basis()) {
    double v = memory ? r.memoryRatio : r.stepRatio;
    if (v > 0)
      bySource[r.source].push_back(v);
  }
  std::vector<double> up, down;
  for (auto &[source, v] : bySource) {
    double m = quantile(v, 0.5);
    up.push_back(std::max(1.0, m));
    down.push_back(std::max(1.0, 1 / m));
  }
  if (up.empty())
    return {1, 1};
  return {quantile(down, 0.8), quantile(up, 0.8)};
}

Band bandOf(const std::vector<double> &ratios, double value,
            std::pair<double, double> widen) {
  return {value * quantile(ratios, 0.1) / widen.first,
          value * quantile(ratios, 0.5),
          value * quantile(ratios, 0.9) * widen.second};
}

std::string familyOf(llvm::StringRef device) {
  for (auto [needle, family] :
       {std::pair<const char *, const char *>{"A100", "A100"},
        {"H100", "Hopper"},
        {"H200", "Hopper"},
        {"H800", "Hopper"},
        {"H20", "Hopper"},
        {"V100", "V100"},
        {"B200", "Blackwell"},
        {"B300", "Blackwell"},
        {"MI", "AMD Instinct"}})
    if (device.contains(needle))
      return family;
  return device.str();
}

std::vector<std::string> mechanismsOf(const Strategy &s) {
  std::vector<std::string> m;
  auto add = [&](bool used, const char *name) {
    if (used)
      m.push_back(name);
  };
  add(s.pp > 1, "pipeline");
  add(s.pp > 1 && (s.schedule == Schedule::ZeroBubbleH1 ||
                   s.schedule == Schedule::ZeroBubble2p ||
                   s.schedule == Schedule::ZeroBubbleV),
      "zero-bubble");
  add(s.schedule == Schedule::DualPipe || s.schedule == Schedule::DualPipeV,
      "dualpipe");
  add(s.schedule == Schedule::Interleaved && s.virtualStages > 1,
      "interleaved");
  add(s.schedule == Schedule::LayerParallelMgrit, "mgrit");
  add(s.tp > 1, "tensor-parallel");
  add(s.overlapTpComm, "tp-overlap");
  add(s.zeroStage == 2, "zero-2");
  add(s.zeroStage == 3, "fsdp");
  add(s.cp > 1, "context-parallel");
  add(s.ep > 1, "expert-parallel");
  add(isFp8(s.precision), "fp8");
  add(s.offloadOptimizer, "optimizer-offload");
  add(s.offloadActivations, "activation-offload");
  add(s.recompute == Recompute::Full, "full-recompute");
  add(s.recompute == Recompute::Selective, "selective-recompute");
  add(s.recompute == Recompute::Op, "op-recompute");
  add(s.subnetworkFraction > 0, "subnetwork-data-parallel");
  add(s.phantomGhosts > 0, "phantom");
  add(s.chunkParams > 0, "chunks");
  return m;
}

} // namespace

Regime regimeOf(const StepResult &r) {
  Regime g;
  for (const StageReport &st : r.stages) {
    std::string f = familyOf(st.device);
    g.deviceFamily = g.deviceFamily.empty() || g.deviceFamily == f ? f : "mixed";
  }
  g.kernels = kernelFusionName(r.assumptions.fusion);
  g.mechanisms = mechanismsOf(r.strategy);
  return g;
}

Regime regimeOf(const HeteroResult &r) {
  Regime g;
  for (const StepResult &group : r.groups) {
    Regime one = regimeOf(group);
    g.deviceFamily = g.deviceFamily.empty() || g.deviceFamily == one.deviceFamily
                         ? one.deviceFamily
                         : "mixed";
    g.kernels = one.kernels;
    for (const std::string &m : one.mechanisms)
      if (!llvm::is_contained(g.mechanisms, m))
        g.mechanisms.push_back(m);
  }
  if (r.groups.size() > 1 || g.deviceFamily == "mixed")
    g.mechanisms.push_back("heterogeneous");
  return g;
}

Uncertainty uncertaintyOf(const Regime &regime, double stepS,
                          double peakMemoryBytes) {
  Uncertainty u;
  u.regime = regime;
  Selection step = select(regime, false, &u.unvalidated);
  u.stepRows = int(step.ratios.size());
  if (!step.ratios.empty()) {
    u.borrowed = step.borrowed;
    std::pair<double, double> widen{1, 1};
    if (step.borrowed || !u.unvalidated.empty())
      widen = publicationSpread(false);
    u.stepS = bandOf(step.ratios, stepS, widen);
  }
  // Peak memory: only where runs of the regime or its mechanisms state it.
  Selection memory = select(regime, true, nullptr);
  if (!memory.borrowed && memory.ratios.size() >= kMinRows) {
    u.memoryRows = int(memory.ratios.size());
    u.peakMemoryBytes = bandOf(memory.ratios, peakMemoryBytes, {1, 1});
  }
  return u;
}

Uncertainty uncertaintyOf(const StepResult &r) {
  return uncertaintyOf(regimeOf(r), r.stepS, r.peakMemoryBytes);
}

Uncertainty uncertaintyOf(const HeteroResult &r) {
  return uncertaintyOf(regimeOf(r), r.stepS, r.peakMemoryBytes);
}

llvm::Error setUncertaintyBasis(const std::string &path) {
  if (path.empty()) {
    basisOverride().reset();
    return llvm::Error::success();
  }
  std::ifstream in(path);
  if (!in)
    return inputError(path + ": cannot read the validation errors");
  std::stringstream text;
  text << in.rdbuf();
  return setUncertaintyBasisText(text.str(), path);
}

llvm::Error setUncertaintyBasisText(const std::string &text,
                                    const std::string &what) {
  auto parsed = parseBasis(text, what);
  if (!parsed)
    return parsed.takeError();
  basisOverride() = std::make_shared<const Basis>(std::move(*parsed));
  return llvm::Error::success();
}

} // namespace orrery
