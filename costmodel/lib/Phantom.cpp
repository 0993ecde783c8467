//===- Phantom.cpp - phantom parallelism's layers ------------------------===//
//
// `phantom=k` (Seal, Alam, Ramirez, Dash and Lu, "A Parallel Alternative
// for Energy-Efficient Neural Network Training and Inferencing", arXiv
// 2508.00960, 2025): an alternative to tensor parallelism for feed-forward
// networks. What is modelled, from the paper's description of its
// operators: each of the p = tp ranks holds n/p of every layer's neurons;
// instead of gathering the whole layer input (tensor parallelism's
// collectives), a rank computes its own block (n_in/p x n_out/p), compresses
// its n_in/p local activations into k "ghost" neurons (a phantom layer,
// n_in/p x k), all-gathers the ghosts of every rank (k per rank), and
// decompresses the p - 1 others' ghosts into its outputs ((p-1)k x n_out/p).
// The backward runs the transposes: the ghosts' gradients are
// reduce-scattered to their owners. So a rank's FLOPs and weights are
// 1/p + k/n_out + (p-1)k/n_in of tensor parallelism's and each layer moves
// k ghosts per rank and token instead of its activations.
//
// The published trade-off: the phantom model is a different, smaller model
// (its cross-rank connections low rank through the ghosts); the paper
// reports about half tensor parallelism's training energy for FFNs and that
// smaller phantom models reach the same loss on fewer GPUs. What a model
// loses in quality at a given k is not priced; the three GEMMs of a
// phantom layer are priced as one; the ghosts kept for the backward and
// the weights' share of the GEMMs' bytes are not reduced. Its operators
// are defined for feed-forward layers: a model with attention is refused.
//
//===----------------------------------------------------------------------===//
#include "Simulation.h"

#include "orrery/CostModel/Errors.h"

#include <cmath>

namespace orrery {
namespace detail {

llvm::Expected<Workload> phantomOf(const Workload &w, const Strategy &s) {
  const double p = s.tp, k = s.phantomGhosts;
  if (w.attentionHeads() > 0)
    return inputError("strategy: phantom: phantom parallelism's operators "
                      "are defined for feed-forward layers (Seal et al.); "
                      "the model has attention");
  Workload out = w;
  bool any = false;
  for (LayerKind &kind : out.kinds) {
    double splitParams = double(kind.parameters - kind.replicatedParameters);
    double phantomParams = splitParams;
    int64_t forward = 0, backward = 0; // what the phantom layers save
    for (OpCost &op : kind.ops) {
      if (op.weighted && op.contraction && op.tensorParallel &&
          op.experts <= 1 && op.gemmK > 0 && op.gemmN > 0) {
        double nin = double(op.gemmK), nout = double(op.gemmN);
        if (k >= nout / p || k >= nin / p)
          return inputError(
              "strategy: phantom=" + std::to_string(s.phantomGhosts) +
              ": " + kind.name + "'s " + op.name + " (" +
              std::to_string(op.gemmK) + " -> " + std::to_string(op.gemmN) +
              ") leaves each of the " + std::to_string(s.tp) +
              " ranks fewer neurons than ghosts; take k below " +
              std::to_string(int64_t(std::min(nin, nout) / p)));
        double ratio = 1 / p + k / nout + (p - 1) * k / nin;
        int64_t f = int64_t(std::llround(double(op.forwardFlops) * ratio));
        int64_t b = int64_t(std::llround(double(op.backwardFlops) * ratio));
        forward += op.forwardFlops - f;
        backward += op.backwardFlops - b;
        op.forwardFlops = f;
        op.backwardFlops = b;
        phantomParams -= nin * nout * (1 - ratio);
        // The ghosts, k per rank and row, all-gathered in the forward
        // (their gradients reduce-scattered in the backward) in place of
        // tensor parallelism's all-reduces.
        double rows = double(op.gemmM) * double(std::max<int64_t>(1, op.gemmBatch));
        double element = rows * nout > 0 ? double(op.outputBytes) / (rows * nout)
                                         : 2.0;
        op.tpAllReduceForwardBytes = op.tpAllReduceBackwardBytes = 0;
        op.tpAllGatherForwardBytes =
            int64_t(std::llround(rows * k * p * element));
        any = true;
      } else if (op.tpAllReduceForwardBytes || op.tpAllReduceBackwardBytes) {
        // Nothing else of a feed-forward layer communicates.
        op.tpAllReduceForwardBytes = op.tpAllReduceBackwardBytes = 0;
      }
    }
    kind.forwardFlops -= forward;
    kind.backwardFlops -= backward;
    kind.parameters =
        kind.replicatedParameters + int64_t(std::llround(std::max(0.0, phantomParams)));
  }
  if (!any)
    return inputError("strategy: phantom: the model has no tensor-parallel "
                      "weighted layers to replace");
  return out;
}

} // namespace detail
} // namespace orrery
