//===- orrery.cpp - the user CLI ------------------------------------------===//
//
//   orrery import MODEL.onnx [--dim NAME=VALUE]... [--outline]
//   orrery stats  MODEL.onnx [--dim NAME=VALUE]... [--json]
//   orrery simulate MODEL --cluster SPEC --strategy "tp=8,pp=8,..." [--json]
//                  [--trace FILE]
//   orrery plan MODEL --cluster SPEC [--global-batch N] [--objective
//   time|cost|energy]
//               [--budget USD_PER_HOUR] [--top K] [--explain] [-o plan.json]
//               [--json]
//   orrery check plan.json [--model MODEL] [--cluster SPEC]
//
// Every user error is one line on stderr, "orrery: error: ...", and exit 1.
//
//===----------------------------------------------------------------------===//

#include "Buckets.h"
#include "Check.h"
#include "Common.h"
#include "Lower.h"
#include "PlanCommand.h"
#include "PlanReport.h"
#include "Report.h"
#include "Run.h"
#include "Serve.h"
#include "Simulate.h"
#include "Stats.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/Export/Exporters.h"
#include "orrery/Import/Importer.h"
#include "orrery/Plan/Plan.h"
#include "orrery/Transforms/ShardAnnotations.h"

#include "mlir/IR/Verifier.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ORRERY_VERSION
#define ORRERY_VERSION "0.0.0"
#endif

namespace {

using namespace orrery::cli;

/// The help text of --kernels.
constexpr const char *kKernelsHelp =
    "which kernels the framework runs: fused (Megatron-Core with Transformer "
    "Engine: flash attention, fused norms, SwiGLU and RoPE; the default), "
    "unfused-attention (Megatron-LM before flash attention: the attention "
    "scores in memory, fused softmax and elementwise chains) or eager (plain "
    "PyTorch: one kernel per op, each dispatched by the host)";

/// How the framework that runs a plan keeps its gradients and which kernels
/// it runs: the flags `simulate` and `plan` share. Only flags given on the
/// command line override (a plan's own assumptions, for `simulate --plan`).
struct FrameworkFlags {
  bool separate = false;
  double bytes = 4, reduceBytes = 4;
  std::string kernels = "fused";
  std::vector<std::string> freeze;
  std::string lora;
  double prefetch = 0;
  std::string layerProfile;
  std::string pipelineGradients = "partitioned";
  bool pipelineMask = false;
  CLI::Option *separateOpt = nullptr, *bytesOpt = nullptr,
              *reduceBytesOpt = nullptr, *kernelsOpt = nullptr,
              *freezeOpt = nullptr, *loraOpt = nullptr, *prefetchOpt = nullptr,
              *layerProfileOpt = nullptr, *pipelineGradientsOpt = nullptr,
              *pipelineMaskOpt = nullptr;
  void add(CLI::App *cmd) {
    pipelineGradientsOpt =
        cmd->add_option(
               "--pipeline-gradients", pipelineGradients,
               "what each tensor-parallel rank sends back between pipeline "
               "stages: partitioned (its shard, gathered at the receiver: "
               "Megatron-LM, DeepSpeed's default; the default) or whole "
               "(DeepSpeed's pipeline.grad_partitioned false, as DeepSpeed "
               "0.3 ran)")
            ->check(CLI::IsMember({"partitioned", "whole"}));
    pipelineMaskOpt = cmd->add_flag(
        "--pipeline-mask", pipelineMask,
        "the [seq, seq] causal mask travels beside every activation between "
        "pipeline stages in fp16, from every tensor-parallel rank (the GPT "
        "pipeline models of DeepSpeed's Megatron examples and of "
        "Megatron-DeepSpeed)");
    layerProfileOpt = cmd->add_option(
        "--layer-profile", layerProfile,
        "a JSON file of your stack's measured forward time of the model's "
        "repeated layer per device type and tp (docs/costmodel.md, \"Layer "
        "profiles\"): what the device model does not explain is priced as "
        "host time per layer");
    freezeOpt = cmd->add_option(
        "--freeze", freeze,
        "fine-tuning: freeze these weights (a name, a dotted prefix or part "
        "of one, '*' for any run, or a layer kind): no gradient, no "
        "optimizer state (repeatable)");
    loraOpt = cmd->add_option(
        "--lora", lora,
        "fine-tuning with LoRA adapters, every base weight frozen: "
        "rank=R[,targets=attention|mlp|all-linear|NAME+...] (default "
        "targets: attention)");
    kernelsOpt =
        cmd->add_option("--kernels", kernels, kKernelsHelp)
            ->check(CLI::IsMember({"fused", "unfused-attention", "eager"}));
    separateOpt = cmd->add_flag(
        "--separate-grad-accumulation", separate,
        "accumulate weight gradients into the main gradients in a kernel of "
        "their own each micro-batch (PyTorch hooks, DeepSpeed's bf16 "
        "optimizer), not inside the weight-gradient GEMM (Megatron-LM)");
    bytesOpt = cmd->add_option("--grad-bytes", bytes,
                               "bytes per gradient element kept (and reduced): "
                               "4 (fp32 main gradients, the default) or 2 "
                               "(16-bit gradients: Megatron-LM with fp16 and "
                               "without --accumulate-allreduce-grads-in-fp32)")
                   ->check(CLI::IsMember({2.0, 4.0}));
    reduceBytesOpt =
        cmd->add_option("--grad-reduce-bytes", reduceBytes,
                        "bytes per gradient element on the wire when "
                        "gradients are reduced, if not those kept: 4 "
                        "reduces 16-bit gradients in fp32 (DeepSpeed's "
                        "fp32_allreduce / communication_data_type fp32)")
            ->check(CLI::IsMember({2.0, 4.0}));
    prefetchOpt =
        cmd->add_option("--zero3-prefetch-params", prefetch,
                        "ZeRO-3: parameters gathered ahead of their use; 0 "
                        "(the default) the next layer whole, as FSDP does "
                        "and the DeepSpeed export configures; DeepSpeed's "
                        "own default stage3_prefetch_bucket_size is 5e7")
            ->check(CLI::NonNegativeNumber);
  }
  /// The flags given on the command line.
  orrery::cli::FrameworkOptions options() const {
    orrery::cli::FrameworkOptions o;
    if (prefetchOpt && prefetchOpt->count())
      o.zero3PrefetchParams = prefetch;
    if (freezeOpt && freezeOpt->count())
      o.freeze = freeze;
    if (loraOpt && loraOpt->count())
      o.lora = lora;
    if (separateOpt && separateOpt->count())
      o.separateGradAccumulation = separate;
    if (bytesOpt && bytesOpt->count())
      o.gradBytes = bytes;
    if (reduceBytesOpt && reduceBytesOpt->count())
      o.gradReduceBytes = reduceBytes;
    if (kernelsOpt && kernelsOpt->count())
      o.kernels = kernels;
    if (layerProfileOpt && layerProfileOpt->count())
      o.layerProfile = layerProfile;
    if (pipelineGradientsOpt && pipelineGradientsOpt->count())
      o.pipelineGradients = pipelineGradients;
    if (pipelineMaskOpt && pipelineMaskOpt->count())
      o.pipelineMask = pipelineMask;
    return o;
  }
  llvm::Error apply(orrery::Assumptions &a) const {
    return orrery::cli::applyFrameworkOptions(options(), a);
  }
};

/// Writes the model at one step's micro-batch (batch = mbs x dp) with the
/// strategy's shardings in MLIR's shard dialect to `path` ("-": stdout).
int emitSharded(ModelArgs args, const orrery::Strategy &st,
                const std::vector<int> &chunkLayers,
                const orrery::LayoutCosts &layoutCosts, const std::string &path,
                const std::string &what) {
  args.dims.erase(std::remove_if(args.dims.begin(), args.dims.end(),
                                 [](const std::string &d) {
                                   return d.rfind("batch=", 0) == 0;
                                 }),
                  args.dims.end());
  args.dims.push_back("batch=" + std::to_string(st.microBatch * st.dp));
  args.optionalDims.insert("batch"); // a model of fixed shapes keeps its own
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  auto module = frontEnd(ctx, args, true, nullptr, rc);
  if (!module)
    return rc;
  orrery::ShardGrid grid;
  for (auto it = st.order.rbegin(); it != st.order.rend(); ++it) {
    grid.axes.push_back(*it);
    grid.sizes.push_back(st.degree(*it));
  }
  orrery::LayoutCosts costs = layoutCosts;
  if (st.tpBatchSplit && st.tp > 1 && st.microBatch % st.tp == 0) {
    costs.batchSplit = true; // as the workload's batch-split layout
    costs.samples = std::max(1, costs.degree);
    costs.sequenceParallel = true;
  }
  orrery::annotateShardings(*module, grid, chunkLayers, st.pp, costs);
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (diag.empty())
      diag = d.str();
    return mlir::success();
  });
  if (mlir::failed(mlir::verify(*module)))
    return fail(what + ": the annotated module does not verify: " + diag);
  if (path == "-") {
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec);
  if (ec)
    return fail(what + " " + path + ": " + ec.message());
  module->print(out);
  out << "\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"Orrery: plans how to train a model on a cluster of GPUs.",
               "orrery"};
  app.set_version_flag("--version", std::string("orrery ") + ORRERY_VERSION);
  app.require_subcommand(1);

  ModelArgs importArgs;
  bool outline = false;
  orrery::cli::LowerCommand lowerCmd;
  orrery::cli::RunCommand runCmd;
  orrery::cli::ProfileCommand profileCmd;
  CLI::App *importCmd = app.add_subcommand(
      "import", "Import an ONNX model and print it in the orrery MLIR dialect");
  addModelArgs(importCmd, importArgs);
  importCmd->add_flag("--outline", outline,
                      "outline repeated layers into functions");
  std::string importKernels = "fused", statsKernels = "fused";
  importCmd
      ->add_option("--kernels", importKernels,
                   std::string("with --outline: ") + kKernelsHelp)
      ->check(CLI::IsMember({"fused", "unfused-attention", "eager"}));

  ModelArgs statsArgs;
  bool json = false;
  CLI::App *statsCmd =
      app.add_subcommand("stats", "Print parameters, FLOPs, activation memory "
                                  "and the layer list of a model");
  addModelArgs(statsCmd, statsArgs);
  statsCmd->add_flag("--json", json, "print JSON instead of a table");
  statsCmd->add_option("--kernels", statsKernels, kKernelsHelp)
      ->check(CLI::IsMember({"fused", "unfused-attention", "eager"}));

  ModelArgs simArgs;
  std::string clusterSpec, strategyText, traceFile;
  bool simJson = false;
  CLI::App *simCmd =
      app.add_subcommand("simulate", "Simulate one training step of a strategy "
                                     "on a cluster, without hardware");
  simCmd
      ->add_option("model", simArgs.path,
                   "ONNX model file, or a built-in model name "
                   "(models/generate.py --list)")
      ->required();
  simCmd
      ->add_option(
          "--dim", simArgs.dims,
          "bind a symbolic dimension, NAME=VALUE (batch defaults to 1: the "
          "micro-batch comes from the strategy)")
      ->type_name("NAME=VALUE");
  simCmd
      ->add_option(
          "--cluster", clusterSpec,
          "cluster spec: a JSON file (docs/cluster.md) or a preset such as "
          "8xA100-80G or 4x8xH100-SXM")
      ->required();
  std::string simPlan;
  CLI::Option *strategyOpt = simCmd->add_option(
      "--strategy", strategyText,
      "e.g. tp=8,pp=8,dp=16,mbs=1,gbs=1536,vpp=2,recompute=full "
      "(docs/strategy.md)");
  simCmd
      ->add_option("--plan", simPlan,
                   "simulate the strategy of a plan JSON file instead (the "
                   "only way to give a heterogeneous strategy)")
      ->excludes(strategyOpt);
  simCmd->add_flag("--json", simJson, "print JSON instead of a table");
  bool noKernelProfile = false;
  simCmd->add_flag("--no-kernel-profile", noKernelProfile,
                   "price kernels with the stated assumptions even where the "
                   "catalog has a measured kernel profile of the device");
  FrameworkFlags simGradients;
  simGradients.add(simCmd);
  simCmd->add_option("--trace", traceFile,
                     "write a Chrome-trace / Perfetto timeline to FILE");

  ModelArgs serveArgs;
  orrery::cli::ServeRequest serve;
  std::string serveOut;
  bool serveJson = false;
  CLI::App *serveCmd = app.add_subcommand(
      "serve", "Size and split a model for serving: simulate a workload "
               "through an engine's scheduler and choose tp, pp and replicas "
               "(docs/serving.md)");
  addModelArgs(serveCmd, serveArgs);
  serveCmd
      ->add_option("--cluster", serve.cluster.spec,
                   "cluster spec: JSON file or preset")
      ->required();
  serveCmd->add_option(
      "--workload", serve.workload,
      "chat (1K in, 256 out), reasoning (1K in, 16K out), summarize, or "
      "isl=..,osl=..,requests=..,rate=..|concurrency=..|offline (default "
      "chat, all at once)");
  serveCmd->add_option("--trace", serve.traceFile,
                       "requests from a CSV file: "
                       "arrival_s,input_tokens,output_tokens");
  serveCmd->add_option("--strategy", serve.strategy,
                       "price this configuration: tp=..,pp=..,replicas=.."
                       "[,device=TYPE]; fields left out are searched");
  serveCmd->add_option("--engine", serve.engine,
                       "the scheduler and host loop modelled: vllm (v1) or "
                       "trtllm");
  serveCmd->add_option("--precision", serve.precision,
                       "weights and linear layers: bf16, fp16 or fp8");
  serveCmd->add_option("--kv-cache", serve.kvCache,
                       "KV-cache elements: auto (16-bit) or fp8");
  serveCmd->add_option("--slo", serve.slo,
                       "p99 targets: ttft_ms=..,tpot_ms=..");
  serveCmd->add_option("--objective", serve.objective,
                       "throughput, cost (requests per dollar) or latency "
                       "(p99 end to end)");
  serveCmd->add_option("--max-requests", serve.maxRequests,
                       "requests a replica runs at once (default: the "
                       "engine's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  serveCmd->add_option("--max-batched-tokens", serve.maxBatchedTokens,
                       "tokens a step computes at most (default: the "
                       "engine's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  serveCmd->add_option("-o,--output", serveOut, "write the serving plan JSON");
  serveCmd->add_option("--trace-out", serve.traceOut,
                       "write the chosen configuration's steps as a Chrome "
                       "trace");
  serveCmd->add_flag("--json", serveJson, "print the plan JSON");

  ModelArgs planArgs;
  std::string planCluster, objective = "time", planOut, precision = "bf16";
  int64_t globalBatch = 1024;
  double budget = 0;
  int topK = 5;
  bool explain = false, planJsonOut = false, quiet = false;
  CLI::App *planCmd =
      app.add_subcommand("plan", "Search for the fastest (or cheapest) "
                                 "strategy that fits and write the plan");
  planCmd
      ->add_option("model", planArgs.path,
                   "ONNX model file or built-in model name")
      ->required();
  planCmd
      ->add_option("--dim", planArgs.dims,
                   "bind a symbolic dimension, NAME=VALUE")
      ->type_name("NAME=VALUE");
  planCmd
      ->add_option("--cluster", planCluster,
                   "cluster spec: JSON file or preset")
      ->required();
  planCmd
      ->add_option("--global-batch", globalBatch, "samples per training step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  planCmd
      ->add_option("--objective", objective,
                   "time, cost (USD per step) or energy (J per step)")
      ->check(CLI::IsMember({"time", "cost", "energy"}));
  planCmd
      ->add_option(
          "--budget", budget,
          "USD per hour: use as many nodes as this buys, fastest on them")
      ->check(CLI::PositiveNumber);
  planCmd->add_option("--top", topK, "how many plans to report")
      ->check(CLI::Range(1, 100));
  planCmd->add_option("--precision", precision, "fp32, tf32, fp16, bf16 or fp8")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "fp8"}));
  planCmd->add_flag("--explain", explain,
                    "say why the best plan beats the runners-up");
  planCmd->add_option("-o,--output", planOut, "write the plan JSON to FILE");
  planCmd->add_flag("--json", planJsonOut,
                    "print the plan JSON instead of the summary");
  planCmd->add_flag(
      "--quiet", quiet,
      "no progress on stderr (shown only when stderr is a terminal)");
  std::string fixedStrategy, lengthBuckets;
  planCmd->add_option(
      "--length-buckets", lengthBuckets,
      "variable-length data trained in length buckets: DIM=LENGTH:FRACTION,... "
      "(e.g. seq=512:0.5,2048:0.3,8192:0.2, fractions of the tokens): a plan "
      "per bucket at a constant token budget (--global-batch samples of the "
      "longest), with the cost of switching between them");
  double planMoeImbalance = 1, planMoeCapacity = 0;
  planCmd->add_option(
      "--moe-imbalance", planMoeImbalance,
      "mixture of experts: the busiest expert-parallel rank's routed tokens "
      "over the mean, 1 to 64, every candidate priced with it "
      "(docs/strategy.md moe_imbalance)");
  planCmd->add_option(
      "--moe-capacity", planMoeCapacity,
      "mixture of experts: the experts' capacity factor (tokens above "
      "dropped, buffers padded; Megatron-Core's --moe-expert-capacity-factor), "
      "every candidate priced with it");
  planCmd->add_option("--strategy", fixedStrategy,
                      "no search: price this strategy (docs/strategy.md) and "
                      "write it as the plan, e.g. to export a configuration "
                      "you already run");
  FrameworkFlags planGradients;
  planGradients.add(planCmd);
  std::string planFramework;
  planCmd
      ->add_option("--framework", planFramework,
                   "search only what this framework runs, as `orrery export "
                   "--to` writes it (megatron, deepspeed, torchtitan, "
                   "pytorch, jax), priced with its gradient accumulation")
      ->check(CLI::IsMember(orrery::frameworkFormats()));
  std::string emitMlir;
  planCmd->add_option("--emit-mlir", emitMlir,
                      "write the model annotated with the plan's shardings "
                      "(MLIR shard dialect) to FILE");

  std::string checkPlan, checkModel, checkCluster;
  CLI::App *checkCmd = app.add_subcommand(
      "check",
      "Validate a plan against its model and cluster and simulate it again");
  checkCmd->add_option("plan", checkPlan, "plan JSON file")->required();
  checkCmd->add_option("--model", checkModel,
                       "the model (default: the plan's model.source)");
  checkCmd->add_option("--cluster", checkCluster,
                       "the cluster (default: the plan's cluster.spec)");

  std::string reportPlan, reportOut, reportModel, reportCluster, reportMeasured;
  CLI::App *reportCmd = app.add_subcommand(
      "report", "Write a plan as one self-contained HTML page: the step's "
                "timeline, memory per device, the stages on the cluster, "
                "the runners-up");
  reportCmd->add_option("plan", reportPlan, "plan JSON file")->required();
  reportCmd->add_option("-o,--output", reportOut, "the HTML file to write")
      ->required();
  reportCmd->add_option("--model", reportModel,
                        "the model (default: the plan's model.source)");
  reportCmd->add_option("--cluster", reportCluster,
                        "the cluster (default: the plan's cluster.spec)");
  reportCmd->add_option("--measured", reportMeasured,
                        "a step measured by `orrery run --json`: its timeline "
                        "and memory beside the prediction");

  std::string exportPlanPath, exportFormat, exportOut, exportModel,
      exportCluster;
  CLI::App *exportCmd = app.add_subcommand(
      "export", "Write a plan in another framework's own format "
                "(docs/export.md)");
  exportCmd->add_option("plan", exportPlanPath, "plan JSON file")->required();
  exportCmd
      ->add_option("--to", exportFormat,
                   "megatron, deepspeed, torchtitan, pytorch, jax or mlir; "
                   "for a serving plan vllm, sglang or trtllm")
      ->required()
      ->check(CLI::IsMember([] {
        auto formats = orrery::exportFormats();
        formats.insert(formats.end(), {"vllm", "sglang", "trtllm"});
        return formats;
      }()));
  exportCmd->add_option("-o,--output", exportOut,
                        "write to FILE instead of stdout");
  exportCmd->add_option("--model", exportModel,
                        "mlir: the model (default: the plan's model.source)");
  exportCmd->add_option("--cluster", exportCluster,
                        "mlir: the cluster (default: the plan's cluster.spec)");
  lowerCmd.add(app);
  runCmd.add(app);
  profileCmd.add(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    return fail(e.what());
  }

  if (*lowerCmd.cmd)
    return lowerCmd.run();
  if (*runCmd.cmd)
    return runCmd.run(argc, argv);
  if (*profileCmd.cmd)
    return profileCmd.run(argc, argv);

  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  if (*importCmd) {
    orrery::parseKernelFusion(importKernels, importArgs.kernels);
    auto module = frontEnd(ctx, importArgs, outline, nullptr, rc);
    if (!module)
      return rc;
    module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  if (*exportCmd) {
    static const std::set<std::string> servingTargets = {"vllm", "sglang",
                                                         "trtllm"};
    {
      std::string text;
      if (readFileBytes(exportPlanPath, text)) {
        auto parsed = nlohmann::json::parse(text, nullptr, false);
        if (orrery::cli::isServingPlan(parsed)) {
          if (!servingTargets.count(exportFormat))
            return fail("--to " + exportFormat + ": " + exportPlanPath +
                        " is a serving plan: export it to vllm, sglang or "
                        "trtllm");
          auto out = orrery::cli::exportServingPlan(parsed, exportFormat,
                                                    exportPlanPath);
          if (!out)
            return fail(llvm::toString(out.takeError()));
          if (exportOut.empty()) {
            std::cout << *out;
            return 0;
          }
          std::ofstream f(exportOut);
          f << *out;
          if (!f)
            return fail("-o " + exportOut + ": cannot write the file");
          return 0;
        }
      }
    }
    if (servingTargets.count(exportFormat))
      return fail("--to " + exportFormat + ": " + exportPlanPath +
                  " is a training plan; " + exportFormat +
                  " takes a serving plan (orrery serve -o)");
    nlohmann::json planDoc;
    if (int readRc = readPlanFile(exportPlanPath, planDoc))
      return readRc;
    auto plan = orrery::readExportPlan(planDoc, exportPlanPath);
    if (!plan)
      return fail(llvm::toString(plan.takeError()));
    if (exportFormat == "mlir") {
      std::string clusterSpec =
          exportCluster.empty() && planDoc["cluster"].is_object()
              ? planDoc["cluster"].value("spec", "")
              : exportCluster;
      auto cluster =
          orrery::loadCluster(clusterSpec, orrery::HardwareCatalog::builtin());
      if (!cluster)
        return fail(exportPlanPath +
                    ": cluster.spec: " + llvm::toString(cluster.takeError()));
      ModelArgs args{exportModel.empty() ? plan->model : exportModel, {}};
      auto dims = orrery::planDims(planDoc, exportPlanPath);
      if (!dims)
        return fail(llvm::toString(dims.takeError()));
      args.dims = *dims;
      auto framework = orrery::assumptionsFromPlan(planDoc, exportPlanPath);
      if (!framework)
        return fail(llvm::toString(framework.takeError()));
      args.kernels = framework->fusion;
      std::string bytes;
      readFileBytes(resolveModel(args.path), bytes);
      std::string want = planDoc.value("model", nlohmann::json::object())
                             .value("digest_fnv1a64", "");
      if (orrery::digestOf(bytes) != want)
        return fail(exportPlanPath + ": model.digest_fnv1a64 " + want +
                    " differs from " + args.path +
                    ": the plan is for another model");
      return emitSharded(args, plan->strategy, plan->chunkLayers,
                         layoutCostsFor(*cluster, plan->strategy.precision),
                         exportOut.empty() ? "-" : exportOut,
                         "export --to mlir");
    }
    auto text2 = orrery::exportPlan(*plan, exportFormat);
    if (!text2)
      return fail(exportPlanPath + ": " + llvm::toString(text2.takeError()));
    if (plan->aggregation == "sharp" && exportFormat == "deepspeed")
      std::cerr << "note: launch with NCCL_COLLNET_ENABLE=1 (e.g. in "
                   ".deepspeed_env): the plan's gradient all-reduce was "
                   "priced through InfiniBand SHARP\n";
    if (exportOut.empty()) {
      std::cout << *text2;
      return 0;
    }
    std::ofstream out(exportOut);
    out << *text2;
    if (!out)
      return fail("-o " + exportOut + ": cannot write the file");
    return 0;
  }
  if (*simCmd) {
    if (strategyText.empty() && simPlan.empty())
      return fail("simulate: give --strategy or --plan");
    nlohmann::json planDoc;
    orrery::Assumptions assumptions;
    if (!simPlan.empty()) {
      if (int readRc = readPlanFile(simPlan, planDoc))
        return readRc;
      auto fromPlan = orrery::assumptionsFromPlan(planDoc, simPlan);
      if (!fromPlan)
        return fail(llvm::toString(fromPlan.takeError()));
      assumptions = *fromPlan;
    }
    assumptions.useMeasuredKernels = !noKernelProfile;
    if (auto e = simGradients.apply(assumptions))
      return fail(llvm::toString(std::move(e)));
    defaultBatchToOne(simArgs);
    simArgs.kernels = assumptions.fusion;
    auto module = frontEnd(ctx, simArgs, true, nullptr, rc);
    if (!module)
      return rc;
    return orrery::cli::simulateModule(
        *module, simArgs, {clusterSpec, nullptr}, strategyText,
        simPlan.empty() ? nullptr : &planDoc, simPlan, assumptions, traceFile,
        simJson, std::cout);
  }

  if (*checkCmd) {
    // A serving plan (orrery serve -o): served again and compared.
    nlohmann::json doc;
    std::string text;
    if (readFileBytes(checkPlan, text)) {
      auto parsed = nlohmann::json::parse(text, nullptr, false);
      if (orrery::cli::isServingPlan(parsed)) {
        std::string model;
        auto request =
            orrery::cli::servingRequestOf(parsed, checkPlan, model);
        if (!request)
          return fail(llvm::toString(request.takeError()));
        if (!checkCluster.empty())
          request->cluster.spec = checkCluster;
        ModelArgs args{checkModel.empty() ? model : checkModel, {}};
        defaultBatchToOne(args);
        auto module = frontEnd(ctx, args, true, nullptr, rc);
        if (!module)
          return rc;
        return orrery::cli::checkServingPlan(*module, args, parsed, checkPlan,
                                             *request, std::cout);
      }
    }
  }
  if (*checkCmd || *reportCmd) {
    // A report checks the plan first.
    const bool reporting = bool(*reportCmd);
    const std::string &path = reporting ? reportPlan : checkPlan;
    LoadedPlan loaded;
    if (int loadRc = loadPlan(path, reporting ? reportModel : checkModel,
                              reporting ? reportCluster : checkCluster, loaded))
      return loadRc;
    return checkPlanDoc(loaded.doc, path, loaded.workload, *loaded.cluster,
                        reporting ? reportOut : "",
                        reporting ? reportMeasured : "");
  }
  if (*planCmd) {
    ModelArgs args = planArgs;
    // The kernels the plan is priced with (--kernels).
    orrery::Assumptions framework;
    if (auto e = planGradients.apply(framework))
      return fail(llvm::toString(std::move(e)));
    args.kernels = planArgs.kernels = framework.fusion;
    // Length buckets bind their dim per bucket; the first import (and the
    // digest) uses the longest.
    std::optional<orrery::LengthBuckets> buckets;
    if (!lengthBuckets.empty()) {
      auto b = orrery::parseLengthBuckets(lengthBuckets, globalBatch);
      if (!b)
        return fail(llvm::toString(b.takeError()));
      for (const std::string &d : args.dims)
        if (d.rfind(b->dim + "=", 0) == 0)
          return fail("--length-buckets binds " + b->dim +
                      " per bucket; drop --dim " + d);
      args.dims.push_back(b->dim + "=" +
                          std::to_string(b->buckets.back().length));
      buckets = std::move(*b);
    }
    defaultBatchToOne(args);
    auto module = frontEnd(ctx, args, true, nullptr, rc);
    if (!module)
      return rc;
    auto setup = orrery::cli::preparePlan(*module, args, {planCluster, nullptr},
                                          precision, framework);
    if (!setup)
      return fail(llvm::toString(setup.takeError()));

    orrery::cli::PlanRequest request;
    request.globalBatch = globalBatch;
    request.objective = objective;
    request.budgetUsdPerHour = budget;
    request.topK = topK;
    request.precision = precision;
    request.framework = planFramework;
    request.fixedStrategy = fixedStrategy;
    request.moeImbalance = planMoeImbalance;
    request.moeCapacity = planMoeCapacity;
    request.flags = planGradients.options();
    // Progress goes to a terminal only: a log or a pipe gets the result
    // and, on failure, the one error line alone.
    request.showProgress = !quiet && ::isatty(STDERR_FILENO);
    std::vector<std::string> notes;
    auto options = orrery::cli::planOptions(*setup, request, notes);
    if (!options)
      return fail(llvm::toString(options.takeError()));
    if (!quiet)
      for (const std::string &note : notes)
        std::cerr << "note: " << note << "\n";
    if (buckets) {
      const char *why = orrery::needsHeteroSearch(*setup->cluster)
                            ? "plans one node type at one site"
                        : !fixedStrategy.empty() ? "searches; drop --strategy"
                        : budget > 0             ? "takes no --budget"
                        : !emitMlir.empty()      ? "takes no --emit-mlir"
                        : options->objective != orrery::Objective::Time
                            ? "minimizes time only"
                            : nullptr;
      if (why)
        return fail(std::string("--length-buckets ") + why);
      return planLengthBucketsCommand(ctx, args, *buckets, *setup->cluster,
                                      *options, setup->inputs, framework,
                                      setup->layoutCosts, planOut, planJsonOut);
    }
    auto made =
        orrery::cli::searchPlan(*setup, *options, request, !emitMlir.empty());
    if (!made)
      return fail(llvm::toString(made.takeError()));
    std::string text = made->doc.dump(2) + "\n";
    if (!planOut.empty()) {
      std::ofstream out(planOut);
      out << text;
      if (!out)
        return fail("-o " + planOut + ": cannot write the file");
    }
    if (made->plan && !emitMlir.empty())
      if (int emitRc = emitSharded(planArgs, made->plan->top.front().strategy,
                                   made->plan->top.front().chunkLayers,
                                   setup->layoutCosts, emitMlir, "--emit-mlir"))
        return emitRc;
    if (planJsonOut)
      std::cout << text;
    else if (made->hetero)
      orrery::printHeteroPlan(std::cout, *made->hetero, setup->workload,
                              *setup->cluster, options->objective);
    else
      orrery::printPlan(std::cout, *made->plan, setup->workload,
                        options->objective, explain);
    return 0;
  }

  if (*serveCmd) {
    defaultBatchToOne(serveArgs);
    auto module = frontEnd(ctx, serveArgs, true, nullptr, rc);
    if (!module)
      return rc;
    return orrery::cli::serveModule(*module, serveArgs, serve, serveJson,
                                    serveOut, std::cout);
  }

  std::map<std::string, int64_t> hist;
  orrery::parseKernelFusion(statsKernels, statsArgs.kernels);
  auto module = frontEnd(ctx, statsArgs, true, &hist, rc);
  if (!module)
    return rc;
  return orrery::cli::statsModule(*module, statsArgs, hist, json, std::cout);
}
