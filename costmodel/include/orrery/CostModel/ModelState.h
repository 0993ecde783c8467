//===- ModelState.h - the model state one device holds ----------*- C++ -*-===//
//
// One function sizes model state for every caller: the simulator's memory
// per stage (StepMemory.cpp), the planner's memory floor per saver
// (Planner.cpp) and the heterogeneous planner's bytes per parameter
// (HeteroPlanner.cpp). Weights, gradients and optimizer state by ZeRO
// stage — ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too,
// ZeRO-3 (FSDP) the weights too — over the ranks that hold the same
// weights, the experts over the ranks that hold the same experts; frozen
// weights (fine-tuning, LoRA's base) at the weights' bytes with no gradient
// or optimizer state, sharded by ZeRO-3 as FSDP shards them; the optimizer
// state on the host under offload. PatrickStar's chunks place model data
// by their own rule (ChunkedMemory.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_MODELSTATE_H
#define ORRERY_COSTMODEL_MODELSTATE_H

#include "orrery/CostModel/Simulator.h"

namespace orrery {

/// The parameters one device holds before ZeRO shards them, and how ZeRO
/// shards them.
struct ModelShare {
  double trainable = 0; ///< parameters that train (experts included)
  double experts = 0;   ///< of `trainable`, the experts'
  double frozen = 0;    ///< weights that do not train
  int zeroStage = 0;
  double ranks = 1;       ///< the ranks ZeRO shards over (dp x cp)
  double expertRanks = 1; ///< those holding the same experts
  bool offloadOptimizer = false;
  /// ZeRO-3 under pipeline stages as torchtitan and PyTorch's pipelining
  /// run FSDP2: the stage's weights gathered once a step and kept whole,
  /// 16-bit, until its last micro-batch's backward, and the gradients
  /// accumulated whole, 16-bit, until they are reduce-scattered once.
  bool unshardedAcrossMicroBatches = false;
};

struct ModelState {
  double weightsBytes = 0, gradientsBytes = 0, optimizerBytes = 0;
  double total() const {
    return weightsBytes + gradientsBytes + optimizerBytes;
  }
};

/// The bytes of `m` on one device at `a`'s bytes per parameter.
ModelState modelState(const ModelShare &m, const Assumptions &a);

} // namespace orrery

#endif // ORRERY_COSTMODEL_MODELSTATE_H
