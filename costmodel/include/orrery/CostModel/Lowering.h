//===- Lowering.h - a plan's step as one program per rank ----------------===//
//
// Lowers a strategy (homogeneous, or heterogeneous replica groups) and its
// workload into the per-rank programs of Program.h. The chunks, the
// schedule, each op's kernels and collectives and their prices are the
// simulator's own (Simulation's chunkLayers, schedule and priceOp), so a
// program's spans are the simulated trace's spans and its instructions
// price to the simulated step (docs/runtime.md).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_LOWERING_H
#define ORRERY_COSTMODEL_LOWERING_H

#include "orrery/CostModel/Hetero.h"
#include "orrery/CostModel/Program.h"

namespace orrery {

/// Memory a rank may hold above its predicted peak before checkPrograms
/// refuses the set: rounding, not a budget.
constexpr double kProgramMemoryAllowanceBytes = 1 << 20;

/// Which ranks to lower. Empty: every rank (the offline whole-set check).
/// Else the listed ranks and, with `peers`, the ranks each must match
/// (peersToMatch), so checkRank can run on each listed rank: what a rank
/// of `orrery run` lowers at start-up, whatever the world size.
struct RankSelection {
  std::vector<int> ranks;
  bool peers = true;
};

/// One step of a strategy on a cluster of one device type at one site.
/// Fails with a one-line message for what the runtime cannot run yet
/// (offloaded activations or optimizer state).
llvm::Expected<ProgramSet> lowerStep(const Workload &w, const Cluster &c,
                                     Strategy s, const Assumptions &a = {},
                                     const RankSelection &only = {});

/// One step of a heterogeneous strategy: each replica group's pipeline,
/// each replica with its own number of micro-batches, the gradient
/// reduction inside each group and across groups. World ranks are the
/// devices used, in cluster order.
llvm::Expected<ProgramSet> lowerHetero(const Workload &w, const Cluster &c,
                                       HeteroStrategy s,
                                       const Assumptions &a = {},
                                       const RankSelection &only = {});

} // namespace orrery

#endif // ORRERY_COSTMODEL_LOWERING_H
