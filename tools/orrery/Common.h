//===- Common.h - what the subcommands share -------------------*- C++ -*-===//
#ifndef ORRERY_TOOLS_COMMON_H
#define ORRERY_TOOLS_COMMON_H

#include "Requests.h"
#include "orrery/CostModel/Lowering.h"
#include "orrery/Import/Importer.h"
#include "orrery/Plan/Plan.h"
#include "orrery/Transforms/ShardAnnotations.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace orrery {
namespace cli {

/// Prints "orrery: error: MESSAGE" (one line) and returns 1; while an
/// ErrorCapture is alive on this thread, keeps MESSAGE there instead (the
/// Python bindings raise it as orrery.Error with the CLI's words).
int fail(const std::string &message);

/// Captures the messages fail() reports on this thread while it lives.
class ErrorCapture {
public:
  ErrorCapture();
  ~ErrorCapture();
  ErrorCapture(const ErrorCapture &) = delete;
  ErrorCapture &operator=(const ErrorCapture &) = delete;
  /// The first message reported (the one the CLI would have printed).
  const std::string &message() const { return first; }

private:
  friend int fail(const std::string &message);
  ErrorCapture *outer;
  std::string first;
};

/// Parses NAME=VALUE pairs of --dim; returns an error message or "".
std::string parseDims(const std::vector<std::string> &specs,
                      onnx::LoadOptions &options);

struct ModelArgs {
  std::string path;
  std::vector<std::string> dims;
  /// Dims bound by default (batch=1), which a model may lack.
  std::set<std::string> optionalDims;
  /// The kernels the front end prepares the graph for when it outlines:
  /// `orrery-fuse-kernels` runs first unless eager (attention stays unfused
  /// for unfused-attention).
  KernelFusion kernels = KernelFusion::Fused;
  /// The ONNX bytes when the model is in memory (`orrery.load(bytes)`);
  /// `path` then only names it, in messages and in plans.
  std::shared_ptr<const std::string> bytes;
};

void addModelArgs(CLI::App *cmd, ModelArgs &args);

/// A model argument: an existing file, or the name of a built-in model
/// (`orrery simulate gpt3-175b`), written at build time by models/generate.py.
std::string resolveModel(const std::string &arg);
/// Where built-in models are, in place of the build's folder (the
/// ORRERY_MODELS_DIR variable still comes first).
void setModelsDir(const std::string &dir);

/// Binds `batch` to 1 unless the user bound it: workloads for simulate and
/// plan are per sample, and the strategy sets the micro-batch.
void defaultBatchToOne(ModelArgs &args);
/// The dims the user bound, batch aside (a plan's `model.dims`).
std::map<std::string, int64_t> boundDims(const ModelArgs &args);

/// Layout prices from a cluster's first device and its intra-node link.
LayoutCosts layoutCostsFor(const Cluster &c, Precision p,
                           const Assumptions &a = {});

/// Import and (optionally) outline, or the one-line error.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importFrontEnd(mlir::MLIRContext &ctx, const ModelArgs &args, bool outline,
               std::map<std::string, int64_t> *hist);
/// importFrontEnd; on error prints it and returns null.
mlir::OwningOpRef<mlir::ModuleOp> frontEnd(mlir::MLIRContext &ctx,
                                           const ModelArgs &args, bool outline,
                                           std::map<std::string, int64_t> *hist,
                                           int &rc);

/// The bytes of a file; false when it cannot be read.
bool readFileBytes(const std::string &path, std::string &out);
/// The model's bytes (in memory, or its file's), for its digest.
std::string modelBytesOf(const ModelArgs &args);

/// Checks each of the options' values (the one-line error names the flag)
/// and sets what is set.
llvm::Error applyFrameworkOptions(const FrameworkOptions &o, Assumptions &a);

/// A JSON object from a file; on failure prints the one-line error and
/// returns its exit code.
int readJsonObjectFile(const std::string &path, nlohmann::json &doc);
/// JSON text that must be one object (`what` names it in the error).
llvm::Expected<nlohmann::json> parseJsonObject(const std::string &text,
                                               const std::string &what);
/// Plan JSON text as readPlanFile checks a plan file.
llvm::Expected<nlohmann::json> parsePlanDocument(const std::string &text,
                                                 const std::string &what);
/// A plan file as JSON, every field of its documented type
/// (checkPlanFieldTypes); on failure prints the one-line error and returns
/// its exit code.
int readPlanFile(const std::string &path, nlohmann::json &doc);

/// A plan's model and cluster digests against the inputs at hand.
int checkDigests(const nlohmann::json &planDoc, const std::string &what,
                 const PlanInputs &inputs, const std::string &modelPath,
                 const std::string &clusterSpec);

/// The plan argument, and --model and --cluster in place of its own.
void addPlanSource(CLI::App *cmd, std::string &plan, std::string &model,
                   std::string &cluster);

/// What a plan was made for, loaded as `orrery check` loads it.
struct LoadedPlan {
  nlohmann::json doc;
  Workload workload;
  std::unique_ptr<Cluster> cluster;
  Assumptions assumptions;
  bool hetero = false;
  Strategy strategy;
  HeteroStrategy heteroStrategy;
};

/// Reads a plan and the model and cluster it names (or the given ones),
/// checks the digests; on failure prints the error and returns its code.
int loadPlan(const std::string &planPath, const std::string &model,
             const std::string &cluster, LoadedPlan &out);

/// The plan's per-rank programs (Lowering.h): every rank's, or the
/// selected ranks' and the peers they match.
llvm::Expected<ProgramSet> lowerPlan(const LoadedPlan &plan,
                                     const RankSelection &only = {});

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_COMMON_H
