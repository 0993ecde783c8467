//===- Workload.h - a model as ordered layers with costs ------------------===//
//
// What the cost model and the search see of a model: plain C++, no MLIR.
// Every figure is for one execution at the batch the model was imported with
// (`batchSize` samples); divide by it for per-sample figures.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_WORKLOAD_H
#define ORRERY_COSTMODEL_WORKLOAD_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace orrery {

/// One kind of layer (a function after outlining) and the cost of one
/// instance of it.
struct LayerKind {
  std::string name;
  int64_t count = 0;  ///< instances in the model
  int64_t numOps = 0; ///< ops in one instance (control-flow bodies included)
  int64_t parameters = 0; ///< trainable, each weight counted at its first use
  int64_t buffers = 0;    ///< non-trainable weight elements
  int64_t forwardFlops = 0;
  int64_t backwardFlops = 0;
  int64_t bytesRead = 0;
  int64_t bytesWritten = 0;
  int64_t savedActivationBytes = 0; ///< kept for backward, each value once
  int64_t opsWithoutCostFormula = 0;
};

/// A run of consecutive layers of one kind, in model order.
struct LayerRun {
  size_t kind = 0;
  int64_t count = 0;
};

/// A model, ready for the cost model and the search.
struct Workload {
  std::string source;
  int64_t batchSize = 1;
  /// Tokens per sample when the model's first input is a [batch, seq]
  /// integer tensor of token ids; 0 otherwise.
  int64_t tokensPerSample = 0;
  std::vector<LayerKind> kinds;
  std::vector<LayerRun> layers;
  /// Op histogram of the imported graph (before outlining), by op name.
  std::map<std::string, int64_t> opHistogram;
  /// Op types kept by `orrery.onnx_op`, whose FLOPs are unknown.
  std::map<std::string, int64_t> opsWithoutCostFormula;

  int64_t totalOps() const;
  int64_t parameters() const;
  int64_t buffers() const;
  int64_t forwardFlops() const;
  int64_t backwardFlops() const;
  int64_t savedActivationBytes() const;
};

} // namespace orrery

#endif // ORRERY_COSTMODEL_WORKLOAD_H
