//===- BuildWorkload.cpp - outlined module → Workload ---------------------===//
#include "orrery/Workload/BuildWorkload.h"
#include "FineTuning.h"
#include "RecomputeModules.h"
#include "orrery/Dialect/OrreryDialect.h"
#include "orrery/Workload/Parallelism.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>

using namespace mlir;

namespace orrery {

static std::string histogramKey(Operation *op) {
  if (auto unknown = dyn_cast<OnnxOp>(op))
    return "onnx_op:" + unknown.getOpType().str();
  StringRef name = op->getName().getStringRef();
  name.consume_front("orrery.");
  return name.str();
}

std::map<std::string, int64_t> opHistogram(ModuleOp module) {
  std::map<std::string, int64_t> hist;
  module.walk([&](Operation *op) {
    if (isa<CostOpInterface>(op) &&
        !isa<WeightOp, ConstantOp, NoneOp, YieldOp>(op))
      hist[histogramKey(op)]++;
  });
  return hist;
}

/// Ops that are views of their input: no kernel, no memory traffic.
static bool isView(Operation *op) {
  return isa<ReshapeOp, TransposeOp, SqueezeOp, UnsqueezeOp, FlattenOp,
             ExpandOp, IdentityOp, SplitOp, SliceOp>(op);
}

/// Ops a framework fuses into one elementwise kernel.
static bool isFusible(Operation *op) {
  if (op->getNumRegions() || isa<ConstantOp, NoneOp, WeightOp>(op))
    return false;
  return isa<SoftmaxOp, LogSoftmaxOp, DropoutOp, CastOp, ClipOp, WhereOp,
             GeluOp, ReluOp, SigmoidOp, TanhOp, ErfOp, AddOp, SubOp, MulOp,
             DivOp, PowOp, SqrtOp, ExpOp, NegOp, ReciprocalOp, HardSwishOp,
             HardSigmoidOp, LeakyReluOp, MaxOp, MinOp, SumOp>(op);
}

/// Whether a layer kind lists `op` in its OpCosts (LayerKind::ops is in
/// this order, one entry per such op).
/// The softmax cross-entropy over the class (last) axis of `logits`, as
/// Megatron-LM and PyTorch compute it in fp32: forward, the logits read and
/// an fp32 copy and its log-probabilities written (5 FLOP per element);
/// backward, the fp32 gradient from the log-probabilities, then the
/// gradient in the logits' own type (two kernels). The implied loss of a
/// model that returns logits and a graph's own SoftmaxCrossEntropyLoss are
/// priced alike.
static void softmaxCrossEntropyCost(RankedTensorType logits, OpCost &c) {
  int64_t n = numElements(logits);
  c.forwardFlops = 5 * n;
  c.backwardFlops = 5 * n;
  c.bytesRead = tensorBytes(logits) + 4 * n;
  c.bytesWritten = 8 * n;
  c.kernelClass = KernelClass::Reduction;
  c.backwardBytes = 8 * n + 4 * n + tensorBytes(logits);
  c.backwardKernels = 2;
}

/// ONNX's NegativeLogLikelihoodLoss over log-probabilities [N, C, ...]:
/// forward, one element per row gathered (and weighted); backward, the
/// gradient of the input written whole (zeros but at the targets).
static void negativeLogLikelihoodCost(RankedTensorType input, OpCost &c) {
  int64_t n = numElements(input);
  int64_t classes =
      input.getRank() >= 2 ? std::max<int64_t>(1, input.getDimSize(1)) : 1;
  int64_t rows = n / classes;
  int64_t elem = tensorBytes(input) / std::max<int64_t>(1, n);
  c.forwardFlops = rows;
  c.backwardFlops = rows;
  c.bytesRead = rows * (elem + 8);
  c.bytesWritten = elem;
  c.kernelClass = KernelClass::Pointwise;
  c.backwardBytes = tensorBytes(input) + rows * 8;
  c.backwardKernels = 1;
}

bool isPricedLossOp(llvm::StringRef onnxOpType) {
  return onnxOpType == "SoftmaxCrossEntropyLoss" ||
         onnxOpType == "NegativeLogLikelihoodLoss";
}

static bool hasOpCost(Operation &op) {
  return isa<CostOpInterface>(op) && !isa<ConstantOp, NoneOp>(op);
}

/// What bounds the kernel of an op that is not a contraction when memory
/// does.
static KernelClass kernelClassOf(Operation *op) {
  if (isa<FusedAttentionOp>(op))
    return KernelClass::Attention;
  if (isa<RmsNormalizationOp>(op))
    return KernelClass::Reduction;
  if (isa<DropoutOp>(op))
    return KernelClass::Random;
  if (isa<SoftmaxOp, LogSoftmaxOp, LayerNormalizationOp, BatchNormalizationOp,
          InstanceNormalizationOp, ReduceMeanOp, ReduceSumOp, ReduceMaxOp,
          ReduceMinOp, ReduceProdOp, ReduceL2Op, ReduceSumSquareOp,
          ReduceLogSumExpOp, ArgMaxOp, ArgMinOp>(op))
    return KernelClass::Reduction;
  return KernelClass::Pointwise;
}

/// Whether the backward pass computes a gradient for `v`.
static bool needsGradient(Value v) { return isActivation(v) || isWeight(v); }

/// What an op's backward pass reads and writes (docs/costmodel.md), by the
/// gradients it computes: dy is the gradient of its result, dx of an input.
/// Contractions and ops without a rule here keep the default (twice the
/// forward bytes).
static void priceBackward(Operation *op, OpCost &c) {
  if (c.contraction || op->getNumResults() != 1 || op->getNumRegions())
    return;
  int64_t out = tensorBytes(op->getResult(0).getType());
  int64_t elements = numElements(op->getResult(0).getType());
  auto set = [&](int64_t bytes, int kernels) {
    c.backwardBytes = bytes;
    c.backwardKernels = kernels;
  };
  if (auto attn = dyn_cast<FusedAttentionOp>(op)) {
    // FlashAttention's backward reads Q, K, V, O, dO and the log-sum-exp
    // rows and writes dQ, dK, dV; a small kernel first sums dO · O per row.
    int64_t qkv = 0;
    for (Value v : {attn.getQuery(), attn.getKey(), attn.getValue()})
      qkv += tensorBytes(v.getType());
    return set(2 * qkv + 2 * out + attn.getExtraSavedBytes(), 2);
  }
  if (isa<RmsNormalizationOp>(op))
    return set(5 * out, 2); // as the other norms
  if (isa<GatedActivationOp>(op))
    return set(5 * out, 1); // dy, gate, up; d(gate), d(up)
  if (isa<RotaryEmbeddingOp>(op))
    return set(2 * out, 1); // dy; dx (rotated back by the tables)
  if (isa<DropoutOp>(op))
    return set(2 * out + elements, 1); // dy, the one-byte mask; dx
  if (isa<SoftmaxOp, LogSoftmaxOp>(op))
    return set(3 * out, 1); // y, dy; dx
  if (isa<LayerNormalizationOp, BatchNormalizationOp, InstanceNormalizationOp>(
          op))
    return set(5 * out, 2); // x, dy; dx; then x, dy again for dγ, dβ
  if (isa<AddOp, SubOp>(op)) {
    // dy is each input's gradient as it is; an input broadcast to the
    // result (a bias) sums dy over the broadcast dimensions.
    int kernels = 0;
    for (Value v : op->getOperands())
      if (needsGradient(v) && tensorBytes(v.getType()) < out)
        ++kernels;
    return set(kernels * out, kernels);
  }
  if (isa<MulOp, DivOp>(op) && op->getNumOperands() == 2) {
    // Each input's gradient: dy times the other input, written at the
    // input's size (a scale by a constant reads dy and writes dx).
    int64_t bytes = 0;
    int kernels = 0;
    for (unsigned i = 0; i < 2; ++i) {
      Value v = op->getOperand(i), other = op->getOperand(1 - i);
      if (needsGradient(v)) {
        bytes += out + tensorBytes(other.getType()) + tensorBytes(v.getType());
        ++kernels;
      }
    }
    return set(bytes, kernels);
  }
  if (isa<CastOp, NegOp, IdentityOp>(op))
    return set(2 * out, 1); // dy; dx
  if (op->getNumOperands() == 1 && isFusible(op))
    return set(3 * out, 1); // dy and the kept input; dx
}

/// Looks through views to the op that computed `v`.
static Operation *producerThroughViews(Value v) {
  Operation *def = v.getDefiningOp();
  while (def &&
         isa<ReshapeOp, TransposeOp, SqueezeOp, UnsqueezeOp, FlattenOp,
             IdentityOp>(def) &&
         def->getNumOperands())
    def = def->getOperand(0).getDefiningOp();
  return def;
}

/// The GEMM a runtime runs for a contraction (OpCost::gemmM...): the
/// result's leading dimensions are products of their own when both operands
/// are activations (attention scores) or experts' weights, else rows of one
/// product; k gives the op's FLOPs.
static void gemmShape(Operation *op, OpCost &c) {
  if (op->getNumResults() != 1)
    return;
  auto t = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!t || !t.hasStaticShape() || t.getRank() < 1 || t.getNumElements() <= 0)
    return;
  int64_t rank = t.getRank(), elements = t.getNumElements();
  bool conv = op->getName().getStringRef().contains("conv");
  int64_t n = conv && rank >= 2 ? t.getDimSize(1) : t.getDimSize(rank - 1);
  int64_t batch = 1;
  if (!conv && rank >= 3 && (!c.weighted || c.experts > 1))
    for (int64_t i = 0; i + 2 < rank; ++i)
      batch *= t.getDimSize(i);
  if (n <= 0 || batch <= 0)
    return;
  c.gemmBatch = batch;
  c.gemmN = n;
  c.gemmM = std::max<int64_t>(1, elements / n / batch);
  c.gemmK = std::max<int64_t>(1, int64_t(std::llround(double(c.forwardFlops) /
                                                      2.0 / double(elements))));
}

// The Megatron-LM analysis of a layer: a contraction with a weight whose
// input is replicated is column-parallel (its output is split across the
// tensor-parallel group; its input gradient is all-reduced in backward); one
// whose input is split is row-parallel (its output is all-reduced in
// forward and replicated again). Every other op is split when any of its
// activation operands is. A vocabulary-parallel embedding all-reduces its
// output. For GPT this finds QKV and FC1 column-parallel, the output
// projection and FC2 row-parallel, four all-reduces per layer.
namespace {

/// One layer function's analysis into its LayerKind: each op's cost, how
/// tensor parallelism splits it, attention, fusion and fine-tuning, then the
/// activations it keeps, its weights and LoRA's adapters.
class LayerAnalysis {
public:
  LayerAnalysis(func::FuncOp func, LayerKind &kind, const LayoutCosts &costs,
                bool fuseChains, const LayerTraining &training, int loraRank)
      : func(func), kind(kind), layout(layoutByDynamicProgramming(func, costs)),
        sharded(layout.sharded), fuseChains(fuseChains), training(training),
        loraRank(loraRank) {}

  void run() {
    for (Operation &op : func.getBody().front().without_terminator())
      if (hasOpCost(op))
        analyzeOp(op);
    if (training.noBackward())
      kind.backwardFlops = 0;
    for (auto [op, bits] : recomputeModulesOf(func))
      if (auto it = opIndex.find(op); it != opIndex.end())
        kind.ops[it->second].recomputeModules = bits;
    keptActivations();
    weights();
    addLoraAdapters();
    kind.noBackward = training.noBackward();
  }

private:
  func::FuncOp func;
  LayerKind &kind;
  TensorParallelLayout layout;
  llvm::DenseSet<Value> &sharded;
  bool fuseChains;
  const LayerTraining &training;
  int loraRank;
  llvm::DenseSet<Value> core;
  llvm::DenseSet<Value> gemmInputs; // the roots weighted GEMMs read
  llvm::DenseSet<Type> scoreTypes;
  llvm::DenseMap<Operation *, size_t> opIndex;
  // Contractions whose weight is frozen (their inputs are kept for no
  // weight gradient), and those with a LoRA adapter.
  llvm::DenseSet<Operation *> frozenInputs;
  llvm::SmallVector<Operation *> adapted;
  Operation *previous = nullptr; // the last op with a kernel

  void analyzeOp(Operation &op) {
    auto cost = cast<CostOpInterface>(&op);
    OpCost c = baseCost(op, cost);
    pricedLoss(op, cost, c);
    auto attention = dyn_cast<FusedAttentionOp>(op);
    if (attention)
      attentionShape(attention, c);
    tensorParallelSplit(op, cost, c);
    markAttentionCore(op, c);
    // Selective recompute of fused attention (Megatron-Core checkpoints the
    // core attention) re-runs the kernel in backward and drops only its
    // log-sum-exp rows: Q, K and V are the checkpoint's inputs and the
    // output is the next projection's input, both kept.
    if (attention)
      c.attentionCore = true;
    fuseWithPrevious(op, c);
    fineTune(op, c);
    markSharedGemmInput(op, c);
    opIndex[&op] = kind.ops.size();
    kind.ops.push_back(std::move(c));
  }

  /// A weighted GEMM whose input an earlier one of the layer reads too
  /// (Q, K and V, or gate and up, written as GEMMs of their own): the
  /// frameworks run them as one (Megatron-Core's linear_qkv, linear_fc1),
  /// whose fp8 quantization of that input happens once.
  void markSharedGemmInput(Operation &op, OpCost &c) {
    if (!c.weighted)
      return;
    for (Value v : op.getOperands())
      if (isActivation(v) && !gemmInputs.insert(storageRoot(v)).second)
        c.inputQuantizedBefore = true;
  }

  /// The op's flops, bytes, GEMM shape, kernel class and backward.
  OpCost baseCost(Operation &op, CostOpInterface cost) {
    OpCost c;
    c.name = op.getName().getStringRef().str();
    if (auto unknown = dyn_cast<OnnxOp>(op))
      c.name = "onnx_op:" + unknown.getOpType().str();
    c.forwardFlops = cost.getForwardFlops();
    c.backwardFlops = cost.getBackwardFlops();
    c.bytesRead = cost.getBytesRead();
    c.bytesWritten = cost.getBytesWritten();
    c.contraction = isContractionOp(&op);
    c.weighted = c.contraction && hasWeightOperand(&op);
    // A mixture-of-experts GEMM on the layer's own expert weights.
    bool swapped;
    if (c.weighted && isExpertGemm(&op) &&
        weightSource(op.getOperand(1), swapped)) {
      auto x = cast<RankedTensorType>(op.getOperand(0).getType());
      c.experts = int(x.getDimSize(0));
      kind.experts = std::max(kind.experts, c.experts);
      // The first expert GEMM's input is the dispatched tokens.
      if (kind.expertDispatchBytes == 0)
        kind.expertDispatchBytes = tensorBytes(x);
    }
    if (c.weighted) {
      for (Value v : op.getOperands())
        if (isActivation(v))
          c.activationInputBytes += tensorBytes(v.getType());
      for (Value r : op.getResults())
        c.outputBytes += tensorBytes(r.getType());
    }
    if (c.contraction)
      gemmShape(&op, c);
    c.kernelClass = kernelClassOf(&op);
    c.view = isView(&op);
    priceBackward(&op, c);
    return c;
  }

  /// A graph's own loss, priced as the implied one is (addTrainingLoss).
  void pricedLoss(Operation &op, CostOpInterface cost, OpCost &c) {
    if (auto unknown = dyn_cast<OnnxOp>(op); unknown && op.getNumOperands()) {
      auto in = dyn_cast<RankedTensorType>(op.getOperand(0).getType());
      if (in && in.hasStaticShape() && isa<FloatType>(in.getElementType()) &&
          isPricedLossOp(unknown.getOpType())) {
        if (unknown.getOpType() == "SoftmaxCrossEntropyLoss")
          softmaxCrossEntropyCost(in, c);
        else
          negativeLogLikelihoodCost(in, c);
        // The kind's sums (sumRegionCost) counted the op as free.
        kind.forwardFlops = satAdd(kind.forwardFlops, c.forwardFlops);
        kind.backwardFlops = satAdd(kind.backwardFlops, c.backwardFlops);
        kind.bytesRead =
            satAdd(kind.bytesRead, c.bytesRead - cost.getBytesRead());
        kind.bytesWritten =
            satAdd(kind.bytesWritten, c.bytesWritten - cost.getBytesWritten());
      }
    }
  }

  void attentionShape(FusedAttentionOp attention, OpCost &c) {
    c.attentionKeysPerQuery =
        double(attention.getKvLen()) * attention.computedBlockFraction();
    c.attentionKvBytes = tensorBytes(attention.getKey().getType()) +
                         tensorBytes(attention.getValue().getType());
    c.attentionBatch = attention.getBatch();
    c.attentionQueryHeads = attention.getHeads();
    c.attentionKvHeads = attention.getKvHeads();
    c.attentionQueryLen = attention.getQLen();
    c.attentionKvLen = attention.getKvLen();
    c.attentionHeadDim = attention.getHeadDim();
    c.attentionValueDim = attention.getValueDim();
    c.attentionCausal = attention.getCausal();
    c.attentionWindow = attention.getWindow() ? *attention.getWindow() : 0;
    c.attentionLatentDim = attention.getLatentDim().value_or(0);
    c.attentionRopeDim = attention.getRopeDim().value_or(0);
    kind.attentionHeads =
        std::max<int>(kind.attentionHeads, int(attention.getHeads()));
    kind.attentionKvHeads =
        std::max<int>(kind.attentionKvHeads, int(attention.getKvHeads()));
  }

  /// Column-, row- and vocabulary-parallel contractions, and batch and
  /// spatial splits.
  void tensorParallelSplit(Operation &op, CostOpInterface cost, OpCost &c) {
    auto column = layout.columnParallel.find(&op);
    if (column != layout.columnParallel.end()) {
      c.tensorParallel = true;
      if (!column->second) {
        c.tpAllReduceForwardBytes = tensorBytes(op.getResult(0).getType());
      } else {
        for (Value v : op.getOperands())
          if (isActivation(v))
            c.tpAllReduceBackwardBytes += tensorBytes(v.getType());
      }
    } else if (layout.vocabParallel.contains(&op)) {
      c.tensorParallel = true;
      c.tpAllReduceForwardBytes = tensorBytes(op.getResult(0).getType());
    } else {
      c.tensorParallel =
          op.getNumResults() && sharded.contains(op.getResult(0));
    }
    // Batch and spatial splits (CostOpInterface::getSplitOptions).
    auto [in, out] = layout.layouts.lookup(&op);
    unsigned opts = cost.getSplitOptions();
    auto runsSplit = [&](int l) {
      return (l == Batch && (opts & SplitBatch)) ||
             (l == Spatial && (opts & SplitSpatial));
    };
    if (out == Batch || out == Spatial || runsSplit(in)) {
      int l = out != Replicated ? out : in;
      c.tensorParallel = true;
      kind.batchSplitInTp |= l == Batch;
      if (l == Spatial)
        c.tpHaloBytes = cost.getHaloBytes();
      if (out == Replicated) // run split, then gather the result
        c.tpAllGatherForwardBytes = tensorBytes(op.getResult(0).getType());
      for (Value v : op.getOperands())
        if (isWeight(v) &&
            weightTraining(&op, training) == LayerTraining::Trains)
          kind.tpGradientParameters += numElements(v.getType());
    } else if ((in == Batch || in == Spatial) && out == Replicated) {
      // An input split this op cannot take: gathered, then run whole.
      for (Value v : op.getOperands())
        if (isActivation(v))
          c.tpAllGatherForwardBytes += tensorBytes(v.getType());
    }
  }

  /// Ops of the attention core (between the score product and its use).
  void markAttentionCore(Operation &op, OpCost &c) {
    if (isScoreProduct(&op)) {
      scoreTypes.insert(op.getResult(0).getType());
      if (auto t = dyn_cast<RankedTensorType>(op.getResult(0).getType()))
        kind.attentionHeads =
            std::max<int>(kind.attentionHeads,
                          t.getRank() >= 3 ? t.getDimSize(t.getRank() - 3) : 1);
    }
    c.attentionCore =
        llvm::any_of(op.getOperandTypes(),
                     [&](Type t) { return scoreTypes.contains(t); }) ||
        llvm::any_of(op.getResultTypes(),
                     [&](Type t) { return scoreTypes.contains(t); });
    for (Value r : op.getResults())
      if (c.attentionCore)
        core.insert(r);
  }

  void fuseWithPrevious(Operation &op, OpCost &c) {
    // PyTorch's dropout is a kernel of its own (it draws random numbers);
    // what follows it may fuse with it (Megatron's bias-dropout-add).
    if (fuseChains && !c.view && isFusible(&op) && !isa<DropoutOp>(op) &&
        previous && isFusible(previous))
      for (Value v : op.getOperands())
        if (producerThroughViews(v) == previous) {
          c.fusesWithPrevious = true;
          c.fusedIntermediateBytes = tensorBytes(v.getType());
          break;
        }
    if (!c.view)
      previous = &op;
  }

  void fineTune(Operation &op, OpCost &c) {
    // Fine-tuning: a layer that nothing before trains and that trains
    // nothing runs no backward; a frozen weight gets no gradient.
    if (training.noBackward()) {
      freezeContraction(c, 0, false);
    } else if (c.weighted) {
      LayerTraining::Arg how = weightTraining(&op, training);
      if (how != LayerTraining::Trains) {
        int64_t weightBytes = 0;
        for (Value v : op.getOperands()) {
          bool swapped;
          if (BlockArgument a = weightSource(v, swapped))
            weightBytes += tensorBytes(a.getType());
        }
        int64_t before = c.backwardFlops;
        freezeContraction(c, weightBytes, true);
        kind.backwardFlops -= before - c.backwardFlops;
        if (how == LayerTraining::Frozen)
          frozenInputs.insert(&op);
        else
          adapted.push_back(&op);
      }
    }
  }

  void keptActivations() {
    // Split the kept activations by how parallelism and recompute treat them.
    llvm::DenseSet<Value> seen;
    // Kept tensors by who keeps them: inputs of weighted contractions (fp8
    // can keep those in one byte) and everything else.
    llvm::DenseMap<Value, std::pair<int64_t, bool>>
        linearInputs; // bytes, split
    llvm::DenseSet<Value> keptByOthers;
    llvm::DenseMap<Value, int64_t> skipped; // by frozen contractions
    for (Operation &op : func.getBody().front().without_terminator()) {
      auto cost = dyn_cast<CostOpInterface>(&op);
      auto idx = opIndex.find(&op);
      if (!cost || idx == opIndex.end())
        continue;
      const OpCost &c = kind.ops[idx->second];
      if (training.noBackward())
        continue; // nothing kept: no backward reads it
      int64_t extra = cost.getExtraSavedBytes();
      (c.attentionCore    ? kind.savedCoreBytes
       : c.tensorParallel ? kind.savedShardedBytes
                          : kind.savedReplicatedBytes) += extra;
      SmallVector<Value> values;
      cost.getSavedForBackward(values);
      for (Value v : values) {
        Value root = storageRoot(v);
        if (frozenInputs.contains(&op) && isActivation(v)) {
          skipped.try_emplace(root, tensorBytes(v.getType()));
          continue;
        }
        bool split = sharded.contains(v) || layout.batchSplit.contains(v) ||
                     layout.spatialSplit.contains(v);
        if (c.weighted && !core.contains(v))
          linearInputs.try_emplace(root, tensorBytes(v.getType()), split);
        else
          keptByOthers.insert(root);
        // A view shares its tensor's storage: keeping both keeps one.
        if (!seen.insert(root).second)
          continue;
        int64_t bytes = tensorBytes(v.getType());
        (core.contains(v) ? kind.savedCoreBytes
         : split          ? kind.savedShardedBytes
                          : kind.savedReplicatedBytes) += bytes;
        if (!core.contains(v))
          noteModuleSaved(v, split, bytes);
      }
    }
    // What the frozen contractions alone would have kept, and a layer with
    // no backward keeps nothing.
    if (training.noBackward())
      kind.savedActivationBytes = 0;
    for (auto &[root, bytes] : skipped)
      if (!seen.contains(root))
        kind.savedActivationBytes -= bytes;
    for (auto &[root, entry] : linearInputs)
      if (!keptByOthers.contains(root))
        (entry.second ? kind.savedLinearInputShardedBytes
                      : kind.savedLinearInputReplicatedBytes) += entry.first;
  }

  /// A kept value made by an op of selective-recompute modules: dropped
  /// when one of them is recomputed.
  void noteModuleSaved(Value v, bool split, int64_t bytes) {
    auto idx = opIndex.find(v.getDefiningOp());
    if (!v.getDefiningOp() || idx == opIndex.end())
      return;
    unsigned bits = kind.ops[idx->second].recomputeModules;
    if (!bits)
      return;
    auto it = llvm::find_if(kind.savedByModules, [&](const auto &m) {
      return m.modules == bits;
    });
    if (it == kind.savedByModules.end())
      it = kind.savedByModules.insert(kind.savedByModules.end(),
                                      LayerKind::ModuleSaved{bits, 0, 0});
    (split ? it->shardedBytes : it->replicatedBytes) += bytes;
  }

  /// K of the layer's TopK over `experts` scores (the router's choice), or
  /// 0 when it has none with a constant K.
  int routerTopK(int experts) {
    int k = 0;
    func.walk([&](OnnxOp op) {
      auto scores = op.getOpType() == "TopK" && op->getNumOperands() == 2
                        ? dyn_cast<RankedTensorType>(op->getOperand(0).getType())
                        : nullptr;
      auto c = scores && scores.getRank() &&
                       scores.getDimSize(scores.getRank() - 1) == experts
                   ? op->getOperand(1).getDefiningOp<ConstantOp>()
                   : nullptr;
      auto values = c ? dyn_cast<DenseIntElementsAttr>(c.getValue()) : nullptr;
      if (values && values.getNumElements() == 1) {
        int64_t v = (*values.value_begin<APInt>()).getSExtValue();
        if (v >= 1 && v <= experts)
          k = int(v);
      }
    });
    return k;
  }

  /// Whether `user` adds weight `w` to an expert GEMM's output, or gathers
  /// rows of it (an export's `bias[expert_ids]`).
  static bool isExpertBiasUse(Operation *user, Value w) {
    if (isa<GatherOp>(user) && user->getOperand(0) == w)
      return true;
    if (auto onnx = dyn_cast<OnnxOp>(user))
      return onnx.getOpType() == "GatherND" && user->getOperand(0) == w;
    if (!isa<AddOp>(user) || user->getNumOperands() != 2)
      return false;
    Value other = user->getOperand(user->getOperand(0) == w ? 1 : 0);
    Operation *def = other.getDefiningOp();
    return def && isExpertGemm(def);
  }

  void weights() {
    // The weights of weighted contractions (fp8 keeps 1-byte copies).
    llvm::DenseMap<BlockArgument, int> splitDims =
        splitWeightDims(func, layout);
    llvm::DenseSet<Value> linearWeights;
    for (Operation &op : func.getBody().front().without_terminator())
      if (isContractionOp(&op) && hasWeightOperand(&op))
        for (Value v : op.getOperands()) {
          bool swapped;
          BlockArgument arg = weightSource(v, swapped);
          if (!arg || !linearWeights.insert(arg).second)
            continue;
          kind.linearParameters += numElements(arg.getType());
          if (!splitDims.count(arg))
            kind.linearReplicatedParameters += numElements(arg.getType());
          auto wt = cast<RankedTensorType>(arg.getType());
          if (kind.experts > 1 && wt.getRank() == 3 &&
              wt.getDimSize(0) == kind.experts) {
            kind.expertsFrozen =
                training.active && arg.getArgNumber() < training.args.size() &&
                training.args[arg.getArgNumber()] != LayerTraining::Trains;
            kind.expertParameters += numElements(wt);
            if (!splitDims.count(arg))
              kind.expertReplicatedParameters += numElements(wt);
          }
        }
    // The experts' own biases ([E, 1, f] added to an expert GEMM's output,
    // GPT-OSS's; or gathered by the router's choice, as an export selects
    // them): held, updated and active with their experts.
    for (BlockArgument arg : func.getArguments()) {
      auto wt = dyn_cast<RankedTensorType>(arg.getType());
      if (kind.experts < 2 || !isWeight(arg) || linearWeights.contains(arg) ||
          !wt || wt.getRank() < 2 || wt.getDimSize(0) != kind.experts ||
          arg.use_empty() || !llvm::all_of(arg.getUsers(), [&](Operation *u) {
            return isExpertBiasUse(u, arg);
          }))
        continue;
      kind.expertParameters += numElements(wt);
      if (!splitDims.count(arg))
        kind.expertReplicatedParameters += numElements(wt);
    }
    for (BlockArgument arg : func.getArguments())
      if (isWeight(arg))
        kind.weightTensors++;
    for (BlockArgument arg : func.getArguments())
      if (isActivation(arg)) {
        kind.inputBytes = tensorBytes(arg.getType());
        break;
      }
    for (Type t : func.getResultTypes())
      kind.outputBytes += tensorBytes(t);
    // The router's top-k: the K of a TopK over the layer's E experts, else
    // what the dispatch holds ([E, capacity, d] at capacity factor 1 is k
    // copies of the layer's [tokens, d] input).
    if (kind.experts > 1)
      kind.expertTopK = routerTopK(kind.experts);
    if (kind.experts > 1 && kind.expertTopK < 1 && kind.inputBytes > 0) {
      double copies = double(kind.expertDispatchBytes) / kind.inputBytes;
      long k = std::lround(copies);
      if (k >= 1 && k <= kind.experts && std::abs(copies - k) < 0.05)
        kind.expertTopK = int(k);
    }
  }

  void addLoraAdapters() {
    // LoRA's adapters, after the layer's own ops.
    for (Operation *op : adapted) {
      auto column = layout.columnParallel.find(op);
      int split = column == layout.columnParallel.end() ? 0
                  : column->second                      ? 1
                                                        : 2;
      addLoraAdapter(kind, kind.ops[opIndex.lookup(op)], loraRank, split);
    }
  }
};

} // namespace

static void analyzeParallelism(func::FuncOp func, LayerKind &kind,
                               const LayoutCosts &costs, bool fuseChains,
                               const LayerTraining &training, int loraRank) {
  LayerAnalysis(func, kind, costs, fuseChains, training, loraRank).run();
}

/// Per argument of a layer function: whether tensor parallelism splits it.
static std::vector<bool> splitArguments(func::FuncOp func,
                                        const LayoutCosts &costs) {
  TensorParallelLayout layout = layoutByDynamicProgramming(func, costs);
  llvm::DenseMap<BlockArgument, int> dims = splitWeightDims(func, layout);
  std::vector<bool> split;
  for (BlockArgument arg : func.getArguments())
    split.push_back(dims.count(arg) > 0);
  return split;
}

static LayerKind measureKind(func::FuncOp func, const LayoutCosts &costs,
                             KernelFusion kernels,
                             const LayerTraining &training, int loraRank) {
  LayerKind kind;
  kind.name = func.getSymName().str();
  if (auto base = func->getAttrOfType<FlatSymbolRefAttr>("orrery.variant_of"))
    kind.variantOf = base.getValue().str();
  RegionCost cost = sumRegionCost(func.getBody());
  kind.forwardFlops = cost.forwardFlops;
  kind.backwardFlops = cost.backwardFlops;
  kind.bytesRead = cost.bytesRead;
  kind.bytesWritten = cost.bytesWritten;
  kind.savedActivationBytes = cost.savedBytes;
  func.walk([&](Operation *op) {
    if (isa<CostOpInterface>(op) && !isa<ConstantOp, NoneOp, YieldOp>(op))
      kind.numOps++;
    if (auto unknown = dyn_cast<OnnxOp>(op);
        unknown && !isPricedLossOp(unknown.getOpType()))
      kind.opsWithoutCostFormula++;
  });
  analyzeParallelism(func, kind, costs, !dispatchesEachOp(kernels),
                     training, loraRank);
  return kind;
}

/// Whether the graph computes its own training loss.
static bool hasLossOp(ModuleOp module) {
  bool found = false;
  module.walk([&](OnnxOp op) { found |= isPricedLossOp(op.getOpType()); });
  return found;
}

/// The logits the implied training loss takes (addTrainingLoss): @main's
/// first floating-point result of rank 2 or more, when a call returns it
/// and the graph has no loss of its own; null otherwise.
static Value impliedLossLogits(ModuleOp module, func::FuncOp main) {
  if (hasLossOp(module))
    return {};
  Operation *ret = main.getBody().front().getTerminator();
  for (Value v : ret->getOperands()) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t || !isa<FloatType>(t.getElementType()) || t.getRank() < 2 ||
        !t.hasStaticShape())
      continue;
    return v.getDefiningOp<func::CallOp>() ? v : Value();
  }
  return {};
}

/// A training step ends with a loss, which an exported model usually leaves
/// out (it returns logits). Unless the graph has one, the step is priced
/// with the softmax cross-entropy that Megatron-LM and PyTorch compute over
/// the class (last) axis of @main's first floating-point result, in fp32:
/// forward, the logits are read and an fp32 copy and its log-probabilities
/// written (5 FLOP per element); backward, the fp32 gradient from the
/// log-probabilities, then the gradient in the logits' type (two kernels).
/// The fp32 log-probabilities are kept
/// for backward (Korthikanti et al. 2022 count these 4·s·b·v bytes on the
/// last stage). The loss joins the layer that returns the logits when that
/// layer occurs once (a model's head) and splits as the logits do (vocab-
/// parallel cross-entropy under tensor parallelism).
static void addTrainingLoss(ModuleOp module, func::FuncOp main, Workload &w,
                            const std::map<std::string, size_t> &kindIndex) {
  if (Value v = impliedLossLogits(module, main)) {
    auto t = cast<RankedTensorType>(v.getType());
    auto call = v.getDefiningOp<func::CallOp>();
    auto it = kindIndex.find(call.getCallee().str());
    if (it == kindIndex.end() || w.kinds[it->second].count != 1)
      return;
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    Value inner = callee.getBody().front().getTerminator()->getOperand(
        cast<OpResult>(v).getResultNumber());
    // The op that computes the logits (through views), at its place in the
    // kind's op list.
    Operation *producer = producerThroughViews(inner);
    size_t index = 0;
    bool found = false;
    for (Operation &op : callee.getBody().front().without_terminator()) {
      if (!hasOpCost(op))
        continue;
      if (&op == producer) {
        found = true;
        break;
      }
      ++index;
    }
    int64_t n = numElements(t);
    OpCost loss;
    loss.name = kImpliedLossOpName;
    softmaxCrossEntropyCost(t, loss);
    // Split by vocabulary, Megatron-LM's cross-entropy all-reduces over
    // the tp group a float a token three times (the row maximum, the
    // target's logit, the sum of exponentials; the layout's choice,
    // LayoutCosts::lossResult, counted them); its backward is local.
    int64_t rows =
        t.getRank() && t.getShape().back() > 0 ? n / t.getShape().back() : 0;
    auto addTo = [&](LayerKind &kind) {
      loss.tensorParallel =
          found && index < kind.ops.size() && kind.ops[index].tensorParallel;
      loss.tpAllReduceForwardBytes = loss.tensorParallel ? 3 * 4 * rows : 0;
      loss.tpAllReducesForward = 3;
      kind.ops.push_back(loss);
      kind.forwardFlops = satAdd(kind.forwardFlops, loss.forwardFlops);
      kind.backwardFlops = satAdd(kind.backwardFlops, loss.backwardFlops);
      kind.bytesRead = satAdd(kind.bytesRead, loss.bytesRead);
      kind.bytesWritten = satAdd(kind.bytesWritten, loss.bytesWritten);
      kind.savedActivationBytes = satAdd(kind.savedActivationBytes, 4 * n);
      int64_t &saved = loss.tensorParallel ? kind.savedShardedBytes
                                           : kind.savedReplicatedBytes;
      saved = satAdd(saved, 4 * n);
    };
    LayerKind &kind = w.kinds[it->second];
    addTo(kind);
    if (kind.batchSplitLayout) {
      auto alt = std::make_shared<LayerKind>(*kind.batchSplitLayout);
      addTo(*alt);
      kind.batchSplitLayout = alt;
    }
    w.hasImpliedLoss = true;
  }
}

/// Op costs saturate at INT64_MAX instead of overflowing; an op whose FLOPs
/// or bytes saturated is an error naming it, before any sum hides which.
static llvm::Error checkOpCostsFit(ModuleOp module) {
  Operation *bad = nullptr;
  module.walk([&](CostOpInterface c) {
    if (isa<IfOp, LoopOp, ScanOp>(c.getOperation()))
      return WalkResult::advance(); // their bodies' ops are checked
    for (int64_t v : {c.getForwardFlops(), c.getBackwardFlops(),
                      c.getBytesRead(), c.getBytesWritten()})
      if (v == INT64_MAX) {
        bad = c.getOperation();
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  if (!bad)
    return llvm::Error::success();
  std::string name = bad->getName().getStringRef().str();
  if (auto loc = dyn_cast<NameLoc>(bad->getLoc()))
    name = "node '" + loc.getName().str() + "' (" + name + ")";
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      name +
          ": its FLOPs or bytes for one step exceed 2^63; bind smaller dims");
}

llvm::Expected<Workload> buildWorkload(ModuleOp module,
                                       const LayoutCosts &costs,
                                       KernelFusion kernels,
                                       const FineTuning &fineTuning) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main || main.isExternal())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "module has no function @main");
  if (llvm::Error e = checkOpCostsFit(module))
    return std::move(e);
  Workload w;
  w.kernels = kernels;
  if (auto src = module->getAttrOfType<StringAttr>("orrery.source"))
    w.source = src.str();
  if (auto tied = module->getAttrOfType<ArrayAttr>("orrery.tied_weights"))
    for (Attribute a : tied)
      if (auto note = dyn_cast<StringAttr>(a))
        w.tiedWeights.push_back(note.str());
  if (main.getNumArguments() > 0) {
    auto first = dyn_cast<RankedTensorType>(main.getArgument(0).getType());
    if (first && first.getRank() >= 1)
      w.batchSize = std::max<int64_t>(1, first.getDimSize(0));
    if (first && first.getRank() == 2 && first.getElementType().isInteger())
      w.tokensPerSample = first.getDimSize(1);
  }
  auto training = layerTraining(module, main, fineTuning);
  if (!training)
    return training.takeError();
  w.fineTuning = fineTuning;
  // Kinds by function and, when fine-tuning, how the instance trains; the
  // kind of each function's latest call (the loss joins the head's).
  std::map<std::string, size_t> kindIndex, calleeKind;
  std::map<std::string, int> kindsOfCallee;
  llvm::DenseSet<Value> countedWeights;
  llvm::DenseMap<Value, size_t> weightKind; // the kind that counts a weight
  size_t callNo = 0;
  // The head whose logits the implied loss takes, when it runs once: they
  // may leave it split by vocabulary (LayoutCosts::lossResult).
  func::CallOp lossCall;
  int lossResult = -1;
  if (Value logits = impliedLossLogits(module, main)) {
    lossCall = logits.getDefiningOp<func::CallOp>();
    lossResult = int(cast<OpResult>(logits).getResultNumber());
    int calls = 0;
    main.walk([&](func::CallOp c) {
      calls += c.getCallee() == lossCall.getCallee();
    });
    if (calls != 1)
      lossCall = {};
  }
  for (Operation &op : main.getBody().front()) {
    auto call = dyn_cast<func::CallOp>(op);
    if (!call)
      continue;
    const LayerTraining &trains = (*training)[callNo++];
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (!callee)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "call to unknown function @" +
                                         call.getCallee().str());
    std::string fn = callee.getSymName().str();
    auto [it, inserted] =
        kindIndex.try_emplace(fn + "|" + trains.key(), w.kinds.size());
    calleeKind[fn] = it->second;
    // The layout for any micro-batch (no batch split, chosen per sample),
    // and the one for micro-batches that split over the group.
    LayoutCosts perSample = costs, batched = costs;
    perSample.batchSplit = false;
    batched.batchSplit = true;
    batched.samples = std::max(1, costs.degree);
    batched.sequenceParallel = true; // as the planner runs tp
    if (call == lossCall)
      perSample.lossResult = batched.lossResult = lossResult;
    if (inserted) {
      w.kinds.push_back(
          measureKind(callee, perSample, kernels, trains, fineTuning.loraRank));
      // Instances of one function that train differently are kinds of
      // their own: the first keeps the function's name.
      if (int n = kindsOfCallee[fn]++)
        w.kinds.back().name = fn + "." + std::to_string(n + 1);
      LayerKind alt =
          measureKind(callee, batched, kernels, trains, fineTuning.loraRank);
      alt.name = w.kinds.back().name;
      // A mixture-of-experts layer's batched products are its experts,
      // which expert parallelism (ep, etp) splits, not a batch of samples.
      if (alt.batchSplitInTp && w.kinds.back().experts < 2)
        w.kinds.back().batchSplitLayout =
            std::make_shared<LayerKind>(std::move(alt));
    }
    LayerKind &kind = w.kinds[it->second];
    kind.count++;
    if (kind.count == 1) {
      // Weights of the first instance, each counted where first used (a tied
      // embedding counts in the embedding, not again in the head).
      std::vector<bool> split = splitArguments(callee, perSample);
      std::vector<bool> splitBatched = splitArguments(callee, batched);
      int64_t replicatedBatched = 0;
      for (auto [i, arg] : llvm::enumerate(call.getOperands())) {
        auto weight = arg.getDefiningOp<WeightOp>();
        if (!weight)
          continue;
        if (!countedWeights.insert(arg).second) {
          auto owner = weightKind.find(arg);
          bool trainsHere = i >= trains.args.size() ||
                            trains.args[i] == LayerTraining::Trains;
          if (weight.getTrainable() && trainsHere &&
              owner != weightKind.end() && owner->second != it->second) {
            int64_t n = numElements(arg.getType());
            kind.tiedParameters += n;
            if (!(i < split.size() && split[i]))
              kind.tiedReplicatedParameters += n;
            kind.tiedWithKind = int(owner->second);
          }
          continue;
        }
        weightKind[arg] = it->second;
        int64_t n = numElements(arg.getType());
        bool replicated = !(i < split.size() && split[i]);
        if (!weight.getTrainable()) {
          kind.buffers += n;
          kind.bufferBytes += tensorBytes(arg.getType());
          continue;
        }
        char how =
            i < trains.args.size() ? trains.args[i] : LayerTraining::Trains;
        if (how == LayerTraining::Frozen || how == LayerTraining::Adapted) {
          kind.frozenParameters += n;
          if (replicated)
            kind.frozenReplicatedParameters += n;
          continue;
        }
        kind.parameters += n;
        if (replicated)
          kind.replicatedParameters += n;
        if (!(i < splitBatched.size() && splitBatched[i]))
          replicatedBatched += n;
      }
      if (kind.batchSplitLayout) {
        auto alt = std::make_shared<LayerKind>(*kind.batchSplitLayout);
        alt->count = kind.count;
        alt->parameters = kind.parameters;
        alt->buffers = kind.buffers;
        alt->bufferBytes = kind.bufferBytes;
        alt->frozenParameters = kind.frozenParameters;
        alt->frozenReplicatedParameters = kind.frozenReplicatedParameters;
        alt->replicatedParameters = replicatedBatched;
        alt->tiedParameters = kind.tiedParameters;
        alt->tiedReplicatedParameters = kind.tiedReplicatedParameters;
        alt->tiedWithKind = kind.tiedWithKind;
        kind.batchSplitLayout = alt;
      }
    } else {
      bool allShared = kind.parameters + kind.buffers > 0;
      for (Value arg : call.getOperands())
        if (arg.getDefiningOp<WeightOp>()) {
          if (countedWeights.insert(arg).second) {
            weightKind[arg] = it->second;
            allShared = false;
          } else if (weightKind.lookup(arg) != it->second) {
            allShared = false;
          }
        }
      // Shared only when every instance so far reads the first one's.
      kind.instancesShareWeights =
          allShared && (kind.count == 2 || kind.instancesShareWeights);
      if (kind.batchSplitLayout && kind.count == 2) {
        auto alt = std::make_shared<LayerKind>(*kind.batchSplitLayout);
        alt->instancesShareWeights = kind.instancesShareWeights;
        kind.batchSplitLayout = alt;
      }
    }
    if (!w.layers.empty() && w.layers.back().kind == it->second)
      w.layers.back().count++;
    else
      w.layers.push_back({it->second, 1});
  }
  if (w.kinds.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "@main has no layers: run orrery-outline-layers first");
  // The batch-split layout counts the kind's instances too (recompute and
  // fp8 treat repeated layers apart from once-only ones).
  for (LayerKind &kind : w.kinds)
    if (kind.batchSplitLayout && kind.batchSplitLayout->count != kind.count) {
      auto alt = std::make_shared<LayerKind>(*kind.batchSplitLayout);
      alt->count = kind.count;
      kind.batchSplitLayout = alt;
    }
  addTrainingLoss(module, main, w, calleeKind);
  // Costs saturate instead of overflowing; a saturated figure is an error,
  // never a number to plan with.
  for (int64_t total : {w.forwardFlops(), w.backwardFlops(),
                        w.savedActivationBytes(), w.parameters(), w.buffers()})
    if (total == INT64_MAX)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "a cost of one step exceeds 2^63 FLOPs "
                                     "or bytes; bind smaller dims");
  return w;
}

} // namespace orrery
