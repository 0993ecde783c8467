//===- Export.cpp - `orrery export`
//----------------------------------------===//
//
// A training plan to megatron, deepspeed, torchtitan, pytorch, jax or mlir
// (the model annotated with its shardings); a serving plan to vllm, sglang
// or trtllm.
//
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "orrery/Export/Exporters.h"

#include <fstream>
#include <iostream>

namespace orrery {
namespace cli {

static const std::set<std::string> &servingTargets() {
  static const std::set<std::string> targets = {"vllm", "sglang", "trtllm"};
  return targets;
}

void ExportCommand::add(CLI::App &app) {
  cmd = app.add_subcommand("export", "Write a plan in another framework's "
                                     "own format (docs/export.md)");
  cmd->add_option("plan", plan, "plan JSON file")->required();
  cmd->add_option("--to", format,
                  "megatron, deepspeed, torchtitan, pytorch, jax or mlir; "
                  "for a serving plan vllm, sglang or trtllm")
      ->required()
      ->check(CLI::IsMember([] {
        auto formats = exportFormats();
        formats.insert(formats.end(), {"vllm", "sglang", "trtllm"});
        return formats;
      }()));
  cmd->add_option("-o,--output", output, "write to FILE instead of stdout");
  cmd->add_option("--model", model,
                  "mlir: the model (default: the plan's model.source)");
  cmd->add_option("--cluster", cluster,
                  "mlir: the cluster (default: the plan's cluster.spec)");
}

/// `text` to -o's file, or to stdout.
static int writeOut(const std::string &text, const std::string &output) {
  if (output.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream f(output);
  f << text;
  if (!f)
    return fail("-o " + output + ": cannot write the file");
  return 0;
}

/// A serving plan's export.
static int exportServing(const ExportCommand &c, const nlohmann::json &doc) {
  if (!servingTargets().count(c.format))
    return fail("--to " + c.format + ": " + c.plan +
                " is a serving plan: export it to vllm, sglang or trtllm");
  auto out = exportServingPlan(doc, c.format, c.plan);
  if (!out)
    return fail(llvm::toString(out.takeError()));
  return writeOut(*out, c.output);
}

/// The model annotated with the plan's shardings (--to mlir).
static int exportMlir(const ExportCommand &c, const nlohmann::json &planDoc,
                      const ExportPlan &plan) {
  std::string clusterSpec = c.cluster.empty() && planDoc["cluster"].is_object()
                                ? planDoc["cluster"].value("spec", "")
                                : c.cluster;
  auto cluster = loadCluster(clusterSpec, HardwareCatalog::builtin());
  if (!cluster)
    return fail(c.plan +
                ": cluster.spec: " + llvm::toString(cluster.takeError()));
  ModelArgs args{c.model.empty() ? plan.model : c.model, {}};
  auto dims = planDims(planDoc, c.plan);
  if (!dims)
    return fail(llvm::toString(dims.takeError()));
  args.dims = *dims;
  auto framework = assumptionsFromPlan(planDoc, c.plan);
  if (!framework)
    return fail(llvm::toString(framework.takeError()));
  args.kernels = framework->fusion;
  std::string bytes;
  readFileBytes(resolveModel(args.path), bytes);
  std::string want = planDoc.value("model", nlohmann::json::object())
                         .value("digest_fnv1a64", "");
  if (digestOf(bytes) != want)
    return fail(c.plan + ": model.digest_fnv1a64 " + want + " differs from " +
                args.path + ": the plan is for another model");
  return emitSharded(args, plan.strategy, plan.chunkLayers,
                     layoutCostsFor(*cluster, plan.strategy.precision),
                     c.output.empty() ? "-" : c.output, "export --to mlir",
                     /*upstream=*/true);
}

int ExportCommand::run() {
  nlohmann::json planDoc;
  if (int rc = readJsonObjectFile(plan, planDoc))
    return rc;
  if (isServingPlan(planDoc))
    return exportServing(*this, planDoc);
  if (servingTargets().count(format))
    return fail("--to " + format + ": " + plan + " is a training plan; " +
                format + " takes a serving plan (orrery serve -o)");
  if (llvm::Error e = checkPlanFieldTypes(planDoc, plan))
    return fail(llvm::toString(std::move(e)));
  if (isHeteroPlan(planDoc) && format == "pytorch") {
    auto text = exportHeteroPytorch(planDoc, plan);
    if (!text)
      return fail(llvm::toString(text.takeError()));
    return writeOut(*text, output);
  }
  auto parsed = readExportPlan(planDoc, plan);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()));
  if (format == "mlir")
    return exportMlir(*this, planDoc, *parsed);
  auto text = exportPlan(*parsed, format);
  if (!text)
    return fail(plan + ": " + llvm::toString(text.takeError()));
  if (parsed->aggregation == "sharp" && format == "deepspeed")
    std::cerr << "note: launch with NCCL_COLLNET_ENABLE=1 (e.g. in "
                 ".deepspeed_env): the plan's gradient all-reduce was "
                 "priced through InfiniBand SHARP\n";
  return writeOut(*text, output);
}

} // namespace cli
} // namespace orrery
