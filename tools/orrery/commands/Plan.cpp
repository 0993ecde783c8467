//===- Plan.cpp - `orrery plan`
//--------------------------------------------===//
#include "Buckets.h"
#include "Commands.h"
#include "GoodputFlags.h"
#include "PlanCommand.h"
#include "PlanReport.h"
#include "orrery/Plan/Capabilities.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <unistd.h>

namespace orrery {
namespace cli {

void PlanCommand::add(CLI::App &app) {
  cmd = app.add_subcommand("plan", "Search for the fastest (or cheapest) "
                                   "strategy that fits and write the plan");
  cmd->add_option("model", args.path, "ONNX model file or built-in model name")
      ->required();
  cmd->add_option("--dim", args.dims, "bind a symbolic dimension, NAME=VALUE")
      ->type_name("NAME=VALUE");
  cmd->add_option("--cluster", cluster, "cluster spec: JSON file or preset")
      ->required();
  cmd->add_option("--global-batch", globalBatch, "samples per training step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--objective", objective,
                  "time, cost (USD per step), energy (J per step) or "
                  "time-to-train (of --tokens, failures counted)")
      ->check(CLI::IsMember({"time", "cost", "energy", "time-to-train"}));
  cmd->add_option(
         "--budget", budget,
         "USD per hour: use as many nodes as this buys, fastest on them")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--top", topK, "how many plans to report")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--rank-by", rankBy,
                  "step (the simulated step, the default), p50 or p90 (the "
                  "step's uncertainty band: docs/costmodel.md, \"Uncertainty "
                  "band\"); with --objective time")
      ->check(CLI::IsMember({"step", "p50", "p90"}));
  cmd->add_option("--precision", precision,
                  "fp32, tf32, fp16, bf16, fp8 or mxfp8 (default bf16; "
                  "with --strategy, what it names unless it names none)")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8"}));
  cmd->add_flag("--explain", explain,
                "say why the best plan beats the runners-up");
  cmd->add_option("-o,--output", output, "write the plan JSON to FILE");
  cmd->add_flag("--json", json, "print the plan JSON instead of the summary");
  cmd->add_flag("--timings", timings,
                "print where the planning's CPU time went to stderr (process "
                "start, front end, workload, the search's phases, output)");
  cmd->add_flag("--quiet", quiet,
                "no progress on stderr (shown only when stderr is a terminal)");
  cmd->add_option(
      "--length-buckets", lengthBuckets,
      "variable-length data trained in length buckets: DIM=LENGTH:FRACTION,... "
      "(e.g. seq=512:0.5,2048:0.3,8192:0.2, fractions of the tokens): a plan "
      "per bucket at a constant token budget (--global-batch samples of the "
      "longest), with the cost of switching between them");
  cmd->add_option(
      "--moe-imbalance", moeImbalance,
      "mixture of experts: the busiest expert-parallel rank's routed tokens "
      "over the mean, 1 to 64, every candidate priced with it "
      "(docs/strategy.md moe_imbalance)");
  cmd->add_option(
      "--moe-capacity", moeCapacity,
      "mixture of experts: the experts' capacity factor (tokens above "
      "dropped, buffers padded; Megatron-Core's --moe-expert-capacity-factor), "
      "every candidate priced with it");
  cmd->add_option("--strategy", fixedStrategy,
                  "no search: price this strategy (docs/strategy.md) and "
                  "write it as the plan, e.g. to export a configuration "
                  "you already run");
  flags.add(cmd);
  addGoodputFlags(cmd, goodput);
  std::vector<std::string> frameworks = {"any", "none"};
  for (const std::string &f : frameworkFormats())
    frameworks.push_back(f);
  cmd->add_option("--framework", framework,
                  "search only what this framework runs, as `orrery export "
                  "--to` writes it (megatron, deepspeed, torchtitan, "
                  "pytorch, jax), priced with its gradient accumulation "
                  "(torchtitan with --kernels compiled unless told); "
                  "any (the default): the best plan some of them runs, the "
                  "faster one none runs shown beside it; none: the fastest, "
                  "whoever runs it")
      ->check(CLI::IsMember(frameworks));
  cmd->add_option("--emit-mlir", emitMlir,
                  "write the model annotated with the plan's shardings "
                  "(MLIR shard dialect) to FILE");
}

/// Why --length-buckets does not go with the other options given, or null.
static const char *bucketConflict(const PlanCommand &p, const Cluster &c,
                                  Objective objective) {
  return needsHeteroSearch(c)           ? "plans one node type at one site"
         : !p.fixedStrategy.empty()     ? "searches; drop --strategy"
         : p.budget > 0                 ? "takes no --budget"
         : !p.emitMlir.empty()          ? "takes no --emit-mlir"
         : objective != Objective::Time ? "minimizes time only"
                                        : nullptr;
}

/// --timings: each phase's CPU seconds (every thread's) and the search's
/// counts, to stderr.
static void printTimings(const std::vector<std::pair<std::string, double>> &p,
                         const PlanResult *plan) {
  double total = 0;
  std::fprintf(stderr, "timings (CPU seconds of this process):\n");
  for (const auto &[name, s] : p) {
    std::fprintf(stderr, "  %-52s %8.3f\n", name.c_str(), s);
    total += s;
  }
  std::fprintf(stderr, "  %-52s %8.3f\n", "total", total);
  if (!plan)
    return;
  const SearchTimings &t = plan->timings;
  double searchS = 0;
  for (const auto &[name, s] : t.phaseCpuS)
    searchS += s;
  std::fprintf(stderr,
               "  candidates: %lld priced, %lld pruned (memory floor or "
               "step bound); %lld steps simulated, %lld of them scheduled "
               "(the rest stopped at the bound); %.1f us of search a step\n",
               (long long)plan->candidatesPriced,
               (long long)plan->candidatesPruned, (long long)t.simulated,
               (long long)t.scheduled,
               t.simulated ? 1e6 * searchS / double(t.simulated) : 0.0);
}

int PlanCommand::run() {
  std::vector<std::pair<std::string, double>> phases;
  double cpu = 0;
  auto phase = [&](const char *name) {
    double now = processCpuSeconds();
    phases.emplace_back(name, now - cpu);
    cpu = now;
  };
  phase("process start (libraries, static init, arguments)");
  ModelArgs modelArgs = args;
  // The kernels the plan is priced with (--kernels).
  Assumptions assumptions;
  // torchtitan runs its own kernels (torch.compile and SDPA) unless
  // --kernels says which of them.
  FrameworkOptions given = flags.options();
  if (framework == "torchtitan" && !flags.given("kernels"))
    given.set("kernels", double(KernelFusion::Compiled));
  if (auto e = flags.apply(given, assumptions))
    return fail(llvm::toString(std::move(e)));
  modelArgs.kernels = args.kernels = assumptions.fusion;
  // Length buckets bind their dim per bucket; the first import (and the
  // digest) uses the longest.
  std::optional<LengthBuckets> buckets;
  if (!lengthBuckets.empty()) {
    auto b = parseLengthBuckets(lengthBuckets, globalBatch);
    if (!b)
      return fail(llvm::toString(b.takeError()));
    for (const std::string &d : modelArgs.dims)
      if (d.rfind(b->dim + "=", 0) == 0)
        return fail("--length-buckets binds " + b->dim +
                    " per bucket; drop --dim " + d);
    modelArgs.dims.push_back(b->dim + "=" +
                             std::to_string(b->buckets.back().length));
    buckets = std::move(*b);
  }
  defaultBatchToOne(modelArgs);
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  auto module = frontEnd(ctx, modelArgs, true, nullptr, rc);
  if (!module)
    return rc;
  phase("front end (model, import, passes)");
  auto setup = preparePlan(*module, modelArgs, {cluster, nullptr}, precision,
                           assumptions);
  if (!setup)
    return fail(llvm::toString(setup.takeError()));
  phase("cluster and workload");

  PlanRequest request;
  request.globalBatch = globalBatch;
  request.objective = objective;
  request.budgetUsdPerHour = budget;
  request.topK = topK;
  request.rankBy = rankBy;
  request.goodput = goodput;
  request.precision = precision;
  request.framework = framework;
  request.fixedStrategy = fixedStrategy;
  request.moeImbalance = moeImbalance;
  request.moeCapacity = moeCapacity;
  request.flags = given;
  // Progress goes to a terminal only: a log or a pipe gets the result
  // and, on failure, the one error line alone.
  request.showProgress = !quiet && ::isatty(STDERR_FILENO);
  std::vector<std::string> notes;
  auto options = planOptions(*setup, request, notes);
  if (!options)
    return fail(llvm::toString(options.takeError()));
  if (!quiet)
    for (const std::string &note : notes)
      std::cerr << "note: " << note << "\n";
  if (buckets) {
    if (const char *why =
            bucketConflict(*this, *setup->cluster, options->objective))
      return fail(std::string("--length-buckets ") + why);
    return planLengthBucketsCommand(ctx, modelArgs, *buckets, *setup->cluster,
                                    *options, setup->inputs, assumptions,
                                    setup->layoutCosts, output, json);
  }
  auto made = searchPlan(*setup, *options, request, !emitMlir.empty());
  if (!made)
    return fail(llvm::toString(made.takeError()));
  phase(made->hetero ? "heterogeneous search and the plan JSON"
                     : "options, stragglers and the plan JSON");
  if (made->plan) { // the search's own phases before what surrounds them
    const auto &searched = made->plan->timings.phaseCpuS;
    for (const auto &p : searched)
      phases.back().second -= p.second;
    phases.insert(phases.end() - 1, searched.begin(), searched.end());
  }
  std::string text = made->doc.dump(2) + "\n";
  if (!output.empty()) {
    std::ofstream out(output);
    out << text;
    if (!out)
      return fail("-o " + output + ": cannot write the file");
  }
  if (made->plan && !emitMlir.empty())
    if (int emitRc = emitSharded(args, made->plan->top.front().strategy,
                                 made->plan->top.front().chunkLayers,
                                 setup->layoutCosts, emitMlir, "--emit-mlir"))
      return emitRc;
  if (json)
    std::cout << text;
  else if (made->hetero)
    printHeteroPlan(std::cout, *made->hetero, setup->workload, *setup->cluster,
                    options->objective,
                    nlohmann::json::parse(made->doc.dump()));
  else {
    printPlan(std::cout, *made->plan, setup->workload, options->objective,
              explain);
    printPlanExtras(std::cout, *made);
  }
  if (timings) {
    std::cout.flush();
    phase("output");
    printTimings(phases, made->plan ? &*made->plan : nullptr);
  }
  return 0;
}

} // namespace cli
} // namespace orrery
