//===- FailureSimulation.cpp - a whole run's failures, drawn one by one ---===//
#include "orrery/CostModel/FailureSimulation.h"
#include "orrery/CostModel/Errors.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>

namespace orrery {

double RunTrial::ettr() const {
  double wall =
      trainedS + lostWorkS + checkpointS + downtimeS + waitingS + plannedS;
  return wall > 0 ? trainedS / wall : 0;
}

namespace {

/// xoshiro256** (Blackman and Vigna), seeded by SplitMix64: the same
/// numbers on every platform, unlike the standard library's distributions.
class Random {
public:
  explicit Random(uint64_t seed) {
    for (uint64_t &w : s) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
  }
  /// Uniform in [0, 1).
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  /// Exponential with `ratePerS` (infinite at rate 0).
  double exponential(double ratePerS) {
    return ratePerS > 0 ? -std::log1p(-uniform()) / ratePerS : INFINITY;
  }

private:
  uint64_t s[4];
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
};

/// One trial of the run: the job's phases advanced event by event.
class Trial {
public:
  Trial(const ReliabilitySpec &spec, const GoodputEstimate &g, bool async,
        uint64_t seed)
      : spec(spec), g(g), async(async), rng(seed),
        failureRate(g.failuresPerHour / 3600),
        plannedRate(g.plannedPerHour / 3600), sparesFree(spec.spareNodes) {}

  llvm::Expected<RunTrial> run(double horizonS);

private:
  enum class Phase { Compute, Checkpoint, Down, Waiting, PlannedStop };
  const ReliabilitySpec &spec;
  const GoodputEstimate &g;
  bool async;
  Random rng;
  double failureRate, plannedRate;
  RunTrial out;
  double t = 0;
  /// Compute done (kept or not yet lost), and at the last durable
  /// checkpoint; an async checkpoint's progress until its write ends.
  double progress = 0, durable = 0, pending = 0;
  double pendingAt = INFINITY;
  Phase phase = Phase::Compute;
  double phaseEnd = 0, nextFailure = 0, nextPlanned = 0;
  int sparesFree;
  std::priority_queue<double, std::vector<double>, std::greater<double>>
      repaired; ///< when nodes in repair return to the pool

  void advanceTo(double e);
  void endPhase();
  void fail();
  void plannedStop();
  FailureKind drawKind();
};

void Trial::advanceTo(double e) {
  double dt = e - t;
  switch (phase) {
  case Phase::Compute:
    progress += dt;
    break;
  case Phase::Checkpoint:
    out.checkpointS += dt;
    break;
  case Phase::Down:
    out.downtimeS += dt;
    break;
  case Phase::Waiting:
    out.waitingS += dt;
    break;
  case Phase::PlannedStop:
    out.plannedS += dt;
    break;
  }
  t = e;
}

void Trial::endPhase() {
  switch (phase) {
  case Phase::Compute:
    phase = Phase::Checkpoint;
    phaseEnd = t + g.checkpointStallS;
    pending = progress;
    return;
  case Phase::Checkpoint:
    if (async) {
      pendingAt = t + g.checkpointWriteS;
    } else {
      durable = pending;
    }
    break;
  case Phase::Waiting:
    // A healthy node: now the restart, during which failures strike too.
    phase = Phase::Down;
    phaseEnd = t + spec.detectionS + spec.restartS + g.loadS;
    nextFailure = t + rng.exponential(failureRate);
    return;
  case Phase::PlannedStop:
    durable = progress;
    nextPlanned = t + rng.exponential(plannedRate);
    break;
  case Phase::Down:
    break;
  }
  phase = Phase::Compute;
  phaseEnd = t + g.intervalS;
}

FailureKind Trial::drawKind() {
  double u = rng.uniform() * g.failuresPerHour;
  for (int k = 0; k + 1 < kFailureKinds; ++k)
    if ((u -= g.failuresPerHourByKind[k]) < 0)
      return FailureKind(k);
  return FailureKind(kFailureKinds - 1);
}

void Trial::fail() {
  FailureKind kind = drawKind();
  ++out.failures;
  ++out.failuresByKind[int(kind)];
  double lost = progress - durable;
  out.lostWorkS += lost;
  progress = durable;
  pendingAt = INFINITY;
  // A hardware failure takes its node out for repair: the job restarts on
  // a spare, or waits for the first node back.
  double ready = t;
  if (kind != FailureKind::Software && spec.nodeRepairS > 0) {
    repaired.push(t + spec.nodeRepairS);
    while (!repaired.empty() && repaired.top() <= t) {
      repaired.pop();
      ++sparesFree;
    }
    if (sparesFree > 0) {
      --sparesFree;
    } else {
      ready = repaired.top();
      repaired.pop();
    }
  }
  phase = Phase::Waiting;
  phaseEnd = ready;
  nextFailure = INFINITY; // drawn again when the restart starts
  if (ready <= t)
    endPhase();
}

void Trial::plannedStop() {
  ++out.planned;
  // Stopped at a step's end with a final checkpoint written; nothing lost.
  pendingAt = INFINITY;
  phase = Phase::PlannedStop;
  phaseEnd = t + g.checkpointWriteS + spec.restartS + g.loadS;
  nextPlanned = INFINITY;
}

llvm::Expected<RunTrial> Trial::run(double horizonS) {
  phaseEnd = g.intervalS;
  nextFailure = rng.exponential(failureRate);
  nextPlanned = rng.exponential(plannedRate);
  constexpr int64_t kMaxEvents = 50'000'000;
  for (int64_t events = 0; t < horizonS; ++events) {
    if (events > kMaxEvents)
      return inputError("--days: more than 50 million events in one trial; "
                        "checkpoints every " +
                        std::to_string(g.intervalS) +
                        " s over the run are too many to draw");
    double e =
        std::min({nextFailure, nextPlanned, phaseEnd, pendingAt, horizonS});
    advanceTo(e);
    if (e >= horizonS)
      break;
    if (e == pendingAt) {
      durable = pending;
      pendingAt = INFINITY;
    } else if (e == phaseEnd) {
      endPhase();
    } else if (e == nextFailure) {
      fail();
    } else if (phase == Phase::Compute || phase == Phase::Checkpoint) {
      plannedStop();
    } else {
      nextPlanned = t + rng.exponential(plannedRate); // not while down
    }
  }
  out.trainedS = progress;
  return out;
}

template <typename T> T nearestRank(std::vector<T> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = size_t(std::ceil(q * double(v.size())));
  return v[std::min(v.size() - 1, i > 0 ? i - 1 : 0)];
}

} // namespace

llvm::Expected<RunDistribution>
simulateRun(const ReliabilitySpec &spec, const GoodputEstimate &g,
            const CheckpointPolicy &policy,
            const RunSimulationOptions &options) {
  if (!(options.days > 0) || options.days > 3653)
    return inputError("--days " + std::to_string(options.days) +
                      ": expected more than 0 and at most 3653 (10 years)");
  if (options.trials < 1 || options.trials > 10000)
    return inputError("--trials " + std::to_string(options.trials) +
                      ": expected 1 to 10000");
  // Each checkpoint is two events, each failure and planned stop a few:
  // a run that would take minutes to draw is refused up front.
  double horizonS = options.days * 86400;
  double perTrial =
      2 * horizonS / (g.intervalS + g.checkpointStallS) +
      3 * horizonS / 3600 * (g.failuresPerHour + g.plannedPerHour);
  if (perTrial * options.trials > 1e9)
    return inputError(
        "--days " + std::to_string(int64_t(options.days)) + " with --trials " +
        std::to_string(options.trials) + ": about " +
        std::to_string(int64_t(perTrial * options.trials / 1e6)) +
        " million events to draw (a checkpoint every " +
        std::to_string(int64_t(std::ceil(g.intervalS))) +
        " s); give fewer trials or days, or a longer --checkpoint-every");
  RunDistribution d;
  std::vector<double> ettr;
  std::vector<int> failures;
  for (int i = 0; i < options.trials; ++i) {
    Trial trial(spec, g, policy.async,
                options.seed * 0x100000001b3ull + uint64_t(i));
    auto r = trial.run(horizonS);
    if (!r)
      return r.takeError();
    d.trials.push_back(*r);
    ettr.push_back(r->ettr());
    failures.push_back(r->failures);
  }
  d.ettrP10 = nearestRank(ettr, 0.1);
  d.ettrP50 = nearestRank(ettr, 0.5);
  d.ettrP90 = nearestRank(ettr, 0.9);
  d.failuresP10 = nearestRank(failures, 0.1);
  d.failuresP50 = nearestRank(failures, 0.5);
  d.failuresP90 = nearestRank(failures, 0.9);
  double n = double(d.trials.size());
  RunTrial &m = d.mean;
  double counts[2 + kFailureKinds] = {};
  for (const RunTrial &r : d.trials) {
    m.trainedS += r.trainedS / n;
    m.lostWorkS += r.lostWorkS / n;
    m.checkpointS += r.checkpointS / n;
    m.downtimeS += r.downtimeS / n;
    m.waitingS += r.waitingS / n;
    m.plannedS += r.plannedS / n;
    counts[0] += r.failures / n;
    counts[1] += r.planned / n;
    for (int k = 0; k < kFailureKinds; ++k)
      counts[2 + k] += r.failuresByKind[k] / n;
  }
  m.failures = int(std::lround(counts[0]));
  m.planned = int(std::lround(counts[1]));
  for (int k = 0; k < kFailureKinds; ++k)
    m.failuresByKind[k] = int(std::lround(counts[2 + k]));
  return d;
}

} // namespace orrery
