//===- Parallelism.cpp - Megatron's tensor-parallel layout of a layer -----===//
//
// For GPT this finds QKV and FC1 column-parallel, the output projection and
// FC2 row-parallel: four all-reduces per layer, two forward, two backward.
//
//===----------------------------------------------------------------------===//
#include "orrery/Workload/Parallelism.h"
#include "orrery/Dialect/OrreryDialect.h"

#include <array>

using namespace mlir;

namespace orrery {

bool isContractionOp(Operation *op) {
  return isa<MatMulOp, GemmOp, ConvOp, ConvTransposeOp>(op);
}

bool hasWeightOperand(Operation *op) {
  return llvm::any_of(op->getOperands(), [](Value v) {
    return isa<RankedTensorType>(v.getType()) && !isActivation(v) &&
           !v.getDefiningOp<ConstantOp>();
  });
}

/// Attention scores: the product of two activations with a square trailing
/// [s, s] block (QKᵀ); ops on tensors of that type form the attention core.
bool isScoreProduct(Operation *op) {
  if (!isContractionOp(op) || op->getNumResults() != 1)
    return false;
  int activations = llvm::count_if(op->getOperands(), isActivation);
  auto t = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  return activations >= 2 && t && t.getRank() >= 3 &&
         t.getDimSize(t.getRank() - 1) == t.getDimSize(t.getRank() - 2);
}

TensorParallelLayout layoutTensorParallel(func::FuncOp layer) {
  TensorParallelLayout l;
  auto anySharded = [&](Operation *op) {
    return llvm::any_of(op->getOperands(),
                        [&](Value v) { return l.sharded.contains(v); });
  };
  for (Operation &op : layer.getBody().front().without_terminator()) {
    if (!isa<CostOpInterface>(op) || isa<ConstantOp, NoneOp, WeightOp>(op))
      continue;
    bool split = false;
    if (isContractionOp(&op) && hasWeightOperand(&op)) {
      bool row = anySharded(&op);
      l.columnParallel[&op] = !row;
      split = !row;
    } else if (isa<GatherOp>(op) && op.getNumOperands() &&
               !isActivation(op.getOperand(0))) {
      l.vocabParallel.insert(&op);
    } else {
      split = anySharded(&op);
    }
    if (split)
      for (Value r : op.getResults())
        l.sharded.insert(r);
  }
  return l;
}

bool isExpertGemm(Operation *op) {
  if (!isa<MatMulOp>(op) || op->getNumOperands() != 2 ||
      !isActivation(op->getOperand(0)) || isActivation(op->getOperand(1)))
    return false;
  auto x = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto w = dyn_cast<RankedTensorType>(op->getOperand(1).getType());
  return x && w && x.getRank() == 3 && w.getRank() == 3 &&
         x.getDimSize(0) == w.getDimSize(0) && x.getDimSize(0) > 1;
}

namespace {

/// Whether expert GEMM `op` reads `hidden`-wide tokens (fc1, fc3).
bool expertReads(Operation *op, int64_t hidden) {
  auto x = cast<RankedTensorType>(op->getOperand(0).getType());
  return x.getDimSize(2) == hidden;
}

double bytesOut(Operation *op) {
  return op->getNumResults() ? double(tensorBytes(op->getResult(0).getType()))
                             : 0.0;
}

double bytesIn(Operation *op) {
  double b = 0;
  for (Value v : op->getOperands())
    if (isActivation(v))
      b += tensorBytes(v.getType());
  return b;
}

double weightBytes(Operation *op) {
  double b = 0;
  for (Value v : op->getOperands())
    if (isa<RankedTensorType>(v.getType()) && !isActivation(v) &&
        !v.getDefiningOp<ConstantOp>())
      b += tensorBytes(v.getType());
  return b;
}

/// The dynamic program over a layer's dataflow trees: each op's own cost
/// per input and output layout, the cheapest subtree per input layout, and
/// the choices read down the trees.
class LayoutSearch {
public:
  LayoutSearch(func::FuncOp layer, const LayoutCosts &costs)
      : layer(layer), costs(costs), t(std::max(1, costs.degree)),
        k(std::max(costs.samples, 1e-9)) {
    // Activation traffic per byte of one sample; weights are not per
    // sample. An all-gather moves half an all-reduce's bytes; a
    // point-to-point byte crosses the link once (an all-reduce byte costs
    // 2(t-1)/t link bytes).
    wr = costs.secondsPerAllReduceByte;
    ar = wr * k;
    lat = costs.allReduceLatencyS;
    ag = ar / 2;
    p2p = t > 1 ? ar * t / (2 * (t - 1)) : ar;
  }

  TensorParallelLayout run() {
    for (BlockArgument a : layer.getArguments())
      if (auto t = dyn_cast<RankedTensorType>(a.getType());
          t && isActivation(a) && t.getRank()) {
        hidden = t.getDimSize(t.getRank() - 1);
        break;
      }
    buildTrees();
    local.resize(n);
    vocabSplit.assign(n, false);
    for (int i = 0; i < n; ++i)
      localCosts(i);
    solve();
    return layout();
  }

private:
  func::FuncOp layer;
  const LayoutCosts &costs;
  double t, k, wr = 0, ar = 0, lat = 0, ag = 0, p2p = 0;
  int64_t hidden = 0; ///< the layer's hidden width (its first input's)
  static constexpr double inf = 1e300;
  // The ops that compute, in order, and each one's tree parent: the last op
  // (by position) that produced one of its activation operands.
  std::vector<Operation *> ops;
  llvm::DenseMap<Operation *, int> index;
  int n = 0;
  std::vector<int> parent;
  std::vector<std::vector<int>> children;
  llvm::DenseSet<Operation *> returned, lossInput;
  // local[i][in][out]: op i's own cost with its input laid out `in` and its
  // output `out` (the options the op states, CostOpInterface).
  std::vector<std::array<std::array<double, kLayouts>, kLayouts>> local;
  std::vector<bool> vocabSplit;
  std::vector<int> layoutOf, inputOf;

  double work(Operation *op, double split) const {
    auto c = cast<CostOpInterface>(op);
    double flops = double(c.getForwardFlops()) + double(c.getBackwardFlops());
    double bytes = 3.0 * double(c.getBytesRead() + c.getBytesWritten());
    return costs.kernelS +
           k * (flops * costs.secondsPerFlop + bytes * costs.secondsPerByte) /
               split;
  }
  double gather(double bytes) const { return lat + ag * bytes; }

  void buildTrees() {
    for (Operation &op : layer.getBody().front().without_terminator()) {
      if (!isa<CostOpInterface>(op) || isa<ConstantOp, NoneOp, WeightOp>(op))
        continue;
      index[&op] = int(ops.size());
      ops.push_back(&op);
    }
    n = int(ops.size());
    parent.assign(n, -1);
    children.assign(n, {});
    for (int i = 0; i < n; ++i) {
      // The layout travels with the data: integer operands (a gather's
      // indices, the experts' routing) carry none. A mixture of experts'
      // gather of the tokens hangs under the hidden states it gathers, not
      // under the router's top-k that picks the rows.
      int data = -1, any = -1;
      for (Value v : ops[i]->getOperands()) {
        Operation *def = v.getDefiningOp();
        auto it = def ? index.find(def) : index.end();
        if (it == index.end() || !isActivation(v))
          continue;
        any = std::max(any, it->second);
        auto t = dyn_cast<RankedTensorType>(v.getType());
        if (t && isa<FloatType>(t.getElementType()))
          data = std::max(data, it->second);
      }
      parent[i] = data >= 0 ? data : any;
      if (parent[i] >= 0)
        children[parent[i]].push_back(i);
    }
    for (auto [i, v] : llvm::enumerate(
             layer.getBody().front().getTerminator()->getOperands()))
      if (Operation *def = v.getDefiningOp())
        (int(i) == costs.lossResult ? lossInput : returned).insert(def);
  }

  void localCosts(int i) {
    Operation *op = ops[i];
    auto &L = local[i];
    for (auto &row : L)
      row.fill(inf);
    unsigned opts = cast<CostOpInterface>(op).getSplitOptions();
    bool data = llvm::any_of(op->getOperands(),
                             [](Value v) { return isActivation(v); });
    double full = work(op, 1), part = work(op, t);
    if (!data) { // computed from weights and constants: not laid out
      L[Replicated][Replicated] = full;
      return;
    }
    // Under sequence parallelism the replicated ops between weighted ones
    // run split too (the simulator prices them so).
    L[Replicated][Replicated] =
        costs.sequenceParallel && weightBytes(op) == 0 ? part : full;
    if (opts & SplitVocab) {
      // An embedding lookup: the table split by vocabulary, each rank's
      // partial rows all-reduced; or the whole table on every rank.
      // The split also saves memory: it is taken whenever the table is
      // larger than what the lookup all-reduces (Megatron always splits
      // vocabularies of language models), or when it is faster.
      double vocab = part + lat + ar * bytesOut(op);
      double table = tensorBytes(op->getOperand(0).getType());
      vocabSplit[i] = vocab < full || table > bytesOut(op);
      L[Replicated][Replicated] = vocabSplit[i] ? vocab : full;
    }
    if (opts & (SplitColumn | SplitRow)) {
      // Megatron-Core's experts: those reading the hidden state (fc1)
      // column-parallel, those writing it (fc2) row-parallel.
      bool intoExperts = isExpertGemm(op) && expertReads(op, hidden);
      bool outOfExperts = isExpertGemm(op) && !intoExperts;
      if ((opts & SplitColumn) && !outOfExperts)
        L[Replicated][Feature] = part + lat + ar * bytesIn(op);
      if ((opts & SplitRow) && !intoExperts)
        L[Feature][Replicated] = part + lat + ar * bytesOut(op);
      // Gather the input, then column-parallel (not an expert GEMM:
      // Megatron-Core's experts are column-parallel from the dispatched
      // tokens and row-parallel into the combine).
      if ((opts & SplitColumn) && !isExpertGemm(op))
        L[Feature][Feature] = 2 * (lat + ar * bytesIn(op)) + part;
    } else if (opts & SplitFollow) {
      L[Feature][Feature] = part;
      L[Feature][Replicated] = lat + ar * bytesOut(op) + part; // gather
    }
    // Batch and spatial splits keep weights whole: their gradients are
    // all-reduced across the group (priced here per execution, an upper
    // bound of the per-step cost). A slice of a replicated input is free.
    double weights = weightBytes(op);
    double gradients = weights > 0 ? lat + wr * weights : 0;
    // A batch or spatial split starts at a weighted contraction: splitting
    // the replicated ops between them (bias, dropout, residual, norm) is
    // sequence parallelism, which the simulator prices on its own
    // (Strategy::sequenceParallel).
    bool starts = (opts & (SplitColumn | SplitRow)) != 0;
    if ((opts & SplitBatch) && costs.batchSplit) {
      L[Batch][Batch] = part + gradients;
      if (starts)
        L[Replicated][Batch] = part + gradients;
      L[Batch][Replicated] = part + gradients + gather(bytesOut(op));
    }
    if (opts & SplitSpatial) {
      double h = double(cast<CostOpInterface>(op).getHaloBytes());
      double halo = h > 0 ? 2 * (lat + p2p * h) : 0; // forward and backward
      L[Spatial][Spatial] = part + halo + gradients;
      if (starts)
        L[Replicated][Spatial] = part + halo + gradients;
      L[Spatial][Replicated] = part + halo + gradients + gather(bytesOut(op));
    }
    // An input split in a way the op cannot take is gathered first.
    for (int in : {Feature, Batch, Spatial})
      L[in][Replicated] =
          std::min(L[in][Replicated], gather(bytesIn(op)) + full);
    if (returned.contains(op)) // the layer hands on replicated tensors
      for (int in = 0; in < kLayouts; ++in)
        for (int out : {Feature, Batch, Spatial})
          L[in][out] = inf;
    if (lossInput.contains(op) && !returned.contains(op)) {
      // The loss takes the logits split by vocabulary: its three
      // all-reduces of a float a token, no gather.
      auto logits = dyn_cast<RankedTensorType>(op->getResult(0).getType());
      double rows = logits && logits.getRank() && logits.getShape().back() > 0
                        ? double(logits.getNumElements()) /
                              double(logits.getShape().back())
                        : 0;
      double loss = 3 * (lat + ar * 4 * rows);
      for (int in = 0; in < kLayouts; ++in) {
        for (int out : {Batch, Spatial})
          L[in][out] = inf;
        L[in][Feature] += loss;
      }
    }
  }

  void solve() {
    // best[i][in]: cheapest cost of op i's subtree given its input layout.
    std::vector<std::array<double, kLayouts>> best(n);
    std::vector<std::array<int, kLayouts>> choice(n);
    for (int i = n - 1; i >= 0; --i)
      for (int in = 0; in < kLayouts; ++in) {
        best[i][in] = inf;
        choice[i][in] = Replicated;
        for (int out = 0; out < kLayouts; ++out) {
          double c = local[i][in][out];
          for (int child : children[i])
            c += best[child][out];
          if (c < best[i][in]) {
            best[i][in] = c;
            choice[i][in] = out;
          }
        }
      }
    // Read the choices down the trees; roots take the layer's replicated input.
    layoutOf.assign(n, Replicated);
    inputOf.assign(n, Replicated);
    for (int i = 0; i < n; ++i) {
      inputOf[i] = parent[i] < 0 ? Replicated : layoutOf[parent[i]];
      layoutOf[i] = choice[i][inputOf[i]];
    }
  }

  TensorParallelLayout layout() const {
    TensorParallelLayout l;
    for (int i = 0; i < n; ++i) {
      Operation *op = ops[i];
      l.layouts[op] = {inputOf[i], layoutOf[i]};
      if (isContractionOp(op) && hasWeightOperand(op)) {
        if (inputOf[i] == Replicated && layoutOf[i] == Feature)
          l.columnParallel[op] = true;
        else if (inputOf[i] == Feature && layoutOf[i] == Replicated &&
                 local[i][Feature][Replicated] <
                     gather(bytesIn(op)) + work(op, 1))
          l.columnParallel[op] = false;
        else if (inputOf[i] == Feature && layoutOf[i] == Feature)
          l.columnParallel[op] = true; // gathered input, then column-parallel
      }
      if (vocabSplit[i])
        l.vocabParallel.insert(op);
      for (Value r : op->getResults()) {
        if (layoutOf[i] == Feature)
          l.sharded.insert(r);
        else if (layoutOf[i] == Batch)
          l.batchSplit.insert(r);
        else if (layoutOf[i] == Spatial)
          l.spatialSplit.insert(r);
      }
    }
    return l;
  }
};

} // namespace

TensorParallelLayout layoutByDynamicProgramming(func::FuncOp layer,
                                                const LayoutCosts &costs) {
  return LayoutSearch(layer, costs).run();
}

BlockArgument weightSource(Value v, bool &swapped) {
  swapped = false;
  if (auto t = v.getDefiningOp<TransposeOp>()) {
    v = t->getOperand(0);
    swapped = true;
  }
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && isWeight(arg) ? arg : BlockArgument();
}

llvm::DenseMap<BlockArgument, int>
splitWeightDims(func::FuncOp layer, const TensorParallelLayout &layout) {
  llvm::DenseMap<BlockArgument, int> weightDim;
  auto splitWeight = [&](Value v, int dim) {
    bool swapped;
    BlockArgument arg = weightSource(v, swapped);
    if (!arg)
      return;
    auto t = cast<RankedTensorType>(arg.getType());
    // A transposed weight ([E, d, f] experts read as [E, f, d] too) swaps
    // its last two dims.
    int64_t r = t.getRank();
    if (swapped && r >= 2 && (dim == r - 1 || dim == r - 2))
      dim = dim == r - 1 ? int(r - 2) : int(r - 1);
    if (dim >= 0 && dim < t.getRank())
      weightDim.try_emplace(arg, dim);
  };
  for (Operation &op : layer.getBody().front()) {
    auto column = layout.columnParallel.find(&op);
    if (column != layout.columnParallel.end()) {
      Value w = op.getOperand(1);
      int rank = cast<RankedTensorType>(w.getType()).getRank();
      bool transB = false;
      if (auto attr = op.getAttrOfType<IntegerAttr>("transB"))
        transB = attr.getInt() != 0;
      int outDim, inDim;
      if (isa<ConvOp>(op)) {
        outDim = 0;
        inDim = 1;
      } else if (isa<ConvTransposeOp>(op)) {
        outDim = 1;
        inDim = 0;
      } else {
        outDim = transB ? rank - 2 : rank - 1;
        inDim = transB ? rank - 1 : rank - 2;
      }
      splitWeight(w, column->second ? outDim : inDim);
      if (column->second && op.getNumOperands() > 2) // a Gemm/Conv bias
        splitWeight(op.getOperand(2), 0);
    } else if (layout.vocabParallel.contains(&op)) {
      splitWeight(op.getOperand(0), 0);
    } else if (op.getNumResults() && layout.sharded.contains(op.getResult(0))) {
      // A bias (or scale) of a split activation: split its last dim.
      for (Value v : op.getOperands()) {
        bool swapped;
        if (BlockArgument arg = weightSource(v, swapped))
          weightDim.try_emplace(
              arg, cast<RankedTensorType>(arg.getType()).getRank() - 1);
      }
    }
  }
  return weightDim;
}

} // namespace orrery
