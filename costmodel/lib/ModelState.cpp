//===- ModelState.cpp - the model state one device holds ------------------===//
#include "orrery/CostModel/ModelState.h"

#include <algorithm>

namespace orrery {

ModelState modelState(const ModelShare &m, const Assumptions &a) {
  // The trainable parameters a state sharded from ZeRO stage `stage` on
  // keeps: all of them below it, else the dense ones' share and the
  // experts' share.
  auto sharded = [&](int stage) {
    if (m.zeroStage < stage)
      return m.trainable;
    return (m.trainable - m.experts) / m.ranks +
           m.experts / std::max(1.0, m.expertRanks);
  };
  ModelState s;
  s.weightsBytes =
      (sharded(3) + (m.zeroStage >= 3 ? m.frozen / m.ranks : m.frozen)) *
      a.weightBytesPerParam;
  s.gradientsBytes = sharded(2) * a.gradBytesPerParam;
  s.optimizerBytes =
      m.offloadOptimizer ? 0 : sharded(1) * a.optimizerBytesPerParam;
  if (m.zeroStage >= 3 && m.unshardedAcrossMicroBatches) {
    s.weightsBytes += (m.trainable + m.frozen) * a.weightBytesPerParam;
    s.gradientsBytes += m.trainable * a.weightBytesPerParam;
  }
  return s;
}

} // namespace orrery
