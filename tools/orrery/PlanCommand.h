//===- PlanCommand.h - `orrery plan` as a function ------------*- C++ -*-===//
//
// The steps of `orrery plan` (and `check`, which prepares the same
// workload), as functions that return values, so that the CLI and the
// Python bindings make the same plan and write the same bytes.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TOOLS_PLANCOMMAND_H
#define ORRERY_TOOLS_PLANCOMMAND_H

#include "Common.h"
#include "Goodput.h"
#include "Stragglers.h"
#include "orrery/Search/HeteroPlanner.h"
#include "orrery/Search/Planner.h"

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace orrery {
namespace cli {

/// Parses the cluster; errors as loadCluster words them.
llvm::Expected<Cluster> loadClusterSource(const ClusterSource &source);

/// The workload on its cluster, as plan and check build it.
struct PlanSetup {
  std::unique_ptr<Cluster> cluster;
  Workload workload;
  LayoutCosts layoutCosts;
  PlanInputs inputs;
  Precision layoutPrecision = Precision::BF16;
};

/// Loads the cluster and builds the workload of an imported model
/// (`args` as the model was imported) with the framework's kernels and
/// fine-tuning; `clusterWhat` prefixes a cluster error ("plan.json:
/// cluster.spec: " for check).
llvm::Expected<PlanSetup>
preparePlan(mlir::ModuleOp module, const ModelArgs &args,
            const ClusterSource &cluster, const std::string &precision,
            const Assumptions &framework, const std::string &clusterWhat = "");

/// The search's options from a request (and its one-line errors: an
/// unknown objective or precision, a bad framework flag); notes for stderr
/// (a framework that prices without SwitchML) go to `notes`.
llvm::Expected<PlanOptions> planOptions(PlanSetup &setup,
                                        const PlanRequest &request,
                                        std::vector<std::string> &notes);

/// A plan made: its JSON (the bytes `orrery plan --json` prints are
/// `doc.dump(2) + "\n"`) and the result it was written from.
struct PlanOutcome {
  nlohmann::ordered_json doc;
  std::optional<PlanResult> plan;         ///< one node type at one site
  std::optional<HeteroPlanResult> hetero; ///< mixed types or sites
  /// The best plan's goodput (`--tokens`, `--days`).
  std::optional<GoodputReport> goodput;
  /// The best plan's step with one slow device or NIC.
  std::optional<StragglerReport> stragglers;
};

/// What the text shows after a plan's table: its stragglers and goodput.
void printPlanExtras(std::ostream &os, const PlanOutcome &made);

/// Searches (or prices request.fixedStrategy) and writes the plan.
/// `emitMlir`: the caller will write shard annotations (refused for a
/// heterogeneous plan).
llvm::Expected<PlanOutcome> searchPlan(const PlanSetup &setup,
                                       const PlanOptions &options,
                                       const PlanRequest &request,
                                       bool emitMlir = false);

/// `orrery simulate` of an imported model: the strategy string, or the
/// strategy of `planDoc` (named `simPlan` in messages; heterogeneous plans
/// too), priced with `assumptions`; the table (or JSON) to `os`, the
/// Chrome trace to `traceFile` when one is named. Returns the exit code;
/// errors through fail().
int simulateModule(mlir::ModuleOp module, const ModelArgs &simArgs,
                   const ClusterSource &clusterSource,
                   const std::string &strategyText,
                   const nlohmann::json *planDoc, const std::string &simPlan,
                   const Assumptions &assumptions, const std::string &traceFile,
                   bool simJson, std::ostream &os,
                   const GoodputRequest &goodput = {});

/// `orrery stats` of an imported model (`hist`: its ONNX op counts).
int statsModule(mlir::ModuleOp module, const ModelArgs &args,
                const std::map<std::string, int64_t> &hist, bool json,
                std::ostream &os);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_PLANCOMMAND_H
