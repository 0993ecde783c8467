//===- Requests.h - what the subcommands are asked -------------*- C++ -*-===//
//
// The arguments of `plan` and `simulate` as plain structs of standard types:
// the CLI fills them from its flags, the Python bindings from keywords, and
// one function checks and applies each (PlanCommand.h, Common.h).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TOOLS_REQUESTS_H
#define ORRERY_TOOLS_REQUESTS_H

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace orrery {
namespace cli {

/// How the framework keeps and sends gradients and which kernels it runs:
/// the flags of `simulate` and `plan` and the Python keywords of the same
/// names. Only what is set overrides (a plan's own assumptions, for
/// `simulate --plan`).
struct FrameworkOptions {
  /// The rows of the assumptions table given (AssumptionFields.h), by
  /// flag: a choice's index or a number, checked when applied.
  std::vector<std::pair<std::string, double>> fields;
  std::optional<std::vector<std::string>> freeze;
  std::optional<std::string> lora;
  std::optional<std::string> layerProfile; ///< a file (LayerProfile.h)
  void set(const std::string &flag, double value) {
    fields.emplace_back(flag, value);
  }
};

/// A cluster argument: a preset, a JSON file, or JSON text in memory (then
/// `spec` only names it, in messages and in plans).
struct ClusterSource {
  std::string spec;
  std::shared_ptr<const std::string> json;
};

/// A run's goodput (`--tokens`, `--checkpoint`, `--checkpoint-every`,
/// `--days`, `--seed`, `--trials`; Reliability.h, FailureSimulation.h):
/// priced when a token budget or a run's days are given.
struct GoodputRequest {
  double tokens = 0; ///< time to train this many tokens
  std::string checkpoint = "sync"; ///< sync or async
  int64_t checkpointEvery = 0;     ///< steps; 0: Daly's optimum
  double days = 0;                 ///< Monte-Carlo of a run this long
  uint64_t seed = 1;
  int trials = 100;
  bool wanted() const { return tokens > 0 || days > 0; }
};

/// What `orrery plan` takes besides the model and the cluster.
struct PlanRequest {
  int64_t globalBatch = 1024;
  /// time, cost, energy or time-to-train (with goodput.tokens)
  std::string objective = "time";
  GoodputRequest goodput;
  double budgetUsdPerHour = 0;
  int topK = 5;
  /// --rank-by: step (the simulated step), p50 or p90 of its band.
  std::string rankBy = "step";
  /// --precision; empty: not given (bf16, or what --strategy names).
  std::string precision;
  /// --framework: a framework, "any" (what some export target runs) or
  /// "none" (empty: the same).
  std::string framework = "any";
  std::string fixedStrategy; ///< --strategy: price this one, no search
  /// --moe-imbalance, --moe-capacity: every candidate priced with them
  /// (Strategy::moeImbalance, moeCapacity).
  double moeImbalance = 1, moeCapacity = 0;
  FrameworkOptions flags;
  /// Progress on stderr (the CLI shows it only on a terminal).
  bool showProgress = false;
};

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_REQUESTS_H
