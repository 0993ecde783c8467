//===- ServingSim.h - requests through a serving engine, step by step -----===//
//
// docs/serving.md, "The simulator". Requests arrive (all at once, Poisson at
// a rate, a fixed number outstanding, or a trace); each replica's scheduler
// forms steps as its engine does (continuous batching under a token budget
// and a request cap, chunked prefill, the KV cache in blocks, vLLM's
// preemption or TensorRT-LLM's admission that reserves a request's whole
// cache); every step is priced by a StepPricer. Out come throughput and the
// latency percentiles a serving team states targets in.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_SERVINGSIM_H
#define ORRERY_COSTMODEL_SERVINGSIM_H

#include "orrery/CostModel/ServingStep.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace orrery {

struct ServingRequest {
  double arrivalS = 0;
  int64_t inputTokens = 0, outputTokens = 0;
  /// Set by the simulator: the request's index in its workload, and for a
  /// request prefilled by another pool, when it was issued, when its first
  /// token came, and the prompt tokens whose cache arrives with it.
  int64_t id = -1;
  double issuedS = -1, firstTokenS = -1;
  int64_t cachedTokens = 0;
  /// What the prompt shares with other requests' (docs/serving.md, "Prefix
  /// caching"), stated by the workload: its first `prefixTokens` are the
  /// shared prefix named `prefixId` (0: none); a turn that continues a
  /// session starts with the session's previous turn's prompt and output
  /// (`previousTurn`: that request's index in the workload; -1: none).
  uint64_t prefixId = 0;
  int64_t prefixTokens = 0;
  int64_t previousTurn = -1;
  /// A Mooncake trace's `hash_ids`: the prompt's blocks of
  /// kTraceHashBlockTokens tokens named by content (equal ids at the same
  /// place: the same tokens up to there); null: none.
  std::shared_ptr<const std::vector<uint64_t>> hashIds;
  /// Set by the simulator: the content keys of the request's full blocks,
  /// prompt then output, when it shares content (null: all its own).
  std::shared_ptr<const std::vector<uint64_t>> blockKeys;
};

/// The tokens each of a Mooncake trace's hash ids stands for (its
/// published traces' block size).
constexpr int64_t kTraceHashBlockTokens = 512;

/// The content key of block `i` of `r` (KvBlockPool): from its blockKeys,
/// or one no other request's block has.
uint64_t requestBlockKey(const ServingRequest &r, int64_t i);
/// Sets the blockKeys of the requests that share content (a prefix or a
/// session's history), for blocks of `blockTokens` tokens; `reqs` in
/// workload order (a turn after the turn it continues).
void assignBlockKeys(std::vector<ServingRequest> &reqs, int64_t blockTokens);

/// How requests come.
struct ServingWorkload {
  enum class Arrival {
    Offline,     ///< every request at time 0 (a throughput benchmark)
    Poisson,     ///< at `ratePerS`, exponential gaps (seeded, reproducible)
    Concurrency, ///< `concurrency` outstanding: each end issues the next
    Trace,       ///< the trace's own arrival times
  } arrival = Arrival::Offline;
  double ratePerS = 0;
  int concurrency = 0;
  int64_t requests = 1000;
  int64_t inputTokens = 1024, outputTokens = 256;
  /// Every prompt's first `prefixTokens` (of inputTokens) are one of
  /// `prefixGroups` shared prefixes (a system prompt), drawn uniformly
  /// with the seed; 0: none.
  int64_t prefixTokens = 0, prefixGroups = 1;
  /// Log-normal lengths: each request's input (output) drawn with this
  /// standard deviation of the length's logarithm and the mean of
  /// inputTokens (outputTokens), at least 1 (and longer than the shared
  /// prefix); 0: every request the same.
  double inputSigma = 0, outputSigma = 0;
  uint64_t seed = 1;
  /// The requests of a trace (arrival, input, output), in arrival order.
  std::vector<ServingRequest> trace;
  std::string name; ///< how the user named it, for messages and plans

  /// "chat" (1K in, 256 out), "reasoning" (1K in, 16K out), "summarize"
  /// (8K in, 512 out), or key=value pairs: isl=, osl=, requests=, and one
  /// of rate= (requests/s), concurrency=, offline; seed=; prefix= (tokens
  /// of the prompt shared), prefix_groups= (distinct shared prefixes);
  /// isl_sigma=, osl_sigma= (log-normal lengths).
  /// Errors name the word.
  static llvm::Expected<ServingWorkload> parse(const std::string &text);
  /// A trace: CSV with the header `arrival_s,input_tokens,output_tokens`
  /// (and optional prefix and session columns, docs/serving.md), or JSON
  /// Lines, one request an object: Orrery's field names, or a Mooncake
  /// trace's (`timestamp` in ms, `input_length`, `output_length`,
  /// `hash_ids`);
  /// errors name `what` and the line.
  static llvm::Expected<ServingWorkload> parseTrace(const std::string &text,
                                                    const std::string &what);
  /// The requests, arrival times drawn for Poisson (Concurrency: all at 0;
  /// the simulator issues them as slots free).
  std::vector<ServingRequest> requestsToServe() const;
  /// Longest prompt + output of any request.
  int64_t longestRequestTokens() const;
  /// Whether any requests share content (a prefix, a session's history).
  bool sharesContent() const;
  /// Mean input and output tokens of the requests.
  double meanInput() const, meanOutput() const;
};

/// The scheduler's limits on one replica.
struct SchedulerLimits {
  int64_t maxRequests = 256;       ///< vLLM max_num_seqs / TRT max_batch_size
  int64_t maxBatchedTokens = 8192; ///< tokens a step computes at most
  int64_t blockTokens = 16;        ///< tokens per KV-cache block
  int64_t kvCacheTokens = 0;       ///< tokens the cache holds
  /// Prefix caching (KvBlockPool): on by default in vLLM v1, SGLang and
  /// TensorRT-LLM. Not modelled for sliding-window models (the simulator
  /// runs those without it).
  bool prefixCaching = true;
  /// KV offload (with prefix caching): blocks a host-memory tier holds,
  /// and the seconds to load one back to the device.
  int64_t hostCacheBlocks = 0;
  double hostLoadSecondsPerBlock = 0;
  /// The simulator's shortcut, not the engine's: a run of decode-only
  /// steps over the same requests is priced at its first and last step and
  /// taken at once (the time grows linearly with the keys read), up to the
  /// next arrival, finish or block allocation. Off: every step priced.
  bool coalesceDecodeSteps = true;
};

/// The limits an engine sets by default. vLLM v1's server: 1024 requests
/// and 8192 tokens on a GPU of 70 GiB or more that is not an A100, else
/// 256 and 2048; blocks of 16 tokens. TensorRT-LLM's trtllm-bench sizes
/// the engine from the workload (its calc_engine_setting): the requests
/// of mean length that the memory left after 8-bit or 16-bit weights holds
/// (0.95 of it) over pp, capped at 4096, rounded up (64 at least); the
/// tokens that batch computes when prompts and outputs interleave, capped
/// at 32768 (2048 at least); blocks of 64 tokens.
SchedulerLimits engineDefaults(ServingEngine engine, const DeviceSpec &device,
                               int tp, int pp, double weightBytesPerDevice,
                               double kvBytesPerTokenPerDevice,
                               double meanInput, double meanOutput);

struct LatencyStats {
  double meanS = 0, p50S = 0, p90S = 0, p99S = 0;
};

struct ServingResult {
  int64_t requests = 0, inputTokens = 0, outputTokens = 0;
  double durationS = 0;
  double requestsPerS = 0, outputTokensPerS = 0, totalTokensPerS = 0;
  /// Time to first token, time per output token after the first, end to
  /// end.
  LatencyStats ttft, tpot, e2e;
  /// Inter-token latency: every gap between two consecutive output tokens
  /// of a request, over all tokens (vLLM's benchmark's ITL). TPOT averages
  /// a request's gaps; a decode stalled behind a prefill chunk, a
  /// preemption or a KV transfer shows in ITL's tail.
  LatencyStats itl;
  double kvUtilizationMean = 0, kvUtilizationPeak = 0;
  int64_t preemptions = 0, steps = 0;
  double meanRequestsPerStep = 0;
  /// Prompt tokens found in the prefix cache when a request was first
  /// scheduled (not computed), and blocks evicted from it.
  int64_t cachedPromptTokens = 0, prefixEvictions = 0;
  int64_t hostLoadedBlocks = 0; ///< KV offload: blocks loaded from the host
  double prefixHitRate() const {
    return inputTokens > 0 ? double(cachedPromptTokens) / double(inputTokens)
                           : 0;
  }
};

/// One step, for the Chrome trace.
struct StepRecord {
  int replica = 0;
  double startS = 0, durationS = 0;
  int64_t prefillTokens = 0, decodeRequests = 0;
  double kvUtilization = 0;
  /// Decode steps over the same requests taken as one record.
  int64_t steps = 1;
};

/// Moving a prompt's KV cache from a prefill replica to a decode replica
/// (docs/serving.md, "Disaggregation"): `bytesPerToken` of the whole model,
/// over `devices` parallel device-to-device paths (the fewer of the two
/// replicas' devices) of `bandwidthBytesPerS` each, after `latencyS`.
struct KvTransfer {
  double bytesPerToken = 0, bandwidthBytesPerS = 0, latencyS = 0;
  int devices = 1;
  double seconds(double tokens) const {
    return bandwidthBytesPerS > 0
               ? latencyS + tokens * bytesPerToken /
                                (bandwidthBytesPerS * std::max(1, devices))
               : latencyS;
  }
};

/// Serves the workload on `replicas` copies of the pricer's replica, the
/// requests dealt round robin. An error when a request cannot fit the
/// cache even alone (naming it), or the workload is empty.
llvm::Expected<ServingResult>
simulateServing(const StepPricer &pricer, const SchedulerLimits &limits,
                const ServingWorkload &workload, int replicas,
                std::vector<StepRecord> *trace = nullptr);

/// Prefill/decode disaggregation (DistServe, Splitwise, Dynamo): a prefill
/// pool computes each prompt and samples the first token, the cache moves
/// to a decode pool, which generates the rest. TTFT comes from the prefill
/// pool; TPOT counts the transfer and the decode pool's queue. Arrivals at a
/// rate, all at once or from a trace.
llvm::Expected<ServingResult> simulateDisaggregated(
    const StepPricer &prefill, const SchedulerLimits &prefillLimits,
    int prefillReplicas, const StepPricer &decode,
    const SchedulerLimits &decodeLimits, int decodeReplicas,
    const KvTransfer &transfer, const ServingWorkload &workload,
    std::vector<StepRecord> *trace = nullptr);

} // namespace orrery

#endif // ORRERY_COSTMODEL_SERVINGSIM_H
