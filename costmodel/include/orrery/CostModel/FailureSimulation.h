//===- FailureSimulation.h - a whole run's failures, drawn one by one -*- C++
//-*-===//
//
// A Monte-Carlo of a training run of `days` on the plan's devices: failures
// of each kind (Reliability.h) arrive as Poisson processes in wall time,
// planned stops beside them; the job computes, checkpoints at its interval
// (stalled for the copy; an async checkpoint durable only once written),
// and on a failure loses the work since its last durable checkpoint, waits
// for detection, for a healthy node where a hardware failure took one and
// the spare pool is empty, and restarts — a failure during the restart
// restarts it again. Trials are independent draws of the same run; the
// same seed gives the same trials, whatever the machine (our own
// generator: xoshiro256**, seeded by SplitMix64).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_FAILURESIMULATION_H
#define ORRERY_COSTMODEL_FAILURESIMULATION_H

#include "orrery/CostModel/Reliability.h"

#include <vector>

namespace orrery {

struct RunSimulationOptions {
  double days = 0;
  uint64_t seed = 1;
  int trials = 100;
};

/// One trial: where the run's wall time went (seconds; they sum to the
/// run's), and what happened.
struct RunTrial {
  double trainedS = 0;    ///< compute kept
  double lostWorkS = 0;   ///< compute done again after failures
  double checkpointS = 0; ///< training stopped for checkpoints
  double downtimeS = 0;   ///< detection, restarts and checkpoint loads
  double waitingS = 0;    ///< no healthy node in the spare pool
  double plannedS = 0;    ///< planned stops
  int failures = 0, planned = 0;
  int failuresByKind[kFailureKinds] = {};
  double ettr() const;
};

struct RunDistribution {
  std::vector<RunTrial> trials; ///< in trial order
  /// Nearest-rank quantiles over the trials.
  double ettrP10 = 0, ettrP50 = 0, ettrP90 = 0;
  int failuresP10 = 0, failuresP50 = 0, failuresP90 = 0;
  RunTrial mean; ///< the trials' mean (counts rounded)
};

/// Errors: a run of no days or over 10 years, fewer than 1 or more than
/// 10,000 trials, or more events than a trial may hold.
llvm::Expected<RunDistribution>
simulateRun(const ReliabilitySpec &spec, const GoodputEstimate &g,
            const CheckpointPolicy &policy,
            const RunSimulationOptions &options);

} // namespace orrery

#endif // ORRERY_COSTMODEL_FAILURESIMULATION_H
