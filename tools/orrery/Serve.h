//===- Serve.h - `orrery serve`: size and split a model for serving -*- C++ -*-===//
//
// docs/serving.md. Prices a serving configuration (--strategy tp=..,pp=..,
// replicas=..) or searches tp x pp x replicas over each device type of the
// cluster, simulating the workload through the engine's scheduler on each,
// and writes a serving plan (JSON) with the chosen configuration, its
// throughput and latency percentiles, and the others it beat.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_TOOLS_SERVE_H
#define ORRERY_TOOLS_SERVE_H

#include "Requests.h"
#include "Common.h"

#include <ostream>
#include <string>

namespace orrery {
namespace cli {

struct ServeRequest {
  ClusterSource cluster;
  std::string workload = "chat"; ///< ServingWorkload::parse
  std::string traceFile;         ///< a CSV trace instead
  bool workloadGiven = false;    ///< --workload on the command line
  std::string strategy;          ///< tp=..,pp=..,replicas=..; empty: search
  std::string engine = "vllm";
  std::string precision = "bf16", kvCache = "auto";
  std::string slo;               ///< ttft_ms=..,tpot_ms=.. (p99)
  std::string objective = "throughput"; ///< throughput, cost, latency
  int64_t maxRequests = 0, maxBatchedTokens = 0; ///< 0: the engine's
  std::string prefixCaching = "on"; ///< on (the engines' default) or off
  std::string speculative = "off";  ///< Speculation::parse
  double kvOffloadGib = 0;          ///< host memory a replica's cache spills to
  /// The engine's memory share (ServingSearchRequest::memoryFraction).
  double memoryFraction = 0.9;
  /// vLLM's --attention-backend for a latent-attention model ("": the
  /// engine's default; ServingSearchRequest::attentionBackend).
  std::string attentionBackend;
  std::string traceOut; ///< Chrome trace of the chosen configuration's steps
};

/// Runs `orrery serve` on an outlined module; prints the summary (or the
/// plan JSON with `json`) to `os`, writes `planOut` when set. Errors are
/// one line through fail().
int serveModule(mlir::ModuleOp module, const ModelArgs &args,
                const ServeRequest &request, bool json,
                const std::string &planOut, std::ostream &os);

/// Whether a JSON document is a serving plan (`serving_plan_version`).
bool isServingPlan(const nlohmann::json &doc);
/// The request that made a serving plan (its `request`, `cluster` and
/// `objective`), the plan's model in `model`; errors name the field.
llvm::Expected<ServeRequest> servingRequestOf(const nlohmann::json &plan,
                                              const std::string &what,
                                              std::string &model);
/// Serves the plan's request again on `module` and compares the chosen
/// configuration field by field; prints "valid; ..." or fails naming the
/// first field that differs.
int checkServingPlan(mlir::ModuleOp module, const ModelArgs &args,
                     const nlohmann::json &plan, const std::string &what,
                     const ServeRequest &request, std::ostream &os);
/// The chosen configuration as launch flags of vllm, sglang or trtllm (a
/// bash array), refusing what the target cannot run.
llvm::Expected<std::string> exportServingPlan(const nlohmann::json &plan,
                                              const std::string &to,
                                              const std::string &what);

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_SERVE_H
