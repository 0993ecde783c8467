//===- ServingStep.h - the time of one serving engine step -----*- C++ -*-===//
//
// A serving engine runs steps: each computes the new prompt tokens of some
// requests (prefill, maybe a chunk of a prompt) and one token of every
// request that is generating (decode), over the KV cache the requests built
// so far. The step is priced from the same imported model as training, op by
// op on the replica's device (docs/serving.md): the linear layers at the
// step's token count (a decode step's are skinny and stream their weights),
// fused attention over each request's cached keys (prefill and decode
// kernels apart), the tensor-parallel all-reduces at their sizes (small, so
// latency-bound), the output head only for the requests that sample, the
// pipeline's stages and their transfers, and the host's work per step.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_SERVINGSTEP_H
#define ORRERY_COSTMODEL_SERVINGSTEP_H

#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Hardware.h"
#include "orrery/CostModel/Speculation.h"
#include "orrery/CostModel/Workload.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace orrery {

/// The engine whose scheduler, memory policy and host loop are modelled.
enum class ServingEngine {
  /// vLLM v1 (0.8 and later): the KV cache allocated block by block as
  /// tokens come, the newest running request preempted (and recomputed)
  /// when a block is missing; CUDA graphs for decode-only steps of up to
  /// 512 sequences, PyTorch's per-op dispatch otherwise.
  Vllm,
  /// TensorRT-LLM's executor (in-flight batching, trtllm-bench's
  /// defaults): a request admitted only when the cache holds its whole
  /// prompt and output (GUARANTEED_NO_EVICT), kernels enqueued from C++.
  TensorRtLlm,
};
const char *servingEngineName(ServingEngine e);
/// "vllm", "trtllm" (or "tensorrt-llm"); false when neither.
bool parseServingEngine(const std::string &name, ServingEngine &out);

/// vLLM's attention backends for a multi-head latent attention model, as
/// `orrery serve --attention-backend` and vLLM's own `--attention-backend`
/// name them: whether the decode kernel takes a request's 1 + k queries of
/// a speculative verification (query_len_support UNIFORM or VARLEN:
/// FlashInfer MLA, FlashMLA) or one only (SINGLE_ONLY: CUTLASS MLA,
/// Triton MLA; vLLM then runs the verification as a prefill), and the
/// intra-node link of the devices it runs on ("" : any).
struct VllmMlaBackend {
  const char *name, *vllmName;
  bool multiQueryDecode;
  const char *link;
};
/// The backend of that name (case-insensitive); null when none.
const VllmMlaBackend *vllmMlaBackend(const std::string &name);
/// The names, for an error: "cutlass_mla, flashinfer_mla, ...".
std::string vllmMlaBackendNames();

/// The host's fixed work per step besides launching kernels (docs/serving.md,
/// "The host"): scheduling, preparing the inputs, handing out the sampled
/// tokens. Stated assumptions, not measurements: vLLM's Python loop about
/// half a millisecond, TensorRT-LLM's C++ executor about 0.15 ms.
constexpr double kVllmStepHostS = 0.5e-3;
constexpr double kTrtllmStepHostS = 0.15e-3;

/// What a request costs the engine's server outside the GPU's steps, each
/// time a client sends one (docs/serving.md, "The host"; sources in
/// docs/serving-host-sources.md): the OpenAI-compatible front end receiving
/// and tokenizing it and handing it to the engine, and the first token
/// detokenized and streamed back. It adds to every request's
/// time-to-first-token and end-to-end latency, not to the GPU's steps.
/// Stated from the ranges published for light load: vLLM's `vllm serve`
/// answers a small model's first token in about 17 ms at concurrency 1,
/// 8-15 ms of it not the model's (vLLM 0.22, Qwen2.5-0.5B); NVIDIA NIM on
/// TensorRT-LLM answers Llama-3.1-8B's in 9-10 ms at concurrency 1, at
/// most about 5 ms of it the front end's.
constexpr double kVllmRequestHostS = 10e-3;
constexpr double kTrtllmRequestHostS = 5e-3;
/// The per-request host time of an engine (above).
inline double requestHostS(ServingEngine e) {
  return e == ServingEngine::Vllm ? kVllmRequestHostS : kTrtllmRequestHostS;
}

/// Weights, math and cache precision of a served model.
struct ServingPrecision {
  /// The repeated layers' linear layers: bf16/fp16, or fp8 (fp8 weights and
  /// fp8 GEMMs, as TensorRT-LLM's and vLLM's fp8 checkpoints run), or a
  /// block-scaled format on a device with its tensor cores (mxfp8; nvfp4 as
  /// ModelOpt's NVFP4 checkpoints run on Blackwell: weights and
  /// activations in FP4 with their scales; mxfp4). The
  /// embedding and the output head stay 16-bit (ModelOpt and llm-compressor
  /// leave them unquantized); attention runs in 16-bit.
  Precision linear = Precision::BF16;
  /// Weight-only quantization (W8A16, W4A16: AWQ/GPTQ through Marlin or
  /// TensorRT-LLM's weight-only GEMMs): the repeated layers' linear
  /// weights stored at these bytes per parameter (int4 with one 16-bit
  /// scale per group of 128) and dequantized in the GEMM, which computes in
  /// 16-bit; 0: none.
  double weightOnlyBytes = 0;
  double kvBytesPerElement = 2; ///< 2, or 1 for an fp8 KV cache
  /// "bf16", "fp16", "fp8", "mxfp8", "nvfp4", "mxfp4" (weights and math),
  /// "int8" or "int4" (weight-only);
  /// the cache stays 16-bit unless `kvCache` says fp8. Errors name the
  /// word.
  static llvm::Expected<ServingPrecision> parse(const std::string &weights,
                                                const std::string &kvCache);
  /// The repeated layers' weights, per parameter.
  double weightBytesPerParam() const {
    return weightOnlyBytes > 0 ? weightOnlyBytes : precisionBytes(linear);
  }
  /// "bf16", "fp16", "fp8", "mxfp8", "nvfp4", "mxfp4", "int8", "int4".
  std::string name() const;
};

/// One step's batch, as the pricer needs it: sums over its requests.
struct StepBatch {
  /// Prompt tokens computed this step, and the requests (chunks) they
  /// belong to.
  int64_t prefillTokens = 0, prefillRequests = 0;
  /// Sum over the chunks of q·(p + (q+1)/2): the query-key pairs a causal
  /// prefill of q new tokens after p cached ones computes.
  double prefillPairs = 0;
  /// Sum over the chunks of p + q: the keys each reads from the cache.
  double prefillKeys = 0;
  /// Requests generating one token each, and the keys they read (their
  /// context lengths summed).
  int64_t decodeRequests = 0;
  double decodeKeys = 0;
  /// Speculative decoding: the drafts the generating requests' tokens
  /// carry, verified this step (k a request), each one more query over its
  /// request's keys and one more position of the output head.
  int64_t draftTokens = 0;
  /// Requests that sample a token this step (the output head runs for
  /// them only): every decode and each prefill that finishes its prompt.
  int64_t sampled = 0;
  /// The same three for sliding-window layers, each query seeing at most
  /// the model's window of keys (set when the model has one).
  double prefillPairsWindowed = 0, prefillKeysWindowed = 0,
         decodeKeysWindowed = 0;
  /// Tokens at the start of every request's cache that all the engine's
  /// running requests share (blocks of the prefix cache, each request
  /// having computed past them): vLLM's cascade attention reads them once
  /// for the step (StepPricer::cascades).
  double commonPrefixKeys = 0;
  /// The step without the shared prefix's keys: what each request's own
  /// attention reads beyond it.
  StepBatch suffixBeyond(double common) const;
  /// Adds a prompt chunk of q tokens after p cached ones, and a decode of
  /// a request whose context is `context` tokens (its new one included).
  void addPrefill(double p, double q, double window);
  void addDecode(double context, double window);
  int64_t tokens() const {
    return prefillTokens + decodeRequests + draftTokens;
  }
  /// One of `ranks` data-parallel attention ranks' share, the requests
  /// spread evenly (TensorRT-LLM's attention-DP balancing): counts rounded
  /// up (the busiest rank), sums divided.
  StepBatch perRank(int ranks) const;
};

/// Where the step's time goes, on the slowest stage (seconds).
struct StepTime {
  /// One step end to end: every stage in turn and the transfers between.
  double latencyS = 0;
  /// How often the replica can start a step: its slowest stage (pipeline
  /// parallelism keeps `pp` steps in flight); latencyS when pp is 1.
  double intervalS = 0;
  double linearS = 0, attentionS = 0, otherS = 0, communicationS = 0, hostS = 0;
  /// The drafter's passes after the verification (speculative decoding).
  double draftS = 0;
};

/// A serving replica: `tp` x `pp` devices of one type.
struct ServingReplica {
  int tp = 1, pp = 1;
  /// Expert parallelism over the tp ranks (vLLM's --enable-expert-parallel
  /// without data-parallel attention, SGLang's --ep-size, TensorRT-LLM's
  /// moe_ep_size): 1, or tp — each rank keeps E/ep whole experts instead
  /// of 1/tp of every expert. Attention stays tensor-parallel.
  int ep = 1;
  /// Attention data parallelism beside expert parallelism (TensorRT-LLM's
  /// enable_attention_dp, SGLang's --enable-dp-attention, vLLM's
  /// --data-parallel-size with --enable-expert-parallel): each of the tp
  /// ranks runs attention, the dense layers and the output head for its
  /// own requests, holding their weights whole and its requests' KV cache;
  /// the experts split whole over the ranks (ep = tp), the tokens
  /// all-gathered before each expert layer and reduce-scattered after.
  bool attentionDp = false;
  const DeviceSpec *device = nullptr;
  /// The tensor-parallel group (one node) and the stage-to-stage link.
  GroupShape tpGroup, stageLink;
};

/// The replica's devices on a node group: tp ranks side by side in a node,
/// stages on the next ranks (across nodes when a node is full). An error
/// when tp exceeds a node.
llvm::Expected<ServingReplica> servingReplicaOn(const NodeGroup &g, int tp,
                                                int pp, int ep = 1,
                                                bool attentionDp = false);

/// Prices steps of one replica. Built once per (model, replica, precision,
/// engine); price() is cheap (a few dozen roofline evaluations), so the
/// serving simulator calls it once per step.
class StepPricer {
public:
  static llvm::Expected<StepPricer> create(const Workload &w,
                                           const ServingReplica &replica,
                                           const ServingPrecision &precision,
                                           ServingEngine engine);
  StepTime price(const StepBatch &b) const;
  /// Speculative decoding on this replica: its drafter priced after each
  /// step's verification. An error when the model has no layer a drafter
  /// could be, or the replica is pipelined (vLLM up to 0.15 refuses it).
  llvm::Error setSpeculation(const Workload &w, const Speculation &s);
  const Speculation &speculation() const { return spec_; }
  /// The attention backend's decode kernel takes one query a request, so a
  /// speculative step's 1 + k query verification of a latent attention runs
  /// the prefill path (vLLM's SINGLE_ONLY MLA backends: the cached latent
  /// up-projected to every head's keys and values each step).
  void setVerifyAsPrefill(bool on) { verifyAsPrefill_ = on; }
  const ServingReplica &replica() const { return replica_; }
  ServingEngine engine() const { return engine_; }
  /// The sliding window of the model's windowed attention layers (0: none)
  /// and their share of the KV cache's bytes per token.
  int64_t window() const { return window_; }
  double windowedKvFraction() const { return windowedKvFraction_; }
  /// The cache a request of `tokens` holds, in tokens of the full rate:
  /// every token in full-attention layers, the window and a block in
  /// sliding-window layers (vLLM frees the blocks that fall out of the
  /// window; TensorRT-LLM's cache is cyclic).
  double tokensHeld(double tokens, int64_t blockTokens) const {
    if (window_ <= 0)
      return tokens;
    return (1 - windowedKvFraction_) * tokens +
           windowedKvFraction_ *
               std::min(tokens, double(window_ + blockTokens));
  }

  /// One op of a layer kind, reduced to what a step needs: its work per
  /// token on one rank.
  struct TokenOp {
    enum Kind { Linear, Attention, Other } kind = Other;
    KernelClass cls = KernelClass::Pointwise;
    Precision precision = Precision::BF16;
    double flopsPerToken = 0;          ///< on one rank
    double bytesPerToken = 0;          ///< activations moved, one rank
    double weightBytes = 0;            ///< a linear layer's weights, one rank
    int kernels = 1;                   ///< 0 when it fuses with the previous op
    int experts = 0, topK = 0;         ///< a mixture-of-experts GEMM
    int expertParallel = 1;            ///< its experts split whole over ranks
    double allReduceBytesPerToken = 0; ///< tensor-parallel, after it
    /// Attention DP: the hidden state per token all-gathered before the
    /// expert layer and reduce-scattered after it (set on its last GEMM).
    double gatherBytesPerToken = 0;
    /// The vocabulary-parallel output head: each sampled position's 16-bit
    /// logits gathered from the tensor-parallel ranks (vLLM's
    /// LogitsProcessor; TensorRT-LLM's lm_head, a ColumnLinear with
    /// gather_output, all-gathers in the model's dtype and casts to its
    /// float32 logits dtype after).
    double logitsGatherBytesPerToken = 0;
    /// Attention: query heads and kv heads on one rank, head dims, and a
    /// sliding window.
    double heads = 0, kvHeads = 0, headDim = 0, valueDim = 0;
    bool windowed = false;
    /// Multi-head latent attention: the cached latent and the rotary part
    /// all heads share (kvHeads is then 1: the cache is not split).
    double latentDim = 0, ropeDim = 0;
  };
  struct Kind {
    std::vector<TokenOp> ops;
    /// The output head (and the norm before it): run for sampled requests.
    bool head = false;
    /// Instances per stage.
    std::vector<int64_t> perStage;
    double outputBytesPerToken = 0; ///< handed to the next stage
  };

private:
  llvm::Error tokenOp(const OpCost &op, const LayerKind &k, bool head,
                      bool repeated, double tokens,
                      const ServingPrecision &precision, TokenOp &t,
                      bool &anyAttention, bool &anyExperts);
  double kindSeconds(const Kind &k, const StepBatch &b, const StepBatch &rank,
                     StepTime &t) const;
  /// Whether vLLM runs `op` as cascade attention over the step's common
  /// prefix (its rule, docs/serving.md "Prefix caching").
  bool cascades(const TokenOp &op, const StepBatch &b) const;
  /// The drafter's passes after the verification of `b`.
  double draftSeconds(const StepBatch &b) const;
  double expertParallelSeconds(const TokenOp &op, double tokens,
                               double act) const;
  /// The grouped GEMM reading `weights` (the active experts') and moving
  /// `moved` bytes of tokens.
  double expertGemmSeconds(const TokenOp &op, double flops, double weights,
                           double moved) const;
  ServingReplica replica_;
  ServingEngine engine_ = ServingEngine::Vllm;
  const KernelModel *kernels_ = nullptr;
  std::vector<Kind> kinds_;
  double kvBytesPerElement_ = 2;
  int64_t window_ = 0;
  double windowedKvFraction_ = 0;
  Speculation spec_;
  bool verifyAsPrefill_ = false;
  /// The target's precision and the tokens its op costs are for (the
  /// drafter's layer is rebuilt from them at draftPrecision).
  ServingPrecision precision_;
  double tokens_ = 1;
  /// The drafter's layer (setSpeculation).
  Kind draft_;
  int draftKind_ = -1, headKind_ = -1; ///< indices into kinds_
};

} // namespace orrery

#endif // ORRERY_COSTMODEL_SERVINGSTEP_H
