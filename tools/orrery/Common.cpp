//===- Common.cpp - what the subcommands share
//-----------------------------===//
//
// The one-line error, the model arguments and front end (import, fuse,
// outline), plan files, and loading what a plan was made for.
//
//===----------------------------------------------------------------------===//

#include "Common.h"
#include "PlanCommand.h"
#include "orrery/CostModel/AssumptionFields.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/InputFile.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/Import/Importer.h"
#include "orrery/Transforms/Passes.h"
#include "orrery/Workload/BuildWorkload.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/stat.h>

namespace orrery {
namespace cli {

namespace {
thread_local ErrorCapture *currentCapture = nullptr;
} // namespace

ErrorCapture::ErrorCapture() : outer(currentCapture) { currentCapture = this; }
ErrorCapture::~ErrorCapture() { currentCapture = outer; }

int fail(const std::string &message) {
  std::string line = orrery::printableLine(message);
  if (currentCapture) {
    if (currentCapture->first.empty())
      currentCapture->first = line;
    return 1;
  }
  std::cerr << "orrery: error: " << line << "\n";
  return 1;
}

llvm::Error applyFrameworkOptions(const FrameworkOptions &o, Assumptions &a) {
  auto bad = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
  };
  for (const auto &[flag, value] : o.fields) {
    const AssumptionField *f = assumptionFieldByFlag(flag);
    if (!f)
      return bad("--" + flag + ": not a framework assumption");
    if (auto e = setAssumption(*f, value, a))
      return e;
  }
  if (o.freeze)
    a.fineTuning.freeze = *o.freeze;
  if (o.lora) {
    auto ft = orrery::parseLora(*o.lora, a.fineTuning);
    if (!ft)
      return ft.takeError();
    a.fineTuning = *ft;
  }
  if (o.layerProfile) {
    std::string text;
    std::string what = "--layer-profile " + *o.layerProfile;
    std::string why = readInputFile(*o.layerProfile, kMaxJsonInputBytes, text);
    if (!why.empty())
      return bad(what + ": " + why);
    auto profile = parseLayerProfileText(text, what);
    if (!profile)
      return profile.takeError();
    a.layerProfile = std::make_shared<const LayerProfile>(std::move(*profile));
  }
  return llvm::Error::success();
}

/// Parses NAME=VALUE pairs of --dim; returns an error message or "".
std::string parseDims(const std::vector<std::string> &specs,
                      orrery::onnx::LoadOptions &options) {
  for (const std::string &spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      return "--dim '" + spec + "': expected NAME=VALUE";
    std::string name = spec.substr(0, eq), value = spec.substr(eq + 1);
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end || errno || v <= 0)
      return "--dim '" + spec + "': value must be a positive integer";
    options.dims[name] = v;
  }
  return "";
}

void addModelArgs(CLI::App *cmd, ModelArgs &args) {
  cmd->add_option("model", args.path, "ONNX model file (.onnx)")->required();
  cmd->add_option("--dim", args.dims,
                  "bind a symbolic dimension, NAME=VALUE (repeatable)")
      ->type_name("NAME=VALUE");
}

/// A model argument: an existing file, or the name of a built-in model
/// (`orrery simulate gpt3-175b`), written at build time by models/generate.py.
namespace {
std::string &modelsDirOverride() {
  static std::string dir;
  return dir;
}
} // namespace

void setModelsDir(const std::string &dir) { modelsDirOverride() = dir; }

std::string resolveModel(const std::string &arg) {
  struct stat st;
  if (stat(arg.c_str(), &st) == 0 || arg.find('/') != std::string::npos ||
      arg.find(".onnx") != std::string::npos)
    return arg;
  const char *dir = std::getenv("ORRERY_MODELS_DIR");
  std::string base = dir                            ? dir
                     : !modelsDirOverride().empty() ? modelsDirOverride()
                                                    : ORRERY_MODELS_DIR;
  std::string path = base + "/" + arg + ".onnx";
  return stat(path.c_str(), &st) == 0 ? path : arg;
}

/// The dims the user bound (the plan's `model.dims`), batch only where it
/// is not the default 1: a workload at batch N prices N rows per sample,
/// and re-importing it at 1 would price another step.
std::map<std::string, int64_t> boundDims(const ModelArgs &args) {
  std::map<std::string, int64_t> out;
  for (const std::string &d : args.dims) {
    size_t eq = d.find('=');
    if (eq == std::string::npos || args.optionalDims.count(d.substr(0, eq)))
      continue;
    int64_t value = std::strtoll(d.c_str() + eq + 1, nullptr, 10);
    if (d.compare(0, eq, "batch") == 0 && value == 1)
      continue;
    out[d.substr(0, eq)] = value;
  }
  return out;
}

/// Binds `batch` to 1 unless the user bound it: workloads for simulate and
/// plan are per sample, and the strategy sets the micro-batch.
void defaultBatchToOne(ModelArgs &args) {
  for (const std::string &d : args.dims)
    if (d.rfind("batch=", 0) == 0)
      return;
  args.dims.push_back("batch=1");
  args.optionalDims.insert("batch");
}

/// Layout prices from a cluster's first device and its intra-node link.
orrery::LayoutCosts layoutCostsFor(const orrery::Cluster &c,
                                   orrery::Precision p,
                                   const orrery::Assumptions &a) {
  orrery::LayoutCosts costs;
  const orrery::NodeGroup &g = c.groupOf(0);
  const orrery::KernelModel &k = a.kernelsFor(*g.device);
  costs.degree = std::max(1, g.scaleUpDevices());
  costs.secondsPerFlop = 1.0 / (g.device->tensorPeak(p) * k.gemmEfficiency);
  costs.secondsPerByte =
      1.0 / (g.device->memoryBandwidthBytesPerS * k.pointwiseMemoryEfficiency);
  costs.kernelS = k.kernelLaunchS;
  if (g.intraNodeLink) {
    double n = costs.degree;
    double bw = g.intraNodeLink->bandwidthBytesPerS *
                orrery::ncclLinkEfficiency(*g.intraNodeLink);
    costs.secondsPerAllReduceByte = 2.0 * (n - 1) / n / bw;
    costs.allReduceLatencyS = 2.0 * (n - 1) * g.intraNodeLink->latencyS;
  }
  return costs;
}

/// Import and (optionally) outline, or the one-line error.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importFrontEnd(mlir::MLIRContext &ctx, const ModelArgs &args, bool outline,
               std::map<std::string, int64_t> *hist) {
  auto error = [](const std::string &m) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), m);
  };
  orrery::onnx::LoadOptions options;
  std::string err = parseDims(args.dims, options);
  options.optionalDims = args.optionalDims;
  if (!err.empty())
    return error(err);
  orrery::onnx::LoadResult loaded =
      args.bytes
          ? orrery::onnx::loadOnnxModelFromBytes(*args.bytes, args.path,
                                                 options)
          : orrery::onnx::loadOnnxModel(resolveModel(args.path), options);
  if (!loaded.model)
    return error(loaded.error);
  auto module = orrery::importModel(ctx, *loaded.model);
  if (!module)
    return module.takeError();
  if (hist)
    *hist = orrery::opHistogram(**module);
  if (args.kernels == orrery::KernelFusion::UnfusedAttention) {
    // The file states attention fused (opset 23's Attention): pricing it
    // with the scores in memory would need the graph it does not hold.
    std::string fused;
    (*module)->walk([&](orrery::FusedAttentionOp op) {
      if (fused.empty())
        if (auto name = mlir::dyn_cast<mlir::NameLoc>(op.getLoc()))
          fused = name.getName().str();
    });
    if (!fused.empty())
      return error(
          args.path + ": node '" + fused +
          "' is one fused Attention op in the file; --kernels "
          "unfused-attention prices attention written out as "
          "MatMul / Softmax / MatMul (use --kernels fused, eager or sdpa)");
  }
  if (outline) {
    using orrery::KernelFusion;
    std::string diag = orrery::fuseAndOutline(
        **module, args.kernels != KernelFusion::Eager,
        args.kernels == KernelFusion::Fused || attentionBySdpa(args.kernels),
        args.kernels != KernelFusion::Sdpa);
    if (!diag.empty())
      return error(args.path + ": layer outlining failed: " + diag);
  }
  return std::move(*module);
}

mlir::OwningOpRef<mlir::ModuleOp> frontEnd(mlir::MLIRContext &ctx,
                                           const ModelArgs &args, bool outline,
                                           std::map<std::string, int64_t> *hist,
                                           int &rc) {
  auto module = importFrontEnd(ctx, args, outline, hist);
  if (!module) {
    rc = fail(llvm::toString(module.takeError()));
    return nullptr;
  }
  rc = 0;
  return std::move(*module);
}

std::string modelBytesOf(const ModelArgs &args) {
  if (args.bytes)
    return *args.bytes;
  std::string bytes;
  readFileBytes(resolveModel(args.path), bytes);
  return bytes;
}

/// The bytes of a file; false when it cannot be read (or is not a regular
/// file, or is larger than 4 GiB).
bool readFileBytes(const std::string &path, std::string &out) {
  return orrery::readInputFile(path, int64_t(4) << 30, out).empty();
}

/// A JSON object from a file; on failure prints the one-line error and
/// returns its exit code.
llvm::Expected<nlohmann::json> parseJsonObject(const std::string &text,
                                               const std::string &what) {
  std::string problem;
  nlohmann::json doc = orrery::parseJsonInput(text, problem);
  if (doc.is_discarded())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + ": " + problem);
  if (!doc.is_object())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   what + ": expected a JSON object");
  return std::move(doc);
}

int readJsonObjectFile(const std::string &path, nlohmann::json &doc) {
  std::string text;
  std::string problem =
      orrery::readInputFile(path, orrery::kMaxJsonInputBytes, text);
  if (!problem.empty())
    return fail(path + ": " + problem);
  auto parsed = parseJsonObject(text, path);
  if (!parsed)
    return fail(llvm::toString(parsed.takeError()));
  doc = std::move(*parsed);
  return 0;
}

llvm::Expected<nlohmann::json> parsePlanDocument(const std::string &text,
                                                 const std::string &what) {
  auto doc = parseJsonObject(text, what);
  if (!doc)
    return doc.takeError();
  if (llvm::Error e = orrery::checkPlanFieldTypes(*doc, what))
    return std::move(e);
  return doc;
}

int readPlanFile(const std::string &path, nlohmann::json &doc) {
  if (int rc = readJsonObjectFile(path, doc))
    return rc;
  if (llvm::Error e = orrery::checkPlanFieldTypes(doc, path))
    return fail(llvm::toString(std::move(e)));
  return 0;
}

/// A plan's model and cluster digests against the inputs at hand.
int checkDigests(const nlohmann::json &planDoc, const std::string &what,
                 const orrery::PlanInputs &inputs, const std::string &modelPath,
                 const std::string &clusterSpec) {
  const nlohmann::json none = nlohmann::json::object();
  std::string wantModel =
      planDoc.value("model", none).value("digest_fnv1a64", "");
  if (wantModel != inputs.modelDigest)
    return fail(what + ": model.digest_fnv1a64 " + wantModel +
                " differs from " + modelPath + " (" + inputs.modelDigest +
                "): the plan is for another model");
  std::string wantCluster =
      planDoc.value("cluster", none).value("digest_fnv1a64", "");
  if (wantCluster != inputs.clusterDigest)
    return fail(what + ": cluster.digest_fnv1a64 " + wantCluster +
                " differs from " + clusterSpec + " (" + inputs.clusterDigest +
                "): the plan is for another cluster");
  return 0;
}

void addPlanSource(CLI::App *cmd, std::string &plan, std::string &model,
                   std::string &cluster) {
  cmd->add_option("plan", plan, "plan JSON written by `orrery plan`")
      ->required();
  cmd->add_option("--model", model, "the model, if not the plan's own");
  cmd->add_option("--cluster", cluster, "the cluster, if not the plan's own");
}

int loadPlan(const std::string &planPath, const std::string &model,
             const std::string &cluster, LoadedPlan &out) {
  if (int rc = readPlanFile(planPath, out.doc))
    return rc;
  const nlohmann::json &doc = out.doc;
  if (!doc.contains("model") || !doc["model"].is_object() ||
      !doc["model"].contains("source") || !doc["model"]["source"].is_string())
    return fail(planPath + ": model.source: missing");
  if (!doc.contains("cluster") || !doc["cluster"].is_object() ||
      !doc["cluster"].contains("spec") || !doc["cluster"]["spec"].is_string())
    return fail(planPath + ": cluster.spec: missing");
  ModelArgs args{
      model.empty() ? doc["model"]["source"].get<std::string>() : model, {}};
  auto dims = planDims(doc, planPath);
  if (!dims)
    return fail(llvm::toString(dims.takeError()));
  args.dims = *dims;
  std::string spec =
      cluster.empty() ? doc["cluster"]["spec"].get<std::string>() : cluster;
  auto assumptions = assumptionsFromPlan(doc, planPath);
  if (!assumptions)
    return fail(llvm::toString(assumptions.takeError()));
  out.assumptions = *assumptions;
  args.kernels = out.assumptions.fusion;
  defaultBatchToOne(args);
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  auto module = frontEnd(ctx, args, true, nullptr, rc);
  if (!module)
    return rc;
  // As `orrery plan` built it, so that the predictions agree.
  auto setup =
      preparePlan(*module, args, {spec, nullptr}, "bf16", out.assumptions,
                  cluster.empty() ? planPath + ": cluster.spec: " : "");
  if (!setup)
    return fail(llvm::toString(setup.takeError()));
  out.cluster = std::move(setup->cluster);
  out.workload = std::move(setup->workload);
  if (int drc = checkDigests(doc, planPath, setup->inputs, args.path, spec))
    return drc;
  out.hetero = isHeteroPlan(doc);
  if (out.hetero) {
    auto hs = heteroStrategyFromPlan(doc, planPath);
    if (!hs)
      return fail(llvm::toString(hs.takeError()));
    out.heteroStrategy = *hs;
  } else {
    auto st = strategyFromPlan(doc, planPath);
    if (!st)
      return fail(llvm::toString(st.takeError()));
    out.strategy = *st;
  }
  return 0;
}

llvm::Expected<ProgramSet> lowerPlan(const LoadedPlan &plan,
                                     const RankSelection &only) {
  return plan.hetero ? lowerHetero(plan.workload, *plan.cluster,
                                   plan.heteroStrategy, plan.assumptions, only)
                     : lowerStep(plan.workload, *plan.cluster, plan.strategy,
                                 plan.assumptions, only);
}

} // namespace cli
} // namespace orrery
