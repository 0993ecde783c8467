//===- Parallelism.h - Megatron's tensor-parallel layout of a layer -------===//
#ifndef ORRERY_WORKLOAD_PARALLELISM_H
#define ORRERY_WORKLOAD_PARALLELISM_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace orrery {

/// How tensor parallelism splits one layer function: a contraction with a
/// weight whose activation input is replicated is column-parallel (its
/// output is split), one whose input is split is row-parallel (its output
/// is all-reduced and replicated); every other op is split when any of its
/// activation operands is; an embedding lookup is vocabulary-parallel.
/// How a value is laid out across the tensor-parallel group.
enum Layout { Replicated = 0, Feature = 1, Batch = 2, Spatial = 3 };
constexpr int kLayouts = 4;

struct TensorParallelLayout {
  /// Values split across the tensor-parallel group by feature (Megatron's
  /// split: heads, hidden, channels).
  llvm::DenseSet<mlir::Value> sharded;
  /// Values split by batch, and by a spatial dimension.
  llvm::DenseSet<mlir::Value> batchSplit, spatialSplit;
  /// Every op's input and output layout, as chosen.
  llvm::DenseMap<mlir::Operation *, std::pair<int, int>> layouts;
  /// Weighted contractions: true = column-parallel, false = row-parallel.
  llvm::DenseMap<mlir::Operation *, bool> columnParallel;
  /// Embedding lookups split along the vocabulary.
  llvm::DenseSet<mlir::Operation *> vocabParallel;
};

/// True for MatMul, Gemm, Conv, ConvTranspose.
bool isContractionOp(mlir::Operation *op);
/// True when an op has a weight (or weight-derived) tensor operand.
bool hasWeightOperand(mlir::Operation *op);
/// Attention scores: the product of two activations with a square
/// trailing [s, s] block (QKᵀ).
bool isScoreProduct(mlir::Operation *op);
/// A mixture-of-experts GEMM: [E, capacity, d] routed tokens times
/// [E, d, f] expert weights, E > 1 (the generator's and Megatron-Core's
/// batched experts; what FormExpertsPass writes exports into).
bool isExpertGemm(mlir::Operation *op);

/// The weight argument a value comes from, looking through a transpose of
/// a matrix (torch exports nn.Linear as MatMul(x, Transpose(W))); `swapped`
/// says the dims were exchanged. Null when it is not a weight.
mlir::BlockArgument weightSource(mlir::Value v, bool &swapped);

/// Megatron's rule: the layout above, decided op by op.
TensorParallelLayout layoutTensorParallel(mlir::func::FuncOp layer);

/// Prices that rank layouts (not a step's price): seconds per FLOP of a
/// split or replicated op, per byte moved in memory, per byte all-reduced,
/// for a tensor-parallel group of `degree` devices.
struct LayoutCosts {
  int degree = 8;
  double secondsPerFlop = 1.0 / (312e12 * 0.8);
  double secondsPerByte = 1.0 / (2.0e12 * 0.8);
  double secondsPerAllReduceByte = 2.0 * 7 / 8 / 240e9;
  /// A ring all-reduce's 2(n-1) steps of latency, and a kernel launch.
  double allReduceLatencyS = 2.0 * 7 * 2e-6;
  double kernelS = 3e-6;
  /// Whether ops may split the batch across the group (a micro-batch
  /// smaller than the group cannot; Strategy::tpBatchSplit allows it).
  bool batchSplit = false;
  /// Samples per execution the layout is chosen for: the layer's work and
  /// activation traffic scale with them, weights, latencies and launches
  /// do not.
  double samples = 1;
  /// Price replicated ops without weights as split over the group, as
  /// sequence parallelism runs them (the planner turns it on with tp).
  bool sequenceParallel = false;
  /// The layer's result the training loss takes (the logits of a model
  /// that returns them), or -1. Megatron-LM's vocab-parallel cross-entropy
  /// takes the logits split by vocabulary, with three all-reduces of one
  /// float a token (the row maximum, the target's logit, the sum of
  /// exponentials), so that result may leave the layer split instead of
  /// gathered.
  int lossResult = -1;
};

/// The cheapest layout by dynamic programming over the layer's dataflow
/// tree (each op hangs under the last op that produced one of its inputs):
/// every op chooses its output layout (replicated, split by feature, by
/// batch, or spatially) given its input's, among the splits the op states
/// (CostOpInterface::getSplitOptions): a weighted contraction may be
/// column-parallel (replicated in, feature-split out, input gradient
/// all-reduced in backward), row-parallel (feature-split in, output
/// all-reduced) or replicated; ops that follow a split keep it; a batch or
/// spatial split keeps weights whole (their gradients all-reduced across
/// the group) and a spatial split exchanges the kernel's halo; an input
/// split in a way an op cannot take is all-gathered first; an embedding
/// lookup splits its table by vocabulary when that is faster or the table
/// outweighs the lookup's output (the memory it saves); ops computed from
/// weights and constants alone stay replicated. The layer's outputs end
/// replicated. For non-transformer graphs, where Megatron's alternation is
/// not the answer.
TensorParallelLayout layoutByDynamicProgramming(mlir::func::FuncOp layer,
                                                const LayoutCosts &costs);

/// For a layout: the dimension of each weight argument that tensor
/// parallelism splits (column-parallel weights on their output dim,
/// row-parallel on their input dim, embeddings on the vocabulary, the bias
/// or scale of a split activation on its last dim). Weights not in the map
/// are replicated.
llvm::DenseMap<mlir::BlockArgument, int>
splitWeightDims(mlir::func::FuncOp layer, const TensorParallelLayout &layout);

} // namespace orrery

#endif // ORRERY_WORKLOAD_PARALLELISM_H
