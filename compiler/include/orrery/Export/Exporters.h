//===- Exporters.h - a plan in other frameworks' own formats -------------===//
//
// `orrery export plan.json --to FORMAT` (docs/export.md): Megatron-LM flags,
// a DeepSpeed ds_config.json, torchtitan's [parallelism] TOML, a PyTorch
// DeviceMesh / FSDP2 / DTensor snippet, JAX mesh axes and PartitionSpecs.
// (The `mlir` format needs the model and lives in the CLI.) Each exporter
// writes only what its target can express; anything else in the plan is an
// error that names it, never a file that would train differently.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_EXPORT_EXPORTERS_H
#define ORRERY_EXPORT_EXPORTERS_H

#include "orrery/CostModel/Simulator.h"
#include "orrery/CostModel/Strategy.h"
#include "orrery/CostModel/Workload.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace orrery {

/// The formats `exportPlan` writes, in the order --help lists them.
const std::vector<std::string> &exportFormats();

/// What the exporters need of a plan: its strategy and how its layers fall
/// into pipeline chunks.
struct ExportPlan {
  Strategy strategy;
  std::string model;      ///< model.source
  std::string deviceType; ///< cluster.device_type
  int devices = 0;
  /// Layer kinds in model order and their counts (model.layers).
  std::vector<std::pair<std::string, int64_t>> layers;
  /// Layers (of the plan's own count: embedding and head included) per
  /// pipeline chunk, pp x vpp chunks in model order.
  std::vector<int> chunkLayers;
  /// Of the layers: those before the repeated body, the body, those after.
  int64_t before = 0, body = 0, after = 0;
  /// Transformer-body layers per chunk; empty when the embedding or head
  /// layers are not all in the first and last chunks.
  std::vector<int64_t> chunkBodyLayers;
  /// The kernels the plan was priced with (predicted.kernels).
  KernelFusion kernels = KernelFusion::Fused;
  /// Bytes per gradient element kept and on the wire when reduced
  /// (predicted.gradient_bytes_per_parameter and
  /// gradient_reduce_bytes_per_parameter).
  double gradBytes = 4, gradReduceBytes = 4;
  /// Whether weight gradients accumulate inside the weight-gradient GEMM
  /// (Assumptions::fusedGradientAccumulation).
  bool fusedGradAccumulation = true;
  /// Which weights train (the plan's fine_tuning).
  FineTuning fineTuning;
  /// ZeRO-3's prefetch as priced (Assumptions::zero3PrefetchParams; 0:
  /// the next layer whole) and the model's parameters (model.parameters).
  double zero3PrefetchParams = 0;
  int64_t parameters = 0;
  /// What the pipeline sends between stages as priced
  /// (predicted.pipeline_gradients, pipeline_attention_mask).
  bool pipelineWholeGradients = false, pipelineAttentionMask = false;
  /// The switches' sum the gradient all-reduce was priced with
  /// (predicted.in_network_aggregation: "", "sharp", "switchml").
  std::string aggregation;
};

/// Reads the plan (strategy fields checked as `orrery check` does).
/// Heterogeneous plans are refused: no framework here runs one.
llvm::Expected<ExportPlan> readExportPlan(const nlohmann::json &plan,
                                          const std::string &what);

/// Fills `p`'s chunks (before, body, after, chunkLayers, chunkBodyLayers)
/// from its strategy and layers, as the simulator places them.
llvm::Error placeChunks(ExportPlan &p, const std::string &what);

/// What `orrery plan` would write for `s` priced on `w` under `a`, as the
/// exporters see it: the planner's `--framework` asks the exporters
/// whether a candidate runs there.
llvm::Expected<ExportPlan> exportPlanFor(const Workload &w, const Strategy &s,
                                         const Assumptions &a);

/// The export targets that run a plan (the formats but `mlir`), in
/// exportFormats() order.
const std::vector<std::string> &frameworkFormats();

/// Success when `format` runs the plan as priced; else its refusal.
llvm::Error frameworkRuns(const ExportPlan &plan, const std::string &format);

/// The frameworks among frameworkFormats() that run the plan.
std::vector<std::string> frameworksRunning(const ExportPlan &plan);
/// The same for a priced strategy, as `orrery plan` writes it.
std::vector<std::string> frameworksRunning(const StepResult &r,
                                           const Workload &w);

/// The plan in `format`, or an error naming what the format cannot express.
llvm::Expected<std::string> exportPlan(const ExportPlan &plan,
                                       const std::string &format);

} // namespace orrery

#endif // ORRERY_EXPORT_EXPORTERS_H
