//===- Reliability.cpp - failures, checkpoints and the goodput of a run ---===//
#include "orrery/CostModel/Reliability.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/JsonInput.h"

#include <algorithm>
#include <cmath>

namespace orrery {

const char *failureKindName(FailureKind k) {
  switch (k) {
  case FailureKind::Gpu:
    return "gpu";
  case FailureKind::Host:
    return "host";
  case FailureKind::Network:
    return "network";
  case FailureKind::Software:
    return "software";
  }
  return "?";
}

double ReliabilitySpec::failuresPerHour(FailureKind k, int devices,
                                        int nodes) const {
  switch (k) {
  case FailureKind::Gpu:
    return gpuFailuresPerDeviceHour * devices;
  case FailureKind::Host:
    return hostFailuresPerNodeHour * nodes;
  case FailureKind::Network:
    return networkFailuresPerDeviceHour * devices;
  case FailureKind::Software:
    return softwareFailuresPerNodeHour * nodes;
  }
  return 0;
}

double ReliabilitySpec::failuresPerHour(int devices, int nodes) const {
  double sum = 0;
  for (int k = 0; k < kFailureKinds; ++k)
    sum += failuresPerHour(FailureKind(k), devices, nodes);
  return sum;
}

namespace detail {

llvm::Error readReliability(const nlohmann::json &j, const std::string &path,
                            ReliabilitySpec &out) {
  if (!j.is_object())
    return inputError(path + ": expected an object");
  struct Field {
    const char *key;
    double *value;
  };
  double spares = out.spareNodes;
  const Field fields[] = {
      {"gpu_failures_per_device_hour", &out.gpuFailuresPerDeviceHour},
      {"host_failures_per_node_hour", &out.hostFailuresPerNodeHour},
      {"network_failures_per_device_hour", &out.networkFailuresPerDeviceHour},
      {"software_failures_per_node_hour", &out.softwareFailuresPerNodeHour},
      {"planned_interruptions_per_node_day",
       &out.plannedInterruptionsPerNodeDay},
      {"detection_s", &out.detectionS},
      {"restart_s", &out.restartS},
      {"storage_write_bytes_per_s", &out.storageWriteBytesPerS},
      {"storage_read_bytes_per_s", &out.storageReadBytesPerS},
      {"node_storage_bytes_per_s", &out.nodeStorageBytesPerS},
      {"checkpoint_copy_bytes_per_s", &out.checkpointCopyBytesPerS},
      {"spare_nodes", &spares},
      {"node_repair_s", &out.nodeRepairS}};
  std::vector<const char *> known = {"source"};
  for (const Field &f : fields)
    known.push_back(f.key);
  std::string unknown = unknownField(j, known);
  if (!unknown.empty())
    return inputError(path + "." + unknown);
  for (const Field &f : fields) {
    if (!j.contains(f.key))
      continue;
    const auto &v = j[f.key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) ||
        v.get<double>() < 0 || v.get<double>() > 1e18)
      return inputError(path + "." + f.key +
                        ": expected a non-negative number, got " +
                        printableLine(v.dump()));
    *f.value = v.get<double>();
  }
  for (const char *bandwidth :
       {"storage_write_bytes_per_s", "storage_read_bytes_per_s",
        "node_storage_bytes_per_s", "checkpoint_copy_bytes_per_s"})
    if (j.contains(bandwidth) && j[bandwidth].get<double>() <= 0)
      return inputError(path + "." + bandwidth + ": must be positive");
  if (spares != std::floor(spares) || spares > 1e6)
    return inputError(path +
                      ".spare_nodes: expected a whole number up to "
                      "1,000,000, got " +
                      printableLine(j["spare_nodes"].dump()));
  out.spareNodes = int(spares);
  if (j.contains("source")) {
    if (!j["source"].is_string())
      return inputError(path + ".source: expected a string");
    out.source = printableLine(j["source"].get<std::string>());
  }
  return llvm::Error::success();
}

} // namespace detail

double dalyIntervalS(double checkpointS, double mtbfS) {
  if (checkpointS >= 2 * mtbfS)
    return mtbfS;
  double x = checkpointS / (2 * mtbfS);
  return std::sqrt(2 * checkpointS * mtbfS) * (1 + std::sqrt(x) / 3 + x / 9) -
         checkpointS;
}

namespace {

/// The checkpoint's stall and write time, and the load at a restart.
llvm::Error checkpointCosts(const ReliabilitySpec &spec,
                            const GoodputInputs &in,
                            const CheckpointPolicy &policy,
                            GoodputEstimate &g) {
  // Every device hands over its shard (de-duplicated shards spread over
  // all ranks) at its copy rate, no faster than its host link; the
  // storage and the nodes' storage network take the sum.
  double perDevice = in.checkpointBytes / std::max(1, in.devices);
  double copyBw = spec.checkpointCopyBytesPerS;
  if (in.deviceToHostBytesPerS > 0)
    copyBw = std::min(copyBw, in.deviceToHostBytesPerS);
  double copyS = perDevice / copyBw;
  double nodesBw = double(in.nodes) * spec.nodeStorageBytesPerS;
  double writeBw = std::min(spec.storageWriteBytesPerS, nodesBw);
  double readBw = std::min(spec.storageReadBytesPerS, nodesBw);
  g.checkpointWriteS = std::max(copyS, in.checkpointBytes / writeBw);
  g.loadS = in.restartReadBytes / readBw;
  if (!policy.async) {
    g.checkpointStallS = g.checkpointWriteS;
    return llvm::Error::success();
  }
  // The copy to pinned host memory alone stalls training, the node's
  // devices at once; the hosts must hold it.
  g.checkpointStallS = copyS;
  double pinned = perDevice * in.devicesPerNode;
  if (in.hostMemoryBytesPerNode > 0 && pinned > in.hostMemoryBytesPerNode)
    return inputError(
        "--checkpoint async: each node must pin " +
        std::to_string(int64_t(pinned / (1 << 30))) +
        " GiB of host memory for the checkpoint's copy, above its " +
        std::to_string(int64_t(in.hostMemoryBytesPerNode / (1 << 30))) +
        " GiB");
  return llvm::Error::success();
}

/// Steps between checkpoints: the asked number, or Daly's optimum
/// rounded to whole steps, never so few that an async write is still
/// running when the next checkpoint starts.
llvm::Error chooseInterval(const GoodputInputs &in,
                           const CheckpointPolicy &policy, double mtbfS,
                           GoodputEstimate &g) {
  // The next copy to host memory waits for the previous write.
  double minS = policy.async ? g.checkpointWriteS : 0;
  int64_t minSteps =
      std::max<int64_t>(1, int64_t(std::ceil(minS / in.stepS - 1e-9)));
  if (policy.everySteps > 0) {
    if (policy.everySteps < minSteps)
      return inputError("--checkpoint-every " +
                        std::to_string(policy.everySteps) +
                        ": an async checkpoint's write takes " +
                        std::to_string(int64_t(std::ceil(g.checkpointWriteS))) +
                        " s, so checkpoints must be at least " +
                        std::to_string(minSteps) + " steps apart");
    g.intervalSteps = policy.everySteps;
  } else {
    double best = dalyIntervalS(g.checkpointStallS, mtbfS);
    double steps = std::isfinite(best) ? std::round(best / in.stepS) : 1e15;
    g.intervalSteps = std::max(minSteps, int64_t(std::min(steps, 1e15)));
  }
  g.intervalS = double(g.intervalSteps) * in.stepS;
  return llvm::Error::success();
}

} // namespace

llvm::Expected<GoodputEstimate>
estimateGoodput(const ReliabilitySpec &spec, const GoodputInputs &in,
                const CheckpointPolicy &policy) {
  GoodputEstimate g;
  if (in.devices < 1 || in.nodes < 1 || !(in.stepS > 0))
    return inputError("goodput: the plan has no devices or no step time");
  for (int k = 0; k < kFailureKinds; ++k)
    g.failuresPerHourByKind[k] =
        spec.failuresPerHour(FailureKind(k), in.devices, in.nodes);
  g.failuresPerHour = spec.failuresPerHour(in.devices, in.nodes);
  g.plannedPerHour = spec.plannedInterruptionsPerNodeDay * in.nodes / 24;
  if (auto e = checkpointCosts(spec, in, policy, g))
    return std::move(e);
  double lambda = g.failuresPerHour / 3600; // per second of wall time
  double mtbfS = lambda > 0 ? 1 / lambda : INFINITY;
  if (auto e = chooseInterval(in, policy, mtbfS, g))
    return std::move(e);
  g.restartS = spec.detectionS + spec.restartS + g.loadS;
  // An async checkpoint is durable only once written: a failure before
  // that loses the interval before it too, on average the write's time.
  double lag = policy.async ? g.checkpointWriteS : 0;
  double tau = g.intervalS, delta = g.checkpointStallS;
  // Daly's expected wall time of a segment of tau (his eq. 20): failures
  // strike in compute, checkpoints and restarts alike.
  double ettrFailures = lambda > 0
                            ? tau * lambda /
                                  (std::exp((g.restartS + lag) * lambda) *
                                   std::expm1((tau + delta) * lambda))
                            : tau / (tau + delta);
  // Planned stops: a final checkpoint, then a restart without detection.
  double plannedCost = g.checkpointWriteS + spec.restartS + g.loadS;
  g.plannedFraction = std::min(1.0, g.plannedPerHour / 3600 * plannedCost);
  g.ettr = ettrFailures * (1 - g.plannedFraction);
  if (!(g.ettr > 1e-6))
    return inputError(
        "goodput: " + std::to_string(g.failuresPerHour) +
        " failures an hour leave no time to train between restarts of " +
        std::to_string(int64_t(g.restartS)) + " s");
  // Where the rest goes, to first order (per wall second): checkpoint
  // stalls, downtime per failure, and the lost work the remainder.
  double failuresPerWallS = lambda * (1 - g.plannedFraction);
  g.checkpointFraction = g.ettr * delta / tau;
  g.downtimeFraction = std::min(1.0, failuresPerWallS * g.restartS);
  g.lostWorkFraction =
      std::max(0.0, 1 - g.ettr - g.checkpointFraction - g.downtimeFraction -
                        g.plannedFraction);
  g.effectiveTokensPerS = g.ettr * in.tokensPerStep / in.stepS;
  return g;
}

TimeToTrain timeToTrain(const GoodputEstimate &g, const GoodputInputs &in,
                        double tokens) {
  TimeToTrain t;
  if (g.effectiveTokensPerS <= 0)
    return t;
  t.seconds = tokens / g.effectiveTokensPerS;
  t.deviceHours = t.seconds / 3600 * in.devices;
  t.costUsd = t.deviceHours * in.priceUsdPerDeviceHour;
  return t;
}

} // namespace orrery
