//===- Run.h - `orrery run` -------------------------------------*- C++ -*-===//
#ifndef ORRERY_TOOLS_RUN_H
#define ORRERY_TOOLS_RUN_H

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
  std::string output, plan;
  int local = 0;
  double secondsPerPoint = 0.02;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run(int argc, char **argv) const;
};

/// Starts `local` copies of this command line (without --local) as ranks
/// 0 to local - 1 with torchrun's variables and a free port on 127.0.0.1;
/// waits for them (a failed rank stops the rest within the timeout).
int spawnRanks(int argc, char **argv, int local, int timeoutS);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_RUN_H
