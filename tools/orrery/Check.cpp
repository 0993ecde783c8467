//===- Check.cpp - `orrery check` and `orrery report` ---------------------===//
//
// Re-simulates a plan on its model and cluster, compares it with what the
// plan says, and prints "valid" or writes the HTML report.
//
//===----------------------------------------------------------------------===//

#include "Check.h"
#include "Report.h"
#include "Simulate.h"
#include "UncertaintyText.h"
#include "orrery/Plan/Plan.h"

#include <fstream>
#include <iostream>

namespace orrery {
namespace cli {

namespace {

std::string fmtNum(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// The stragglers and goodput the plan was made with (`plan --tokens`,
/// `--days`), as it records them (the plan check has checked the fields'
/// types).
void addGoodputFigures(orrery::ReportData &d, const nlohmann::json &planDoc) {
  if (planDoc.contains("stragglers") && planDoc["stragglers"].is_object()) {
    const nlohmann::json &s = planDoc["stragglers"];
    double step = d.stepS > 0 ? d.stepS : 1;
    double factor = s.value("slowdown_factor", 1.0);
    d.figures.push_back(
        {fmtNum("step, one device %.0f %% slower", 100 * (factor - 1)),
         fmtNum("%+.1f%%",
                100 * (s.value("slow_device_step_time_s", step) / step - 1))});
  }
  if (!planDoc.contains("goodput") || !planDoc["goodput"].is_object())
    return;
  const nlohmann::json &g = planDoc["goodput"];
  d.figures.push_back(
      {"effective training time",
       fmtNum("%.1f%%",
              100 * g.value("effective_training_time_fraction", 0.0))});
  double perHour = g.value("failures_per_hour", 0.0);
  if (perHour > 0)
    d.figures.push_back(
        {"failures", "one every " + fmtNum("%.3g h", 1 / perHour)});
  d.figures.push_back(
      {"checkpoint every",
       std::to_string(g.value("checkpoint_every_steps", int64_t(0))) +
           " steps (" +
           fmtNum("%.3g min", g.value("checkpoint_interval_s", 0.0) / 60) +
           ")"});
  if (g.contains("time_to_train") && g["time_to_train"].is_object())
    d.figures.push_back(
        {"time to train",
         fmtNum("%.1f days",
                g["time_to_train"].value("seconds", 0.0) / 86400)});
  if (g.contains("run") && g["run"].is_object() &&
      g["run"].contains("effective_training_time_fraction")) {
    const nlohmann::json &q = g["run"]["effective_training_time_fraction"];
    d.figures.push_back({fmtNum("run of %.4g days: p10 / p50 / p90",
                                g["run"].value("days", 0.0)),
                         fmtNum("%.1f / ", 100 * q.value("p10", 0.0)) +
                             fmtNum("%.1f / ", 100 * q.value("p50", 0.0)) +
                             fmtNum("%.1f%%", 100 * q.value("p90", 0.0))});
  }
}

/// What every report shows whatever the plan's kind: model, cluster, its
/// nodes, and the plan with its runners-up as the plan file records them.
orrery::ReportData reportBase(const nlohmann::json &planDoc,
                              const orrery::Workload &w,
                              const orrery::Cluster &c, double stepS) {
  orrery::ReportData d;
  d.model = w.source;
  d.cluster = c.name + " (" + std::to_string(c.numDevices()) + " devices)";
  // Its fabric's tiers, as plan and simulate print them.
  std::string fabric = orrery::fabricLines(c);
  for (size_t at = 0;
       (at = fabric.find("fabric       ", at)) != std::string::npos;)
    fabric.replace(at, 13, "; fabric: ");
  while (!fabric.empty() && fabric.back() == '\n')
    fabric.pop_back();
  for (char &ch : fabric)
    if (ch == '\n')
      ch = ' ';
  d.cluster += fabric;
  d.stepS = stepS;
  auto pools = orrery::clusterPools(c);
  for (const orrery::Pool &p : pools)
    for (int n = 0; n < p.nodes->count; ++n)
      d.nodes.push_back({c.sites[p.site].name.empty()
                             ? "site" + std::to_string(p.site)
                             : c.sites[p.site].name,
                         p.name, p.firstDevice + n * p.nodes->devicesPerNode,
                         p.nodes->devicesPerNode});
  auto row = [&](const nlohmann::json &strategy,
                 const nlohmann::json &predicted) {
    orrery::ReportRow r;
    if (strategy.is_object())
      r.plan = strategy.value("summary", strategy.value("cli", ""));
    if (predicted.is_object()) {
      r.stepS = predicted.value("step_time_s", 0.0);
      r.mfu = predicted.value("mfu", 0.0);
      r.peakMemoryBytes = predicted.value("peak_memory_bytes", 0.0);
      r.devices = predicted.value("devices_used", c.numDevices());
    }
    return r;
  };
  d.top.push_back(row(planDoc.value("strategy", nlohmann::json()),
                      planDoc.value("predicted", nlohmann::json())));
  if (planDoc.contains("alternatives") && planDoc["alternatives"].is_array())
    for (const auto &alt : planDoc["alternatives"])
      if (alt.is_object())
        d.top.push_back(row(alt.value("strategy", nlohmann::json()),
                            alt.value("predicted", nlohmann::json())));
  return d;
}

int writeReport(orrery::ReportData d, const std::string &path,
                const std::string &measuredPath, bool announce) {
  if (!measuredPath.empty()) {
    nlohmann::json run;
    if (int rc = readJsonObjectFile(measuredPath, run))
      return rc;
    if (auto e = orrery::addMeasuredRun(d, run, measuredPath))
      return fail("--measured " + llvm::toString(std::move(e)));
    const orrery::MeasuredRun &m = d.measured;
    d.figures.insert(
        d.figures.begin() + 1,
        {"measured step",
         fmtNum("%.3f s", m.stepS) + " (" +
             fmtNum("%+.1f%%",
                    m.stepS > 0 ? 100 * (m.predictedStepS - m.stepS) / m.stepS
                                : 0.0) +
             ")"});
  }
  std::ofstream out(path);
  out << orrery::reportHtml(d);
  if (!out)
    return fail("-o " + path + ": cannot write the file");
  if (announce)
    std::cout << path << ": report of " << d.stages.size() << " stages on "
              << d.nodes.size() << " nodes\n";
  return 0;
}

} // namespace

/// `orrery check` of a heterogeneous plan: re-simulates it and compares.
int checkHeteroPlan(const nlohmann::json &planDoc, const std::string &what,
                    const orrery::Workload &w, const orrery::Cluster &c,
                    const std::string &reportOut,
                    const std::string &measuredPath, bool announce) {
  auto strategy = orrery::heteroStrategyFromPlan(planDoc, what);
  if (!strategy)
    return fail(llvm::toString(strategy.takeError()));
  auto assumptions = orrery::assumptionsFromPlan(planDoc, what);
  if (!assumptions)
    return fail(llvm::toString(assumptions.takeError()));
  auto result = orrery::simulateHetero(w, c, *strategy, *assumptions);
  if (!result)
    return fail(what + ": " + llvm::toString(result.takeError()));
  if (!result->fits)
    return fail(what + ": the plan does not fit: " + result->doesNotFit);
  size_t stages = 0;
  for (const orrery::ReplicaGroup &g : strategy->groups)
    stages += g.stages.size();
  if (!planDoc.contains("stages") || !planDoc["stages"].is_array() ||
      planDoc["stages"].size() != stages)
    return fail(what + ": stages: expected " + std::to_string(stages) +
                " stages over the replica groups");
  // Every stage's recorded devices and type must be the ones the strategy
  // places there.
  auto pools = orrery::clusterPools(c);
  size_t k = 0;
  for (size_t g = 0; g < result->strategy.groups.size(); ++g)
    for (const orrery::HeteroStage &st : result->strategy.groups[g].stages) {
      const nlohmann::json &js = planDoc["stages"][k];
      std::string at = what + ": stages[" + std::to_string(k++) + "]";
      if (!js.is_object() ||
          js.value("device_type", "") != pools[st.pool].nodes->device->name)
        return fail(at + ".device_type: expected " +
                    pools[st.pool].nodes->device->name);
      if (!js.contains("devices") || js["devices"] != st.devices)
        return fail(at +
                    ".devices: differ from the devices the strategy "
                    "places on pool " +
                    pools[st.pool].name);
    }
  double predicted =
      planDoc.contains("predicted") && planDoc["predicted"].is_object()
          ? planDoc["predicted"].value("step_time_s", -1.0)
          : -1.0;
  if (predicted > 0 && std::abs(result->stepS - predicted) > 1e-6 * predicted)
    return fail(what + ": predicted.step_time_s " + std::to_string(predicted) +
                " differs from the re-simulated " +
                std::to_string(result->stepS));
  if (!reportOut.empty()) {
    auto traced = orrery::simulateHetero(w, c, *strategy, *assumptions, true);
    if (!traced)
      return fail(what + ": " + llvm::toString(traced.takeError()));
    orrery::ReportData data = reportBase(planDoc, w, c, traced->stepS);
    for (size_t g = 0; g < traced->groups.size(); ++g) {
      int offset = int(data.stages.size());
      const orrery::ReplicaGroup &rg = traced->strategy.groups[g];
      for (size_t i = 0; i < traced->groups[g].stages.size(); ++i) {
        const orrery::StageReport &st = traced->groups[g].stages[i];
        data.stages.push_back({st.label, st.device, rg.stages[i].tp,
                               st.numLayers, st.memory, st.capacityBytes,
                               rg.stages[i].devices});
      }
      for (orrery::TraceEvent e : traced->groups[g].trace) {
        e.track += offset;
        data.trace.push_back(e);
      }
    }
    data.strategy = traced->strategy.str(pools);
    data.figures = {
        {"step", fmtNum("%.3f s", traced->stepS)},
        {"tokens/s", fmtNum("%.4g", traced->tokensPerS)},
        {"MFU", fmtNum("%.1f%%", 100 * traced->mfu)},
        {"devices used", std::to_string(traced->devicesUsed) + " of " +
                             std::to_string(c.numDevices())},
        {"gradients across groups", fmtNum("%.3f s", traced->crossGroupSyncS)},
        {"WAN per step", fmtNum("%.4g GB", traced->wanBytesPerStep / 1e9) +
                             ", " + fmtNum("%.3g USD", traced->wanUsdPerStep)},
        {"peak memory",
         fmtNum("%.1f GiB", traced->peakMemoryBytes / double(1ull << 30))},
        {"energy per step", orrery::energyText(traced->energy)},
        {"cost per step", fmtNum("%.4g USD", traced->costUsd)}};
    if (std::string band = stepBandFigure(uncertaintyOf(*traced));
        !band.empty())
      data.figures.insert(data.figures.begin() + 1,
                          {"step p10 / p50 / p90", band});
    return writeReport(data, reportOut, measuredPath, announce);
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s: valid; re-simulated step %.6g s (plan says %.6g s), "
                "fits, %d devices used, peak %.1f GiB\n",
                what.c_str(), result->stepS, predicted, result->devicesUsed,
                result->peakMemoryBytes / double(1ull << 30));
  std::cout << buf << uncertaintyLines(uncertaintyOf(*result));
  return 0;
}

int checkPlanDoc(const nlohmann::json &planDoc, const std::string &checkPlan,
                 const Workload &workload, const Cluster &cluster,
                 const std::string &reportOut,
                 const std::string &reportMeasured, bool announce) {
  const bool reporting = !reportOut.empty();
  if (isHeteroPlan(planDoc))
    return checkHeteroPlan(planDoc, checkPlan, workload, cluster, reportOut,
                           reportMeasured, announce);
  auto strategy = orrery::strategyFromPlan(planDoc, checkPlan);
  if (!strategy)
    return fail(llvm::toString(strategy.takeError()));
  auto assumptions = orrery::assumptionsFromPlan(planDoc, checkPlan);
  if (!assumptions)
    return fail(llvm::toString(assumptions.takeError()));
  auto result =
      orrery::simulateStep(workload, cluster, *strategy, *assumptions);
  if (!result)
    return fail(checkPlan + ": " + llvm::toString(result.takeError()));
  if (!result->fits)
    return fail(checkPlan + ": the plan does not fit: " + result->doesNotFit);
  double predicted =
      planDoc.contains("predicted") && planDoc["predicted"].is_object()
          ? planDoc["predicted"].value("step_time_s", -1.0)
          : -1.0;
  if (!planDoc.contains("stages") || !planDoc["stages"].is_array() ||
      planDoc["stages"].size() != result->stages.size())
    return fail(checkPlan + ": stages: expected " +
                std::to_string(result->stages.size()) +
                " stages for pp=" + std::to_string(strategy->pp));
  int64_t layerSum = 0;
  for (const auto &st : planDoc["stages"]) {
    int64_t n = st.is_object() && st.contains("layers") &&
                        st["layers"].is_number_integer()
                    ? st["layers"].get<int64_t>()
                    : 0;
    // Bounded before it is summed (a plan's 2^62 must not wrap the sum).
    if (n < 0 || n > orrery::kMaxDevices)
      return fail(checkPlan + ": stages: a stage's layers must be 0 to " +
                  std::to_string(orrery::kMaxDevices) + ", not " +
                  std::to_string(n));
    layerSum += n;
  }
  // The layers the re-simulation places (the model's, or a
  // subnetwork worker's under sdp).
  int64_t placed = 0;
  for (const orrery::StageReport &st : result->stages)
    placed += st.numLayers;
  if (layerSum != placed)
    return fail(checkPlan + ": stages: " + std::to_string(layerSum) +
                " layers in stages, the model has " + std::to_string(placed));
  if (predicted > 0 && std::abs(result->stepS - predicted) > 1e-6 * predicted)
    return fail(checkPlan + ": predicted.step_time_s " +
                std::to_string(predicted) + " differs from the re-simulated " +
                std::to_string(result->stepS));
  if (reporting) {
    auto traced =
        orrery::simulateStep(workload, cluster, *strategy, *assumptions, true);
    if (!traced)
      return fail(checkPlan + ": " + llvm::toString(traced.takeError()));
    orrery::ReportData data =
        reportBase(planDoc, workload, cluster, traced->stepS);
    for (size_t i = 0; i < traced->stages.size(); ++i) {
      const orrery::StageReport &st = traced->stages[i];
      orrery::ReportStage rs{"stage " + std::to_string(i),
                             st.device,
                             strategy->tp,
                             st.numLayers,
                             st.memory,
                             st.capacityBytes,
                             {}};
      const auto &js = planDoc["stages"][i];
      if (js.is_object() && js.contains("devices") && js["devices"].is_array())
        for (const auto &d : js["devices"])
          if (d.is_number_integer())
            rs.devices.push_back(d.get<int>());
      data.stages.push_back(rs);
    }
    data.trace = traced->trace;
    data.strategy = strategy->str();
    data.figures = {{"step", fmtNum("%.3f s", traced->stepS)},
                    {"tokens/s", fmtNum("%.4g", traced->tokensPerS)},
                    {"MFU", fmtNum("%.1f%%", 100 * traced->mfu)},
                    {"bubble", fmtNum("%.1f%%", 100 * traced->bubbleFraction)},
                    {"peak memory", fmtNum("%.1f GiB", traced->peakMemoryBytes /
                                                           double(1ull << 30))},
                    {"devices", std::to_string(cluster.numDevices())},
                    {"energy per step", orrery::energyText(traced->energy)},
                    {"cost per step", fmtNum("%.4g USD", traced->costUsd)}};
    if (std::string band = stepBandFigure(uncertaintyOf(*traced));
        !band.empty())
      data.figures.insert(data.figures.begin() + 1,
                          {"step p10 / p50 / p90", band});
    addGoodputFigures(data, planDoc);
    return writeReport(data, reportOut, reportMeasured, announce);
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s: valid; re-simulated step %.6g s (plan says %.6g s), "
                "fits, peak %.1f GiB\n",
                checkPlan.c_str(), result->stepS, predicted,
                result->peakMemoryBytes / double(1ull << 30));
  std::cout << buf << uncertaintyLines(uncertaintyOf(*result));
  return 0;
}

} // namespace cli
} // namespace orrery
