//===- Goodput.cpp - a priced step's goodput, time-to-train and run -------===//
#include "Goodput.h"
#include "orrery/CostModel/Errors.h"

#include <cmath>
#include <cstdio>

namespace orrery {
namespace cli {

using ojson = nlohmann::ordered_json;

llvm::Error checkGoodputRequest(const GoodputRequest &q) {
  if (!(q.tokens >= 0) || q.tokens > 1e18)
    return inputError("--tokens: expected 0 to 1e18 tokens");
  if (q.checkpoint != "sync" && q.checkpoint != "async")
    return inputError("--checkpoint '" + q.checkpoint +
                      "': expected sync or async");
  if (q.checkpointEvery < 0 || q.checkpointEvery > (int64_t(1) << 40))
    return inputError("--checkpoint-every " +
                      std::to_string(q.checkpointEvery) +
                      ": expected 1 to 2^40 steps (0: Daly's optimum)");
  if (!(q.days >= 0) || q.days > 3653)
    return inputError("--days: expected 0 to 3653 (10 years)");
  if (q.trials < 1 || q.trials > 10000)
    return inputError("--trials " + std::to_string(q.trials) +
                      ": expected 1 to 10000");
  if (!q.wanted() &&
      (q.checkpoint != "sync" || q.checkpointEvery > 0 || q.trials != 100))
    return inputError("--checkpoint, --checkpoint-every and --trials price "
                      "a run's goodput: give --tokens or --days");
  return llvm::Error::success();
}

GoodputInputs goodputInputs(const StepResult &r, const Cluster &c,
                            const Workload &w) {
  GoodputInputs in;
  for (const StageReport &st : r.stages)
    in.devices += st.devices;
  in.devices = std::max(1, std::min(in.devices, c.numDevices()));
  const NodeGroup &group = c.groupOf(0);
  in.devicesPerNode = group.devicesPerNode;
  in.nodes = in.devices == c.numDevices()
                 ? c.numNodes()
                 : (in.devices + in.devicesPerNode - 1) / in.devicesPerNode;
  in.stepS = r.stepS;
  in.tokensPerStep = r.tokensPerS * r.stepS;
  const Assumptions &a = r.assumptions;
  double trainable = double(w.parameters());
  in.checkpointBytes =
      trainable * (a.weightBytesPerParam + a.optimizerBytesPerParam);
  in.restartReadBytes =
      in.checkpointBytes + double(w.frozenParameters()) * a.weightBytesPerParam;
  const LinkSpec *host = hostLinkOf(group);
  in.deviceToHostBytesPerS = host ? host->bandwidthBytesPerS : 0;
  in.hostMemoryBytesPerNode = group.hostMemoryBytes;
  in.priceUsdPerDeviceHour = group.priceUsdPerDeviceHour;
  return in;
}

llvm::Expected<GoodputReport> priceGoodput(const GoodputRequest &q,
                                           const StepResult &r,
                                           const Cluster &c,
                                           const Workload &w) {
  if (auto e = checkGoodputRequest(q))
    return std::move(e);
  GoodputReport g;
  g.inputs = goodputInputs(r, c, w);
  g.policy.async = q.checkpoint == "async";
  g.policy.everySteps = q.checkpointEvery;
  auto estimate = estimateGoodput(c.reliability, g.inputs, g.policy);
  if (!estimate)
    return estimate.takeError();
  g.estimate = *estimate;
  g.tokens = q.tokens;
  if (q.tokens > 0)
    g.train = timeToTrain(g.estimate, g.inputs, q.tokens);
  if (q.days > 0) {
    auto run = simulateRun(c.reliability, g.estimate, g.policy,
                           {q.days, q.seed, q.trials});
    if (!run)
      return run.takeError();
    g.run = std::move(*run);
    g.runDays = q.days;
    g.seed = q.seed;
  }
  return g;
}

namespace {

std::string duration(double s) {
  char buf[64];
  if (s >= 2 * 86400)
    std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  else if (s >= 7200)
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else if (s >= 120)
    std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

void printRun(std::ostream &os, const GoodputReport &g) {
  const RunDistribution &d = *g.run;
  const RunTrial &m = d.mean;
  char buf[512];
  double wall = g.runDays * 86400;
  auto pct = [&](double s) { return 100 * s / wall; };
  std::snprintf(buf, sizeof buf,
                "run          %.4g days, %zu trials (seed %llu): effective "
                "training time p10 %.1f %%  p50 %.1f %%  p90 %.1f %%\n",
                g.runDays, d.trials.size(), (unsigned long long)g.seed,
                100 * d.ettrP10, 100 * d.ettrP50, 100 * d.ettrP90);
  os << buf;
  std::snprintf(buf, sizeof buf,
                "             interruptions p10 %d  p50 %d  p90 %d "
                "(mean: gpu %d, host %d, network %d, software %d; "
                "planned %d)\n",
                d.failuresP10, d.failuresP50, d.failuresP90,
                m.failuresByKind[0], m.failuresByKind[1], m.failuresByKind[2],
                m.failuresByKind[3], m.planned);
  os << buf;
  std::snprintf(buf, sizeof buf,
                "             wall time (mean): trained %.1f %%, work lost "
                "%.1f %%, checkpoints %.1f %%, detection and restarts %.1f "
                "%%, waiting for a node %.1f %%, planned stops %.1f %%\n",
                pct(m.trainedS), pct(m.lostWorkS), pct(m.checkpointS),
                pct(m.downtimeS), pct(m.waitingS), pct(m.plannedS));
  os << buf;
}

} // namespace

void printGoodput(std::ostream &os, const GoodputReport &g,
                  const ReliabilitySpec &spec) {
  const GoodputEstimate &e = g.estimate;
  char buf[512];
  if (!(e.failuresPerHour > 0))
    std::snprintf(buf, sizeof buf,
                  "failures     none expected on %d devices in %d nodes, "
                  "planned stops %.3g a day\n",
                  g.inputs.devices, g.inputs.nodes, 24 * e.plannedPerHour);
  else
    std::snprintf(buf, sizeof buf,
                  "failures     %.3g an hour on %d devices in %d nodes (one "
                  "every %s; gpu %.0f %%, host %.0f %%, network %.0f %%, "
                  "software %.0f %%), planned stops %.3g a day\n",
                  e.failuresPerHour, g.inputs.devices, g.inputs.nodes,
                  duration(3600 / e.failuresPerHour).c_str(),
                  100 * e.failuresPerHourByKind[0] / e.failuresPerHour,
                  100 * e.failuresPerHourByKind[1] / e.failuresPerHour,
                  100 * e.failuresPerHourByKind[2] / e.failuresPerHour,
                  100 * e.failuresPerHourByKind[3] / e.failuresPerHour,
                  24 * e.plannedPerHour);
  os << buf << "             rates: " << spec.source << "\n";
  std::snprintf(buf, sizeof buf,
                "checkpoint   %.4g GB %s every %lld steps (%s%s): %s stalled, "
                "%s to write; a restart %s (load %s)\n",
                g.inputs.checkpointBytes / 1e9,
                g.policy.async ? "async" : "sync", (long long)e.intervalSteps,
                duration(e.intervalS).c_str(),
                g.policy.everySteps > 0 ? ", as asked" : ", Daly's optimum",
                duration(e.checkpointStallS).c_str(),
                duration(e.checkpointWriteS).c_str(),
                duration(e.restartS).c_str(), duration(e.loadS).c_str());
  os << buf;
  std::snprintf(buf, sizeof buf,
                "goodput      %.1f %% effective training time expected "
                "(work lost %.1f %%, restarts %.1f %%, checkpoints %.1f %%, "
                "planned stops %.1f %%): %.4g tokens/s\n",
                100 * e.ettr, 100 * e.lostWorkFraction,
                100 * e.downtimeFraction, 100 * e.checkpointFraction,
                100 * e.plannedFraction, e.effectiveTokensPerS);
  os << buf;
  if (g.tokens > 0) {
    std::snprintf(buf, sizeof buf,
                  "train        %.4g tokens in %s, %.4g device-hours", g.tokens,
                  duration(g.train.seconds).c_str(), g.train.deviceHours);
    os << buf;
    if (g.train.costUsd > 0) {
      std::snprintf(buf, sizeof buf, ", %.4g USD", g.train.costUsd);
      os << buf;
    }
    os << "\n";
  }
  if (g.run)
    printRun(os, g);
  else if (spec.nodeRepairS > 0)
    os << "             (expected with a healthy node always at hand: --days "
          "prices the spare pool and the repairs)\n";
}

ojson goodputJson(const GoodputReport &g) {
  const GoodputEstimate &e = g.estimate;
  ojson byKind;
  for (int k = 0; k < kFailureKinds; ++k)
    byKind[failureKindName(FailureKind(k))] = e.failuresPerHourByKind[k];
  ojson j = {{"devices", g.inputs.devices},
             {"nodes", g.inputs.nodes},
             {"failures_per_hour", e.failuresPerHour},
             {"failures_per_hour_by_kind", byKind},
             {"planned_stops_per_hour", e.plannedPerHour},
             {"checkpoint_bytes", g.inputs.checkpointBytes},
             {"checkpoint_mode", g.policy.async ? "async" : "sync"},
             {"checkpoint_every_steps", e.intervalSteps},
             {"checkpoint_interval_s", e.intervalS},
             {"checkpoint_stall_s", e.checkpointStallS},
             {"checkpoint_write_s", e.checkpointWriteS},
             {"restart_s", e.restartS},
             {"effective_training_time_fraction", e.ettr},
             {"lost_work_fraction", e.lostWorkFraction},
             {"restart_fraction", e.downtimeFraction},
             {"checkpoint_fraction", e.checkpointFraction},
             {"planned_stop_fraction", e.plannedFraction},
             {"effective_tokens_per_s", e.effectiveTokensPerS}};
  if (g.tokens > 0)
    j["time_to_train"] = {{"tokens", g.tokens},
                          {"seconds", g.train.seconds},
                          {"device_hours", g.train.deviceHours},
                          {"cost_usd", g.train.costUsd}};
  if (g.run) {
    const RunDistribution &d = *g.run;
    j["run"] = {{"days", g.runDays},
                {"seed", g.seed},
                {"trials", d.trials.size()},
                {"effective_training_time_fraction",
                 {{"p10", d.ettrP10}, {"p50", d.ettrP50}, {"p90", d.ettrP90}}},
                {"interruptions",
                 {{"p10", d.failuresP10},
                  {"p50", d.failuresP50},
                  {"p90", d.failuresP90}}},
                {"mean_s",
                 {{"trained", d.mean.trainedS},
                  {"lost_work", d.mean.lostWorkS},
                  {"checkpoints", d.mean.checkpointS},
                  {"restarts", d.mean.downtimeS},
                  {"waiting_for_nodes", d.mean.waitingS},
                  {"planned_stops", d.mean.plannedS}}}};
  }
  return j;
}

} // namespace cli
} // namespace orrery
