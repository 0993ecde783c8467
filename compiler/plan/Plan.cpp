//===- Plan.cpp - the plan format (version 1) ----------------------------===//
#include "orrery/Plan/Plan.h"
#include "orrery/CostModel/AssumptionFields.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/Uncertainty.h"
#include "orrery/Plan/Capabilities.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <cstdio>
#include <tuple>

namespace orrery {

using ojson = nlohmann::ordered_json;

std::string digestOf(const std::string &bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

static ojson strategyJson(const Strategy &s) {
  ojson j;
  j["tp"] = s.tp;
  j["pp"] = s.pp;
  j["dp"] = s.dp;
  j["cp"] = s.cp;
  j["cp_comm"] = cpCommName(s.cpComm);
  j["ep"] = s.ep;
  j["expert_tensor_parallel"] = s.expertTp();
  if (s.dispatcher != MoeDispatcher::AllToAll)
    j["moe_dispatcher"] = moeDispatcherName(s.dispatcher);
  if (s.moeImbalance != 1)
    j["moe_load_imbalance_ratio"] = s.moeImbalance;
  if (s.moeCapacity > 0)
    j["moe_capacity_factor"] = s.moeCapacity;
  j["sequence_parallel"] = s.sequenceParallel;
  j["tp_batch_split"] = s.tpBatchSplit;
  j["virtual_stages"] = s.virtualStages;
  j["schedule"] = scheduleName(s.schedule);
  j["micro_batch_size_samples"] = s.microBatch;
  j["global_batch_size_samples"] = s.globalBatch;
  j["micro_batches"] = s.microBatches();
  j["zero_stage"] = s.zeroStage;
  j["recompute"] = recomputeName(s.recompute);
  if (s.recomputeLayers > 0)
    j["recompute_layers"] = s.recomputeLayers;
  if (s.subnetworkFraction > 0) {
    j["subnetwork_fraction"] = s.subnetworkFraction;
    j["subnetwork_masking"] = s.subnetworkBackwardMask ? "backward" : "forward";
  }
  if (s.chunkParams > 0)
    j["chunk_parameters"] = s.chunkParams;
  if (s.phantomGhosts > 0)
    j["phantom_ghost_neurons"] = s.phantomGhosts;
  if (s.schedule == Schedule::LayerParallelMgrit) {
    j["mgrit_coarsening"] = s.mgCoarsening;
    j["mgrit_iterations"] = s.mgIterations;
  }
  if (!s.recomputeKinds.empty())
    j["recompute_kinds"] = s.recomputeKinds;
  if (s.recomputeModules) {
    std::vector<std::string> names;
    for (unsigned b = 0; b < 6; ++b)
      if (s.recomputeModules & (1u << b))
        names.push_back(kRecomputeModuleNames[b]);
    j["recompute_modules"] = names;
  }
  j["offload_optimizer"] = s.offloadOptimizer;
  j["offload_activations"] = s.offloadActivations;
  j["precision"] = precisionName(s.precision);
  if (s.precision == Precision::FP8)
    j["fp8_recipe"] = fp8RecipeName(s.fp8Recipe);
  j["device_order"] = s.order;
  j["layers_per_stage"] = s.stageLayers;
  j["overlap"] = {{"grad_reduce", s.overlapGradReduce},
                  {"param_gather", s.overlapParamGather},
                  {"tp_comm", s.overlapTpComm},
                  {"p2p", s.overlapP2p},
                  {"expert_all_to_all", s.overlapEp}};
  j["cli"] = s.str();
  return j;
}

std::string kernelRates(const std::vector<std::string> &devices) {
  return devices.empty() ? "stated assumptions"
                         : "measured profile of " + llvm::join(devices, ", ");
}

/// Where a device's power is unknown, the device type replaces the
/// step's joules (the other fields keep their order).
/// The metrics, without the energy where a device's power is unknown.
static ojson withEnergyKnown(ojson j, const EnergyByActivity &e) {
  if (e.known())
    return j;
  j.erase("energy_j_per_step");
  j.erase("energy_j_per_step_by_activity");
  j["energy_unknown_for_device_type"] = e.unknownFor;
  return j;
}

/// The metrics with the layer profile that priced them (absent when none
/// did).
static ojson withLayerProfile(ojson j, const LayerProfile *profile) {
  if (profile)
    j["layer_profile"] = layerProfileJson(*profile);
  return j;
}

static ojson energyJson(const EnergyByActivity &e) {
  return {{"gemm_j", e.gemmJ},
          {"memory_bound_j", e.memoryBoundJ},
          {"communication_j", e.communicationJ},
          {"idle_j", e.idleJ}};
}

/// The metrics with the framework assumptions they were priced with
/// (AssumptionFields.h), and the energy when the device types state it.
static ojson withAssumptions(ojson j, const Assumptions &a,
                             const EnergyByActivity &e) {
  writeAssumptionFields(a, j);
  return withEnergyKnown(std::move(j), e);
}

/// The band of a prediction and what it rests on (Uncertainty.h): the
/// regime always, the band where published runs give one.
static ojson withUncertainty(ojson j, const Uncertainty &u) {
  j["uncertainty"] = {{"device_family", u.regime.deviceFamily},
                      {"kernels", u.regime.kernels},
                      {"mechanisms", u.regime.mechanisms},
                      {"unvalidated_mechanisms", u.unvalidated},
                      {"published_runs", u.stepRows},
                      {"published_memory_runs", u.memoryRows}};
  if (u.stepRows == 0)
    return j;
  j["step_time_band_s"] = {
      {"p10", u.stepS.p10}, {"p50", u.stepS.p50}, {"p90", u.stepS.p90}};
  if (u.memoryRows > 0)
    j["peak_memory_band_bytes"] = {{"p10", u.peakMemoryBytes.p10},
                                   {"p50", u.peakMemoryBytes.p50},
                                   {"p90", u.peakMemoryBytes.p90}};
  return j;
}

ojson metricsJson(const StepResult &r) {
  ojson j = withAssumptions(
      {{"step_time_s", r.stepS},
       {"tokens_per_s", r.tokensPerS},
       {"samples_per_s", r.samplesPerS},
       {"model_tflop_per_s_per_device", r.modelTflopsPerDevice},
       {"mfu", r.mfu},
       {"hfu", r.hfu},
       {"bubble_fraction", r.bubbleFraction},
       {"exposed_communication_s", r.exposedTpCommS + r.exposedCpCommS +
                                       r.exposedEpCommS + r.exposedPpCommS +
                                       r.exposedDpCommS},
       {"peak_memory_bytes", r.peakMemoryBytes},
       {"host_memory_bytes_per_node", r.hostMemoryBytesPerNode},
       {"energy_j_per_step", r.energyJ},
       {"energy_j_per_step_by_activity", energyJson(r.energy)},
       {"cost_usd_per_step", r.costUsd},
       {"kernel_rates", kernelRates(r.measuredKernelDevices)},
       {"in_network_aggregation",
        r.inNetworkAggregation.empty() ? "none" : r.inNetworkAggregation}},
      r.assumptions, r.energy);
  j = withUncertainty(std::move(j), uncertaintyOf(r));
  return withLayerProfile(std::move(j), r.assumptions.layerProfile.get());
}

ojson stageJson(const StageReport &st) {
  ojson j = {{"first_layer", st.firstLayer},
             {"layers", st.numLayers},
             {"device_type", st.device},
             {"forward_s_per_micro_batch", st.forwardS},
             {"backward_s_per_micro_batch", st.backwardS},
             {"weight_gradient_s_per_micro_batch", st.weightGradS},
             {"memory_bytes",
              {{"weights", st.memory.weightsBytes},
               {"gradients", st.memory.gradientsBytes},
               {"optimizer", st.memory.optimizerBytes},
               {"activations", st.memory.activationsBytes},
               {"workspace", st.memory.workspaceBytes},
               {"total", st.memory.total()},
               {"capacity", st.capacityBytes}}},
             {"seconds_per_step_by_activity",
              {{"gemm_s", st.activity.gemmS},
               {"memory_bound_s", st.activity.memoryBoundS},
               {"communication_s", st.activity.communicationS},
               {"idle_s", st.activity.idleS}}},
             {"power_w_by_activity",
              {{"gemm_w", st.power.gemmW},
               {"memory_bound_w", st.power.memoryBoundW},
               {"communication_w", st.power.communicationW},
               {"idle_w", st.power.idleW}}}};
  if (!st.power.known())
    j.erase("power_w_by_activity"); // unknown, not zero
  return j;
}

/// What every plan starts with: the format and the model it is for.
llvm::Expected<std::vector<std::string>> planDims(const nlohmann::json &plan,
                                                  const std::string &what) {
  std::vector<std::string> out;
  if (!plan.contains("model") || !plan["model"].is_object() ||
      !plan["model"].contains("dims"))
    return out;
  const nlohmann::json &d = plan["model"]["dims"];
  if (!d.is_object())
    return inputError(what + ": model.dims: must be an object of dim values");
  for (auto it = d.begin(); it != d.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() <= 0)
      return inputError(what + ": model.dims." + it.key() +
                        ": must be a positive integer");
    out.push_back(it.key() + "=" + std::to_string(it.value().get<int64_t>()));
  }
  return out;
}

static ojson planHeader(const Workload &w, const PlanInputs &in) {
  ojson j;
  j["schema"] = "orrery-plan";
  j["version"] = 1;
  ojson layers = ojson::array();
  for (const LayerRun &run : w.layers)
    layers.push_back({{"kind", w.kinds[run.kind].name}, {"count", run.count}});
  j["model"] = {{"source", in.modelPath},
                {"digest_fnv1a64", in.modelDigest},
                {"parameters", w.parameters()},
                {"tokens_per_sample", w.tokensPerSample},
                {"layers", layers}};
  if (w.tiedParameters() > 0) // an exporter refuses what cannot tie them
    j["model"]["tied_parameters"] = w.tiedParameters();
  if (!in.dims.empty())
    j["model"]["dims"] = in.dims;
  // Which weights train, as `orrery check` must build the workload again.
  if (w.fineTuning.active()) {
    const FineTuning &ft = w.fineTuning;
    j["fine_tuning"] = {{"freeze", ft.freeze},
                        {"lora_rank", ft.loraRank},
                        {"lora_targets", ft.loraTargets},
                        {"trainable_parameters", w.parameters()},
                        {"frozen_parameters", w.frozenParameters()},
                        {"adapter_parameters", w.adapterParameters()}};
  }
  return j;
}

/// The export targets that run `r`'s strategy as priced (Capabilities.h).
static ojson frameworksJson(const StepResult &r, const Workload &w) {
  ojson list = ojson::array();
  for (const std::string &f : frameworksRunning(r, w))
    list.push_back(f);
  return list;
}

/// The faster plan no export target runs (`--framework any`): its
/// strategy, step, what it gains over the plan and each target's refusal.
static ojson fastestUnrunnableJson(const StepResult &u, const StepResult &best,
                                   const Workload &w) {
  ojson needs = ojson::array();
  for (const std::string &why : frameworkRefusals(u, w))
    needs.push_back(why);
  return {{"strategy", strategyJson(u.strategy)},
          {"step_time_s", u.stepS},
          {"mfu", u.mfu},
          {"step_time_gain_fraction",
           best.stepS > 0 ? 1 - u.stepS / best.stepS : 0.0},
          {"refusals", needs}};
}

ojson planJson(const PlanResult &r, const Workload &w, const PlanInputs &in) {
  const StepResult &best = r.top.front();
  const Strategy &s = best.strategy;
  const Cluster &c = r.cluster;
  ojson j = planHeader(w, in);
  j["cluster"] = {{"spec", in.clusterSpec},
                  {"digest_fnv1a64", in.clusterDigest},
                  {"devices", c.numDevices()},
                  {"devices_used", c.numDevices()},
                  {"device_type", c.deviceSpec(0).name}};
  j["strategy"] = strategyJson(s);

  // Stages: their layers (in model order) and devices. Rank r of the
  // strategy's order is device r of the cluster; its coordinate on an
  // axis is (r / stride) % degree (each looked up once: a plan of 16,384
  // ranks and 128 stages asked two million times).
  auto coordOf = [&](const std::string &axis) {
    return [stride = s.stride(axis), degree = s.degree(axis)](int rank) {
      return (rank / stride) % degree;
    };
  };
  auto stageOf = coordOf("pp");
  std::vector<ojson> stageDevices(best.stages.size(), ojson::array());
  for (int rank = 0; rank < c.numDevices(); ++rank)
    if (size_t(stageOf(rank)) < stageDevices.size())
      stageDevices[size_t(stageOf(rank))].push_back(rank);
  ojson stages = ojson::array();
  for (size_t i = 0; i < best.stages.size(); ++i) {
    const StageReport &st = best.stages[i];
    ojson &devs = stageDevices[i];
    ojson stage = {{"stage", i}};
    ojson fields = stageJson(st); // items() refers into it: keep it alive
    for (auto &[key, value] : fields.items())
      stage[key] = value;
    stage["devices"] = devs;
    stages.push_back(stage);
  }
  j["stages"] = stages;

  // Groups: ranks that share every coordinate but one axis.
  ojson groups;
  for (const char *axis : {"tp", "cp", "dp", "pp"}) {
    ojson list = ojson::array();
    int degree = s.degree(axis), stride = s.stride(axis);
    auto coord = coordOf(axis);
    for (int rank = 0; rank < c.numDevices(); ++rank) {
      if (coord(rank) != 0)
        continue;
      ojson g = ojson::array();
      for (int k = 0; k < degree; ++k)
        g.push_back(rank + k * stride);
      list.push_back(g);
    }
    groups[axis] = list;
  }
  j["groups"] = groups;
  j["predicted"] = metricsJson(best);
  j["frameworks"] = frameworksJson(best, w);
  ojson alternatives = ojson::array();
  for (size_t i = 1; i < r.top.size(); ++i)
    alternatives.push_back({{"strategy", strategyJson(r.top[i].strategy)},
                            {"predicted", metricsJson(r.top[i])},
                            {"frameworks", frameworksJson(r.top[i], w)}});
  j["alternatives"] = alternatives;
  j["search"] = {{"candidates_priced", r.candidatesPriced},
                 {"candidates_pruned", r.candidatesPruned}};
  if (!r.framework.empty()) {
    j["search"]["framework"] = r.framework;
    j["search"]["candidates_refused"] = r.candidatesRefused;
  }
  if (r.fastestUnrunnable)
    j["search"]["fastest_unrunnable"] =
        fastestUnrunnableJson(*r.fastestUnrunnable, best, w);
  return j;
}

static llvm::Error err(const std::string &msg) { return inputError(msg); }

/// The checks every plan passes whatever its strategy's kind.
static llvm::Error checkEnvelope(const nlohmann::json &plan,
                                 const std::string &what) {
  if (!plan.is_object())
    return err(what + ": a plan must be a JSON object");
  if (plan.value("schema", "") != "orrery-plan")
    return err(what + ": schema: expected \"orrery-plan\"");
  if (!plan.contains("version") || !plan["version"].is_number_integer() ||
      plan["version"] != 1)
    return err(what + ": version: expected 1");
  if (!plan.contains("strategy") || !plan["strategy"].is_object())
    return err(what + ": strategy: missing");
  return llvm::Error::success();
}

/// strategy.overlap's booleans into `flags` (a missing one keeps its
/// default).
static llvm::Error
readOverlap(const nlohmann::json &j, const std::string &what,
            std::initializer_list<std::pair<const char *, bool *>> flags) {
  if (!j.contains("overlap"))
    return llvm::Error::success();
  const nlohmann::json &o = j["overlap"];
  if (!o.is_object())
    return err(what + ": strategy.overlap: must be an object");
  for (auto [key, flag] : flags) {
    if (!o.contains(key))
      continue;
    if (!o[key].is_boolean())
      return err(what + ": strategy.overlap." + key +
                 ": must be true or false");
    *flag = o[key];
  }
  return llvm::Error::success();
}

/// A plan's fields named by a word: moe_dispatcher, cp_comm, schedule,
/// recompute, precision and fp8_recipe.
static llvm::Error readNamedFields(const nlohmann::json &j,
                                   const std::string &what, Strategy &s) {
  if (j.contains("moe_dispatcher")) {
    if (j["moe_dispatcher"] == "alltoall")
      s.dispatcher = MoeDispatcher::AllToAll;
    else if (j["moe_dispatcher"] == "deepep")
      s.dispatcher = MoeDispatcher::DeepEP;
    else
      return err(what + ": strategy.moe_dispatcher: must be \"alltoall\" or "
                        "\"deepep\"");
  }
  if (j.contains("cp_comm")) {
    if (j["cp_comm"] == "ring")
      s.cpComm = CpComm::Ring;
    else if (j["cp_comm"] == "all-to-all")
      s.cpComm = CpComm::AllToAll;
    else
      return err(what + ": strategy.cp_comm: must be \"ring\" or "
                        "\"all-to-all\"");
  }
  if (auto sc = scheduleFromName(j.value("schedule", "")))
    s.schedule = *sc;
  else
    return err(what + ": strategy.schedule: must be gpipe, 1f1b, interleaved, "
                      "zb-h1, zb-2p, zb-v, dualpipev, dualpipe or mgrit");
  if (auto r = recomputeFromName(j.value("recompute", "")))
    s.recompute = *r;
  else
    return err(what +
               ": strategy.recompute: must be none, selective, op or full");
  if (auto p = precisionFromName(j.value("precision", "")))
    s.precision = *p;
  else
    return err(what +
               ": strategy.precision: must be fp32, tf32, fp16, bf16, fp8, mxfp8, nvfp4 or mxfp4");
  // Plans written before it scaled fp8 as delayed scaling does.
  if (j.contains("fp8_recipe")) {
    auto r = j["fp8_recipe"].is_string()
                 ? fp8RecipeFromName(j["fp8_recipe"].get<std::string>())
                 : std::nullopt;
    if (!r)
      return err(what + ": strategy.fp8_recipe: must be \"delayed\", "
                        "\"tensorwise\" or \"blockwise\"");
    if (s.precision != Precision::FP8)
      return err(what + ": strategy.fp8_recipe: scales fp8; the precision "
                        "is " + precisionName(s.precision));
    s.fp8Recipe = *r;
  }
  return llvm::Error::success();
}

/// A plan's list fields: recompute_kinds, recompute_modules, device_order
/// and layers_per_stage.
static llvm::Error readListFields(const nlohmann::json &j,
                                  const std::string &what, Strategy &s) {
  if (j.contains("recompute_kinds")) {
    const nlohmann::json &kinds = j["recompute_kinds"];
    if (!kinds.is_array() || kinds.empty())
      return err(what + ": strategy.recompute_kinds: must be a non-empty "
                        "list of layer kind names");
    for (const auto &k : kinds) {
      if (!k.is_string() || k.get<std::string>().empty())
        return err(what + ": strategy.recompute_kinds: must be a non-empty "
                          "list of layer kind names");
      s.recomputeKinds.push_back(k.get<std::string>());
    }
  }
  if (j.contains("recompute_modules")) {
    const nlohmann::json &modules = j["recompute_modules"];
    std::vector<std::string> names;
    if (modules.is_array())
      for (const auto &m : modules)
        if (m.is_string())
          names.push_back(m.get<std::string>());
    if (!modules.is_array() || names.size() != modules.size())
      return err(what + ": strategy.recompute_modules: must be a list of "
                        "module names");
    std::string why = recomputeModuleBits(names, s.recomputeModules);
    if (!why.empty())
      return err(what + ": strategy." + why);
  }
  if (j.contains("device_order")) {
    if (!j["device_order"].is_array())
      return err(what + ": strategy.device_order: must be a list");
    std::vector<std::string> order;
    for (const auto &a : j["device_order"])
      if (a.is_string())
        order.push_back(a);
    std::vector<std::string> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != std::vector<std::string>{"cp", "dp", "pp", "tp"})
      return err(
          what +
          ": strategy.device_order: must list tp, cp, dp and pp once each");
    s.order = order;
  }
  if (j.contains("layers_per_stage")) {
    if (!j["layers_per_stage"].is_array())
      return err(what + ": strategy.layers_per_stage: must be a list");
    for (const auto &n : j["layers_per_stage"]) {
      if (!n.is_number_integer() || n.get<long long>() <= 0 ||
          n.get<long long>() > 1000000)
        return err(what + ": strategy.layers_per_stage: counts must be "
                          "integers from 1 to 1000000");
      s.stageLayers.push_back(n.get<int>());
    }
  }
  return llvm::Error::success();
}

static llvm::Expected<Strategy> strategyFromPlanImpl(const nlohmann::json &plan,
                                                     const std::string &what) {
  if (auto e = checkEnvelope(plan, what))
    return std::move(e);
  const nlohmann::json &j = plan["strategy"];
  Strategy s;
  // Bounded as --strategy bounds it (strategyFieldLimit): 2^32 must not
  // wrap to 0 when it is narrowed, nor a product overflow later.
  auto integer = [&](const char *key, auto &out, long long lo) -> llvm::Error {
    long long hi = strategyFieldLimit(key);
    if (!j.contains(key) || !j[key].is_number_integer() ||
        j[key].get<long long>() < lo || j[key].get<long long>() > hi)
      return err(what + ": strategy." + key + ": must be an integer from " +
                 std::to_string(lo) + " to " + std::to_string(hi));
    out = j[key].get<long long>();
    return llvm::Error::success();
  };
  for (auto [key, field] :
       std::initializer_list<std::pair<const char *, int *>>{
           {"tp", &s.tp},
           {"pp", &s.pp},
           {"dp", &s.dp},
           {"cp", &s.cp},
           {"ep", &s.ep},
           {"virtual_stages", &s.virtualStages},
           {"zero_stage", &s.zeroStage}})
    if (auto e = integer(key, *field, key == std::string("zero_stage") ? 0 : 1))
      return std::move(e);
  if (auto e = integer("micro_batch_size_samples", s.microBatch, 1))
    return std::move(e);
  if (auto e = integer("global_batch_size_samples", s.globalBatch, 1))
    return std::move(e);
  // Derived, and written for people: one that disagrees is an edited plan.
  if (j.contains("micro_batches") &&
      (!j["micro_batches"].is_number_integer() ||
       s.globalBatch % (s.microBatch * s.dp) ||
       j["micro_batches"].get<long long>() != s.microBatches()))
    return err(what + ": strategy.micro_batches: must be "
                      "global_batch_size_samples / (micro_batch_size_samples "
                      "x dp) = " +
               std::to_string(s.globalBatch) + " / (" +
               std::to_string(s.microBatch) + " x " + std::to_string(s.dp) +
               ")");
  auto boolean = [&](const char *key, bool &out) -> llvm::Error {
    if (!j.contains(key) || !j[key].is_boolean())
      return err(what + ": strategy." + key + ": must be true or false");
    out = j[key];
    return llvm::Error::success();
  };
  if (auto e = boolean("sequence_parallel", s.sequenceParallel))
    return std::move(e);
  if (auto e = boolean("offload_optimizer", s.offloadOptimizer))
    return std::move(e);
  if (auto e = boolean("offload_activations", s.offloadActivations))
    return std::move(e);
  if (j.contains("tp_batch_split"))
    if (auto e = boolean("tp_batch_split", s.tpBatchSplit))
      return std::move(e);
  // Plans written before it split the experts as tp does.
  if (j.contains("expert_tensor_parallel")) {
    int etp = 1;
    if (auto e = integer("expert_tensor_parallel", etp, 1))
      return std::move(e);
    s.etp = etp == s.tp ? 0 : etp;
  }
  if (auto e = readNamedFields(j, what, s))
    return std::move(e);
  if (auto e = readOverlap(j, what,
                           {{"grad_reduce", &s.overlapGradReduce},
                            {"param_gather", &s.overlapParamGather},
                            {"tp_comm", &s.overlapTpComm},
                            {"p2p", &s.overlapP2p},
                            {"expert_all_to_all", &s.overlapEp}}))
    return std::move(e);
  if (j.contains("recompute_layers"))
    if (auto e = integer("recompute_layers", s.recomputeLayers, 1))
      return std::move(e);
  if ((j.contains("mgrit_coarsening") || j.contains("mgrit_iterations")) &&
      s.schedule != Schedule::LayerParallelMgrit)
    return err(what + ": strategy.mgrit_*: apply to schedule mgrit only");
  if (j.contains("mgrit_coarsening"))
    if (auto e = integer("mgrit_coarsening", s.mgCoarsening, 2))
      return std::move(e);
  if (j.contains("mgrit_iterations"))
    if (auto e = integer("mgrit_iterations", s.mgIterations, 1))
      return std::move(e);
  if (j.contains("phantom_ghost_neurons"))
    if (auto e = integer("phantom_ghost_neurons", s.phantomGhosts, 1))
      return std::move(e);
  if (j.contains("chunk_parameters")) {
    const nlohmann::json &n = j["chunk_parameters"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1000000 ||
        n.get<int64_t>() % 1000000 || n.get<int64_t>() > int64_t(1e11))
      return err(what + ": strategy.chunk_parameters: must be a whole "
                        "number of millions of elements, 1e6 to 1e11");
    s.chunkParams = n.get<int64_t>();
  }
  // Mixture of experts: absent = balanced and dropless.
  for (auto [key, field, lo] :
       std::initializer_list<std::tuple<const char *, double *, double>>{
           {"moe_load_imbalance_ratio", &s.moeImbalance, 1},
           {"moe_capacity_factor", &s.moeCapacity, 0}}) {
    if (!j.contains(key))
      continue;
    const nlohmann::json &f = j[key];
    double v = f.is_number() ? f.get<double>() : -1;
    if (!(lo == 1 ? v >= 1 : v > 0) || v > kMaxExpertLoad)
      return err(what + ": strategy." + key + ": must be " +
                 (lo == 1 ? "from 1" : "above 0") + " to 64");
    *field = v;
  }
  if (j.contains("subnetwork_fraction")) {
    const nlohmann::json &f = j["subnetwork_fraction"];
    if (!f.is_number() || !(f.get<double>() > 0) || f.get<double>() > 1)
      return err(what + ": strategy.subnetwork_fraction: must be in (0, 1]");
    s.subnetworkFraction = f.get<double>();
  }
  if (j.contains("subnetwork_masking")) {
    const nlohmann::json &m = j["subnetwork_masking"];
    if (!s.subnetworkFraction || !m.is_string() ||
        (m != "forward" && m != "backward"))
      return err(what + ": strategy.subnetwork_masking: must be forward or "
                        "backward, with subnetwork_fraction");
    s.subnetworkBackwardMask = m == "backward";
  }
  if (auto e = readListFields(j, what, s))
    return std::move(e);
  return s;
}

} // namespace orrery

namespace orrery {

static ojson heteroStrategyJson(const HeteroStrategy &s,
                                const std::vector<Pool> &pools) {
  ojson groups = ojson::array();
  for (const ReplicaGroup &g : s.groups) {
    ojson stages = ojson::array();
    for (const HeteroStage &st : g.stages)
      stages.push_back({{"pool", st.pool},
                        {"device_type", pools[st.pool].nodes->device->name},
                        {"tp", st.tp},
                        {"layers", st.layers}});
    ojson samples = ojson::array(), weights = ojson::array();
    for (int64_t m : g.microBatches) {
      samples.push_back(m * g.microBatch);
      weights.push_back(double(m * g.microBatch) / double(s.globalBatch));
    }
    groups.push_back({{"replicas", g.replicas},
                      {"micro_batch_size_samples", g.microBatch},
                      {"recompute", recomputeName(g.recompute)},
                      {"micro_batches_per_replica", g.microBatches},
                      {"samples_per_replica", samples},
                      {"gradient_weight_per_replica", weights},
                      {"stages", stages}});
  }
  return {{"kind", "heterogeneous"},
          {"global_batch_size_samples", s.globalBatch},
          {"zero_stage", s.zeroStage},
          {"precision", precisionName(s.precision)},
          {"overlap",
           {{"grad_reduce", s.overlapGradReduce},
            {"param_gather", s.overlapParamGather}}},
          {"replica_groups", groups},
          {"summary", s.str(pools)}};
}

/// The device types of any replica group whose kernels a measured profile
/// priced.
static std::vector<std::string> heteroKernelDevices(const HeteroResult &r) {
  std::vector<std::string> seen;
  for (const StepResult &g : r.groups)
    for (const std::string &name : g.measuredKernelDevices)
      if (!llvm::is_contained(seen, name))
        seen.push_back(name);
  return seen;
}

ojson heteroMetricsJson(const HeteroResult &r) {
  // Every group is priced under the same assumptions.
  Assumptions priced =
      r.groups.empty() ? Assumptions{} : r.groups.front().assumptions;
  ojson j =
      withAssumptions({{"step_time_s", r.stepS},
                       {"tokens_per_s", r.tokensPerS},
                       {"samples_per_s", r.samplesPerS},
                       {"model_tflop_per_s_per_device", r.modelTflopsPerDevice},
                       {"mfu", r.mfu},
                       {"slowest_group_s", r.groupsS},
                       {"cross_group_gradient_sync_s", r.crossGroupSyncS},
                       {"wan_bytes_per_step", r.wanBytesPerStep},
                       {"wan_usd_per_step", r.wanUsdPerStep},
                       {"peak_memory_bytes", r.peakMemoryBytes},
                       {"devices_used", r.devicesUsed},
                       {"energy_j_per_step", r.energyJ},
                       {"energy_j_per_step_by_activity", energyJson(r.energy)},
                       {"cost_usd_per_step", r.costUsd},
                       {"kernel_rates", kernelRates(heteroKernelDevices(r))},
                       {"in_network_aggregation",
                        [&] {
                          for (const StepResult &g : r.groups)
                            if (!g.inNetworkAggregation.empty())
                              return g.inNetworkAggregation;
                          return std::string("none");
                        }()}},
                      priced, r.energy);
  j = withUncertainty(std::move(j), uncertaintyOf(r));
  return withLayerProfile(std::move(j), priced.layerProfile.get());
}

ojson heteroStagesJson(const HeteroResult &r, const std::vector<Pool> &pools) {
  ojson stages = ojson::array();
  for (size_t g = 0; g < r.groups.size(); ++g) {
    const ReplicaGroup &rg = r.strategy.groups[g];
    for (size_t i = 0; i < r.groups[g].stages.size(); ++i) {
      ojson stage = {{"replica_group", g},
                     {"stage", i},
                     {"pool", pools[rg.stages[i].pool].name},
                     {"tp", rg.stages[i].tp}};
      ojson fields = stageJson(r.groups[g].stages[i]);
      for (auto &[key, value] : fields.items())
        stage[key] = value;
      stage["devices"] = rg.stages[i].devices;
      stages.push_back(stage);
    }
  }
  return stages;
}

ojson heteroPlanJson(const HeteroPlanResult &r, const Workload &w,
                     const PlanInputs &in, const Cluster &c) {
  const HeteroResult &best = r.top.front();
  ojson j = planHeader(w, in);
  ojson pools = ojson::array();
  for (size_t p = 0; p < r.pools.size(); ++p) {
    const Pool &pool = r.pools[p];
    pools.push_back({{"pool", p},
                     {"name", pool.name},
                     {"site", c.sites[pool.site].name},
                     {"device_type", pool.nodes->device->name},
                     {"devices", pool.devices},
                     {"first_device", pool.firstDevice}});
  }
  j["cluster"] = {{"spec", in.clusterSpec},
                  {"digest_fnv1a64", in.clusterDigest},
                  {"devices", c.numDevices()},
                  {"devices_used", best.devicesUsed},
                  {"pools", pools}};
  j["strategy"] = heteroStrategyJson(best.strategy, r.pools);
  j["stages"] = heteroStagesJson(best, r.pools);
  j["predicted"] = heteroMetricsJson(best);
  j["frameworks"] = ojson::array(); // no export target runs one
  ojson alternatives = ojson::array();
  for (size_t i = 1; i < r.top.size(); ++i)
    alternatives.push_back(
        {{"strategy", heteroStrategyJson(r.top[i].strategy, r.pools)},
         {"predicted", heteroMetricsJson(r.top[i])}});
  j["alternatives"] = alternatives;
  j["search"] = {{"candidates_priced", r.candidatesPriced},
                 {"candidates_pruned", r.candidatesPruned}};
  return j;
}

static llvm::Expected<Assumptions>
assumptionsFromPlanImpl(const nlohmann::json &plan, const std::string &what) {
  Assumptions a;
  if (!plan.contains("predicted") || !plan["predicted"].is_object())
    return a;
  const nlohmann::json &p = plan["predicted"];
  if (auto e = readAssumptionFields(p, what, a))
    return std::move(e);
  if (plan.contains("fine_tuning")) {
    const nlohmann::json &f = plan["fine_tuning"];
    auto strings = [&](const char *key,
                       std::vector<std::string> &out) -> llvm::Error {
      if (!f.contains(key))
        return llvm::Error::success();
      if (!f[key].is_array())
        return err(what + ": fine_tuning." + key +
                   ": must be an array of "
                   "strings");
      for (const auto &v : f[key]) {
        if (!v.is_string() || v.get<std::string>().empty())
          return err(what + ": fine_tuning." + key +
                     ": must be an array of non-empty strings");
        out.push_back(v.get<std::string>());
      }
      return llvm::Error::success();
    };
    if (!f.is_object())
      return err(what + ": fine_tuning: must be an object");
    if (auto e = strings("freeze", a.fineTuning.freeze))
      return std::move(e);
    if (auto e = strings("lora_targets", a.fineTuning.loraTargets))
      return std::move(e);
    if (f.contains("lora_rank")) {
      const nlohmann::json &r = f["lora_rank"];
      if (!r.is_number_integer() || r.get<int64_t>() < 0 ||
          r.get<int64_t>() > 65536)
        return err(what + ": fine_tuning.lora_rank: must be an integer from "
                          "0 to 65536");
      a.fineTuning.loraRank = int(r.get<int64_t>());
    }
    if (a.fineTuning.loraRank > 0 && a.fineTuning.loraTargets.empty())
      return err(what + ": fine_tuning.lora_targets: missing (LoRA needs "
                        "its targets)");
  }
  if (p.contains("layer_profile")) {
    auto profile = parseLayerProfile(p["layer_profile"],
                                     what + ": predicted.layer_profile");
    if (!profile)
      return profile.takeError();
    a.layerProfile = std::make_shared<const LayerProfile>(std::move(*profile));
  }
  return a;
}

bool isHeteroPlan(const nlohmann::json &plan) {
  if (!plan.is_object() || !plan.contains("strategy") ||
      !plan["strategy"].is_object())
    return false;
  const nlohmann::json &s = plan["strategy"];
  return s.contains("kind") && s["kind"].is_string() &&
         s["kind"].get<std::string>() == "heterogeneous";
}

static llvm::Expected<HeteroStrategy>
heteroStrategyFromPlanImpl(const nlohmann::json &plan,
                           const std::string &what) {
  if (auto e = checkEnvelope(plan, what))
    return std::move(e);
  const nlohmann::json &j = plan["strategy"];
  HeteroStrategy s;
  auto integer = [&](const nlohmann::json &obj, const std::string &where,
                     const char *key, auto &out, long long lo) -> llvm::Error {
    long long hi = strategyFieldLimit(key);
    if (!obj.is_object() || !obj.contains(key) ||
        !obj[key].is_number_integer() || obj[key].get<long long>() < lo ||
        obj[key].get<long long>() > hi)
      return err(what + ": " + where + key + ": must be an integer from " +
                 std::to_string(lo) + " to " + std::to_string(hi));
    out = obj[key].get<long long>();
    return llvm::Error::success();
  };
  if (auto e = integer(j, "strategy.", "global_batch_size_samples",
                       s.globalBatch, 1))
    return std::move(e);
  if (auto e = integer(j, "strategy.", "zero_stage", s.zeroStage, 0))
    return std::move(e);
  if (auto e = readOverlap(j, what,
                           {{"grad_reduce", &s.overlapGradReduce},
                            {"param_gather", &s.overlapParamGather}}))
    return std::move(e);
  if (auto p = precisionFromName(j.value("precision", "")))
    s.precision = *p;
  else
    return err(what +
               ": strategy.precision: must be fp32, tf32, fp16, bf16, fp8, mxfp8, nvfp4 or mxfp4");
  if (!j.contains("replica_groups") || !j["replica_groups"].is_array())
    return err(what + ": strategy.replica_groups: must be a list");
  for (size_t g = 0; g < j["replica_groups"].size(); ++g) {
    const nlohmann::json &jg = j["replica_groups"][g];
    std::string at = "strategy.replica_groups[" + std::to_string(g) + "].";
    ReplicaGroup rg;
    if (auto e = integer(jg, at, "replicas", rg.replicas, 1))
      return std::move(e);
    if (auto e = integer(jg, at, "micro_batch_size_samples", rg.microBatch, 1))
      return std::move(e);
    if (auto r = recomputeFromName(jg.is_object() ? jg.value("recompute", "")
                                                  : std::string()))
      rg.recompute = *r;
    else
      return err(what + ": " + at +
                 "recompute: must be none, selective, op or full");
    if (!jg.contains("micro_batches_per_replica") ||
        !jg["micro_batches_per_replica"].is_array())
      return err(what + ": " + at +
                 "micro_batches_per_replica: must be a list");
    for (const auto &m : jg["micro_batches_per_replica"]) {
      if (!m.is_number_integer() || m.get<long long>() < 1 ||
          m.get<long long>() > kMaxBatchSamples)
        return err(what + ": " + at +
                   "micro_batches_per_replica: counts must be integers "
                   "from 1 to " +
                   std::to_string(kMaxBatchSamples));
      rg.microBatches.push_back(m.get<int64_t>());
    }
    if (!jg.contains("stages") || !jg["stages"].is_array())
      return err(what + ": " + at + "stages: must be a list");
    for (size_t i = 0; i < jg["stages"].size(); ++i) {
      const nlohmann::json &js = jg["stages"][i];
      std::string sat = at + "stages[" + std::to_string(i) + "].";
      HeteroStage st;
      if (auto e = integer(js, sat, "pool", st.pool, 0))
        return std::move(e);
      if (auto e = integer(js, sat, "tp", st.tp, 1))
        return std::move(e);
      if (auto e = integer(js, sat, "layers", st.layers, 1))
        return std::move(e);
      rg.stages.push_back(st);
    }
    s.groups.push_back(std::move(rg));
  }
  return s;
}

//===----------------------------------------------------------------------===//
// Field types of the plan format.
//===----------------------------------------------------------------------===//

namespace {

enum class JsonKind { Object, Array, String, Integer, Number, Boolean };

/// `path` names a field: dot-separated keys, "[]" for each element of an
/// array ("stages[].devices[]", "groups.tp[][]").
struct FieldType {
  const char *path;
  JsonKind kind;
};

using K = JsonKind;

// strategy and each alternatives[].strategy.
const FieldType kStrategyFields[] = {
    {"", K::Object},
    {"cli", K::String},
    {"summary", K::String},
    {"kind", K::String},
    {"tp", K::Integer},
    {"pp", K::Integer},
    {"dp", K::Integer},
    {"cp", K::Integer},
    {"cp_comm", K::String},
    {"ep", K::Integer},
    {"expert_tensor_parallel", K::Integer},
    {"moe_dispatcher", K::String},
    {"fp8_recipe", K::String},
    {"moe_load_imbalance_ratio", K::Number},
    {"moe_capacity_factor", K::Number},
    {"virtual_stages", K::Integer},
    {"zero_stage", K::Integer},
    {"micro_batch_size_samples", K::Integer},
    {"micro_batches", K::Integer},
    {"global_batch_size_samples", K::Integer},
    {"schedule", K::String},
    {"recompute", K::String},
    {"recompute_layers", K::Integer},
    {"recompute_kinds", K::Array},
    {"subnetwork_fraction", K::Number},
    {"mgrit_coarsening", K::Integer},
    {"subnetwork_masking", K::String},
    {"chunk_parameters", K::Integer},
    {"phantom_ghost_neurons", K::Integer},
    {"mgrit_iterations", K::Integer},
    {"recompute_kinds[]", K::String},
    {"recompute_modules", K::Array},
    {"recompute_modules[]", K::String},
    {"precision", K::String},
    {"sequence_parallel", K::Boolean},
    {"tp_batch_split", K::Boolean},
    {"offload_activations", K::Boolean},
    {"offload_optimizer", K::Boolean},
    {"overlap", K::Object},
    {"overlap.expert_all_to_all", K::Boolean},
    {"overlap.grad_reduce", K::Boolean},
    {"overlap.p2p", K::Boolean},
    {"overlap.param_gather", K::Boolean},
    {"overlap.tp_comm", K::Boolean},
    {"device_order", K::Array},
    {"device_order[]", K::String},
    {"layers_per_stage", K::Array},
    {"layers_per_stage[]", K::Integer},
    {"replica_groups", K::Array},
    {"replica_groups[]", K::Object},
    {"replica_groups[].replicas", K::Integer},
    {"replica_groups[].micro_batch_size_samples", K::Integer},
    {"replica_groups[].recompute", K::String},
    {"replica_groups[].samples_per_replica", K::Array},
    {"replica_groups[].samples_per_replica[]", K::Integer},
    {"replica_groups[].micro_batches_per_replica", K::Array},
    {"replica_groups[].micro_batches_per_replica[]", K::Integer},
    {"replica_groups[].gradient_weight_per_replica", K::Array},
    {"replica_groups[].gradient_weight_per_replica[]", K::Number},
    {"replica_groups[].stages", K::Array},
    {"replica_groups[].stages[]", K::Object},
    {"replica_groups[].stages[].device_type", K::String},
    {"replica_groups[].stages[].layers", K::Integer},
    {"replica_groups[].stages[].pool", K::Integer},
    {"replica_groups[].stages[].tp", K::Integer},
};

// predicted and each alternatives[].predicted (and the framework
// assumptions' rows, AssumptionFields.h).
const FieldType kPredictedFields[] = {
    {"", K::Object},
    {"step_time_s", K::Number},
    {"mfu", K::Number},
    {"hfu", K::Number},
    {"peak_memory_bytes", K::Number},
    {"host_memory_bytes_per_node", K::Number},
    {"devices_used", K::Integer},
    {"bubble_fraction", K::Number},
    {"step_time_band_s", K::Object},
    {"step_time_band_s.p10", K::Number},
    {"step_time_band_s.p50", K::Number},
    {"step_time_band_s.p90", K::Number},
    {"peak_memory_band_bytes", K::Object},
    {"peak_memory_band_bytes.p10", K::Number},
    {"peak_memory_band_bytes.p50", K::Number},
    {"peak_memory_band_bytes.p90", K::Number},
    {"uncertainty", K::Object},
    {"uncertainty.device_family", K::String},
    {"uncertainty.kernels", K::String},
    {"uncertainty.mechanisms", K::Array},
    {"uncertainty.unvalidated_mechanisms", K::Array},
    {"uncertainty.published_runs", K::Integer},
    {"uncertainty.published_memory_runs", K::Integer},
    {"cost_usd_per_step", K::Number},
    {"energy_j_per_step", K::Number},
    {"energy_j_per_step_by_activity", K::Object},
    {"energy_j_per_step_by_activity.gemm_j", K::Number},
    {"energy_j_per_step_by_activity.memory_bound_j", K::Number},
    {"energy_j_per_step_by_activity.communication_j", K::Number},
    {"energy_j_per_step_by_activity.idle_j", K::Number},
    {"exposed_communication_s", K::Number},
    {"cross_group_gradient_sync_s", K::Number},
    {"layer_profile", K::Object},
    {"in_network_aggregation", K::String},
    {"kernel_rates", K::String},
    {"model_tflop_per_s_per_device", K::Number},
    {"samples_per_s", K::Number},
    {"tokens_per_s", K::Number},
    {"slowest_group_s", K::Number},
    {"wan_bytes_per_step", K::Number},
    {"wan_usd_per_step", K::Number},
    {"energy_unknown_for_device_type", K::String},
};

const FieldType kPlanFields[] = {
    {"", K::Object},
    {"schema", K::String},
    {"version", K::Integer},
    {"model", K::Object},
    {"model.source", K::String},
    {"model.digest_fnv1a64", K::String},
    {"model.parameters", K::Integer},
    {"model.tokens_per_sample", K::Integer},
    {"model.layers", K::Array},
    {"model.layers[]", K::Object},
    {"model.layers[].kind", K::String},
    {"model.layers[].count", K::Integer},
    {"model.dims", K::Object},
    {"cluster", K::Object},
    {"cluster.spec", K::String},
    {"cluster.digest_fnv1a64", K::String},
    {"cluster.device_type", K::String},
    {"cluster.devices", K::Integer},
    {"cluster.devices_used", K::Integer},
    {"cluster.pools", K::Array},
    {"cluster.pools[]", K::Object},
    {"cluster.pools[].name", K::String},
    {"cluster.pools[].site", K::String},
    {"cluster.pools[].device_type", K::String},
    {"cluster.pools[].devices", K::Integer},
    {"cluster.pools[].first_device", K::Integer},
    {"cluster.pools[].pool", K::Integer},
    {"groups", K::Object},
    {"groups.tp", K::Array},
    {"groups.tp[]", K::Array},
    {"groups.tp[][]", K::Integer},
    {"groups.pp", K::Array},
    {"groups.pp[]", K::Array},
    {"groups.pp[][]", K::Integer},
    {"groups.dp", K::Array},
    {"groups.dp[]", K::Array},
    {"groups.dp[][]", K::Integer},
    {"groups.cp", K::Array},
    {"groups.cp[]", K::Array},
    {"groups.cp[][]", K::Integer},
    {"search", K::Object},
    {"search.candidates_priced", K::Integer},
    {"search.candidates_pruned", K::Integer},
    {"stages", K::Array},
    {"stages[]", K::Object},
    {"stages[].stage", K::Integer},
    {"stages[].replica_group", K::Integer},
    {"stages[].pool", K::String},
    {"stages[].device_type", K::String},
    {"stages[].tp", K::Integer},
    {"stages[].layers", K::Integer},
    {"stages[].first_layer", K::Integer},
    {"stages[].devices", K::Array},
    {"stages[].devices[]", K::Integer},
    {"stages[].forward_s_per_micro_batch", K::Number},
    {"stages[].backward_s_per_micro_batch", K::Number},
    {"stages[].weight_gradient_s_per_micro_batch", K::Number},
    {"stages[].memory_bytes", K::Object},
    {"stages[].memory_bytes.weights", K::Number},
    {"stages[].memory_bytes.gradients", K::Number},
    {"stages[].memory_bytes.optimizer", K::Number},
    {"stages[].memory_bytes.activations", K::Number},
    {"stages[].memory_bytes.workspace", K::Number},
    {"stages[].memory_bytes.total", K::Number},
    {"stages[].memory_bytes.capacity", K::Number},
    {"stages[].seconds_per_step_by_activity", K::Object},
    {"stages[].seconds_per_step_by_activity.gemm_s", K::Number},
    {"stages[].seconds_per_step_by_activity.memory_bound_s", K::Number},
    {"stages[].seconds_per_step_by_activity.communication_s", K::Number},
    {"stages[].seconds_per_step_by_activity.idle_s", K::Number},
    {"stages[].power_w_by_activity", K::Object},
    {"stages[].power_w_by_activity.gemm_w", K::Number},
    {"stages[].power_w_by_activity.memory_bound_w", K::Number},
    {"stages[].power_w_by_activity.communication_w", K::Number},
    {"stages[].power_w_by_activity.idle_w", K::Number},
    {"alternatives", K::Array},
    {"alternatives[]", K::Object},
    {"alternatives[].frameworks", K::Array},
    {"alternatives[].frameworks[]", K::String},
    {"frameworks", K::Array},
    {"frameworks[]", K::String},
    {"fine_tuning", K::Object},
    {"fine_tuning.freeze", K::Array},
    {"fine_tuning.freeze[]", K::String},
    {"fine_tuning.lora_rank", K::Integer},
    {"fine_tuning.lora_targets", K::Array},
    {"fine_tuning.lora_targets[]", K::String},
    {"fine_tuning.trainable_parameters", K::Integer},
    {"fine_tuning.frozen_parameters", K::Integer},
    {"fine_tuning.adapter_parameters", K::Integer},
    {"stragglers", K::Object},
    {"stragglers.slowdown_factor", K::Number},
    {"stragglers.slow_device_step_time_s", K::Number},
    {"stragglers.slow_device_stage", K::Integer},
    {"stragglers.slow_nic_step_time_s", K::Number},
    {"goodput", K::Object},
    {"goodput.failures_per_hour", K::Number},
    {"goodput.checkpoint_every_steps", K::Integer},
    {"goodput.checkpoint_interval_s", K::Number},
    {"goodput.effective_training_time_fraction", K::Number},
    {"goodput.time_to_train", K::Object},
    {"goodput.time_to_train.seconds", K::Number},
    {"goodput.time_to_train.cost_usd", K::Number},
    {"goodput.run", K::Object},
    {"goodput.run.days", K::Number},
    {"goodput.run.effective_training_time_fraction", K::Object},
    {"goodput.run.effective_training_time_fraction.p10", K::Number},
    {"goodput.run.effective_training_time_fraction.p50", K::Number},
    {"goodput.run.effective_training_time_fraction.p90", K::Number},
    {"search.framework", K::String},
    {"search.candidates_refused", K::Integer},
    {"search.fastest_unrunnable", K::Object},
    {"search.fastest_unrunnable.strategy", K::Object},
    {"search.fastest_unrunnable.step_time_s", K::Number},
    {"search.fastest_unrunnable.mfu", K::Number},
    {"search.fastest_unrunnable.step_time_gain_fraction", K::Number},
    {"search.fastest_unrunnable.refusals", K::Array},
    {"search.fastest_unrunnable.refusals[]", K::String},
};

bool hasKind(const nlohmann::json &v, JsonKind kind) {
  switch (kind) {
  case K::Object:
    return v.is_object();
  case K::Array:
    return v.is_array();
  case K::String:
    return v.is_string();
  case K::Integer:
    return v.is_number_integer();
  case K::Number:
    return v.is_number();
  case K::Boolean:
    return v.is_boolean();
  }
  return false;
}

const char *kindName(JsonKind kind) {
  switch (kind) {
  case K::Object:
    return "an object";
  case K::Array:
    return "an array";
  case K::String:
    return "a string";
  case K::Integer:
    return "an integer";
  case K::Number:
    return "a number";
  case K::Boolean:
    return "true or false";
  }
  return "?";
}

const char *typeName(const nlohmann::json &v) {
  if (v.is_number_integer())
    return "an integer";
  if (v.is_number())
    return "a fraction";
  if (v.is_null())
    return "null";
  if (v.is_boolean())
    return "a boolean";
  if (v.is_string())
    return "a string";
  if (v.is_array())
    return "an array";
  return "an object";
}

/// The first value at `path` (from `rest` on) without `kind`: its concrete
/// path in `where`. Absent fields are not checked here.
bool findWrongKind(const nlohmann::json &node, llvm::StringRef rest,
                   JsonKind kind, std::string where, std::string &bad) {
  if (rest.empty()) {
    if (hasKind(node, kind))
      return false;
    bad = where.empty() ? "(the document)" : where;
    bad +=
        std::string(": expected ") + kindName(kind) + ", got " + typeName(node);
    return true;
  }
  if (rest.starts_with("[]")) {
    if (!node.is_array())
      return false; // the array's own entry reports it
    llvm::StringRef next = rest.drop_front(2);
    next.consume_front(".");
    for (size_t i = 0; i < node.size(); ++i)
      if (findWrongKind(node[i], next, kind,
                        where + "[" + std::to_string(i) + "]", bad))
        return true;
    return false;
  }
  size_t end = rest.find_first_of(".[");
  std::string key = rest.substr(0, end).str();
  llvm::StringRef next = end == llvm::StringRef::npos ? "" : rest.substr(end);
  next.consume_front(".");
  if (!node.is_object() || !node.contains(key))
    return false;
  return findWrongKind(node[key], next, kind,
                       where.empty() ? key : where + "." + key, bad);
}

template <size_t N>
bool checkFields(const nlohmann::json &node, const std::string &where,
                 const FieldType (&fields)[N], std::string &bad) {
  for (const FieldType &f : fields)
    if (findWrongKind(node, f.path, f.kind, where, bad))
      return true;
  return false;
}

/// A plan's predicted: its fields and the framework assumptions' rows.
bool checkPredicted(const nlohmann::json &node, const std::string &where,
                    std::string &bad) {
  if (checkFields(node, where, kPredictedFields, bad))
    return true;
  for (const AssumptionField &f : assumptionFields())
    if (findWrongKind(node, f.planKey, f.isChoice() ? K::String : K::Number,
                      where, bad))
      return true;
  return false;
}

} // namespace

/// A length-bucket plan file (`orrery plan --length-buckets -o`) holds a
/// plan per bucket: where one plan is read, the error says which to take.
static llvm::Error refuseBucketFile(const nlohmann::json &plan,
                                    const std::string &what) {
  if (!plan.is_object() || !plan.contains("schema") ||
      !plan["schema"].is_string() ||
      plan["schema"] != "orrery-length-bucket-plans")
    return llvm::Error::success();
  std::string lengths;
  const nlohmann::json &buckets = plan.value("buckets", nlohmann::json());
  for (size_t i = 0; buckets.is_array() && i < buckets.size(); ++i) {
    const nlohmann::json &b = buckets[i];
    lengths += (i ? ", " : "") + std::string("buckets[") + std::to_string(i) +
               "]" +
               (b.is_object() && b.contains("length") &&
                        b["length"].is_number_integer()
                    ? " at " + std::to_string(b["length"].get<int64_t>())
                    : std::string());
  }
  return inputError(
      what + ": a length-bucket plan file (schema orrery-length-bucket-plans) "
             "holds one plan per bucket (" +
      (lengths.empty() ? std::string("none") : lengths) +
      "); give one bucket's plan, e.g. jq '.buckets[0].plan' " + what);
}

llvm::Error checkPlanFieldTypes(const nlohmann::json &plan,
                                const std::string &what) {
  if (llvm::Error e = refuseBucketFile(plan, what))
    return e;
  std::string bad;
  bool wrong = checkFields(plan, "", kPlanFields, bad);
  if (!wrong && plan.is_object() && plan.contains("strategy"))
    wrong = checkFields(plan["strategy"], "strategy", kStrategyFields, bad);
  if (!wrong && plan.is_object() && plan.contains("predicted"))
    wrong = checkPredicted(plan["predicted"], "predicted", bad);
  if (!wrong && plan.is_object() && plan.contains("alternatives") &&
      plan["alternatives"].is_array())
    for (size_t i = 0; i < plan["alternatives"].size() && !wrong; ++i) {
      const nlohmann::json &alt = plan["alternatives"][i];
      std::string at = "alternatives[" + std::to_string(i) + "]";
      if (alt.contains("strategy"))
        wrong = checkFields(alt["strategy"], at + ".strategy", kStrategyFields,
                            bad);
      if (!wrong && alt.contains("predicted"))
        wrong = checkPredicted(alt["predicted"], at + ".predicted", bad);
    }
  if (!wrong)
    return llvm::Error::success();
  return inputError(what + ": " + bad);
}

// nlohmann::json reports a value of the wrong type by exception: each
// reader turns one into the one-line error, never lets it escape.
template <typename F>
static auto catchingJsonErrors(const nlohmann::json &plan,
                               const std::string &what, F read)
    -> decltype(read()) {
  try {
    if (llvm::Error e = checkPlanFieldTypes(plan, what))
      return std::move(e);
    return read();
  } catch (const nlohmann::json::exception &e) {
    return err(what + ": malformed plan: " + e.what());
  }
}

llvm::Expected<Strategy> strategyFromPlan(const nlohmann::json &plan,
                                          const std::string &what) {
  return catchingJsonErrors(plan, what,
                            [&] { return strategyFromPlanImpl(plan, what); });
}

llvm::Expected<Assumptions> assumptionsFromPlan(const nlohmann::json &plan,
                                                const std::string &what) {
  return catchingJsonErrors(
      plan, what, [&] { return assumptionsFromPlanImpl(plan, what); });
}

llvm::Expected<HeteroStrategy>
heteroStrategyFromPlan(const nlohmann::json &plan, const std::string &what) {
  return catchingJsonErrors(
      plan, what, [&] { return heteroStrategyFromPlanImpl(plan, what); });
}

} // namespace orrery
