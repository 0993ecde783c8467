//===- Exporters.h - a plan in other frameworks' own formats -------------===//
//
// `orrery export plan.json --to FORMAT` (docs/export.md): Megatron-LM flags,
// a DeepSpeed ds_config.json, torchtitan's [parallelism] TOML, a PyTorch
// DeviceMesh / FSDP2 / DTensor snippet, JAX mesh axes and PartitionSpecs.
// (The `mlir` format needs the model and lives in the CLI.) Each exporter
// writes only what its target can express; anything else in the plan is an
// error that names it, never a file that would train differently: the
// refusals are the capability table's (orrery/Plan/Capabilities.h), which
// the planner reads too.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_EXPORT_EXPORTERS_H
#define ORRERY_EXPORT_EXPORTERS_H

#include "orrery/CostModel/Simulator.h"
#include "orrery/CostModel/Strategy.h"
#include "orrery/CostModel/Workload.h"
#include "orrery/Plan/Capabilities.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace orrery {

/// The formats `exportPlan` writes, in the order --help lists them.
const std::vector<std::string> &exportFormats();

/// The plan in `format`, or an error naming what the format cannot express.
llvm::Expected<std::string> exportPlan(const ExportPlan &plan,
                                       const std::string &format);

/// A heterogeneous plan (replica groups of stages on different pools) as a
/// PyTorch script: each process runs one stage of one replica, with its
/// own tensor-parallel group; or an error naming what it cannot run.
llvm::Expected<std::string> exportHeteroPytorch(const nlohmann::json &plan,
                                                const std::string &what);

} // namespace orrery

#endif // ORRERY_EXPORT_EXPORTERS_H
