//===- Plan.h - the plan format (version 1) ------------------------------===//
//
// A plan is JSON (docs/plan.md, schema docs/plan.schema.json): the model and
// cluster it was made for (with digests), the strategy, the stages with
// their layers and devices, the device groups, the predicted metrics, and
// the runners-up. The same inputs give the same bytes.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_PLAN_PLAN_H
#define ORRERY_PLAN_PLAN_H

#include "orrery/Search/HeteroPlanner.h"
#include "orrery/Search/Planner.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace orrery {

/// FNV-1a 64-bit of bytes, as 16 hex digits: identifies the model file and
/// the cluster spec a plan was made for.
std::string digestOf(const std::string &bytes);

struct PlanInputs {
  std::string modelPath, modelDigest;
  std::string clusterSpec, clusterDigest;
  /// Symbolic dims the user bound (--dim, --length-buckets; not the
  /// per-sample batch): `model.dims`, so that check, report and export
  /// import the model as it was planned.
  std::map<std::string, int64_t> dims;
};

/// The plan's `model.dims` as --dim bindings ("seq=4096"); an error names
/// a malformed entry.
llvm::Expected<std::vector<std::string>> planDims(const nlohmann::json &plan,
                                                  const std::string &what);

/// A step's predicted figures as JSON (step time, throughput, MFU, memory,
/// energy, cost), shared by plans and `orrery simulate --json`.
nlohmann::ordered_json metricsJson(const StepResult &r);
/// How kernels were priced: "stated assumptions", or "measured profile of"
/// the device types whose measured kernel profile priced them.
std::string kernelRates(const std::vector<std::string> &measuredDevices);

/// One pipeline stage as JSON (layers, times, memory breakdown), shared by
/// plans and `orrery simulate --json`; units in every field name.
nlohmann::ordered_json stageJson(const StageReport &st);

/// The plan document for the best result and its runners-up.
nlohmann::ordered_json planJson(const PlanResult &r, const Workload &w,
                                const PlanInputs &in);

/// Every field of the plan format that is present has its documented JSON
/// type: an error names the first that does not ("plan.json:
/// stages[1].devices[0]: expected an integer, got a string"). Readers of a
/// plan run this first, so no read of a field can meet a wrong type.
llvm::Error checkPlanFieldTypes(const nlohmann::json &plan,
                                const std::string &what);

/// The strategy a plan document holds; errors name the offending field.
llvm::Expected<Strategy> strategyFromPlan(const nlohmann::json &plan,
                                          const std::string &what);

/// Heterogeneous plans (the same format; strategy.kind "heterogeneous",
/// replica groups with per-stage pools and per-replica shares).
nlohmann::ordered_json heteroMetricsJson(const HeteroResult &r);
nlohmann::ordered_json heteroStagesJson(const HeteroResult &r,
                                        const std::vector<Pool> &pools);
nlohmann::ordered_json heteroPlanJson(const HeteroPlanResult &r,
                                      const Workload &w, const PlanInputs &in,
                                      const Cluster &c);
bool isHeteroPlan(const nlohmann::json &plan);
/// How the plan was priced (predicted.gradient_accumulation "fused" or
/// "separate", predicted.gradient_bytes_per_parameter 4 or 2), over the
/// default assumptions; a plan written before these fields gets the
/// defaults. A bad value is an error naming the field.
llvm::Expected<Assumptions> assumptionsFromPlan(const nlohmann::json &plan,
                                                const std::string &what);
llvm::Expected<HeteroStrategy> heteroStrategyFromPlan(const nlohmann::json &plan,
                                                      const std::string &what);

} // namespace orrery

#endif // ORRERY_PLAN_PLAN_H
