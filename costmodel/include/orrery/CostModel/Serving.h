//===- Serving.h - what serving a model holds in memory -------*- C++ -*-===//
//
// The memory side of serving (#15's first piece): the KV cache a token adds,
// read from the graph's attention ops, and how many tokens of it fit on a
// device beside the weights, as vLLM v1 sizes its cache by default.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_SERVING_H
#define ORRERY_COSTMODEL_SERVING_H

#include "orrery/CostModel/Hardware.h"
#include "orrery/CostModel/Speculation.h"
#include "orrery/CostModel/Workload.h"

#include "llvm/Support/Error.h"

namespace orrery {

/// KV-cache bytes one token adds on one tensor-parallel rank of `tp`, all
/// layers summed: each attention op keeps K (kv heads x head dim) and V
/// (kv heads x value dim) elements of `bytesPerElement` per token of its
/// keys. Tensor parallelism splits the kv heads; where there are fewer kv
/// heads than ranks each rank keeps one head whole (vLLM replicates them).
/// Cross-attention over an encoder's tokens is counted like self-attention.
double kvCacheBytesPerToken(const Workload &w, double bytesPerElement,
                            int tp = 1);

/// The kv heads one rank of `tp` keeps of an attention op.
double kvHeadsPerRank(const OpCost &attention, int tp);

/// What a token adds to the cache on one rank, and the part of it kept by
/// attention layers that slide a window (those hold only the window's keys).
struct KvCachePerToken {
  double bytes = 0;
  double windowedBytes = 0;
};
KvCachePerToken kvCachePerToken(const Workload &w, double bytesPerElement,
                                int tp = 1);

/// How a serving replica is split and stored.
struct ServingMemoryOptions {
  int tp = 1, pp = 1;
  /// Attention data parallelism (ServingReplica::attentionDp): every weight
  /// but the experts' whole on each rank, the experts 1/tp, and the rank's
  /// own requests' KV cache at whole heads.
  bool attentionDp = false;
  /// Weight storage: 2 (bf16/fp16), 1 (fp8, int8 weight-only), 0.5 (int4
  /// weight-only; group scales not counted).
  double weightBytesPerParam = 2;
  /// The layers that run once (the embedding, the output head), which
  /// quantized checkpoints keep in 16-bit; 0: weightBytesPerParam.
  double onceOnlyBytesPerParam = 0;
  double kvBytesPerElement = 2; ///< 2 (bf16), 1 (fp8 KV cache)
  /// The share of the device the engine takes (vLLM's
  /// gpu_memory_utilization, 0.9 by default).
  double memoryUtilization = 0.9;
  /// TensorRT-LLM sizes its cache instead as a fraction of the memory free
  /// once the engine is loaded (kv_cache_free_gpu_mem_fraction: 0.9 in the
  /// executor, 0.95 in trtllm-bench); 0: vLLM's rule above.
  double freeMemoryFraction = 0;
  /// Tokens of the engine's profiling forward pass, whose activations it
  /// keeps room for (vLLM v1's max_num_batched_tokens: 8192 by default on
  /// a GPU of 70 GB or more when serving online).
  int64_t maxBatchedTokens = 8192;
  /// CUDA context, NCCL and cuBLAS buffers; 0: the device's
  /// workspace_bytes, else 1.5 GiB (Assumptions::workspaceBytes).
  double workspaceBytes = 0;
  /// A drafter on the device (speculative decoding): one more layer of
  /// its kind (draftLayerKind) in weights, at `draftWeightBytesPerParam`
  /// (draftPrecision's), and in the KV cache a token adds.
  Speculation::Method drafter = Speculation::Method::None;
  double draftWeightBytesPerParam = 2;
};

/// A replica's memory on its most loaded device.
struct ServingMemory {
  double budgetBytes = 0;     ///< memoryUtilization x capacity
  double weightBytes = 0;     ///< the stage's weights on one rank
  double activationBytes = 0; ///< the profiling pass's peak
  double workspaceBytes = 0;
  double kvBytesPerToken = 0; ///< on one rank of one stage
  double kvCacheBytes = 0;    ///< what is left for the cache
  int64_t maxTokens = 0;      ///< tokens whose K and V fit
  /// Sequences of `contextTokens` (prompt and output) that fit at once.
  int64_t maxSequences(int64_t contextTokens) const {
    return contextTokens > 0 ? maxTokens / contextTokens : 0;
  }
};

/// The cache that fits on `device`; an error names what does not fit
/// (the weights alone, or nothing left for one token).
llvm::Expected<ServingMemory> servingMemory(const Workload &w,
                                            const DeviceSpec &device,
                                            const ServingMemoryOptions &o);

} // namespace orrery

#endif // ORRERY_COSTMODEL_SERVING_H
