//===- LengthBuckets.cpp - a plan per sequence-length bucket -------------===//
#include "orrery/Search/LengthBuckets.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Errors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

namespace orrery {

static llvm::Error err(const std::string &msg) { return inputError(msg); }

llvm::Expected<LengthBuckets> parseLengthBuckets(const std::string &spec,
                                                 int64_t globalBatch) {
  const std::string what = "--length-buckets '" + spec + "'";
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    return err(what + ": expected DIM=LENGTH:FRACTION,... (e.g. "
                      "seq=512:0.5,2048:0.3,8192:0.2)");
  LengthBuckets out;
  out.dim = spec.substr(0, eq);
  std::string rest = spec.substr(eq + 1);
  std::set<int64_t> seen;
  double total = 0;
  size_t pos = 0;
  while (pos <= rest.size()) {
    size_t comma = rest.find(',', pos);
    std::string item = rest.substr(pos, comma == std::string::npos
                                            ? std::string::npos
                                            : comma - pos);
    size_t colon = item.find(':');
    if (colon == std::string::npos)
      return err(what + ": bucket '" + item + "': expected LENGTH:FRACTION");
    std::string len = item.substr(0, colon), frac = item.substr(colon + 1);
    char *end = nullptr;
    errno = 0;
    long long l = std::strtoll(len.c_str(), &end, 10);
    if (len.empty() || *end || errno || l <= 0 || l > (1LL << 30))
      return err(what + ": bucket '" + item +
                 "': the length must be a positive integer");
    errno = 0;
    double f = std::strtod(frac.c_str(), &end);
    if (frac.empty() || *end || errno || !(f > 0) || f > 1)
      return err(what + ": bucket '" + item +
                 "': the fraction must be a number in (0, 1]");
    if (!seen.insert(l).second)
      return err(what + ": length " + std::to_string(l) + " given twice");
    out.buckets.push_back({l, f, 0});
    total += f;
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  if (std::fabs(total - 1) > 1e-6)
    return err(what + ": the fractions add up to " + std::to_string(total) +
               ", not 1");
  if (globalBatch <= 0)
    return err(what + ": needs --global-batch (samples per step at the "
                      "longest length: the token budget)");
  int64_t longest = 0;
  for (const LengthBucket &b : out.buckets)
    longest = std::max(longest, b.length);
  for (LengthBucket &b : out.buckets)
    b.globalBatch = globalBatch * longest / b.length;
  std::stable_sort(out.buckets.begin(), out.buckets.end(),
                   [](const LengthBucket &a, const LengthBucket &b) {
                     return a.length < b.length;
                   });
  return out;
}

std::string stateLayout(const Strategy &s) {
  std::string layers;
  for (int n : s.stageLayers)
    layers += std::to_string(n) + ":";
  return "tp" + std::to_string(s.tp) + " pp" + std::to_string(s.pp) + " vpp" +
         std::to_string(s.virtualStages) + " layers " + layers + " ep" +
         std::to_string(s.ep) + (s.expertsFolded() ? " folded" : "") +
         " zero" + std::to_string(s.zeroStage) + " replicas" +
         std::to_string(s.dp * s.cp) +
         (s.offloadOptimizer ? " offload" : "") + " " +
         precisionName(s.precision);
}

double switchSeconds(const StepResult &from, const StepResult &to,
                     const Cluster &c) {
  if (stateLayout(from.strategy) == stateLayout(to.strategy))
    return 0;
  double bytes = 0;
  for (const StageReport &st : to.stages)
    bytes = std::max(bytes, st.memory.weightsBytes + st.memory.optimizerBytes);
  GroupShape all = groupShapeIn(c.groupOf(0), 1, c.numDevices());
  return bytes / ringBusBandwidth(all);
}

llvm::Expected<LengthBucketPlan>
planLengthBuckets(const std::vector<Workload> &workloads,
                  const LengthBuckets &spec, const Cluster &c,
                  const PlanOptions &o) {
  const std::vector<LengthBucket> &B = spec.buckets;
  if (workloads.size() != B.size() || B.empty())
    return err("--length-buckets: one workload per bucket");
  std::vector<PlanResult> results;
  LengthBucketPlan out;
  out.spec = spec;
  for (size_t i = 0; i < B.size(); ++i) {
    PlanOptions oi = o;
    oi.globalBatch = B[i].globalBatch;
    oi.topK = 100; // the layouts each bucket can share
    oi.progress = nullptr;
    auto r = searchPlans(workloads[i], c, oi);
    // "any" holds a search to what some export target runs; where nothing
    // it runs fits, the bucket takes the fastest, as a plain plan does
    // (an internal error recurs and is reported).
    if (!r && oi.framework == "any") {
      llvm::consumeError(r.takeError());
      oi.framework.clear();
      r = searchPlans(workloads[i], c, oi);
    }
    if (!r)
      return err("length bucket " + spec.dim + "=" +
                 std::to_string(B[i].length) + ": " +
                 llvm::toString(r.takeError()));
    out.candidatesPriced += r->candidatesPriced;
    results.push_back(std::move(*r));
  }
  size_t longest = B.size() - 1; // sorted by length

  // Each bucket's fastest, and the switches between them.
  for (size_t i = 0; i < B.size(); ++i) {
    out.plans.push_back(results[i].top.front());
    out.perBucketS += B[i].fraction * results[i].top.front().stepS;
  }
  for (size_t i = 0; i < B.size(); ++i)
    for (size_t j = 0; j < B.size(); ++j)
      if (i != j)
        out.perBucketSwitchS += B[i].fraction * B[j].fraction *
                                switchSeconds(out.plans[i], out.plans[j], c);

  // The best plans that keep one layout (no switch): layouts of the
  // longest bucket's plans (the hardest to fit), each bucket's fastest of
  // that layout among its own.
  std::vector<const StepResult *> bestLayout;
  std::set<std::string> tried;
  for (const StepResult &cand : results[longest].top) {
    std::string key = stateLayout(cand.strategy);
    if (!tried.insert(key).second)
      continue;
    std::vector<const StepResult *> pick;
    double total = 0;
    for (size_t i = 0; i < B.size(); ++i) {
      auto it = std::find_if(results[i].top.begin(), results[i].top.end(),
                             [&](const StepResult &r) {
                               return stateLayout(r.strategy) == key;
                             });
      if (it == results[i].top.end())
        break;
      pick.push_back(&*it);
      total += B[i].fraction * it->stepS;
    }
    if (pick.size() == B.size() &&
        (out.oneLayoutS == 0 || total < out.oneLayoutS)) {
      out.oneLayoutS = total;
      bestLayout = pick;
    }
  }

  // One strategy for every bucket (a static plan): the longest bucket's
  // plans at each bucket's batch.
  for (const StepResult &cand : results[longest].top) {
    double total = 0;
    bool ok = true;
    for (size_t i = 0; i < B.size() && ok; ++i) {
      Strategy s = cand.strategy;
      s.globalBatch = B[i].globalBatch;
      auto r = simulateStep(workloads[i], c, s, o.assumptions);
      if (!r) {
        std::string internal;
        if (stopsSearch(r.takeError(), internal))
          return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                         "plan: " + internal);
        ok = false;
      } else if (!r->fits) {
        ok = false;
      } else {
        total += B[i].fraction * r->stepS;
      }
    }
    if (ok && (out.oneStrategyS == 0 || total < out.oneStrategyS)) {
      out.oneStrategyS = total;
      out.oneStrategy = cand.strategy;
    }
  }

  if (out.oneLayoutS > 0 && out.oneLayoutS <= out.perBucketS + out.perBucketSwitchS) {
    out.choice = "one-layout";
    for (size_t i = 0; i < B.size(); ++i)
      out.plans[i] = *bestLayout[i];
    out.expectedStepS = out.oneLayoutS;
    out.expectedSwitchS = 0;
  } else {
    out.choice = "per-bucket";
    out.expectedStepS = out.perBucketS;
    out.expectedSwitchS = out.perBucketSwitchS;
  }
  return out;
}

} // namespace orrery
