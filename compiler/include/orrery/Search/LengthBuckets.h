//===- LengthBuckets.h - a plan per sequence-length bucket ---------------===//
//
// Variable-length data trained in length buckets (every step's samples of
// one bucket, a constant token budget per step): given the buckets' share
// of the tokens, a plan per bucket — its own parallelism, micro-batch and
// recompute — priced with what switching between them costs. Two plans
// that keep the model state where it is (the same tp, pp, layer split,
// experts, ZeRO stage and dp × cp group: they differ only in how the
// replicas split each sample, cp against dp, and in micro-batch, recompute
// or schedule) switch for free, as FlexSP (Wang et al., ASPLOS'25) switches
// sequence parallelism per batch; any other switch moves every device's
// weights and optimizer state (docs/plan.md, "Length buckets").
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_SEARCH_LENGTHBUCKETS_H
#define ORRERY_SEARCH_LENGTHBUCKETS_H

#include "orrery/Search/Planner.h"

#include <string>
#include <vector>

namespace orrery {

struct LengthBucket {
  int64_t length = 0;      ///< tokens per sample (the bound dim's value)
  double fraction = 0;     ///< of the tokens, so of the steps
  int64_t globalBatch = 0; ///< samples per step: the token budget / length
};

struct LengthBuckets {
  std::string dim; ///< the model's symbolic dim the lengths bind
  std::vector<LengthBucket> buckets;
};

/// Parses "seq=512:0.5,2048:0.3,8192:0.2" (lengths ascending or not,
/// fractions of the tokens adding up to 1). The token budget of a step is
/// `globalBatch` samples of the longest length; a bucket's step takes as
/// many whole samples of its length as the budget holds.
llvm::Expected<LengthBuckets> parseLengthBuckets(const std::string &spec,
                                                 int64_t globalBatch);

/// What a switch keeps: plans of equal layout hold the same state on the
/// same devices.
std::string stateLayout(const Strategy &s);

/// Seconds to switch from `from` to `to` between two steps: 0 for the same
/// layout, else the largest per-device weights and optimizer state of
/// `to` over each rank's bus bandwidth across the whole cluster (every
/// device receives its new shard at once).
double switchSeconds(const StepResult &from, const StepResult &to,
                     const Cluster &c);

struct LengthBucketPlan {
  LengthBuckets spec;
  /// The plan run for each bucket.
  std::vector<StepResult> plans;
  /// Per step on average: Σ fraction × step, and the expected switch
  /// (buckets drawn independently each step: Σ f_a f_b switch(a, b)).
  double expectedStepS = 0, expectedSwitchS = 0;
  /// "per-bucket" (each bucket's fastest, paying the switches) or
  /// "one-layout" (the best plans that keep one layout: no switch).
  std::string choice;
  double perBucketS = 0, perBucketSwitchS = 0;
  double oneLayoutS = 0;    ///< 0: no layout is among every bucket's plans
  double oneStrategyS = 0;  ///< one strategy for every bucket (0: none)
  Strategy oneStrategy;
  int64_t candidatesPriced = 0;
};

/// Plans each bucket (`workloads[i]` at `spec.buckets[i]`'s length) and
/// chooses; an error names the bucket no strategy fits.
llvm::Expected<LengthBucketPlan>
planLengthBuckets(const std::vector<Workload> &workloads,
                  const LengthBuckets &spec, const Cluster &c,
                  const PlanOptions &o);

} // namespace orrery

#endif // ORRERY_SEARCH_LENGTHBUCKETS_H
