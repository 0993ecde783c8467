//===- RunPrograms.h - executing and reporting a program set ---*- C++ -*-===//
#ifndef ORRERY_TOOLS_RUNPROGRAMS_H
#define ORRERY_TOOLS_RUNPROGRAMS_H

#include "orrery/CostModel/Program.h"
#include "orrery/Runtime/Runtime.h"

#include <string>

namespace orrery {
namespace cli {

/// Prints "orrery: error: MESSAGE" (one line) and returns 1.
int failLine(const std::string &message);

/// `text` to `path` (stdout when empty); a failure is the one-line error.
int writeText(const std::string &text, const std::string &path);

struct RunArgs {
  int steps = 3, warmup = 1, timeoutS = 60;
  bool json = false;
  std::string trace, backend = "auto";
  /// The file the programs came from, for the report.
  std::string what;
};

/// Starts `local` copies of this command line (without --local) as ranks
/// 0 to local - 1 with torchrun's variables and a free port on 127.0.0.1;
/// waits for them (a failed rank stops the rest within the timeout).
int spawnRanks(int argc, char **argv, int local, int timeoutS);

/// Runs this rank's program of `set` on the backend (auto: cuda for GPU
/// ranks, cpu for CPU ones); rank 0 prints the report (or JSON) and writes
/// the trace.
int runPrograms(const ProgramSet &set, const LaunchEnv &env,
                const RunArgs &args);

/// Profiles this machine on `backend` and writes the cluster spec to
/// `output` (stdout when empty) on rank 0.
int runProfile(const LaunchEnv &env, const ProfileOptions &options,
               const std::string &backend, const std::string &output);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_RUNPROGRAMS_H
