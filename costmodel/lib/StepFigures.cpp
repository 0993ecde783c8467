//===- StepFigures.cpp - a step's figures ---------------------------------===//
//
// The last phase: throughput, model and hardware FLOPs, MFU and HFU, each
// stage's time by activity and the energy it draws, and the slowest stage's
// time breakdown (compute, exposed tp/cp/ep/dp collectives, pipeline
// transfers, bubble, optimizer). A pruned step states its bound alone.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"

#include <algorithm>

namespace orrery {
namespace detail {

void Simulation::figures(const StepLayout &l, const ScheduledStep &sch,
                         const GradientSync &sync, double noTransferEnd,
                         bool keepTrace, StepResult &r) const {
  int pp = s.pp, v = s.virtualStages, chunks = pp * v;
  int m = int(s.microBatches());
  const std::vector<double> &free = sch.timeline.free,
                            &busy = sch.timeline.busy;
  double stepS = sch.pruned ? sch.thisSplitS : sync.stepS;
  int slowest = sync.slowest;
  double samples = double(s.globalBatch);
  double perSample = 1.0 / std::max<int64_t>(1, w.batchSize);
  r.stepS = stepS;
  r.samplesPerS = samples / stepS;
  r.tokensPerS = r.samplesPerS * double(w.tokensPerSample); // 0 without tokens
  r.modelFlopsPerStep =
      double(w.forwardFlops() + w.backwardFlops()) * perSample * samples;
  // recompFlops are per device per micro-batch; scale to the whole step.
  double devices = 0, peakFlops = 0, hwRecompute = 0;
  for (int ch = 0; ch < chunks; ++ch)
    hwRecompute +=
        l.recompFlops[ch] * at[s.stageOfChunk(ch)].tp * s.cp * m * s.dp;
  for (int i = 0; i < pp; ++i) {
    double n = double(at[i].tp) * s.cp * s.dp;
    devices += n;
    peakFlops += n * at[i].device->tensorPeak(s.precision);
    r.costUsd += n * at[i].group->priceUsdPerDeviceHour * stepS / 3600.0;
    // What a device of the stage does: its tasks' compute (tensor-core
    // math or memory-bound), the collectives inside them that compute does
    // not hide, the exposed gradient reduction, the optimizer step
    // (memory-bound on the device, or the host's under offload, when the
    // device waits), and waiting for the rest of the step (the bubble,
    // pipeline transfers, a faster stage).
    ActivitySeconds &act = r.stages[i].activity;
    double compute = 0, gemm = 0;
    for (int c2 = 0; c2 < v; ++c2) {
      compute += l.computeS[s.chunkOnStage(i, c2)] * m;
      gemm += l.gemmS[s.chunkOnStage(i, c2)] * m;
    }
    act.gemmS = gemm;
    act.memoryBoundS =
        std::max(0.0, compute - gemm) + (s.offloadOptimizer ? 0 : sync.optS[i]);
    act.communicationS = std::max(0.0, busy[i] - compute) + sync.dpExposedS[i];
    act.idleS = std::max(0.0, stepS - act.gemmS - act.memoryBoundS -
                                  act.communicationS);
    r.stages[i].power = at[i].group->power;
    r.energy.add(act, at[i].group->power, n);
  }
  r.energyJ = r.energy.total();
  r.hardwareFlopsPerStep = r.modelFlopsPerStep + hwRecompute;
  r.modelTflopsPerDevice = r.modelFlopsPerStep / stepS / devices / 1e12;
  r.mfu = r.modelFlopsPerStep / stepS / peakFlops;
  r.hfu = r.hardwareFlopsPerStep / stepS / peakFlops;
  double compute = 0, tp = 0, cpComm = 0;
  for (int c2 = 0; c2 < v; ++c2) {
    compute += l.computeS[s.chunkOnStage(slowest, c2)] * m;
    tp += l.tpS[s.chunkOnStage(slowest, c2)] * m;
    cpComm += l.cpS[s.chunkOnStage(slowest, c2)] * m;
    r.exposedEpCommS += l.epS[s.chunkOnStage(slowest, c2)] * m;
    r.cpTransferS += l.cpAllS[s.chunkOnStage(slowest, c2)] * m;
  }
  r.computeS = compute;
  r.exposedTpCommS = tp;
  r.exposedCpCommS = cpComm;
  r.exposedDpCommS = sync.dpExposedS[slowest];
  r.optimizerS = sync.optS[slowest];
  double idle = std::max(0.0, free[slowest] - busy[slowest]);
  r.exposedPpCommS =
      std::min(idle, std::max(0.0, free[slowest] - noTransferEnd));
  r.bubbleS = std::max(0.0, idle - r.exposedPpCommS);
  if (sch.pruned) // the part of the bound that this split and schedule add
    r.bubbleS = sch.thisSplitS - sch.anySplitS;
  r.bubbleFraction = r.bubbleS / stepS;
  if (keepTrace)
    for (int i = 0; i < pp; ++i) {
      if (sync.dpExposedS[i] > 0)
        r.trace.push_back({i, "gradient all-reduce (exposed)", "dp", free[i],
                           sync.dpExposedS[i]});
      r.trace.push_back({i, "optimizer", "optimizer",
                         free[i] + sync.dpExposedS[i], sync.optS[i]});
    }
}

} // namespace detail
} // namespace orrery
