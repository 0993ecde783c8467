//===- main.cpp - orrery-run: programs and profiles without the compiler --===//
//
//   orrery-run run programs.json [--local N] [--steps K] [--warmup W]
//              [--timeout S] [--backend auto|cpu|cuda] [--json] [--trace F]
//   orrery-run profile [-o cluster.json] [--backend cpu|cuda] [--local N]
//
// `programs.json` is what `orrery lower plan.json --json -o programs.json`
// writes. Same launchers, same output as `orrery run` and `orrery profile`.
//
//===----------------------------------------------------------------------===//
#include "RunPrograms.h"
#include "orrery/CostModel/InputFile.h"
#include "orrery/CostModel/JsonInput.h"

#include <CLI/CLI.hpp>
#include <fstream>
#include <optional>
#include <sstream>

using namespace orrery;
using namespace orrery::cli;

int main(int argc, char **argv) {
  CLI::App app{"orrery-run: executes per-rank programs written by `orrery "
               "lower --json`, and profiles this machine",
               "orrery-run"};
  app.require_subcommand(1);
  std::string programs, output, profileBackend = "cpu";
  RunArgs ra;
  int local = 0;
  CLI::App *run = app.add_subcommand("run", "run the programs and measure");
  run->add_option("programs", programs, "programs JSON")->required();
  run->add_option("--local", local, "start this many ranks on this machine")
      ->check(CLI::Range(1, 256));
  run->add_option("--steps", ra.steps, "steps to measure")
      ->check(CLI::Range(1, 100000));
  run->add_option("--warmup", ra.warmup, "steps before measuring")
      ->check(CLI::Range(0, 100000));
  run->add_option("--timeout", ra.timeoutS, "seconds to wait for a peer")
      ->check(CLI::Range(1, 86400));
  run->add_option("--backend", ra.backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  run->add_flag("--json", ra.json, "print the measurement as JSON");
  run->add_option("--trace", ra.trace, "write a Chrome trace of the last step");
  int profileLocal = 0;
  CLI::App *profile = app.add_subcommand("profile", "measure this machine");
  profile->add_option("-o,--output", output, "the cluster spec to write");
  profile->add_option("--backend", profileBackend, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  profile->add_option("--local", profileLocal, "ranks on this machine")
      ->check(CLI::Range(1, 256));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    if (e.get_exit_code() == 0)
      return app.exit(e);
    return failLine(e.what());
  }
  std::optional<ProgramSet> set;
  if (*run) { // read and check the file before any rank starts
    std::string text;
    std::string problem =
        readInputFile(programs, kMaxJsonInputBytes, text);
    if (!problem.empty())
      return failLine(programs + ": " + problem);
    nlohmann::json doc = parseJsonInput(text, problem);
    if (doc.is_discarded())
      return failLine(programs + ": " + problem);
    auto parsed = programSetFromJson(doc);
    if (!parsed)
      return failLine(programs + ": " + llvm::toString(parsed.takeError()));
    set = std::move(*parsed);
  }
  int forLocal = *run ? local : profileLocal;
  if (forLocal > 1) {
    if (set && set->worldSize != forLocal)
      return failLine("--local " + std::to_string(forLocal) +
                      ": the programs have " + std::to_string(set->worldSize) +
                      " ranks");
    return spawnRanks(argc, argv, forLocal, ra.timeoutS);
  }
  LaunchEnv env;
  bool launched = std::getenv("RANK") || std::getenv("OMPI_COMM_WORLD_RANK") ||
                  std::getenv("SLURM_PROCID");
  if (launched) {
    auto e = launchFromEnvironment();
    if (!e)
      return failLine(llvm::toString(e.takeError()));
    env = *e;
  }
  if (*profile)
    return runProfile(env, ProfileOptions(), profileBackend, output);
  if (!launched && set->worldSize != 1)
    return failLine("run: the programs have " +
                    std::to_string(set->worldSize) +
                    " ranks: start them under torchrun, mpirun or srun, or "
                    "give --local " + std::to_string(set->worldSize));
  ra.what = programs;
  return runPrograms(*set, env, ra);
}
