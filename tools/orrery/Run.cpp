//===- Run.cpp - `orrery run`: execute a plan and measure it -------------===//
//
//   orrery run plan.json [--local N] [--steps K] [--warmup W] [--json]
//              [--trace FILE] [--timeout S]
//
// Under torchrun, mpirun or srun each process runs its rank; `--local N`
// starts N such processes on this machine (torchrun's variables, a free
// port on 127.0.0.1). Rank 0 prints the measured step beside the plan's
// prediction.
//
//===----------------------------------------------------------------------===//
#include "Run.h"
#include "Common.h"
#include "orrery/Runtime/Runtime.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

namespace orrery {
namespace cli {

void RunCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "run", "Execute a plan's per-rank programs on this machine's backend "
             "and measure the step against the plan's prediction "
             "(docs/runtime.md)");
  addPlanSource(cmd, plan, model, cluster);
  cmd->add_option("--local", local,
                  "start this many ranks on this machine (else the launcher "
                  "started this process: torchrun, mpirun or srun)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--steps", steps, "steps to measure")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", warmup, "steps run before measuring")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--timeout", timeoutS,
                  "seconds a rank waits for a peer before it stops with an "
                  "error (a lost rank stops the others at once)")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--backend", backend,
                  "cpu (OpenBLAS, Gloo), cuda (cuBLASLt, NCCL), or auto: "
                  "cuda for a plan on GPUs, cpu for one on CPU ranks")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_flag("--json", json, "print the measurement as JSON");
  cmd->add_option("--trace", trace,
                  "write the last measured step as a Chrome trace");
}

int RunCommand::spawnLocal(int argc, char **argv) const {
  // The plan's rank count first: a wrong --local is an error before any
  // process starts.
  LoadedPlan loaded;
  if (int rc = loadPlan(plan, model, cluster, loaded))
    return rc;
  auto set = lowerPlan(loaded, RankSelection{{0}, false});
  if (!set)
    return fail(plan + ": " + llvm::toString(set.takeError()));
  if (set->worldSize != local)
    return fail("--local " + std::to_string(local) + ": the plan has " +
                std::to_string(set->worldSize) + " ranks");
  return spawnRanks(argc, argv, local, timeoutS);
}

int RunCommand::run(int argc, char **argv) const {
  if (local > 0)
    return spawnLocal(argc, argv);
  auto env = launchFromEnvironment();
  if (!env)
    return fail("run: " + llvm::toString(env.takeError()));
  LoadedPlan loaded;
  if (int rc = loadPlan(plan, model, cluster, loaded))
    return rc;
  // This rank's program and its peers' only (checkRank at start-up): the
  // cost does not grow with the world size.
  auto set = lowerPlan(loaded, RankSelection{{env->rank}, true});
  if (!set)
    return fail(plan + ": " + llvm::toString(set.takeError()));
  RunArgs ra{steps, warmup, timeoutS, json, trace, backend, plan};
  return runPrograms(*set, *env, ra);
}

} // namespace cli
} // namespace orrery

namespace orrery {
namespace cli {

void ProfileCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "profile", "Measure this machine for the cost model (GEMMs, memory-"
                 "bound kernels, attention, and the collectives between "
                 "ranks) and write it as a cluster spec (docs/runtime.md)");
  cmd->add_option("-o,--output", output,
                  "write the cluster spec here (default: stdout)");
  cmd->add_option("--local", local,
                  "profile this many ranks on this machine (the links "
                  "between them too)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--plan", plan,
                  "also measure the GEMM shapes of rank 0 of this plan");
  cmd->add_option("--backend", backend,
                  "cpu (this machine's cores) or cuda (its GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--seconds-per-point", secondsPerPoint,
                  "about how long each measured point runs")
      ->check(CLI::Range(0.001, 60.0));
}

int ProfileCommand::run(int argc, char **argv) const {
  if (local > 1)
    return spawnRanks(argc, argv, local, 60);
  LaunchEnv env;
  if (local != 1 && std::getenv("RANK") == nullptr &&
      std::getenv("OMPI_COMM_WORLD_RANK") == nullptr &&
      std::getenv("SLURM_PROCID") == nullptr) {
    env = LaunchEnv(); // one rank, this process
  } else if (local != 1) {
    auto e = launchFromEnvironment();
    if (!e)
      return fail("profile: " + llvm::toString(e.takeError()));
    env = *e;
  }
  ProfileOptions options;
  options.secondsPerPoint = secondsPerPoint;
  if (!plan.empty()) {
    LoadedPlan loaded;
    if (int rc = loadPlan(plan, "", "", loaded))
      return rc;
    auto set = lowerPlan(loaded, RankSelection{{0}, false});
    if (!set)
      return fail(plan + ": " + llvm::toString(set.takeError()));
    for (const Instruction &in : set->ranks[0].code)
      if (in.kind == InstrKind::Gemm &&
          std::none_of(options.gemmShapes.begin(), options.gemmShapes.end(),
                       [&](const ProfileOptions::GemmShape &g) {
                         return g.m == in.m && g.n == in.n && g.k == in.k;
                       }))
        options.gemmShapes.push_back({in.m, in.n, in.k});
  }
  return runProfile(env, options, backend, output);
}

} // namespace cli
} // namespace orrery
