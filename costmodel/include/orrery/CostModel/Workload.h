//===- Workload.h - a model as ordered layers with costs ------------------===//
//
// What the cost model and the search see of a model: plain C++, no MLIR.
// Every figure is for one execution at the batch the model was imported with
// (`batchSize` samples); divide by it for per-sample figures.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_WORKLOAD_H
#define ORRERY_COSTMODEL_WORKLOAD_H

#include "orrery/CostModel/Hardware.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace orrery {

/// One op of a layer kind, as the cost model needs it.
struct OpCost {
  std::string name;
  int64_t forwardFlops = 0;
  int64_t backwardFlops = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
  /// Bytes and kernels of its backward pass (docs/costmodel.md: what the
  /// gradients need to read and write); negative: twice the forward bytes,
  /// two kernels for a contraction, else one.
  int64_t backwardBytes = -1;
  int backwardKernels = -1;
  /// Runs on tensor cores (MatMul, Gemm, Conv).
  bool contraction = false;
  /// A contraction with a weight (a linear layer): fp8 under
  /// Transformer Engine. Its activation operands' and its result's bytes.
  bool weighted = false;
  int64_t activationInputBytes = 0, outputBytes = 0;
  /// Another weighted GEMM of the layer reads the same input before this
  /// one (Q, K and V, gate and up as GEMMs of their own): the framework's
  /// fused projection quantizes it for fp8 once, in that GEMM.
  bool inputQuantizedBefore = false;
  /// A mixture-of-experts GEMM: one batched product over `experts` expert
  /// weights ([E, tokens, d] x [E, d, f]); expert parallelism splits it.
  int experts = 0;
  /// What bounds its kernel when memory does, if it is not a contraction
  /// (contractions are GEMMs).
  KernelClass kernelClass = KernelClass::Pointwise;
  /// A view (Reshape, Transpose, Slice, ...): no kernel of its own.
  bool view = false;
  /// Split across the tensor-parallel group (Megatron: every op between a
  /// column-parallel and a row-parallel contraction, and the contractions).
  bool tensorParallel = false;
  /// Part of the attention core (scores, softmax, their dropout and the two
  /// activation-activation products): what selective recompute recomputes.
  bool attentionCore = false;
  /// Under tensor parallelism: a row-parallel contraction all-reduces its
  /// output in the forward pass; a column-parallel one all-reduces its input
  /// gradient in the backward pass.
  int64_t tpAllReduceForwardBytes = 0;
  int64_t tpAllReduceBackwardBytes = 0;
  /// The forward all-reduces those bytes take, in equal parts (Megatron's
  /// vocab-parallel cross-entropy: three of a float a token).
  int tpAllReducesForward = 1;
  /// A batch- or spatially-split value gathered whole (all-gather in
  /// forward, reduce-scatter of its gradient in backward).
  int64_t tpAllGatherForwardBytes = 0;
  /// A spatial split: bytes each rank exchanges with its neighbours (the
  /// kernel's halo), forward, and as many backward.
  int64_t tpHaloBytes = 0;
  /// An elementwise op (or softmax, dropout) that reads the output of the
  /// elementwise op before it: frameworks fuse such chains into one kernel
  /// (Megatron's bias-GeLU, bias-dropout-add, scale-mask-softmax), so that
  /// tensor never goes to memory.
  bool fusesWithPrevious = false;
  int64_t fusedIntermediateBytes = 0;
  /// A fused attention kernel (KernelClass::Attention): the keys each query
  /// row visits (kv_len times the fraction of blocks computed), for its
  /// efficiency.
  double attentionKeysPerQuery = 0;
  /// Bytes of its K and V operands (what context parallelism's ring passes
  /// around), at the workload's batch.
  int64_t attentionKvBytes = 0;
  bool attentionCausal = false;
  /// Sliding-window attention: the keys each query sees (0: all of them).
  int64_t attentionWindow = 0;
  /// A contraction as the GEMM a runtime runs, at the workload's batch:
  /// gemmBatch products of [gemmM, gemmK] x [gemmK, gemmN] with the op's
  /// result ([.., m, n]; a convolution's output channels are n, its other
  /// output positions m) and its FLOPs (k = FLOPs / 2 / result elements).
  int64_t gemmBatch = 0, gemmM = 0, gemmN = 0, gemmK = 0;
  /// A fused attention's shape (orrery.fused_attention's attributes).
  int64_t attentionBatch = 0, attentionQueryHeads = 0, attentionKvHeads = 0,
          attentionQueryLen = 0, attentionKvLen = 0, attentionHeadDim = 0,
          attentionValueDim = 0;
  /// The selective-recompute modules (RecomputeModule bits) the op is part
  /// of, besides the attention core (attentionCore).
  unsigned recomputeModules = 0;
  /// Multi-head latent attention (orrery.fused_attention's latent_dim and
  /// rope_dim): what a serving engine caches a token for all heads, and
  /// the latent its absorbed decode attends over (0: not latent).
  int64_t attentionLatentDim = 0, attentionRopeDim = 0;
  /// Elements a token's KV cache holds for one key-value head (or, latent,
  /// for all heads).
  int64_t attentionCacheWidth() const {
    return attentionLatentDim > 0 ? attentionLatentDim + attentionRopeDim
                                  : attentionHeadDim + attentionValueWidth();
  }
  /// The value heads' width: attentionValueDim, the keys' when not stated.
  int64_t attentionValueWidth() const {
    return attentionValueDim > 0 ? attentionValueDim : attentionHeadDim;
  }
};

/// One kind of layer (a function after outlining) and the cost of one
/// instance of it.
struct LayerKind {
  std::string name;
  /// The kind this one is in another precision (the outliner's variant: a
  /// first or last layer whose ops are the stack's modulo float types), or
  /// empty. Priced at its own types; counted with that kind's layers.
  std::string variantOf;
  int64_t count = 0;  ///< instances in the model
  /// A repeated block that subnetwork data parallelism thins (sdp=F): its
  /// gradients are averaged over the workers holding it (Simulator.cpp).
  bool subnetworkBlock = false;
  int64_t numOps = 0; ///< ops in one instance (control-flow bodies included)
  int64_t parameters = 0; ///< trainable, each weight counted at its first use
  /// Of those, the ones tensor parallelism does not split (LayerNorm
  /// scales, biases of replicated ops): every tp rank holds them whole.
  int64_t replicatedParameters = 0;
  int64_t buffers = 0;    ///< non-trainable weight elements
  /// Their bytes at their own element types (held on every device whole).
  int64_t bufferBytes = 0;
  /// Trainable weights frozen for fine-tuning (`--freeze`, and every base
  /// weight under `--lora`): held at the weights' bytes, sharded by ZeRO-3
  /// and gathered as the others are, but with no gradient and no optimizer
  /// state; `parameters` does not count them. Of those, the ones tensor
  /// parallelism does not split.
  int64_t frozenParameters = 0, frozenReplicatedParameters = 0;
  /// Of `parameters`, the low-rank adapters' (`--lora`).
  int64_t adapterParameters = 0;
  /// Nothing before this layer trains and it trains nothing: it runs no
  /// backward and keeps nothing for one (a frozen embedding, frozen first
  /// layers).
  bool noBackward = false;
  /// The experts' weights are frozen (they count in frozenParameters).
  bool expertsFrozen = false;
  /// Per tensor-parallel rank of `tp`: the trainable parameters (split
  /// ones divided, replicated ones whole), and the frozen ones.
  double trainablePerRank(double tp) const {
    return double(parameters - replicatedParameters) / tp +
           double(replicatedParameters);
  }
  double frozenPerRank(double tp) const {
    return double(frozenParameters - frozenReplicatedParameters) / tp +
           double(frozenReplicatedParameters);
  }
  /// Every instance reads the same weights (ALBERT's one set for all its
  /// layers): the model holds them once, and a pipeline chunk holds one
  /// copy however many instances it runs.
  bool instancesShareWeights = false;
  /// Trainable weights this kind uses that an earlier kind counts (a tied
  /// head's embedding). A pipeline stage that holds this kind but not that
  /// one keeps a copy of its own, whose gradient is all-reduced with the
  /// owner's after the backward (Megatron-LM's embedding group).
  int64_t tiedParameters = 0;
  int64_t tiedReplicatedParameters = 0; ///< of those, not split by tp
  int tiedWithKind = -1;                ///< the kind that counts them
  int64_t forwardFlops = 0;
  int64_t backwardFlops = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
  int64_t savedActivationBytes = 0; ///< kept for backward, each value once
  int64_t opsWithoutCostFormula = 0;
  /// The ops in execution order.
  std::vector<OpCost> ops;
  /// Of the replicated parameters, those of ops split by batch or
  /// spatially inside the tensor-parallel group: their gradients are
  /// all-reduced across that group once per step.
  int64_t tpGradientParameters = 0;
  /// Some op splits the batch inside the tensor-parallel group.
  bool batchSplitInTp = false;
  /// The layer laid out for micro-batches that split evenly over the
  /// tensor-parallel group, when that layout splits some op's batch (null
  /// otherwise): chosen at as many samples as the group has devices.
  std::shared_ptr<const LayerKind> batchSplitLayout;
  /// The layout that applies to a micro-batch of `mbs` samples on a tensor
  /// group of `tp` (the batch-split one only when the strategy allows it).
  const LayerKind &forMicroBatch(int64_t mbs, int tp, bool batchSplit) const {
    return batchSplit && tp > 1 && mbs % tp == 0 && batchSplitLayout
               ? *batchSplitLayout
               : *this;
  }
  /// Weight tensors of one instance (ZeRO-3 gathers each one by one).
  int weightTensors = 0;
  /// Attention heads of the layer (0 without attention), and its
  /// key-value heads when a fused attention op states them (grouped-query
  /// attention; 0 otherwise).
  int attentionHeads = 0;
  int attentionKvHeads = 0;
  /// savedActivationBytes split by how parallelism treats them: replicated
  /// across tensor parallelism (the residual stream; split by sequence
  /// parallelism), split by tensor parallelism, and the attention core's
  /// (dropped by selective recompute). They sum to savedActivationBytes.
  int64_t savedReplicatedBytes = 0;
  int64_t savedShardedBytes = 0;
  int64_t savedCoreBytes = 0;
  /// Of the replicated and split saved bytes, those made by ops of
  /// selective-recompute modules, by the ops' module bits: dropped when
  /// a module among them is recomputed.
  struct ModuleSaved {
    unsigned modules = 0;
    int64_t replicatedBytes = 0, shardedBytes = 0;
  };
  std::vector<ModuleSaved> savedByModules;
  /// Of the replicated and split saved bytes, those kept only as inputs of
  /// weighted contractions (kept in fp8 under Transformer Engine's fp8).
  int64_t savedLinearInputReplicatedBytes = 0,
          savedLinearInputShardedBytes = 0;
  /// Elements of the weights of weighted contractions, and of those the
  /// ones tensor parallelism does not split (fp8 keeps a copy and its
  /// transpose of each, 1 byte per element each).
  int64_t linearParameters = 0, linearReplicatedParameters = 0;
  /// Mixture of experts: the experts of the layer, their parameters (and of
  /// those the ones tp does not split), and the bytes of the dispatched
  /// tokens ([E, capacity, d] at the workload's batch, top-k copies of each
  /// token): what the dispatch and the combine all-to-all move.
  int experts = 0;
  int64_t expertParameters = 0, expertReplicatedParameters = 0;
  int64_t expertDispatchBytes = 0;
  /// Experts each token is routed to: the dispatched tokens over the
  /// layer's input at capacity factor 1 (0: not known from the graph).
  int expertTopK = 0;
  /// The activation the layer takes (kept alone under full recompute).
  int64_t inputBytes = 0;
  /// The activations the layer hands to the next one (pipeline transfers).
  int64_t outputBytes = 0;
};

/// FlashAttention's tile of queries and keys (FA2, FA3 and cuDNN at head
/// dim 128); the dialect's fused_attention cost uses the same.
constexpr int64_t kAttentionTileTokens = 128;

/// Which kernels a training stack runs, and so how the graph is priced
/// (docs/costmodel.md, `--kernels`).
enum class KernelFusion {
  /// Megatron-Core with Transformer Engine: FlashAttention-style fused
  /// attention, fused RMSNorm / SwiGLU / RoPE, fused elementwise chains.
  Fused,
  /// Megatron-LM before FlashAttention (its fused scale-mask-softmax,
  /// bias-GELU, bias-dropout-add; the attention scores in memory): what
  /// the SC'21, Korthikanti et al. and BLOOM runs ran.
  UnfusedAttention,
  /// Plain PyTorch: one kernel per op, each paying the host's dispatch.
  Eager,
  /// Plain PyTorch calling scaled_dot_product_attention (torchtitan or
  /// Hugging Face models without torch.compile): attention fused as
  /// FlashAttention runs it, every other op a kernel of its own paying the
  /// host's dispatch.
  Sdpa,
  /// torch.compile'd PyTorch calling scaled_dot_product_attention
  /// (torchtitan with compile = true): elementwise chains, norms and RoPE
  /// fused by Inductor as `Fused` prices them, attention as SDPA's backend
  /// runs it on the device (DeviceSpec::sdpaAttention).
  Compiled,
};

/// Whether every op but fused attention is a kernel of its own, dispatched
/// by the host (Eager, Sdpa).
inline bool dispatchesEachOp(KernelFusion k) {
  return k == KernelFusion::Eager || k == KernelFusion::Sdpa;
}

/// Whether attention runs as PyTorch's scaled_dot_product_attention picks
/// its backend (Sdpa, Compiled) rather than Transformer Engine's fused
/// attention (Fused).
inline bool attentionBySdpa(KernelFusion k) {
  return k == KernelFusion::Sdpa || k == KernelFusion::Compiled;
}

/// The flag's spelling of a KernelFusion, and back (false: not one).
const char *kernelFusionName(KernelFusion k);
bool parseKernelFusion(const std::string &name, KernelFusion &out);

/// Which weights train (`--freeze`, `--lora`, docs/finetuning.md). Empty:
/// every trainable weight of the graph trains.
struct FineTuning {
  /// Weights frozen: a glob on weight names ('*' any run of characters),
  /// matching a name or a dotted prefix of it ("layers.0" freezes
  /// "layers.0.mlp.up.weight"), or a layer kind's name (every weight its
  /// instances use).
  std::vector<std::string> freeze;
  /// LoRA (Hu et al. 2021) as PEFT and NeMo run it: every base weight
  /// frozen; each targeted linear layer y = xW gets y += (xA)B with
  /// A [d_in, rank] and B [rank, d_out] trainable. 0: no adapters.
  int loraRank = 0;
  /// "attention" (the projections into and out of attention), "mlp" (the
  /// other linear layers of a layer that has attention), "all-linear"
  /// (every linear layer but the last layer's, the head), or weight-name
  /// globs as `freeze` takes.
  std::vector<std::string> loraTargets;
  bool active() const { return loraRank > 0 || !freeze.empty(); }
  /// "lora=rank=16,targets=attention;freeze=embed_tokens" style (empty
  /// when inactive), for plans and summaries.
  std::string str() const;
};

/// Parses `--lora rank=R[,targets=T1+T2...]` (targets default: attention).
llvm::Expected<FineTuning> parseLora(const std::string &text, FineTuning base);

/// A run of consecutive layers of one kind, in model order.
struct LayerRun {
  size_t kind = 0;
  int64_t count = 0;
};

/// The name of the softmax cross-entropy op the workload adds to the head of
/// a graph without a loss (Workload::hasImpliedLoss).
inline constexpr const char *kImpliedLossOpName =
    "training_loss:softmax_cross_entropy";

/// A model, ready for the cost model and the search.
struct Workload {
  std::string source;
  int64_t batchSize = 1;
  /// Tokens per sample when the model's first input is a [batch, seq]
  /// integer tensor of token ids; 0 otherwise.
  int64_t tokensPerSample = 0;
  std::vector<LayerKind> kinds;
  std::vector<LayerRun> layers;
  /// The graph has no loss op, so the step is priced with the softmax
  /// cross-entropy of its logits (an op of the head's kind).
  bool hasImpliedLoss = false;
  /// The kernels the graph was built for (the fusion pass ran for Fused
  /// and UnfusedAttention; elementwise chains fuse unless Eager).
  KernelFusion kernels = KernelFusion::Fused;
  /// Op histogram of the imported graph (before outlining), by op name.
  std::map<std::string, int64_t> opHistogram;
  /// Output projections the importer tied back to their embedding table
  /// ("head = table transposed"), as the training framework holds them.
  std::vector<std::string> tiedWeights;
  /// Which weights train (what buildWorkload applied).
  FineTuning fineTuning;
  /// Op types kept by `orrery.onnx_op`, whose FLOPs are unknown.
  std::map<std::string, int64_t> opsWithoutCostFormula;

  int64_t totalOps() const;
  /// Layer instances in the model (embedding and head count as layers).
  int64_t totalLayers() const;
  /// Attention heads (the largest over layer kinds; 0 without attention).
  int attentionHeads() const;
  /// The kind that occurs most often (the first of equals), or -1 when no
  /// kind repeats: what a layer profile measures.
  int repeatedKind() const;
  /// Experts of a mixture-of-experts layer (the largest over layer kinds;
  /// 0 without one).
  int experts() const;
  int64_t parameters() const;
  /// The parameters one token runs through: a mixture of experts' k of its
  /// E experts (expertTopK), every other weight; parameters() without
  /// experts, and -1 where an expert layer's top-k is not known.
  int64_t activeParameters() const;
  int64_t buffers() const;
  int64_t frozenParameters() const;
  int64_t adapterParameters() const;
  /// Parameters a layer kind shares with another (LayerKind::tiedParameters:
  /// a head tied to its embedding table), counted once.
  int64_t tiedParameters() const;
  int64_t forwardFlops() const;
  int64_t backwardFlops() const;
  int64_t savedActivationBytes() const;
  /// Layers in each of `chunks` consecutive pipeline chunks, in model
  /// order, as Megatron-LM splits them by default: the longest run of
  /// repeated layers (the body) evenly, what precedes it joining the first
  /// chunk and what follows the last; every layer evenly when the body has
  /// fewer repeats than chunks. Training's stages and serving's share it.
  std::vector<int> layersPerChunk(int chunks) const;
};

} // namespace orrery

#endif // ORRERY_COSTMODEL_WORKLOAD_H
