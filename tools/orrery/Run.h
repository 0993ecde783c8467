//===- Run.h - `orrery run` -------------------------------------*- C++ -*-===//
#ifndef ORRERY_TOOLS_RUN_H
#define ORRERY_TOOLS_RUN_H

#include "RunPrograms.h"

#include <CLI/CLI.hpp>
#include <string>

namespace orrery {
namespace cli {

struct RunCommand {
  std::string plan, model, cluster, trace, backend = "auto";
  int local = 0, steps = 3, warmup = 1, timeoutS = 60;
  bool json = false;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  /// argv: the command line, for --local's ranks.
  int run(int argc, char **argv) const;

private:
  int spawnLocal(int argc, char **argv) const;
};

/// `orrery profile [-o cluster.json] [--local N] [--plan plan.json]`.
struct ProfileCommand {
  std::string output, plan, backend = "cpu";
  int local = 0;
  double secondsPerPoint = 0.02;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run(int argc, char **argv) const;
};

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_RUN_H
