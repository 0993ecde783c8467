//===- Simulation.h - the step simulator's internals -------------------===//
//
// Shared by Simulator.cpp (chunks, the schedule, the step) and
// LayerPricing.cpp (one layer kind's times under a strategy). Not part of
// the public API.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_LIB_SIMULATION_H
#define ORRERY_COSTMODEL_LIB_SIMULATION_H

#include "orrery/CostModel/Simulator.h"

#include <vector>

namespace orrery {
namespace detail {

/// Per micro-batch times of one layer kind under the strategy.
struct LayerTime {
  double forwardComputeS = 0, backwardComputeS = 0;
  double forwardTpS = 0, backwardTpS = 0;
  /// Context parallelism's key-value exchange, exposed, and all of it.
  double forwardCpS = 0, backwardCpS = 0, cpTransferS = 0;
  double forwardCpSendS = 0, backwardCpSendS = 0;
  /// Expert parallelism's token all-to-alls (dispatch and combine).
  double forwardEpS = 0, backwardEpS = 0;
  double recomputeS = 0; ///< extra forward work in backward (compute + comm)
  double recomputeFlops = 0;
  /// Activation bytes one micro-batch keeps for this layer, per device.
  double keptBytes = 0;
  /// Bytes one micro-batch needs while this layer runs its backward.
  double workingBytes = 0;
  /// Its forward runs again in backward (full recompute of a repeated layer).
  bool fullRecompute = false;
};

struct Task {
  int vs = 0, mb = 0;
  bool backward = false;
  /// A forward whose output leaves with the next task's gradient, in one
  /// communication after both (Megatron-LM's interleaved 1F1B in its steady
  /// state: send_forward_backward_recv_forward_backward).
  bool sendsWithNext = false;
};

class Simulation {
public:
  /// `at[i]` says where pipeline stage i runs; `uniform` when every stage
  /// runs on the same placement (layer times are then priced once).
  Simulation(const Workload &w, const Strategy &s, const Assumptions &a,
             std::vector<StagePlacement> at, bool uniform)
      : w(w), s(s), a(a), at(std::move(at)), uniform(uniform) {}

  llvm::Expected<StepResult> run(bool keepTrace);
  Detail detail = Detail::Full;

private:
  const Workload &w;
  const Strategy &s;
  const Assumptions &a;
  std::vector<StagePlacement> at;
  bool uniform;

  double scale() const {
    return double(s.microBatch) / double(std::max<int64_t>(1, w.batchSize)) /
           s.cp;
  }
  double opTime(const DeviceSpec &dev, double flops, double bytes,
                KernelClass c, int kernels) const {
    return opTime(dev, flops, bytes, c, kernels, s.precision);
  }
  double opTime(const DeviceSpec &dev, double flops, double bytes,
                KernelClass c, int kernels, Precision precision) const;
  LayerTime layerTime(const LayerKind &k, const StagePlacement &p,
                      LayerBreakdown *breakdown = nullptr) const;
  std::vector<std::vector<int>>
  chunkLayers(std::vector<size_t> &sequence) const;
  std::vector<std::vector<Task>> schedule(int microBatches) const;
};

} // namespace detail
} // namespace orrery

#endif // ORRERY_COSTMODEL_LIB_SIMULATION_H
