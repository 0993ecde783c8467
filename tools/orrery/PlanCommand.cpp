//===- PlanCommand.cpp - `orrery plan` as a function ----------------------===//
//
// Moved out of the CLI's main so that the Python bindings run the same
// code: the cluster, the workload, the search options, the search and the
// plan JSON.
//
//===----------------------------------------------------------------------===//

#include "PlanCommand.h"
#include "Goodput.h"
#include "PlanReport.h"
#include "Simulate.h"
#include "Stats.h"
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/CostModel/Uncertainty.h"
#include "orrery/Plan/Capabilities.h"
#include "orrery/Plan/Plan.h"
#include "orrery/Workload/BuildWorkload.h"

#include <fstream>
#include <iostream>

namespace orrery {
namespace cli {

/// How many plans the search keeps for --rank-by p50|p90 to reorder.
constexpr int kRankedByBand = 20;

namespace {
llvm::Error error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

llvm::Expected<Cluster> loadClusterSource(const ClusterSource &source) {
  if (source.json)
    return parseClusterJson(*source.json, source.spec,
                            HardwareCatalog::builtin());
  return loadCluster(source.spec, HardwareCatalog::builtin());
}

llvm::Expected<PlanSetup>
preparePlan(mlir::ModuleOp module, const ModelArgs &args,
            const ClusterSource &source, const std::string &precision,
            const Assumptions &framework, const std::string &clusterWhat) {
  PlanSetup setup;
  auto cluster = loadClusterSource(source);
  if (!cluster)
    return error(clusterWhat + llvm::toString(cluster.takeError()));
  setup.cluster = std::make_unique<Cluster>(std::move(*cluster));
  if (auto p = parseStrategy("precision=" +
                             (precision.empty() ? "bf16" : precision)))
    setup.layoutPrecision = p->precision;
  else
    return error("--precision '" + precision +
                 "': expected fp32, tf32, fp16, bf16, fp8 or mxfp8");
  setup.layoutCosts = layoutCostsFor(*setup.cluster, setup.layoutPrecision);
  auto workload = buildWorkload(module, setup.layoutCosts, framework.fusion,
                                framework.fineTuning);
  if (!workload)
    return error(args.path + ": " + llvm::toString(workload.takeError()));
  setup.workload = std::move(*workload);
  std::string clusterBytes = source.spec;
  if (source.json)
    clusterBytes = *source.json;
  else if (source.spec.find(".json") != std::string::npos)
    readFileBytes(source.spec, clusterBytes);
  setup.inputs =
      PlanInputs{args.path, digestOf(modelBytesOf(args)), source.spec,
                 digestOf(clusterBytes), boundDims(args)};
  return std::move(setup);
}

llvm::Expected<PlanOptions> planOptions(PlanSetup &setup,
                                        const PlanRequest &request,
                                        std::vector<std::string> &notes) {
  PlanOptions options;
  if (request.globalBatch < 1 || request.globalBatch > (int64_t(1) << 40))
    return error("--global-batch " + std::to_string(request.globalBatch) +
                 ": expected 1 to 2^40 samples");
  options.globalBatch = request.globalBatch;
  if (request.objective == "time")
    options.objective = Objective::Time;
  else if (request.objective == "cost")
    options.objective = Objective::Cost;
  else if (request.objective == "energy") {
    options.objective = Objective::Energy;
    // Joules of a device nobody published the power of would be a guess.
    for (const Site &site : setup.cluster->sites)
      for (const NodeGroup &ng : site.nodeGroups)
        if (!ng.power.known())
          return error("--objective energy: " + ng.power.unknownFor +
                       " has no published board power; give its node "
                       "group's power_w in a cluster file");
  } else if (request.objective == "time-to-train") {
    // Ranked by the time to train the tokens, failures counted: the
    // search keeps more than shown for the goodput to reorder.
    if (!(request.goodput.tokens > 0))
      return error("--objective time-to-train: give the token budget "
                   "(--tokens N)");
    options.objective = Objective::Time;
    options.topK = std::max(request.topK, kRankedByBand);
  } else
    return error("--objective '" + request.objective +
                 "': expected time, cost, energy or time-to-train");
  if (auto e = checkGoodputRequest(request.goodput))
    return std::move(e);
  if (request.budgetUsdPerHour < 0)
    return error("--budget: expected a positive number of USD per hour");
  options.budgetUsdPerHour = request.budgetUsdPerHour;
  if (request.topK < 1 || request.topK > 100)
    return error("--top " + std::to_string(request.topK) +
                 ": expected 1 to 100");
  if (request.objective != "time-to-train")
    options.topK = request.topK;
  if (request.rankBy != "step") {
    if (request.rankBy != "p50" && request.rankBy != "p90")
      return error("--rank-by '" + request.rankBy +
                   "': expected step, p50 or p90");
    if (request.objective != "time")
      return error("--rank-by " + request.rankBy +
                   ": ranks step times; --objective " + request.objective +
                   " ranks by its own figure");
    // The band reorders what the search keeps: keep more than shown.
    options.topK = std::max(request.topK, kRankedByBand);
  }
  // "any" (the default): what some export target runs; "none" (or
  // empty): no target holds the search.
  std::string framework =
      request.framework == "none" ? std::string() : request.framework;
  if (!framework.empty() && framework != "any") {
    const auto formats = frameworkFormats();
    if (std::find(formats.begin(), formats.end(), framework) == formats.end())
      return error("--framework '" + request.framework +
                   "': expected any, none, megatron, deepspeed, torchtitan, "
                   "pytorch or jax");
  }
  options.framework = framework;
  // A framework's collectives are NCCL's: SwitchML's switch sum (its own
  // client library) does not run under any of them, so the plan is
  // priced without it.
  // (A strategy given to price is priced on the cluster as stated unless
  // a framework is named.)
  bool stripSwitchMl = !framework.empty() &&
                       (framework != "any" || request.fixedStrategy.empty());
  if (stripSwitchMl)
    for (Site &site : setup.cluster->sites)
      for (NodeGroup &ng : site.nodeGroups)
        if (ng.aggregation.kind == InNetworkAggregation::Kind::SwitchML) {
          ng.aggregation = InNetworkAggregation{};
          notes.push_back(
              "--framework " + framework +
              (framework == "any" ? ": every export target runs" : " runs") +
              " its gradient all-reduce in NCCL: priced "
              "without the cluster's SwitchML aggregation (" +
              site.name + "; --framework none prices it)");
        }
  // Megatron-LM accumulates weight gradients inside the wgrad GEMM and
  // XLA fuses the add into it; PyTorch's autograd (DeepSpeed, torchtitan,
  // DDP/FSDP) adds each micro-batch's gradient in a kernel of its own.
  if (!framework.empty() && framework != "any")
    options.assumptions.fusedGradientAccumulation =
        framework == "megatron" || framework == "jax";
  if (auto e = applyFrameworkOptions(request.flags, options.assumptions))
    return std::move(e);
  auto prec = parseStrategy(
      "precision=" + (request.precision.empty() ? "bf16" : request.precision));
  if (!prec) {
    llvm::consumeError(prec.takeError());
    return error("--precision '" + request.precision +
                 "': expected fp32, tf32, fp16, bf16, fp8 or mxfp8");
  }
  options.precision = prec->precision;
  // torchtitan's float8 converter (torchao) scales each tensor from its
  // current amax; Megatron-LM's default is delayed scaling.
  if (framework == "torchtitan")
    options.fp8Recipe = Fp8Recipe::Tensorwise;
  if (!(request.moeImbalance >= 1 && request.moeImbalance <= kMaxExpertLoad))
    return error("--moe-imbalance " + printableNumber(request.moeImbalance) +
                 ": expected the busiest expert-parallel rank's tokens over "
                 "the mean, from 1 to 64");
  if (request.moeCapacity != 0 &&
      !(request.moeCapacity > 0 && request.moeCapacity <= kMaxExpertLoad))
    return error("--moe-capacity " + printableNumber(request.moeCapacity) +
                 ": expected the experts' capacity factor, above 0 and at "
                 "most 64");
  if ((request.moeImbalance != 1 || request.moeCapacity > 0) &&
      setup.workload.experts() < 2)
    return error(std::string(request.moeCapacity > 0 ? "--moe-capacity"
                                                     : "--moe-imbalance") +
                 ": the model has no mixture-of-experts layers");
  options.moeImbalance = request.moeImbalance;
  options.moeCapacity = request.moeCapacity;
  if (request.showProgress)
    options.progress = [](int64_t priced, const StepResult *best) {
      std::cerr << "\rorrery: priced " << priced << " candidates, best so far "
                << (best ? std::to_string(best->stepS) + " s"
                         : std::string("none"))
                << "   ";
      std::cerr.flush();
    };
  return std::move(options);
}

/// `--framework any`: the fastest plan when it runs on some export target;
/// else the fastest that some target runs, with the faster one beside it
/// (PlanResult::fastestUnrunnable). Where no target runs any plan that
/// fits, the fastest, unrunnable.
/// --rank-by p50|p90: the plans the search kept, best first by that
/// quantile of their step's band (the simulated step where no published
/// run gives one), cut to the `shown`.
static void rankByBand(PlanResult &r, bool p90, int shown) {
  auto key = [&](const StepResult &s) {
    Uncertainty u = uncertaintyOf(s);
    return u.stepRows == 0 ? s.stepS : p90 ? u.stepS.p90 : u.stepS.p50;
  };
  std::vector<std::pair<double, size_t>> order;
  for (size_t i = 0; i < r.top.size(); ++i)
    order.push_back({key(r.top[i]), i});
  std::stable_sort(
      order.begin(), order.end(),
      [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<StepResult> ranked;
  for (size_t k = 0; k < order.size() && int(k) < shown; ++k)
    ranked.push_back(std::move(r.top[order[k].second]));
  r.top = std::move(ranked);
}

/// The best plan's goodput; with --objective time-to-train, the plans kept
/// reordered by their time to train the tokens (stable: equal times keep
/// the step's order) and cut to --top.
static llvm::Expected<GoodputReport>
rankByGoodput(PlanResult &r, const Workload &w, const PlanRequest &request) {
  std::vector<std::pair<double, size_t>> order;
  std::vector<GoodputReport> reports;
  bool rank = request.objective == "time-to-train";
  GoodputRequest estimateOnly = request.goodput;
  estimateOnly.days = 0; // the Monte-Carlo runs for the best alone
  for (size_t i = 0; i < r.top.size() && (rank || i == 0); ++i) {
    auto g = priceGoodput(estimateOnly, r.top[i], r.cluster, w);
    if (!g)
      return g.takeError();
    order.emplace_back(rank ? g->train.seconds : 0, i);
    reports.push_back(std::move(*g));
  }
  std::stable_sort(
      order.begin(), order.end(),
      [](const auto &a, const auto &b) { return a.first < b.first; });
  if (rank) {
    std::vector<StepResult> ranked;
    for (size_t k = 0; k < order.size() && int(k) < request.topK; ++k)
      ranked.push_back(std::move(r.top[order[k].second]));
    r.top = std::move(ranked);
  }
  if (request.goodput.days > 0)
    return priceGoodput(request.goodput, r.top.front(), r.cluster, w);
  return std::move(reports[order.front().second]);
}

static llvm::Expected<PlanResult> searchRunnable(const Workload &w,
                                                 const Cluster &c,
                                                 const PlanOptions &options) {
  PlanOptions open = options;
  open.framework.clear();
  auto fastest = searchPlans(w, c, open);
  if (!fastest || fastest->top.empty())
    return fastest;
  if (!frameworksRunning(fastest->top.front(), w).empty()) {
    fastest->framework = options.framework;
    return fastest;
  }
  auto runnable = searchPlans(w, c, options);
  if (!runnable) {
    llvm::consumeError(runnable.takeError());
    return fastest;
  }
  auto score = [&](const StepResult &r) {
    return options.objective == Objective::Cost     ? r.costUsd
           : options.objective == Objective::Energy ? r.energyJ
                                                    : r.stepS;
  };
  runnable->candidatesPriced += fastest->candidatesPriced;
  runnable->candidatesPruned += fastest->candidatesPruned;
  runnable->searchS += fastest->searchS;
  // Both searches' phases, the one without a framework first.
  SearchTimings &times = runnable->timings;
  for (auto &[name, s] : times.phaseCpuS)
    name += " (runnable)";
  times.phaseCpuS.insert(times.phaseCpuS.begin(),
                         fastest->timings.phaseCpuS.begin(),
                         fastest->timings.phaseCpuS.end());
  times.simulated += fastest->timings.simulated;
  times.scheduled += fastest->timings.scheduled;
  if (score(fastest->top.front()) < score(runnable->top.front()))
    runnable->fastestUnrunnable = fastest->top.front();
  return runnable;
}

llvm::Expected<PlanOutcome> searchPlan(const PlanSetup &setup,
                                       const PlanOptions &options,
                                       const PlanRequest &request,
                                       bool emitMlir) {
  const Workload &workload = setup.workload;
  const Cluster &cluster = *setup.cluster;
  PlanOutcome out;
  // A framework named (not "any": what some target runs, which only holds
  // a search).
  bool named = !options.framework.empty() && options.framework != "any";
  if (needsHeteroSearch(cluster)) {
    if (named && options.framework != "pytorch")
      return error("--framework " + request.framework +
                   ": this cluster needs a heterogeneous plan (stages on "
                   "different device types or sites), which of the export "
                   "targets only pytorch runs");
    if (!request.fixedStrategy.empty())
      return error("--strategy: a strategy string places one device type at "
                   "one site; this cluster needs a heterogeneous plan");
    if (request.budgetUsdPerHour > 0)
      return error("plan: --budget supports clusters of one node type at one "
                   "site");
    if (request.goodput.wanted())
      return error("--tokens, --days: a heterogeneous plan's goodput is not "
                   "priced (one node type at one site only)");
    if (emitMlir)
      return error("--emit-mlir: a plan over mixed device types or sites has "
                   "a mesh per stage; this version writes shard annotations "
                   "for one mesh only");
    // The PyTorch script runs heterogeneous plans (its refusals, ZeRO-3 and
    // fp16 among them, are the exporter's); the search does not filter.
    PlanOptions open = options;
    open.framework.clear();
    auto hetero = searchHeteroPlans(workload, cluster, open);
    if (request.showProgress)
      std::cerr << "\n";
    if (!hetero)
      return hetero.takeError();
    out.doc = heteroPlanJson(*hetero, workload, setup.inputs, cluster);
    out.hetero = std::move(*hetero);
    return std::move(out);
  }
  auto result = [&]() -> llvm::Expected<PlanResult> {
    if (request.fixedStrategy.empty())
      return options.framework == "any"
                 ? searchRunnable(workload, cluster, options)
                 : searchPlans(workload, cluster, options);
    auto s = parseStrategy(request.fixedStrategy);
    if (!s)
      return s.takeError();
    if (s->globalBatch == 0)
      s->globalBatch = options.globalBatch;
    // --precision applies where the strategy names none; never ignored.
    if (request.fixedStrategy.find("precision=") == std::string::npos)
      s->precision = options.precision;
    else if (!request.precision.empty() && s->precision != options.precision)
      return error("--precision " + request.precision +
                   ": the strategy names precision=" +
                   precisionName(s->precision) + "; give one of them");
    // The framework's fp8 scaling where the strategy names none.
    if (s->precision == Precision::FP8 &&
        request.fixedStrategy.find("fp8_recipe=") == std::string::npos)
      s->fp8Recipe = options.fp8Recipe;
    auto r = simulateStep(workload, cluster, *s, options.assumptions);
    if (!r)
      return r.takeError();
    if (!r->fits)
      return error("--strategy: does not fit: " + r->doesNotFit);
    if (named) {
      auto p = exportPlanFor(workload, r->strategy, options.assumptions,
                             &cluster.deviceSpec(0));
      if (!p)
        return p.takeError();
      if (auto e = frameworkRuns(*p, request.framework))
        return error("--strategy: --framework " + request.framework +
                     " does not run it: " + llvm::toString(std::move(e)));
    }
    PlanResult one;
    one.top.push_back(std::move(*r));
    one.candidatesPriced = 1;
    one.cluster = cluster;
    return std::move(one);
  }();
  if (request.showProgress && request.fixedStrategy.empty())
    std::cerr << "\n";
  if (!result)
    return result.takeError();
  if (request.rankBy != "step")
    rankByBand(*result, request.rankBy == "p90", request.topK);
  if (request.goodput.wanted()) {
    auto good = rankByGoodput(*result, workload, request);
    if (!good)
      return good.takeError();
    out.goodput = std::move(*good);
  }
  auto stragglers =
      priceStragglers(workload, result->cluster, result->top.front());
  if (!stragglers)
    return stragglers.takeError();
  out.stragglers = *stragglers;
  out.doc = planJson(*result, workload, setup.inputs);
  out.doc["stragglers"] = stragglersJson(*out.stragglers);
  if (out.goodput)
    out.doc["goodput"] = goodputJson(*out.goodput);
  out.plan = std::move(*result);
  return std::move(out);
}

void printPlanExtras(std::ostream &os, const PlanOutcome &made) {
  if (made.stragglers)
    printStragglers(os, *made.stragglers);
  if (made.goodput && made.plan)
    printGoodput(os, *made.goodput, made.plan->cluster.reliability);
}

int simulateModule(mlir::ModuleOp module, const ModelArgs &simArgs,
                   const ClusterSource &clusterSource,
                   const std::string &strategyText,
                   const nlohmann::json *planDoc, const std::string &simPlan,
                   const Assumptions &assumptions, const std::string &traceFile,
                   bool simJson, std::ostream &os,
                   const GoodputRequest &goodput) {
  if (auto e = checkGoodputRequest(goodput))
    return fail(llvm::toString(std::move(e)));
  auto cluster = loadClusterSource(clusterSource);
  if (!cluster)
    return fail(llvm::toString(cluster.takeError()));
  if (planDoc && isHeteroPlan(*planDoc)) {
    if (goodput.wanted())
      return fail("--tokens, --days: a heterogeneous plan's goodput is not "
                  "priced (one node type at one site only)");
    auto hetero = orrery::heteroStrategyFromPlan(*planDoc, simPlan);
    if (!hetero)
      return fail(llvm::toString(hetero.takeError()));
    auto workload = orrery::buildWorkload(
        module, layoutCostsFor(*cluster, hetero->precision, assumptions),
        assumptions.fusion, assumptions.fineTuning);
    if (!workload)
      return fail(simArgs.path + ": " + llvm::toString(workload.takeError()));
    auto result = orrery::simulateHetero(*workload, *cluster, *hetero,
                                         assumptions, !traceFile.empty());
    if (!result)
      return fail(simPlan + ": " + llvm::toString(result.takeError()));
    auto pools = orrery::clusterPools(*cluster);
    if (!traceFile.empty()) {
      std::ofstream out(traceFile);
      out << orrery::heteroTraceJson(*result, pools);
      if (!out)
        return fail("--trace " + traceFile + ": cannot write the file");
    }
    if (simJson) {
      nlohmann::ordered_json j;
      j["strategy"] = result->strategy.str(pools);
      j["predicted"] = orrery::heteroMetricsJson(*result);
      j["fits"] = result->fits;
      if (!result->fits)
        j["does_not_fit"] = result->doesNotFit;
      j["stages"] = orrery::heteroStagesJson(*result, pools);
      os << j.dump(2) << "\n";
    } else {
      orrery::printHeteroResult(os, *result, pools, *workload, *cluster,
                                orrery::Objective::Time, "");
      if (!result->fits)
        os << "does not fit: " << result->doesNotFit << "\n";
    }
    return 0;
  }
  auto strategy = !planDoc ? orrery::parseStrategy(strategyText)
                           : orrery::strategyFromPlan(*planDoc, simPlan);
  if (!strategy)
    return fail(llvm::toString(strategy.takeError()));
  auto workload = orrery::buildWorkload(
      module, layoutCostsFor(*cluster, strategy->precision, assumptions),
      assumptions.fusion, assumptions.fineTuning);
  if (!workload)
    return fail(simArgs.path + ": " + llvm::toString(workload.takeError()));
  // The trace's detail also gives the per-layer kernel breakdown.
  auto result =
      orrery::simulateStep(*workload, *cluster, *strategy, assumptions, true);
  if (!result)
    return fail(llvm::toString(result.takeError()));
  if (!traceFile.empty()) {
    std::ofstream out(traceFile);
    out << orrery::chromeTraceJson(*result);
    if (!out)
      return fail("--trace " + traceFile + ": cannot write the file");
  }
  std::optional<GoodputReport> good;
  if (goodput.wanted()) {
    auto priced = priceGoodput(goodput, *result, *cluster, *workload);
    if (!priced)
      return fail(llvm::toString(priced.takeError()));
    good = std::move(*priced);
  }
  if (simJson) {
    auto j = orrery::simulateJson(*result, *cluster, *workload);
    if (good)
      j["goodput"] = goodputJson(*good);
    os << j.dump(2) << "\n";
  } else {
    orrery::printSimulation(os, *result, *cluster, *workload);
    if (good)
      printGoodput(os, *good, cluster->reliability);
  }
  return 0;
}

int statsModule(mlir::ModuleOp module, const ModelArgs &args,
                const std::map<std::string, int64_t> &hist, bool json,
                std::ostream &os) {
  auto workload = buildWorkload(module, {}, args.kernels);
  if (!workload)
    return fail(args.path + ": " + llvm::toString(workload.takeError()));
  workload->opHistogram = hist;
  for (const auto &[name, count] : hist)
    if (llvm::StringRef(name).starts_with("onnx_op:") &&
        !isPricedLossOp(name.substr(8)))
      workload->opsWithoutCostFormula[name.substr(8)] = count;
  std::map<std::string, int64_t> dims;
  if (auto d = module->getAttrOfType<mlir::DictionaryAttr>("orrery.dims"))
    for (auto named : d)
      dims[named.getName().str()] =
          mlir::cast<mlir::IntegerAttr>(named.getValue()).getInt();
  if (json)
    os << statsJson(*workload, dims).dump(2) << "\n";
  else
    printStats(os, *workload, dims);
  return 0;
}

} // namespace cli
} // namespace orrery
