//===- Lower.cpp - `orrery lower`: a plan's per-rank programs ------------===//

#include "Lower.h"
#include "Common.h"
#include "RunPrograms.h"

#include <cstdio>
#include <fstream>
#include <iostream>

namespace orrery {
namespace cli {

void LowerCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "lower", "Lower a plan into one program per rank, check the set "
               "(matched sends and receives, collectives in order, no "
               "deadlock, memory) and print one rank's program");
  addPlanSource(cmd, plan, model, cluster);
  cmd->add_option("--rank", rank, "the rank whose program to print")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", json,
                "write every rank's program as JSON (schema orrery-programs, "
                "what orrery-run executes)");
  cmd->add_option("-o,--output", output, "write to FILE instead of stdout");
  cmd->add_flag("--local-check", localCheck,
                "lower only --rank and the peers it must match, and check "
                "those (what each rank of orrery run does at start-up: its "
                "cost does not grow with the world size); without it every "
                "rank is lowered and the whole set checked, deadlock "
                "included (time and memory grow with the ranks)");
  cmd->add_flag("--summary", summary,
                "print per rank its instruction counts by kind and its "
                "predicted compute and communication instead");
}

int LowerCommand::run() const {
  LoadedPlan loaded;
  if (int rc = loadPlan(plan, model, cluster, loaded))
    return rc;
  RankSelection only;
  if (localCheck)
    only.ranks = {rank};
  auto set = lowerPlan(loaded, only);
  if (!set)
    return fail(plan + ": " + llvm::toString(set.takeError()));
  if (auto e = localCheck ? checkRank(*set, rank) : checkPrograms(*set))
    return fail(plan + ": program check: " + llvm::toString(std::move(e)));
  if (json)
    return writeText(programSetJson(*set).dump() + "\n", output);
  if (rank >= set->worldSize)
    return fail("--rank " + std::to_string(rank) + ": the plan has " +
                std::to_string(set->worldSize) + " ranks (0 to " +
                std::to_string(set->worldSize - 1) + ")");
  if (!summary) {
    std::cout << programText(*set, rank);
    return 0;
  }
  size_t total = 0, lowered = 0;
  for (const Program &p : set->ranks)
    total += p.code.size(), lowered += p.lowered;
  if (localCheck)
    std::printf("%s: %d ranks; rank %d lowered with the %zu peers it "
                "matches (%zu instructions, %zu groups); checked: its sends "
                "received, its collectives in its groups' order, its "
                "memory within the prediction\n",
                plan.c_str(), set->worldSize, rank, lowered - 1, total,
                set->groups.size());
  else
    std::printf("%s: %d ranks, %zu instructions, %zu groups; checked: every "
                "send received, collectives in order, no deadlock, memory "
                "within the prediction\n",
                plan.c_str(), set->worldSize, total, set->groups.size());
  for (const Program &p : set->ranks) {
    if (!p.lowered)
      continue;
    int counts[kInstrKinds] = {0};
    double busy[kStreamKinds] = {0};
    for (const Instruction &in : p.code) {
      ++counts[int(in.kind)];
      busy[int(in.stream)] += in.predictedS;
    }
    std::printf("rank %d (%s, stage %d): %zu instructions: %d gemm, %d "
                "attention, %d kernel, %d collective, %d send, %d recv, %d "
                "copy; compute %.2f ms, comm %.2f ms, dp %.2f ms, pp %.2f ms, "
                "host copy %.2f ms\n",
                p.rank, p.device.c_str(), p.stage, p.code.size(), counts[0],
                counts[1], counts[2], counts[3], counts[4], counts[5],
                counts[int(InstrKind::Copy)], busy[0] * 1e3, busy[1] * 1e3,
                busy[2] * 1e3, (busy[3] + busy[4]) * 1e3,
                busy[int(StreamKind::HostCopy)] * 1e3);
  }
  return 0;
}

} // namespace cli
} // namespace orrery
