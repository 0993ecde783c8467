//===- Check.cpp - `orrery check` and `orrery report`
//----------------------===//
#include "Check.h"
#include "Commands.h"

#include <iostream>

namespace orrery {
namespace cli {

void CheckCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "check",
      "Validate a plan against its model and cluster and simulate it again");
  cmd->add_option("plan", plan, "plan JSON file")->required();
  cmd->add_option("--model", model,
                  "the model (default: the plan's model.source)");
  cmd->add_option("--cluster", cluster,
                  "the cluster (default: the plan's cluster.spec)");
}

void ReportCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "report", "Write a plan as one self-contained HTML page: the step's "
                "timeline, memory per device, the stages on the cluster, "
                "the runners-up");
  cmd->add_option("plan", plan, "plan JSON file")->required();
  cmd->add_option("-o,--output", output, "the HTML file to write")->required();
  cmd->add_option("--model", model,
                  "the model (default: the plan's model.source)");
  cmd->add_option("--cluster", cluster,
                  "the cluster (default: the plan's cluster.spec)");
  cmd->add_option("--measured", measured,
                  "a step measured by `orrery run --json`: its timeline "
                  "and memory beside the prediction");
}

/// A serving plan (orrery serve -o): served again and compared. -1: the
/// file is no serving plan.
static int checkServing(const CheckCommand &c) {
  std::string text;
  if (!readFileBytes(c.plan, text))
    return -1;
  auto parsed = nlohmann::json::parse(text, nullptr, false);
  if (!isServingPlan(parsed))
    return -1;
  std::string model;
  auto request = servingRequestOf(parsed, c.plan, model);
  if (!request)
    return fail(llvm::toString(request.takeError()));
  if (!c.cluster.empty())
    request->cluster.spec = c.cluster;
  ModelArgs args{c.model.empty() ? model : c.model, {}};
  defaultBatchToOne(args);
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  auto module = frontEnd(ctx, args, true, nullptr, rc);
  if (!module)
    return rc;
  return checkServingPlan(*module, args, parsed, c.plan, *request, std::cout);
}

/// A training plan checked, and (with `reportOut`) written as a report.
static int checkTraining(const std::string &path, const std::string &model,
                         const std::string &cluster,
                         const std::string &reportOut,
                         const std::string &measured) {
  LoadedPlan loaded;
  if (int loadRc = loadPlan(path, model, cluster, loaded))
    return loadRc;
  return checkPlanDoc(loaded.doc, path, loaded.workload, *loaded.cluster,
                      reportOut, measured);
}

int CheckCommand::run() {
  int rc = checkServing(*this);
  if (rc >= 0)
    return rc;
  return checkTraining(plan, model, cluster, "", "");
}

int ReportCommand::run() {
  // A report checks the plan first.
  return checkTraining(plan, model, cluster, output, measured);
}

} // namespace cli
} // namespace orrery
