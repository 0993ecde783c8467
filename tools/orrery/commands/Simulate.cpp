//===- Simulate.cpp - `orrery simulate`
//------------------------------------===//
#include "Commands.h"
#include "GoodputFlags.h"
#include "PlanCommand.h"

#include <iostream>

namespace orrery {
namespace cli {

void SimulateCommand::add(CLI::App &app) {
  cmd = app.add_subcommand("simulate", "Simulate one training step of a "
                                       "strategy on a cluster, without "
                                       "hardware");
  cmd->add_option("model", args.path,
                  "ONNX model file, or a built-in model name "
                  "(models/generate.py --list)")
      ->required();
  cmd->add_option(
         "--dim", args.dims,
         "bind a symbolic dimension, NAME=VALUE (batch defaults to 1: the "
         "micro-batch comes from the strategy)")
      ->type_name("NAME=VALUE");
  cmd->add_option("--cluster", cluster,
                  "cluster spec: a JSON file (docs/cluster.md) or a preset "
                  "such as 8xA100-80G or 4x8xH100-SXM")
      ->required();
  CLI::Option *strategyOpt = cmd->add_option(
      "--strategy", strategy,
      "e.g. tp=8,pp=8,dp=16,mbs=1,gbs=1536,vpp=2,recompute=full "
      "(docs/strategy.md)");
  cmd->add_option("--plan", plan,
                  "simulate the strategy of a plan JSON file instead (the "
                  "only way to give a heterogeneous strategy)")
      ->excludes(strategyOpt);
  cmd->add_flag("--json", json, "print JSON instead of a table");
  cmd->add_flag("--no-kernel-profile", noKernelProfile,
                "price kernels with the stated assumptions even where the "
                "catalog has a measured kernel profile of the device");
  framework.add(cmd);
  cmd->add_option("--trace", trace,
                  "write a Chrome-trace / Perfetto timeline to FILE");
  addGoodputFlags(cmd, goodput);
}

int SimulateCommand::run() {
  if (strategy.empty() && plan.empty())
    return fail("simulate: give --strategy or --plan");
  nlohmann::json planDoc;
  Assumptions assumptions;
  if (!plan.empty()) {
    if (int readRc = readPlanFile(plan, planDoc))
      return readRc;
    auto fromPlan = assumptionsFromPlan(planDoc, plan);
    if (!fromPlan)
      return fail(llvm::toString(fromPlan.takeError()));
    assumptions = *fromPlan;
  }
  assumptions.useMeasuredKernels = !noKernelProfile;
  if (auto e = framework.apply(assumptions))
    return fail(llvm::toString(std::move(e)));
  defaultBatchToOne(args);
  args.kernels = assumptions.fusion;
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  auto module = frontEnd(ctx, args, true, nullptr, rc);
  if (!module)
    return rc;
  return simulateModule(*module, args, {cluster, nullptr}, strategy,
                        plan.empty() ? nullptr : &planDoc, plan, assumptions,
                        trace, json, std::cout, goodput);
}

} // namespace cli
} // namespace orrery
