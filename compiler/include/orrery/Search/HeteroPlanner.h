//===- HeteroPlanner.h - plans for mixed device types and sites ----------===//
//
// The search over heterogeneous strategies (orrery/CostModel/Hetero.h):
//
//  * pipelines across pools: an ordered choice of pools, a tp, a replica
//    count; each pool gives the pipeline as many stages as its devices
//    allow, and the layers are split by a memory-aware linear partition
//    on each stage's own layer times (a faster device gets more layers,
//    a smaller one fewer);
//  * one replica group per pool: each pool runs its own pipeline and the
//    global batch is shared by earliest-finish assignment of micro-batches
//    (a faster pool takes more samples);
//  * every subset of pools for both, so devices that would slow the step
//    are left out.
//
// Candidates are ranked by a lower bound (micro-batches x the slowest
// stage) and simulated best-first; the search stops when no remaining
// bound can beat the K-th best.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_SEARCH_HETEROPLANNER_H
#define ORRERY_SEARCH_HETEROPLANNER_H

#include "orrery/CostModel/Hetero.h"
#include "orrery/Search/Planner.h"

namespace orrery {

struct HeteroPlanResult {
  std::vector<HeteroResult> top; ///< best first
  std::vector<Pool> pools;
  int64_t candidatesPriced = 0; ///< simulated
  int64_t candidatesPruned = 0; ///< dropped by memory or by the bound
  double searchS = 0;
};

/// Which plans the search may build (the baselines restrict it).
struct HeteroSearchScope {
  /// Pools the search may use (empty: all).
  std::vector<bool> pools;
  /// Uniform splits only: equal layers per stage and equal micro-batches
  /// per replica, one configuration for every pool: what a planner that
  /// assumes identical devices would do.
  bool uniform = false;
};

llvm::Expected<HeteroPlanResult>
searchHeteroPlans(const Workload &w, const Cluster &c, const PlanOptions &o,
                  const HeteroSearchScope &scope = {});

/// True when a cluster needs the heterogeneous search: more than one
/// device type, or more than one site.
bool needsHeteroSearch(const Cluster &c);

} // namespace orrery

#endif // ORRERY_SEARCH_HETEROPLANNER_H
