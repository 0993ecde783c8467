//===- Capabilities.h - what each framework runs, in one table ---*- C++
//-*-===//
//
// The one place that says what a target framework (and the release the
// exports are written for) runs as Orrery prices it: its schedules, ZeRO
// stages with and without pipeline stages, context-parallel kinds,
// overlaps, expert layouts, fine-tuning, precisions and kernels, offloads,
// how it splits layers into stages, how it accumulates and reduces
// gradients. The planner's `--framework` and `runs on`, the plan's
// `frameworks`, and every exporter's refusals read it (Capabilities.cpp);
// the exporters only write what it lets through. docs/export.md lists the
// table in words.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_PLAN_CAPABILITIES_H
#define ORRERY_PLAN_CAPABILITIES_H

#include "orrery/CostModel/Simulator.h"
#include "orrery/CostModel/Strategy.h"
#include "orrery/CostModel/Workload.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace orrery {

/// What a framework sees of a plan: its strategy, the assumptions it was
/// priced with, and how its layers fall into pipeline chunks.
struct ExportPlan {
  Strategy strategy;
  std::string model;      ///< model.source
  std::string deviceType; ///< cluster.device_type
  /// Its vendor (DeviceSpec::vendor; the built-in catalog's for a plan
  /// read from a file); "" when unknown, which no target refuses.
  std::string deviceVendor;
  int devices = 0;
  /// Layer kinds in model order and their counts (model.layers).
  std::vector<std::pair<std::string, int64_t>> layers;
  /// Layers (of the plan's own count: embedding and head included) per
  /// pipeline chunk, pp x vpp chunks in model order.
  std::vector<int> chunkLayers;
  /// Of the layers: those before the repeated body, the body, those after.
  int64_t before = 0, body = 0, after = 0;
  /// The body's layer kind ("transformer_layer", "conv_block", ...).
  std::string bodyKind;
  /// Transformer-body layers per chunk; empty when the embedding or head
  /// layers are not all in the first and last chunks.
  std::vector<int64_t> chunkBodyLayers;
  /// The framework assumptions the plan was priced with (its predicted
  /// fields of AssumptionFields.h, its fine_tuning and layer profile).
  Assumptions assumptions;
  int64_t parameters = 0; ///< model.parameters
  /// Parameters two layer kinds share (an embedding table tied to the
  /// head): model.tied_parameters.
  int64_t tiedParameters = 0;
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
/// What `orrery plan` would write for `s` priced on `w` under `a` (on
/// `device`, when known), as a framework sees it.
llvm::Expected<ExportPlan> exportPlanFor(const Workload &w, const Strategy &s,
                                         const Assumptions &a,
                                         const DeviceSpec *device = nullptr);

/// The vendor of a plan's device type in the built-in catalog ("NVIDIA",
/// "AMD", "Intel", "Google", "AWS", "generic" for CPUs); "" for a device
/// the catalog does not hold (a cluster file's own).
std::string deviceVendorOf(const std::string &deviceType);

/// What a refusal is about: the columns of the capability table.
enum class Capability {
  Schedule,         ///< pipeline schedules (GPipe, 1F1B, interleaved, ...)
  Devices,          ///< the device types it runs on
  ModelKind,        ///< the models it builds (transformer blocks or any)
  LayerSplit,       ///< how layers fall into stages it can state
  DeviceOrder,      ///< the order of the parallel axes over the ranks
  Zero,             ///< ZeRO stages, alone and with pipeline stages
  ContextParallel,  ///< context-parallel kinds (ring, Ulysses)
  Overlap,          ///< which collectives overlap compute
  Experts,          ///< expert layouts and the MoE layer's settings
  FineTuning,       ///< frozen weights and adapters
  Precision,        ///< parameter and math precisions
  Kernels,          ///< the kernels priced (fused, unfused, eager, sdpa)
  Offload,          ///< optimizer and activation offload
  Recompute,        ///< which layers recompute
  Gradients,        ///< how gradients accumulate and are reduced
  PipelineSends,    ///< what the pipeline sends between stages
  Collectives,      ///< the collectives' library (NCCL's, SwitchML's)
  ResearchStrategy, ///< strategies only their authors' code runs
};

/// A framework target: its name, the release the exports are written for,
/// and its refusals in the order they are checked (Capabilities.cpp).
struct FrameworkCapabilities {
  const char *name;
  const char *release;
  /// How it accumulates and reduces gradients, in words (docs/export.md).
  const char *gradients;
  /// The device vendors it runs on (DeviceSpec::vendor), and in words.
  std::vector<std::string> vendors;
  const char *devices;
};

/// The export targets that run a plan (the export formats but `mlir`).
const std::vector<std::string> &frameworkFormats();
/// The table's row for `framework` (one of frameworkFormats()), or null.
const FrameworkCapabilities *frameworkCapabilities(const std::string &name);
/// Success when `framework` runs the plan as priced; else its refusal, one
/// line naming what the framework cannot run. "any": some framework of
/// frameworkFormats() runs it (the refusal: each one's, the first
/// framework's named).
llvm::Error frameworkRuns(const ExportPlan &plan, const std::string &framework);
/// The frameworks among frameworkFormats() that run the plan.
std::vector<std::string> frameworksRunning(const ExportPlan &plan);
/// The same for a priced strategy, as `orrery plan` writes it.
std::vector<std::string> frameworksRunning(const StepResult &r,
                                           const Workload &w);
/// Each framework's refusal of a priced strategy ("megatron: ..."), one a
/// framework that does not run it.
std::vector<std::string> frameworkRefusals(const StepResult &r,
                                           const Workload &w);

/// Megatron-LM's transformer layers per chunk (the body; embedding and head
/// are no layers there), counted as its even split does with
/// --account-for-embedding/loss-in-pipeline-split where that makes them
/// even (`embedding`, `loss` say which of those flags the split needs).
std::vector<int64_t> megatronChunkLayers(const ExportPlan &p, bool &embedding,
                                         bool &loss);

} // namespace orrery

#endif // ORRERY_PLAN_CAPABILITIES_H
