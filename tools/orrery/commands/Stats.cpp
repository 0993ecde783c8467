//===- Stats.cpp - `orrery stats`
//------------------------------------------===//
#include "Commands.h"
#include "PlanCommand.h"

#include <iostream>

namespace orrery {
namespace cli {

void StatsCommand::add(CLI::App &app) {
  cmd = app.add_subcommand("stats", "Print parameters, FLOPs, activation "
                                    "memory and the layer list of a model");
  addModelArgs(cmd, args);
  cmd->add_flag("--json", json, "print JSON instead of a table");
  cmd->add_option("--kernels", kernels, kernelsHelp())
      ->check(CLI::IsMember({"fused", "unfused-attention", "eager", "sdpa"}));
}

int StatsCommand::run() {
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  std::map<std::string, int64_t> hist;
  parseKernelFusion(kernels, args.kernels);
  // Per sample, as simulate and plan see the model (a built-in's batch is
  // symbolic): --dim batch=N prices N.
  defaultBatchToOne(args);
  auto module = frontEnd(ctx, args, true, &hist, rc);
  if (!module)
    return rc;
  return statsModule(*module, args, hist, json, std::cout);
}

} // namespace cli
} // namespace orrery
