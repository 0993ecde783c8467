//===- StepSchedule.cpp - the step's schedule, run or bounded -------------===//
//
// The schedule's tasks (Schedule.cpp) run event by event over the layout's
// chunk times and the pipeline transfers; zero-bubble schedules split each
// backward into B and W. A search's bar prunes a step whose lower bound is
// above it before the schedule runs. Multigrid layer-parallel training
// (MGRIT) replaces the schedule with its forward and adjoint solves.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"
#include "orrery/CostModel/Errors.h"

#include <algorithm>
#include <limits>

namespace orrery {
namespace detail {

llvm::Expected<ScheduledStep>
Simulation::scheduleStep(const StepLayout &l, const PipelineTransfers &x,
                         StepResult &r, bool keepTrace) const {
  int pp = s.pp, v = s.virtualStages, chunks = pp * v;
  int m = int(s.microBatches());
  const std::vector<double> &fwdS = l.fwdS, &bwdS = l.bwdS, &wS = l.wS;
  ScheduledStep sch;
  // Zero bubble: B tasks take the backward without its weight gradients,
  // W tasks those; the order comes from the times.
  bool zeroBubble = s.splitsWeightGradients() || dualPipeTurn;
  sch.bS = bwdS;
  if (zeroBubble)
    for (int ch = 0; ch < chunks; ++ch)
      sch.bS[ch] = std::max(0.0, bwdS[ch] - wS[ch]);
  // Each task's expert-parallel all-to-alls, which DualPipeV's pairs
  // overlap (DeepSeek-V3 §3.2.1: a forward chunk's dispatch and combine
  // behind the backward chunk's attention and MLP and the reverse; tensor
  // and context parallelism, which it does not use, stay exposed).
  sch.fwdCommS.assign(chunks, 0.0);
  sch.bwdCommS.assign(chunks, 0.0);
  for (int ch = 0; ch < chunks; ++ch) {
    for (int layer : l.chunkOf[ch]) {
      const LayerTime &t = l.stageTimes(s.stageOfChunk(ch))[l.sequence[layer]];
      sch.fwdCommS[ch] += t.forwardEpS;
    }
    sch.bwdCommS[ch] = std::max(0.0, l.epS[ch] - sch.fwdCommS[ch]);
  }
  sch.order = schedule(m);
  // A search's bar (boundS): what this step takes at least. Every stage's
  // tasks over the stages' mean, which no split of the layers lowers nor a
  // zero-bubble schedule of the same work; and, for this split and
  // schedule, a stage's tasks after the first micro-batch's forward down
  // the chunks before it, and, where its last task is a backward (B) of
  // chunk c, the B of the chunks before c that must follow it. Where
  // every layer recomputes, the backwards without their recompute: the
  // bound then holds for any partial recompute of the same candidate too
  // (which the search tries after). DualPipeV's pairs (and DualPipe's,
  // folded into DualPipeV's turn) hide their expert all-to-alls behind
  // each other's compute: its tasks without those.
  double &anySplitS = sch.anySplitS, &thisSplitS = sch.thisSplitS;
  if (boundS < std::numeric_limits<double>::infinity() &&
      s.schedule != Schedule::LayerParallelMgrit) {
    bool everyLayer = s.recompute == Recompute::Full && s.recomputeLayers == 0;
    bool pairs = s.schedule == Schedule::DualPipeV;
    std::vector<double> leastFwdS = fwdS, leastBwdS = bwdS, leastBS = sch.bS;
    for (int ch = 0; ch < chunks; ++ch) {
      double recompute = everyLayer ? l.recomputeS[ch] : 0;
      leastBwdS[ch] = std::max(0.0, bwdS[ch] - recompute);
      leastBS[ch] = std::max(0.0, sch.bS[ch] - recompute);
      if (pairs) {
        leastFwdS[ch] = std::max(0.0, fwdS[ch] - sch.fwdCommS[ch]);
        leastBwdS[ch] = std::max(0.0, leastBwdS[ch] - sch.bwdCommS[ch]);
        leastBS[ch] = std::max(0.0, leastBS[ch] - sch.bwdCommS[ch]);
      }
    }
    std::vector<double> stageBusy(pp, 0.0);
    for (int ch = 0; ch < chunks; ++ch)
      stageBusy[s.stageOfChunk(ch)] +=
          double(m) * (leastFwdS[ch] + leastBwdS[ch]);
    double fill = 0;
    for (int i = 0; i < pp; ++i) {
      const std::vector<Task> &tasks = sch.order->tasks[i];
      double drain = 0;
      if (!tasks.empty() && tasks.back().backward && !tasks.back().weight &&
          tasks.back().pairVs < 0)
        for (int ch = 0; ch < tasks.back().vs; ++ch)
          drain += leastBS[ch];
      anySplitS += stageBusy[i] / pp;
      thisSplitS = std::max(thisSplitS, fill + stageBusy[i] + drain);
      fill += leastFwdS[i]; // chunk i is stage i's first
    }
  }
  sch.pruned = thisSplitS > boundS;
  Timeline &tl = sch.timeline;
  if (sch.pruned) {
    tl.free.assign(pp, thisSplitS);
    tl.busy.assign(pp, anySplitS);
    tl.lastBackwardS.assign(pp, 0);
    r.pruned = true;
  } else {
    tl = runSchedule(sch.order->tasks, chunks, m, fwdS, sch.bS, x.links,
                     keepTrace ? &r.trace : nullptr, &wS, &sch.fwdCommS,
                     &sch.bwdCommS);
  }
  if (!tl.ok)
    return internalError(
        "simulator: the schedule deadlocked (an internal error)");
  if (s.schedule == Schedule::LayerParallelMgrit)
    mgritTimeline(l, x.links, tl, r, keepTrace);
  return sch;
}

/// Every stage alike: the layer kinds priced once on stage 0's placement,
/// each run of layers m times forward and backward (less its recompute),
/// over the stages. A sum of the same terms as layOut's chunks, less what
/// they add (activation offload's transfers beyond the compute, the
/// recompute): at most scheduleStep's anySplitS.
std::optional<double> Simulation::leastBusyS() const {
  bool straggler = a.stragglerStage >= 0 && a.stragglerStage < s.pp;
  if (boundS == std::numeric_limits<double>::infinity() || !uniform ||
      straggler || dualPipeTurn || s.schedule == Schedule::DualPipeV ||
      s.schedule == Schedule::LayerParallelMgrit || s.recomputeLayers > 0)
    return std::nullopt;
  // Kept for the layout (priceKinds prices the same kinds so).
  pricedKinds.clear();
  for (const LayerKind &k : w.kinds)
    pricedKinds.push_back(layerTime(
        k.forMicroBatch(s.microBatch, at[0].tp, s.tpBatchSplit), at[0]));
  double layers = 0;
  for (const LayerRun &run : w.layers) {
    const LayerTime &t = pricedKinds[run.kind];
    layers +=
        double(run.count) *
        (t.forwardComputeS + t.forwardTpS + t.forwardCpS + t.forwardEpS +
         t.backwardComputeS + t.backwardTpS + t.backwardCpS + t.backwardEpS);
  }
  return double(s.microBatches()) * layers / s.pp;
}

/// Two-level MGRIT (Günther et al. 2020), each replica's batch at once: an
/// iteration relaxes every stage's own layers in parallel (FCF: (2c-1)/c
/// of a pass), sends each stage's last C-point on, and solves the coarse
/// grid (every c-th layer) once through all the stages in turn; K
/// iterations and a last F-relaxation give the forward states. The
/// backward (adjoint) solve does the same with the input-gradient kernels,
/// then every stage computes its weight gradients once.
void Simulation::mgritTimeline(const StepLayout &l, const PipelineLinks &links,
                               Timeline &tl, StepResult &r,
                               bool keepTrace) const {
  int pp = s.pp, chunks = pp * s.virtualStages;
  const std::vector<double> &fwdS = l.fwdS, &bwdS = l.bwdS, &wS = l.wS;
  double c = s.mgCoarsening, K = s.mgIterations;
  // The forward solve sends states down, the adjoint gradients up.
  auto sends = [&](const std::vector<double> &x) {
    std::pair<double, double> maxSum{0, 0};
    for (int ch = 0; ch + 1 < chunks; ++ch) {
      maxSum.first = std::max(maxSum.first, x[ch]);
      maxSum.second += x[ch];
    }
    return maxSum;
  };
  auto solve = [&](const std::vector<double> &pass,
                   const std::vector<double> &transfer) {
    auto [maxX, sumX] = sends(transfer);
    double relax = 0, coarse = 0, last = 0;
    for (int i = 0; i < pp; ++i) {
      relax = std::max(relax, (2 - 1 / c) * pass[i]);
      coarse += pass[i] / c;
      last = std::max(last, (1 - 1 / c) * pass[i]);
    }
    return K * (relax + coarse + sumX + maxX) + last;
  };
  std::vector<double> inputGrad(pp), weightGrad(pp);
  double lastW = 0;
  for (int i = 0; i < pp; ++i) {
    weightGrad[i] = wS[i];
    inputGrad[i] = std::max(0.0, bwdS[i] - wS[i]);
    lastW = std::max(lastW, wS[i]);
  }
  double forward = solve(fwdS, links.transferS),
         backward = solve(inputGrad, links.transferBwdS) + lastW;
  for (int i = 0; i < pp; ++i) {
    tl.free[i] = forward + backward;
    tl.busy[i] =
        (K * (2 - 1 / c + 1 / c) + (1 - 1 / c)) * (fwdS[i] + inputGrad[i]) +
        weightGrad[i];
    tl.lastBackwardS[i] = weightGrad[i];
  }
  if (keepTrace) {
    r.trace.clear();
    for (int i = 0; i < pp; ++i) {
      r.trace.push_back({i, "mgrit forward", "forward", 0, forward});
      r.trace.push_back(
          {i, "mgrit backward", "backward", forward, backward - lastW});
      r.trace.push_back({i, "weight gradients", "backward",
                         forward + backward - lastW, weightGrad[i]});
    }
  }
}

} // namespace detail
} // namespace orrery
