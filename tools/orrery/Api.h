//===- Api.h - Orrery as a library of calls --------------------*- C++ -*-===//
//
// What the Python bindings (python/) call: load, stats, simulate, plan,
// export and report, each through the same code as the CLI's subcommand of
// that name, so that a plan made here is the bytes `orrery plan --json`
// prints. Standard types only; every error is the CLI's one-line message.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TOOLS_API_H
#define ORRERY_TOOLS_API_H

#include "Requests.h"

#include <memory>
#include <string>
#include <vector>

namespace orrery {
namespace api {

/// A value, or the one-line error the CLI prints for the same input.
template <typename T> struct Outcome {
  T value{};
  std::string error;
  bool ok() const { return error.empty(); }
};

/// An imported and outlined model with its MLIR context. Calls on one
/// model take turns (its context is single-threaded); calls on different
/// models run in parallel.
class Model;
using ModelRef = std::shared_ptr<Model>;

/// Imports a model: an ONNX file, a built-in model's name, or `bytes` in
/// memory (then `name` names it in messages and plans). `dims` are
/// NAME=VALUE bindings; batch defaults to 1 (a plan's micro-batch comes
/// from its strategy). `kernels`: fused, unfused-attention or eager.
Outcome<ModelRef> loadModel(const std::string &name, const std::string *bytes,
                            const std::vector<std::string> &dims,
                            const std::string &kernels);
/// The name the model was loaded as (a plan's model.source).
const std::string &modelName(const Model &m);
/// The kernels it was loaded for.
std::string modelKernels(const Model &m);

/// `orrery stats` (JSON, or the table).
Outcome<std::string> stats(Model &m, bool json);

/// Parses a cluster; its name, device count, nodes and device types as
/// JSON.
Outcome<std::string> describeCluster(const cli::ClusterSource &cluster);

/// `orrery simulate` of a strategy string, or of a plan's strategy when
/// `planJson` is given (heterogeneous plans too): JSON or the table;
/// `traceFile` (when not empty) gets the Chrome trace.
Outcome<std::string> simulate(Model &m, const cli::ClusterSource &cluster,
                              const std::string &strategy,
                              const std::string *planJson,
                              const cli::FrameworkOptions &framework,
                              bool useMeasuredKernels, bool json,
                              const std::string &traceFile,
                              const cli::GoodputRequest &goodput = {});

/// A plan as `orrery plan --json` prints it, and as its summary prints it.
struct PlanText {
  std::string json;
  std::string summary;
};
/// `orrery plan`, with the kernels the model was loaded for (whatever
/// request.flags's kernels say).
Outcome<PlanText> plan(Model &m, const cli::ClusterSource &cluster,
                       cli::PlanRequest request, bool explain);

/// `orrery export --to FORMAT` of a plan's JSON text.
Outcome<std::string> exportPlan(const std::string &planJson,
                                const std::string &format);

/// `orrery report` of a plan of this model on `cluster`: checks the plan
/// (digests, stages, the re-simulated step) and writes the HTML page to
/// `out`, with a measured run (`orrery run --json`) beside it when
/// `measured` names one.
Outcome<bool> report(Model &m, const std::string &planJson,
                     const cli::ClusterSource &cluster, const std::string &out,
                     const std::string &measured);

/// Where built-in model names resolve (the Python package ships them).
void setBuiltinModelsDir(const std::string &dir);

} // namespace api
} // namespace orrery

#endif // ORRERY_TOOLS_API_H
