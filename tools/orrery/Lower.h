//===- Lower.h - `orrery lower` ---------------------------------*- C++ -*-===//
#ifndef ORRERY_TOOLS_LOWER_H
#define ORRERY_TOOLS_LOWER_H

#include <CLI/CLI.hpp>
#include <string>

namespace orrery {
namespace cli {

/// `orrery lower plan.json [--rank R] [--summary] [--local-check]`: the
/// plan's program of one rank as text, after the static check of the whole
/// set, or (--local-check) of that rank against its peers only, as each
/// rank of `orrery run` checks itself.
struct LowerCommand {
  std::string plan, model, cluster, output;
  int rank = 0;
  bool summary = false, json = false, localCheck = false;
  CLI::App *cmd = nullptr;
  void add(CLI::App &app);
  int run() const;
};

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_LOWER_H
