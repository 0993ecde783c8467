//===- Commands.h - the `orrery` subcommands ---------------------*- C++
//-*-===//
//
// One struct per subcommand: its options (`add` registers them on the app)
// and its action (`run`, after the command line parsed). orrery.cpp only
// registers them in order and dispatches to the one given; `lower`, `run`
// and `profile` follow the same shape in Lower.h and Run.h.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TOOLS_COMMANDS_COMMANDS_H
#define ORRERY_TOOLS_COMMANDS_COMMANDS_H

#include "Common.h"
#include "FrameworkFlags.h"
#include "Requests.h"
#include "Serve.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace orrery {
namespace cli {

/// `orrery import MODEL [--outline] [--kernels K]`: the model in the orrery
/// dialect.
struct ImportCommand {
  ModelArgs args;
  bool outline = false;
  std::string kernels = "fused";
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run();
};

/// `orrery stats MODEL [--json]`: parameters, FLOPs, activations, layers.
struct StatsCommand {
  ModelArgs args;
  bool json = false;
  std::string kernels = "fused";
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run();
};

/// `orrery simulate MODEL --cluster SPEC --strategy S | --plan FILE`.
struct SimulateCommand {
  ModelArgs args;
  std::string cluster, strategy, plan, trace;
  bool json = false, noKernelProfile = false;
  FrameworkFlags framework;
  GoodputRequest goodput;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run();
};

/// `orrery serve MODEL --cluster SPEC [--workload W] ...`.
struct ServeCommand {
  ModelArgs args;
  ServeRequest request;
  std::string output;
  bool json = false;
  CLI::App *cmd = nullptr;
  CLI::Option *workloadOpt = nullptr;
  void add(CLI::App &app);
  int run();
};

/// `orrery plan MODEL --cluster SPEC [--global-batch N] ...`.
struct PlanCommand {
  ModelArgs args;
  std::string cluster, objective = "time", output,
      precision; ///< empty: not given (bf16, or the strategy's)
  int64_t globalBatch = 1024;
  double budget = 0;
  int topK = 5;
  std::string rankBy = "step";
  bool explain = false, json = false, quiet = false, timings = false;
  std::string fixedStrategy, lengthBuckets, emitMlir;
  std::string framework = "any";
  double moeImbalance = 1, moeCapacity = 0;
  FrameworkFlags flags;
  GoodputRequest goodput;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run();
};

/// `orrery check PLAN` (a training or a serving plan) and `orrery report
/// PLAN -o FILE` (which checks the plan first).
struct CheckCommand {
  std::string plan, model, cluster;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run();
};
struct ReportCommand {
  std::string plan, output, model, cluster, measured;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run();
};

/// `orrery export PLAN --to TARGET [-o FILE]`.
struct ExportCommand {
  std::string plan, format, output, model, cluster;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run();
};

/// Writes the model at one step's micro-batch (batch = mbs x dp) with the
/// strategy's shardings in MLIR's shard dialect to `path` ("-": stdout): in
/// the orrery dialect, or with `upstream` in upstream dialects only
/// (upstreamForm), refusing a model that has no such form.
int emitSharded(ModelArgs args, const Strategy &st,
                const std::vector<int> &chunkLayers,
                const LayoutCosts &layoutCosts, const std::string &path,
                const std::string &what, bool upstream = false);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_COMMANDS_COMMANDS_H
