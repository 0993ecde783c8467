//===- StepLayout.cpp - the step's layers as the pipeline holds them -----===//
//
// The first phase of a step: layers into pipeline chunks (Megatron's split:
// the repeated layers evenly over pp x vpp chunks, the layers before them in
// the first chunk, the layers after in the last; or the strategy's own
// split), every layer kind priced once per stage placement
// (LayerPricing.cpp), each chunk's times, bytes and parameters summed, the
// kept activations activation offload moves to the host, and the copies of
// tied weights a stage holds. Every later phase reads the layout.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Errors.h"

#include <algorithm>

namespace orrery {
namespace detail {

double secondsOf(const LayerTime &t) {
  return t.forwardComputeS + t.forwardTpS + t.forwardCpS + t.forwardEpS +
         t.backwardCpS + t.backwardEpS + t.backwardComputeS + t.backwardTpS +
         t.recomputeS;
}

std::vector<std::vector<int>>
Simulation::chunkLayers(std::vector<size_t> &sequence) const {
  sequence.reserve(size_t(w.totalLayers()));
  for (const LayerRun &run : w.layers)
    sequence.insert(sequence.end(), size_t(run.count), run.kind);
  int chunks = s.pp * s.virtualStages;
  std::vector<int> sizes =
      s.stageLayers.empty() ? w.layersPerChunk(chunks) : s.stageLayers;
  std::vector<std::vector<int>> out(chunks);
  int next = 0;
  for (int i = 0; i < chunks; ++i) {
    out[i].resize(size_t(std::max(0, sizes[i])));
    for (int &layer : out[i])
      layer = next++;
  }
  return out;
}

std::vector<bool>
Simulation::fullyRecomputed(const std::vector<std::vector<int>> &chunkOf,
                            const std::vector<size_t> &sequence) const {
  std::vector<bool> out(sequence.size(), false);
  if (s.recompute != Recompute::Full)
    return out;
  for (const std::vector<int> &layers : chunkOf) {
    int taken = 0;
    for (int l : layers) {
      const LayerKind &k = w.kinds[sequence[l]];
      if (k.count < 2 || k.noBackward || !s.recomputesKind(k.name))
        continue;
      if (s.recomputeLayers > 0 && taken >= s.recomputeLayers)
        break;
      out[l] = true;
      ++taken;
    }
  }
  return out;
}

llvm::Expected<StepLayout> Simulation::layOut(StepResult &r,
                                              bool keepTrace) const {
  StepLayout l;
  l.chunkOf = chunkLayers(l.sequence);
  int chunks = s.pp * s.virtualStages;
  for (const auto &layers : l.chunkOf)
    if (layers.empty())
      return inputError(
          "strategy: a pipeline stage gets no layers (pp x vpp = " +
          std::to_string(chunks) + " for " + std::to_string(l.sequence.size()) +
          " layers)");
  for (const auto &layers : l.chunkOf)
    r.chunkLayers.push_back(int(layers.size()));
  if (auto e = checkAssumptions())
    return std::move(e);
  priceKinds(l, r, keepTrace);
  for (auto *v : {&l.wS,
                  &l.fwdS,
                  &l.bwdS,
                  &l.tpS,
                  &l.cpS,
                  &l.cpAllS,
                  &l.epS,
                  &l.recompFlops,
                  &l.recomputeS,
                  &l.offloadedBytes,
                  &l.largestLayerBytes,
                  &l.offloadS,
                  &l.keptBytes,
                  &l.workingBytes,
                  &l.params,
                  &l.outBytes,
                  &l.tpGradParams,
                  &l.fp8Params,
                  &l.expertParams,
                  &l.subnetParams,
                  &l.computeS,
                  &l.gemmS,
                  &l.frozenParams,
                  &l.bufferBytes})
    v->assign(size_t(chunks), 0.0);
  for (int ch = 0; ch < chunks; ++ch) {
    sumChunk(l, ch);
    if (s.offloadActivations)
      offloadChunk(l, ch);
    l.outBytes[ch] = w.kinds[l.sequence[l.chunkOf[ch].back()]].outputBytes *
                     scale() /
                     (at[s.stageOfChunk(ch)].tp > 1 ? at[s.stageOfChunk(ch)].tp
                                                    : 1); // Megatron's p2p
                                                          // scatter/gather
  }
  tieWeights(l);
  stageKindFigures(l, r);
  return l;
}

/// Layer times per stage placement (once when every stage is alike); and
/// under partial full recompute, those of the layers it leaves alone.
/// A straggler's layer: its kernels run `factor` times slower, its
/// collectives at the links' pace.
static void slowDown(LayerTime &t, double factor) {
  for (double *v :
       {&t.forwardComputeS, &t.backwardComputeS, &t.forwardGemmS,
        &t.backwardGemmS, &t.recomputeGemmS, &t.weightGradS, &t.recomputeS})
    *v *= factor;
}

void Simulation::priceKinds(StepLayout &l, StepResult &r,
                            bool keepTrace) const {
  int pp = s.pp;
  bool straggler = a.stragglerStage >= 0 && a.stragglerStage < pp;
  l.uniform = uniform && !straggler;
  l.partial = s.recompute == Recompute::Full && s.recomputeLayers > 0;
  l.recomputed = fullyRecomputed(l.chunkOf, l.sequence);
  l.kindTime.assign(l.uniform ? 1 : size_t(pp), {});
  l.kindTimeKept.assign(l.partial ? l.kindTime.size() : 0, {});
  // Every stage alike: leastBusyS may have priced the kinds already.
  bool priced = l.uniform && !l.partial && pricedKinds.size() == w.kinds.size();
  if (priced)
    l.kindTime[0] = pricedKinds;
  for (size_t i = priced ? 1 : 0; i < l.kindTime.size(); ++i)
    for (const LayerKind &k : w.kinds) {
      const LayerKind &layout =
          k.forMicroBatch(s.microBatch, at[i].tp, s.tpBatchSplit);
      l.kindTime[i].push_back(layerTime(layout, at[i]));
      if (l.partial)
        l.kindTimeKept[i].push_back(layerTime(layout, at[i], nullptr, false));
      if (straggler && int(i) == a.stragglerStage) {
        slowDown(l.kindTime[i].back(), a.stragglerSlowdown);
        if (l.partial)
          slowDown(l.kindTimeKept[i].back(), a.stragglerSlowdown);
      }
    }
  if (keepTrace)
    for (const LayerKind &k : w.kinds) {
      LayerBreakdown b;
      b.kind = k.name;
      b.count = k.count;
      LayerTime t = layerTime(
          k.forMicroBatch(s.microBatch, at[0].tp, s.tpBatchSplit), at[0], &b);
      b.forwardS =
          t.forwardComputeS + t.forwardTpS + t.forwardCpS + t.forwardEpS;
      b.backwardS = t.backwardComputeS + t.backwardTpS + t.backwardCpS +
                    t.backwardEpS + t.recomputeS;
      b.keptBytes = t.keptBytes;
      r.layers.push_back(std::move(b));
    }
  for (const LayerTime &t : l.kindTime[0])
    r.kindSecondsPerMicroBatch.push_back(secondsOf(t));
}

/// Chunk `ch`'s times, bytes and parameters: its layers' sums.
void Simulation::sumChunk(StepLayout &l, int ch) const {
  const StagePlacement &place = at[s.stageOfChunk(ch)];
  std::vector<bool> kindSeen(w.kinds.size(), false);
  for (int layer : l.chunkOf[ch]) {
    size_t k = l.sequence[layer];
    // Weights every instance shares are held once per chunk.
    bool repeatShared = w.kinds[k].instancesShareWeights && kindSeen[k];
    kindSeen[k] = true;
    const LayerTime &t = l.timeOf(layer, s.stageOfChunk(ch));
    l.fwdS[ch] +=
        t.forwardComputeS + t.forwardTpS + t.forwardCpS + t.forwardEpS;
    l.wS[ch] += t.weightGradS;
    l.bwdS[ch] += t.backwardComputeS + t.backwardTpS + t.backwardCpS +
                  t.backwardEpS + t.recomputeS;
    l.epS[ch] +=
        t.forwardEpS + t.backwardEpS + (t.fullRecompute ? t.forwardEpS : 0);
    l.tpS[ch] +=
        t.forwardTpS + t.backwardTpS + (t.fullRecompute ? t.forwardTpS : 0);
    // Recompute re-runs the exchange (selective: the attention's).
    bool recomputesCp =
        t.fullRecompute ||
        ((s.selectiveModules() & kRecomputeCoreAttn) &&
         s.recomputesKind(w.kinds[k].name));
    l.cpS[ch] +=
        t.forwardCpS + t.backwardCpS + (recomputesCp ? t.forwardCpS : 0);
    l.cpAllS[ch] += t.cpTransferS;
    l.computeS[ch] +=
        t.forwardComputeS + t.backwardComputeS +
        (t.fullRecompute ? t.forwardComputeS
                         : t.recomputeS - (recomputesCp ? t.forwardCpS : 0));
    l.gemmS[ch] += t.forwardGemmS + t.backwardGemmS +
                   (t.fullRecompute ? t.forwardGemmS : t.recomputeGemmS);
    l.recompFlops[ch] += t.recomputeFlops;
    l.recomputeS[ch] += t.recomputeS;
    l.keptBytes[ch] += t.keptBytes;
    l.workingBytes[ch] = std::max(l.workingBytes[ch], t.workingBytes);
    // A layer kind's parameters are counted at its first instance; the
    // others repeat them (a tied head reuses the embedding's).
    // Per tp rank: the split parameters divided, the replicated whole.
    const LayerKind &kind =
        w.kinds[k].forMicroBatch(s.microBatch, place.tp, s.tpBatchSplit);
    if (!repeatShared) {
      l.params[ch] += kind.trainablePerRank(place.tp);
      if (kind.subnetworkBlock)
        l.subnetParams[ch] += kind.trainablePerRank(place.tp);
      l.frozenParams[ch] += kind.frozenPerRank(place.tp);
      l.bufferBytes[ch] += double(kind.bufferBytes);
    }
    l.tpGradParams[ch] += double(kind.tpGradientParameters);
    // Expert parallelism: a device holds 1/ep of the experts.
    // Folded (etp 1), each held expert whole.
    double expertsAway = 0;
    if (kind.experts > 1 && kind.expertParameters > 0 && !repeatShared) {
      double experts =
          double(kind.expertParameters - kind.expertReplicatedParameters) /
              place.tp +
          double(kind.expertReplicatedParameters);
      double held =
          (s.expertsFolded() ? double(kind.expertParameters) : experts) / s.ep;
      expertsAway = experts - held;
      if (kind.expertsFrozen) { // no gradients: held weights only
        l.frozenParams[ch] -= expertsAway;
      } else {
        l.params[ch] -= expertsAway;
        l.expertParams[ch] += held;
      }
    }
    // fp8 copies of the linear weights the device holds (its experts
    // only).
    if (isFp8(s.precision) && kind.count > 1)
      l.fp8Params[ch] +=
          double(kind.linearParameters - kind.linearReplicatedParameters) /
              place.tp +
          double(kind.linearReplicatedParameters) - expertsAway;
  }
}

/// Transformer Engine's CPU offload (Megatron-Core --cpu-offloading) and
/// DeepSpeed's cpu_checkpointing: each repeated layer's kept activations
/// (under full recompute its checkpointed input) go to pinned host memory
/// as the next layer computes, and come back one layer ahead of the
/// backward, over the host's PCIe link; what the chunk's compute cannot
/// hide is exposed. The chunk's last repeated layer stays (its backward
/// comes first).
void Simulation::offloadChunk(StepLayout &l, int ch) const {
  const StagePlacement &place = at[s.stageOfChunk(ch)];
  int last = -1;
  for (int layer : l.chunkOf[ch])
    if (w.kinds[l.sequence[layer]].count > 1 &&
        !w.kinds[l.sequence[layer]].noBackward)
      last = layer;
  for (int layer : l.chunkOf[ch]) {
    const LayerKind &k = w.kinds[l.sequence[layer]];
    if (k.count > 1 && !k.noBackward && layer != last) {
      const LayerTime &t = l.timeOf(layer, s.stageOfChunk(ch));
      l.offloadedBytes[ch] += t.keptBytes;
      l.largestLayerBytes[ch] = std::max(l.largestLayerBytes[ch], t.keptBytes);
    }
  }
  // Every device of the node moves its share at once: the host's
  // memory bandwidth caps the PCIe links together.
  const LinkSpec *host = hostLinkOf(place);
  double perDevice = host->bandwidthBytesPerS * ncclLinkEfficiency(*host);
  if (place.group->hostMemoryBandwidthBytesPerS > 0)
    perDevice =
        std::min(perDevice, place.group->hostMemoryBandwidthBytesPerS /
                                std::max(1, place.group->devicesPerNode));
  double xfer = l.offloadedBytes[ch] / perDevice;
  l.offloadS[ch] = xfer;
  l.fwdS[ch] += std::max(0.0, xfer - l.fwdS[ch]);
  l.bwdS[ch] += std::max(0.0, xfer - l.bwdS[ch]);
}

/// Tied weights (a head sharing the embedding's): a stage that uses them
/// without holding their owner keeps a copy (weights, gradients, optimizer
/// state), and the two stages all-reduce its gradient after the backward,
/// in the bytes it is kept in (DeepSpeed's allreduce_tied_weight_gradients
/// reduces weight.grad itself: its fp32_allreduce casts only the
/// data-parallel buckets; Megatron-LM reduces the main gradient).
void Simulation::tieWeights(StepLayout &l) const {
  int pp = s.pp, chunks = pp * s.virtualStages;
  l.tiedSyncS.assign(size_t(pp), 0.0);
  l.tiedCopy.assign(size_t(pp), 0.0);
  l.tiedCopyParams.assign(size_t(pp), 0.0);
  if (pp <= 1)
    return;
  // Whether stage i holds kind k (and a copy of it): [i * kinds + k].
  size_t kinds = w.kinds.size();
  bool tied =
      std::any_of(w.kinds.begin(), w.kinds.end(), [](const LayerKind &k) {
        return k.tiedParameters > 0 && k.tiedWithKind >= 0;
      });
  if (!tied)
    return;
  std::vector<char> holds(size_t(pp) * kinds, 0);
  for (int ch = 0; ch < chunks; ++ch)
    for (int layer : l.chunkOf[ch])
      holds[size_t(s.stageOfChunk(ch)) * kinds + l.sequence[layer]] = 1;
  std::vector<char> copied = holds;
  for (int ch = 0; ch < chunks; ++ch) {
    int i = s.stageOfChunk(ch);
    for (int layer : l.chunkOf[ch]) {
      const LayerKind &kind = w.kinds[l.sequence[layer]];
      int owner = kind.tiedWithKind;
      if (kind.tiedParameters <= 0 || owner < 0 ||
          copied[size_t(i) * kinds + owner])
        continue;
      copied[size_t(i) * kinds + owner] = 1; // one copy per stage
      double copy =
          double(kind.tiedParameters - kind.tiedReplicatedParameters) /
              at[i].tp +
          double(kind.tiedReplicatedParameters);
      l.params[ch] += copy;
      // Between the two stages: over the slowest of the pipeline's links
      // (the last stage has no link of its own to the next).
      double sync = 0;
      for (int j = 0; j + 1 < pp; ++j)
        sync = std::max(sync,
                        collectiveTime(CollectiveKind::AllReduce,
                                       copy * a.gradBytesPerParam, at[j].toNext,
                                       int(a.gradBytesPerParam)));
      l.tiedSyncS[i] += sync;
      l.tiedCopy[i] += copy;
      l.tiedCopyParams[i] += copy;
      for (int j = 0; j < pp; ++j)
        if (holds[size_t(j) * kinds + owner]) {
          l.tiedSyncS[j] += sync;
          l.tiedCopy[j] += copy;
          break;
        }
    }
  }
}

/// Per stage and layer kind, for balancing uneven stages: seconds per
/// micro-batch, parameters per device, activation bytes one micro-batch
/// keeps.
void Simulation::stageKindFigures(const StepLayout &l, StepResult &r) const {
  int pp = s.pp;
  size_t kinds = w.kinds.size();
  r.stageKindSeconds.assign(pp, std::vector<double>(kinds));
  r.stageKindParams.assign(pp, std::vector<double>(kinds));
  r.stageKindKeptBytes.assign(pp, std::vector<double>(kinds));
  for (int i = 0; i < pp; ++i)
    for (size_t k = 0; k < kinds; ++k) {
      const LayerTime &t = l.stageTimes(i)[k];
      const LayerKind &kind =
          w.kinds[k].forMicroBatch(s.microBatch, at[i].tp, s.tpBatchSplit);
      r.stageKindSeconds[i][k] = secondsOf(t);
      r.stageKindParams[i][k] =
          double(kind.parameters - kind.replicatedParameters) / at[i].tp +
          double(kind.replicatedParameters);
      r.stageKindKeptBytes[i][k] = t.keptBytes;
    }
}

} // namespace detail
} // namespace orrery
