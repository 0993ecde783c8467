//===- Planner.h - search the strategy space for the best plan -----------===//
//
// Enumerates tensor x context x pipeline x data parallel factorizations of
// the cluster (tensor and context groups inside a node), micro-batch sizes,
// interleaving, recompute modes, expert parallelism, and for each candidate
// the cheapest memory saver that fits it (ZeRO-1, optimizer offload, ZeRO-3,
// both; docs/costmodel.md); balances pipeline stages over the outlined
// layers with a linear-partition search; prices every candidate that can
// fit with the step simulator, on the host's cores, and keeps the best by
// the objective.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_SEARCH_PLANNER_H
#define ORRERY_SEARCH_PLANNER_H

#include "orrery/CostModel/Simulator.h"

#include <functional>
#include <optional>

namespace orrery {

enum class Objective { Time, Cost, Energy };

struct PlanOptions {
  int64_t globalBatch = 0; ///< samples per step; 0 = 1024
  Objective objective = Objective::Time;
  /// When > 0: use only as many nodes as this many USD per hour buys, and
  /// be fastest on them.
  double budgetUsdPerHour = 0;
  int topK = 5;
  Precision precision = Precision::BF16;
  /// How fp8 is scaled (precision fp8): Megatron-LM's default, delayed
  /// scaling, or the framework's own (torchtitan's torchao: tensorwise).
  Fp8Recipe fp8Recipe = Fp8Recipe::Delayed;
  /// Mixture of experts: the routing's stated imbalance and the experts'
  /// capacity factor every candidate is priced with (Strategy fields).
  double moeImbalance = 1, moeCapacity = 0;
  /// How the framework that will run the plan keeps its gradients (the
  /// rest of the assumptions stay the defaults).
  Assumptions assumptions;
  /// When set (`--framework`, one of frameworkFormats(), or "any": some
  /// of them): only strategies that framework runs, as its exporter writes
  /// them; a candidate it refuses is replaced by its nearest variant the
  /// framework runs (an overlap it lacks turned off, ZeRO-1 or -2 as
  /// ZeRO-0, sequence parallelism off, its uniform layer split), or
  /// dropped.
  std::string framework;
  /// Called now and then with the candidates priced so far and the best.
  std::function<void(int64_t priced, const StepResult *best)> progress;
};

/// CPU seconds of this process so far (every thread's): what a phase of
/// the search cost, on a machine shared with others.
double processCpuSeconds();

/// Where a search's time went (orrery plan --timings): each phase's CPU
/// seconds (every thread's) in order, and the steps simulated, of which
/// those whose schedule ran (the rest stopped at the bound).
struct SearchTimings {
  std::vector<std::pair<std::string, double>> phaseCpuS;
  int64_t simulated = 0, scheduled = 0;
};

struct PlanResult {
  std::vector<StepResult> top; ///< best first
  int64_t candidatesPriced = 0;
  int64_t candidatesPruned = 0; ///< by the memory floor or the step bound
  /// Candidates the framework runs in no variant (PlanOptions::framework).
  int64_t candidatesRefused = 0;
  std::string framework; ///< PlanOptions::framework, echoed
  /// With framework "any": the fastest plan found when no framework held
  /// the search, where it is faster than top[0] and no framework runs it
  /// (what the user gives up for a plan that runs).
  std::optional<StepResult> fastestUnrunnable;
  double searchS = 0;
  SearchTimings timings; ///< not part of the plan: machine-dependent
  /// The devices the plan uses (all of them unless a budget cut nodes).
  Cluster cluster;
};

/// The best strategies, or an error naming why none applies (the smallest
/// memory shortfall when nothing fits).
llvm::Expected<PlanResult> searchPlans(const Workload &w, const Cluster &c,
                                       const PlanOptions &o);

/// Splits `seconds` (one entry per layer, in order) into `parts` contiguous
/// runs minimizing the largest run's sum. Returns the run lengths.
std::vector<int> balanceLayers(const std::vector<double> &seconds, int parts);
/// The same for schedules whose devices each run chunk c and chunk
/// parts-1-c (ZB-V, DualPipeV; DualPipe's mirrored ranks): the split that
/// evens those pairs' sums, from balanceLayers' by moving layers across
/// boundaries while the largest pair (then the spread) shrinks.
std::vector<int> balanceFoldedLayers(const std::vector<double> &seconds,
                                     int parts);

/// The score an objective minimizes.
double objectiveScore(const StepResult &r, Objective o);

} // namespace orrery

#endif // ORRERY_SEARCH_PLANNER_H
