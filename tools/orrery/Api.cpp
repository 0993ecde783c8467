//===- Api.cpp - Orrery as a library of calls -----------------------------===//
//
// Each call runs the CLI's own function for its subcommand under an
// ErrorCapture, so an error is the line the CLI would print.
//
//===----------------------------------------------------------------------===//

#include "Api.h"
#include "Check.h"
#include "PlanCommand.h"
#include "PlanReport.h"
#include "orrery/CostModel/JsonInput.h"
#include "orrery/Export/Exporters.h"
#include "orrery/Plan/Plan.h"

#include <mutex>
#include <sstream>

namespace orrery {
namespace api {

class Model {
public:
  std::mutex mutex;
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  cli::ModelArgs args;
  std::map<std::string, int64_t> histogram;
};

namespace {

template <typename T> Outcome<T> failed(std::string message) {
  Outcome<T> o;
  o.error = message.empty() ? "failed (no message)" : std::move(message);
  return o;
}

/// The model was imported for its kernels; a plan or flags priced with
/// others would price a graph it does not hold.
std::string kernelsMismatch(KernelFusion asked, const Model &m) {
  return std::string("kernels '") + kernelFusionName(asked) +
         "': the model was loaded for '" + kernelFusionName(m.args.kernels) +
         "' (load it again with kernels=...)";
}

} // namespace

Outcome<ModelRef> loadModel(const std::string &name, const std::string *bytes,
                            const std::vector<std::string> &dims,
                            const std::string &kernels) {
  auto m = std::make_shared<Model>();
  m->context.disableMultithreading();
  m->args.path = name;
  m->args.dims = dims;
  if (bytes)
    m->args.bytes = std::make_shared<const std::string>(*bytes);
  if (!parseKernelFusion(kernels, m->args.kernels))
    return failed<ModelRef>("kernels '" + kernels +
                            "': expected fused, unfused-attention, eager, sdpa or compiled");
  cli::defaultBatchToOne(m->args);
  auto module = cli::importFrontEnd(m->context, m->args, true, &m->histogram);
  if (!module)
    return failed<ModelRef>(printableLine(llvm::toString(module.takeError())));
  m->module = std::move(*module);
  return {m, ""};
}

const std::string &modelName(const Model &m) { return m.args.path; }
std::string modelKernels(const Model &m) {
  return kernelFusionName(m.args.kernels);
}

Outcome<std::string> stats(Model &m, bool json) {
  std::lock_guard<std::mutex> lock(m.mutex);
  cli::ErrorCapture capture;
  std::ostringstream os;
  if (cli::statsModule(*m.module, m.args, m.histogram, json, os))
    return failed<std::string>(capture.message());
  return {os.str(), ""};
}

Outcome<std::string> describeCluster(const cli::ClusterSource &source) {
  auto c = cli::loadClusterSource(source);
  if (!c)
    return failed<std::string>(printableLine(llvm::toString(c.takeError())));
  nlohmann::ordered_json j;
  j["name"] = c->name;
  j["devices"] = c->numDevices();
  j["nodes"] = c->numNodes();
  j["sites"] = c->sites.size();
  std::vector<std::string> types;
  for (int d = 0; d < c->numDevices(); ++d) {
    const std::string &t = c->deviceSpec(d).name;
    if (std::find(types.begin(), types.end(), t) == types.end())
      types.push_back(t);
  }
  j["device_types"] = types;
  j["homogeneous"] = c->homogeneous();
  return {j.dump(), ""};
}

Outcome<std::string> simulate(Model &m, const cli::ClusterSource &cluster,
                              const std::string &strategy,
                              const std::string *planJson,
                              const cli::FrameworkOptions &framework,
                              bool useMeasuredKernels, bool json,
                              const std::string &traceFile,
                              const cli::GoodputRequest &goodput) {
  std::lock_guard<std::mutex> lock(m.mutex);
  cli::ErrorCapture capture;
  Assumptions assumptions;
  nlohmann::json planDoc;
  if (planJson) {
    auto doc = cli::parsePlanDocument(*planJson, "plan");
    if (!doc)
      return failed<std::string>(
          printableLine(llvm::toString(doc.takeError())));
    planDoc = std::move(*doc);
    auto fromPlan = assumptionsFromPlan(planDoc, "plan");
    if (!fromPlan)
      return failed<std::string>(
          printableLine(llvm::toString(fromPlan.takeError())));
    assumptions = *fromPlan;
  } else if (strategy.empty()) {
    return failed<std::string>("simulate: give a strategy or a plan");
  }
  assumptions.useMeasuredKernels = useMeasuredKernels;
  if (auto e = cli::applyFrameworkOptions(framework, assumptions))
    return failed<std::string>(printableLine(llvm::toString(std::move(e))));
  if (assumptions.fusion != m.args.kernels)
    return failed<std::string>(kernelsMismatch(assumptions.fusion, m));
  std::ostringstream os;
  if (cli::simulateModule(*m.module, m.args, cluster, strategy,
                          planJson ? &planDoc : nullptr, "plan", assumptions,
                          traceFile, json, os, goodput))
    return failed<std::string>(capture.message());
  return {os.str(), ""};
}

Outcome<PlanText> plan(Model &m, const cli::ClusterSource &cluster,
                       cli::PlanRequest request, bool explain) {
  std::lock_guard<std::mutex> lock(m.mutex);
  cli::ErrorCapture capture;
  auto error = [](llvm::Error e) {
    return failed<PlanText>(printableLine(llvm::toString(std::move(e))));
  };
  // The model was imported for its kernels; the plan records the same.
  // (The kernels row's value is KernelFusion's.)
  request.flags.set("kernels", double(m.args.kernels));
  Assumptions framework;
  if (auto e = cli::applyFrameworkOptions(request.flags, framework))
    return error(std::move(e));
  auto setup = cli::preparePlan(*m.module, m.args, cluster, request.precision,
                                framework);
  if (!setup)
    return error(setup.takeError());
  std::vector<std::string> notes;
  auto options = cli::planOptions(*setup, request, notes);
  if (!options)
    return error(options.takeError());
  auto made = cli::searchPlan(*setup, *options, request);
  if (!made)
    return error(made.takeError());
  PlanText out;
  out.json = made->doc.dump(2) + "\n";
  std::ostringstream os;
  for (const std::string &note : notes)
    os << "note: " << note << "\n";
  if (made->hetero)
    printHeteroPlan(os, *made->hetero, setup->workload, *setup->cluster,
                    options->objective,
                    nlohmann::json::parse(made->doc.dump()));
  else {
    printPlan(os, *made->plan, setup->workload, options->objective, explain);
    printPlanExtras(os, *made);
  }
  out.summary = os.str();
  return {std::move(out), ""};
}

Outcome<std::string> exportPlan(const std::string &planJson,
                                const std::string &format) {
  if (format == "mlir")
    return failed<std::string>(
        "export to mlir: the annotated module is written by `orrery export "
        "--to mlir` (or `orrery plan --emit-mlir`), not from Python");
  const auto &formats = frameworkFormats();
  if (std::find(formats.begin(), formats.end(), format) == formats.end())
    return failed<std::string>("export: unknown format '" + format +
                               "' (megatron, deepspeed, torchtitan, pytorch "
                               "or jax)");
  auto doc = cli::parsePlanDocument(planJson, "plan");
  if (!doc)
    return failed<std::string>(printableLine(llvm::toString(doc.takeError())));
  if (isHeteroPlan(*doc) && format == "pytorch") {
    auto text = exportHeteroPytorch(*doc, "plan");
    if (!text)
      return failed<std::string>(printableLine(llvm::toString(text.takeError())));
    return {*text, ""};
  }
  auto p = readExportPlan(*doc, "plan");
  if (!p)
    return failed<std::string>(printableLine(llvm::toString(p.takeError())));
  auto text = orrery::exportPlan(*p, format);
  if (!text)
    return failed<std::string>(
        printableLine("plan: " + llvm::toString(text.takeError())));
  return {*text, ""};
}

Outcome<bool> report(Model &m, const std::string &planJson,
                     const cli::ClusterSource &cluster, const std::string &out,
                     const std::string &measured) {
  std::lock_guard<std::mutex> lock(m.mutex);
  cli::ErrorCapture capture;
  auto doc = cli::parsePlanDocument(planJson, "plan");
  if (!doc)
    return failed<bool>(printableLine(llvm::toString(doc.takeError())));
  auto framework = assumptionsFromPlan(*doc, "plan");
  if (!framework)
    return failed<bool>(printableLine(llvm::toString(framework.takeError())));
  if (framework->fusion != m.args.kernels)
    return failed<bool>("plan: " + kernelsMismatch(framework->fusion, m));
  auto setup = cli::preparePlan(*m.module, m.args, cluster, "bf16", *framework);
  if (!setup)
    return failed<bool>(printableLine(llvm::toString(setup.takeError())));
  if (cli::checkDigests(*doc, "plan", setup->inputs, m.args.path,
                        cluster.spec) ||
      cli::checkPlanDoc(*doc, "plan", setup->workload, *setup->cluster, out,
                        measured, /*announce=*/false))
    return failed<bool>(capture.message());
  return {true, ""};
}

void setBuiltinModelsDir(const std::string &dir) { cli::setModelsDir(dir); }

} // namespace api
} // namespace orrery
