//===- ServingSearch.h - the serving configuration search -------*- C++ -*-===//
//
// docs/serving.md, "orrery serve". Each candidate configuration is a device
// type (a node group), tp (and ep for a mixture of experts), pp and the
// replicas that fill the group, or on a cluster of two device types a
// prefill pool on one and a decode pool on the other; each is simulated
// through the engine's scheduler on the workload (ServingSim.h). With
// latency targets and requests that all come at once (a throughput
// benchmark), a candidate's figure is its goodput: the highest Poisson
// arrival rate whose p99 TTFT and TPOT meet the targets, found by
// bisection. The CLI (tools/orrery/Serve.cpp) writes the result.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_SERVINGSEARCH_H
#define ORRERY_COSTMODEL_SERVINGSEARCH_H

#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Serving.h"
#include "orrery/CostModel/ServingSim.h"
#include "orrery/CostModel/ServingStep.h"
#include "orrery/CostModel/Workload.h"

#include <optional>
#include <string>
#include <vector>

namespace orrery {

/// p99 latency targets (`--slo ttft_ms=..,tpot_ms=..`); 0: none.
struct ServingSlo {
  double ttftS = 0, tpotS = 0;
  bool any() const { return ttftS > 0 || tpotS > 0; }
  /// Errors name the field.
  static llvm::Expected<ServingSlo> parse(const std::string &text);
};

/// The fields `--strategy` fixes (tp=..,pp=..,ep=..,replicas=..,device=..,
/// or prefill=DEVICE:TP,decode=DEVICE:TP); 0 or empty: searched.
struct ServingFixed {
  int tp = 0, pp = 0, replicas = 0, ep = 0;
  /// adp=0|1: attention data parallelism off or on; -1: searched.
  int adp = -1;
  /// spec=0|1: the requested speculative decoding off or on; -1: both
  /// tried (when one is requested).
  int spec = -1;
  std::string device;
  /// A prefill/decode split: each pool's device type and tp.
  std::string prefillDevice, decodeDevice;
  int prefillTp = 0, decodeTp = 0;
  bool split() const { return !prefillDevice.empty(); }
  static llvm::Expected<ServingFixed> parse(const std::string &text);
};

/// One pool of identical replicas.
struct ServingPool {
  const NodeGroup *group = nullptr;
  int tp = 1, pp = 1, replicas = 1, ep = 1;
  /// Attention data parallelism over the tp ranks (ServingReplica).
  bool attentionDp = false;
  /// Runs the request's speculative decoding (a decode pool's, when
  /// split).
  bool speculative = false;
  ServingMemory memory;
  SchedulerLimits limits;
  /// The cache a request of the workload's mean length holds (less than
  /// its tokens under a sliding window).
  double meanRequestTokensHeld = 0;
  int devices() const { return tp * pp * replicas; }
  std::string name() const;
};

/// A configuration and what its simulation found.
struct ServingCandidate {
  ServingPool p;                     ///< the replicas (prefill when split)
  std::optional<ServingPool> decode; ///< prefill/decode disaggregation
  ServingResult result;
  double goodputRequestsPerS = -1; ///< with targets and offline arrivals
  bool meets = true;
  double miss = 0; ///< the worst target's overshoot, relative
  std::string missText;
  std::string error;
  std::string name() const;
  int devices() const { return p.devices() + (decode ? decode->devices() : 0); }
  /// The --strategy that prices this configuration alone.
  std::string strategyText() const;
  double dollarsPerHour() const;
  /// The objective's figure, larger better.
  double figure(const std::string &objective) const;
};

struct ServingSearchRequest {
  ServingEngine engine = ServingEngine::Vllm;
  ServingPrecision precision;
  ServingWorkload workload;
  ServingSlo slo;
  /// `--strategy`: the fields it fixes (ServingFixed::parse); empty: all
  /// searched.
  std::string strategy;
  std::string objective = "throughput"; ///< throughput, cost or latency
  int64_t maxRequests = 0, maxBatchedTokens = 0; ///< 0: the engine's
  /// The engines' prefix caching (SchedulerLimits::prefixCaching).
  bool prefixCaching = true;
  /// KV offload: host memory a replica's cache may spill to (its blocks
  /// written through, found again by later prompts: SchedulerLimits'
  /// host tier); 0: none.
  double kvOffloadBytes = 0;
  /// The memory the engine takes: vLLM's gpu_memory_utilization (and
  /// SGLang's mem_fraction_static), a share of the device; TensorRT-LLM's
  /// kv_cache_free_gpu_memory_fraction, a share of what the weights and
  /// buffers leave free. 0.9 is each engine's default.
  double memoryFraction = 0.9;
  /// vLLM's attention backend for a latent-attention model ("" : the
  /// engine's default); one whose decode kernel takes one query a request
  /// (CUTLASS MLA, Triton MLA) runs a speculative step's verification as a
  /// prefill (StepPricer::setVerifyAsPrefill).
  std::string attentionBackend;
  /// Speculative decoding offered to the search: each configuration is
  /// tried with it and without (unless --strategy fixes spec=).
  Speculation speculation;
};

struct ServingSearchResult {
  /// The candidates that simulated, best first.
  std::vector<ServingCandidate> ranked;
  /// Why the first: its figure, the target nearest to binding, the
  /// runner-up, and a faster configuration that misses the targets.
  std::string why;
};

/// Searches (or prices, with every field fixed) the configurations of
/// `cluster` for serving `w`. Errors are one line: a request that matches
/// no configuration, none that can serve the model, none that meets the
/// targets (naming the closest).
llvm::Expected<ServingSearchResult>
searchServing(const Workload &w, const Cluster &cluster,
              const ServingSearchRequest &request);

/// Simulates `c` again on `workload`, recording its steps.
llvm::Expected<ServingResult> traceServing(const Workload &w,
                                           const ServingSearchRequest &request,
                                           const ServingCandidate &c,
                                           const ServingWorkload &workload,
                                           std::vector<StepRecord> &steps);

/// "12.3 ms" (three significant digits under 1 ms, one decimal under 100).
std::string servingMs(double seconds);

} // namespace orrery

#endif // ORRERY_COSTMODEL_SERVINGSEARCH_H
