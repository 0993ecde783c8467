//===- GoodputFlags.h - the flags that price a run's goodput ----*- C++ -*-===//
#ifndef ORRERY_TOOLS_COMMANDS_GOODPUTFLAGS_H
#define ORRERY_TOOLS_COMMANDS_GOODPUTFLAGS_H

#include "../Requests.h"

#include <CLI/CLI.hpp>

namespace orrery {
namespace cli {

/// `--tokens`, `--checkpoint`, `--checkpoint-every`, `--days`, `--seed`,
/// `--trials` (docs/reliability.md), shared by `simulate` and `plan`.
inline void addGoodputFlags(CLI::App *cmd, GoodputRequest &q) {
  const char *group = "Goodput (docs/reliability.md)";
  cmd->add_option("--tokens", q.tokens,
                  "price the time and cost to train this many tokens, "
                  "failures and checkpoints counted")
      ->group(group);
  cmd->add_option("--checkpoint", q.checkpoint,
                  "sync (default: the stacks' own) or async (torch DCP's "
                  "async_save, Megatron's --async-save)")
      ->group(group);
  cmd->add_option("--checkpoint-every", q.checkpointEvery,
                  "steps between checkpoints (default: Daly's optimum)")
      ->group(group);
  cmd->add_option("--days", q.days,
                  "run a Monte-Carlo of a run this many days long and print "
                  "its distribution of failures and effective training time")
      ->group(group);
  cmd->add_option("--seed", q.seed, "the Monte-Carlo's seed (default 1)")
      ->group(group);
  cmd->add_option("--trials", q.trials,
                  "the Monte-Carlo's trials (default 100)")
      ->group(group);
}

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_COMMANDS_GOODPUTFLAGS_H
