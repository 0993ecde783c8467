//===- Simulator.cpp - one training step, event by event -----------------===//
//
// 1. Layers -> pipeline chunks (Megatron's split: the repeated layers evenly
//    over pp x vpp chunks, the layers before them in the first chunk, the
//    layers after in the last), or the strategy's own split.
// 2. Per chunk and micro-batch: forward and backward time from the ops
//    (roofline with an efficiency curve), tensor-parallel collectives on the
//    critical path, recompute (LayerPricing.cpp).
// 3. The schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V, DualPipeV)
//    as an ordered task list per pipeline stage, simulated event by event
//    with the transfers between stages as delays on the dependencies
//    (Schedule.cpp).
// 4. Data-parallel gradient reduction overlapped with each stage's last
//    backward, then the optimizer step.
// 5. Memory per stage: weights, gradients, optimizer state by ZeRO stage,
//    the activations the schedule holds at its peak, workspace.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Simulator.h"
#include "Simulation.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/PrintableLine.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

namespace orrery {

static llvm::Error err(const std::string &msg) { return inputError(msg); }

/// The [1, 1, s, s] causal mask a DeepSpeed GPT pipeline passes between
/// stages beside the activation, cast to fp16 for NCCL.
static double attentionMaskBytes(const Workload &w) {
  double s = double(w.tokensPerSample);
  return 2 * s * s;
}

/// A device's link to its host: PCIe 5 beside NVLink 4/5 or PCIe 5
/// between the devices, else PCIe 4.
const LinkSpec *detail::hostLinkOf(const StagePlacement &place) {
  const LinkSpec *l = place.group->intraNodeLink;
  bool gen5 = l && (l->name == "NVLink4" || l->name == "NVLink5" ||
                    l->name == "PCIe5");
  return HardwareCatalog::builtin().link(gen5 ? "PCIe5" : "PCIe4");
}

using namespace detail;

GroupShape groupShapeIn(const NodeGroup &group, int stride, int ranks) {
  // A group of `ranks` ranks `stride` apart (the strategy's order decides
  // the stride) shares a node with as many of its ranks as fit.
  GroupShape g;
  g.ranks = ranks;
  int perNode = group.devicesPerNode;
  g.ranksPerNode =
      stride >= perNode ? 1 : std::max(1, std::min(ranks, perNode / stride));
  g.intraLink = group.intraNodeLink;
  g.nic = group.nic;
  g.nicSharePerRank = double(group.nicsPerNode) / group.devicesPerNode;
  g.aggregation = group.aggregation;
  if (g.intraLink && !g.intraLink->fallbackLink.empty())
    g.fallback = HardwareCatalog::builtin().link(g.intraLink->fallbackLink);
  return g;
}

StagePlacement stageOn(const NodeGroup &group, int tp) {
  StagePlacement p;
  p.device = group.device;
  p.group = &group;
  p.tp = tp;
  p.tpGroup = groupShapeIn(group, 1, tp);
  p.dpGroup = groupShapeIn(group, tp, 1);
  return p;
}

double kernelSeconds(const DeviceSpec &dev, const KernelModel &k,
                     Precision precision, double flops, double bytes,
                     KernelClass c, int kernels) {
  bool gemm = c == KernelClass::Gemm;
  double peak = gemm ? dev.tensorPeak(precision) : dev.vectorPeak();
  double compute = 0;
  if (flops > 0) {
    double ideal = flops / peak;
    double eff =
        gemm ? k.gemmEfficiency * ideal / (ideal + k.gemmHalfEfficiencyS) : 1.0;
    compute = ideal / std::max(eff, 1e-6);
  }
  double memory =
      bytes / (dev.memoryBandwidthBytesPerS * k.memoryEfficiency(c));
  return std::max(compute, memory) + kernels * k.kernelLaunchS;
}

double attentionSeconds(const DeviceSpec &dev, const KernelModel &k,
                        Precision precision, double flops, double bytes,
                        double keysPerQuery, bool backward) {
  double compute =
      flops / (dev.tensorPeak(precision) *
               std::max(k.attentionEfficiency(keysPerQuery, backward), 1e-6));
  double memory = bytes / (dev.memoryBandwidthBytesPerS *
                           k.memoryEfficiency(KernelClass::Attention));
  return std::max(compute, memory) + (backward ? 2 : 1) * k.kernelLaunchS;
}

namespace detail {

std::vector<std::vector<int>>
Simulation::chunkLayers(std::vector<size_t> &sequence) const {
  for (const LayerRun &run : w.layers)
    for (int64_t i = 0; i < run.count; ++i)
      sequence.push_back(run.kind);
  int chunks = s.pp * s.virtualStages;
  std::vector<int> sizes =
      s.stageLayers.empty() ? w.layersPerChunk(chunks) : s.stageLayers;
  std::vector<std::vector<int>> out(chunks);
  int next = 0;
  for (int i = 0; i < chunks; ++i)
    for (int j = 0; j < sizes[i]; ++j)
      out[i].push_back(next++);
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

llvm::Expected<StepResult> Simulation::run(bool keepTrace) {
  if (a.fusion != w.kernels)
    return err(std::string("simulator: the model was built for --kernels ") +
               kernelFusionName(w.kernels) + " but is priced as " +
               kernelFusionName(a.fusion));
  StepResult r;
  r.strategy = s;
  for (const StagePlacement &p : at) {
    std::string problem = p.device->precisionProblem(s.precision);
    if (!problem.empty())
      return err(std::string("strategy: precision=") +
                 precisionName(s.precision) + ": " + problem);
    if (s.precision == Precision::FP8 &&
        !p.device->hasTensorCores(Precision::FP8))
      return err("strategy: precision=fp8: " + p.device->name +
                 " has no fp8 tensor cores (Transformer Engine runs fp8 on "
                 "Hopper, Ada and later)");
    if (!p.device->hasTensorCores(s.precision) &&
        !llvm::is_contained(r.precisionFallbackDevices, p.device->name))
      r.precisionFallbackDevices.push_back(p.device->name);
  }
  int pp = s.pp, v = s.virtualStages, chunks = pp * v;
  int m = int(s.microBatches());
  std::vector<size_t> sequence;
  std::vector<std::vector<int>> chunkOf = chunkLayers(sequence);
  for (const auto &layers : chunkOf)
    if (layers.empty())
      return err("strategy: a pipeline stage gets no layers (pp x vpp = " +
                 std::to_string(chunks) + " for " +
                 std::to_string(sequence.size()) + " layers)");

  for (const auto &layers : chunkOf)
    r.chunkLayers.push_back(int(layers.size()));
  for (const StagePlacement &p : at)
    if (a.useMeasuredKernels && p.device->measuredKernels &&
        !llvm::is_contained(r.measuredKernelDevices, p.device->name))
      r.measuredKernelDevices.push_back(p.device->name);
  r.separateGradientAccumulation = !a.fusedGradientAccumulation;
  r.gradientBytesPerParameter = a.gradBytesPerParam;
  r.gradientReduceBytesPerParameter = a.gradReduceBytes();
  r.kernels = a.fusion;
  r.zero3PrefetchParameters = a.zero3PrefetchParams;
  r.layerProfile = a.layerProfile;
  r.pipelineWholeGradients = a.pipelineWholeGradients;
  r.pipelineAttentionMask = a.pipelineAttentionMask;
  if (a.pipelineAttentionMask && w.tokensPerSample <= 0)
    return err("pipeline mask: the model takes no [batch, seq] token ids, "
               "so it has no [seq, seq] attention mask to send between "
               "stages");
  // DeepSpeed's pipeline engine runs one topology: every stage the same tp,
  // each rank sending to its peer of the same tp rank.
  if (a.pipelineWholeGradients || a.pipelineAttentionMask)
    for (const StagePlacement &p : at)
      if (p.tp != at.front().tp)
        return err(
            std::string(a.pipelineWholeGradients ? "pipeline gradients whole"
                                                 : "pipeline mask") +
            ": DeepSpeed's pipeline sends are those of one tensor-"
            "parallel size on every stage, and these stages have tp " +
            std::to_string(at.front().tp) + " and " + std::to_string(p.tp));
  if (a.layerProfile) {
    // Every stage's device and tp must be measured: a host time guessed
    // for one that is not would be a silent wrong price.
    if (w.repeatedKind() < 0)
      return err("layer profile: the model has no repeated layer for its "
                 "forward times to measure");
    for (const StagePlacement &p : at)
      if (!a.layerProfile->find(p.device->name, p.tp)) {
        std::string has;
        for (const LayerProfile::Entry &e : a.layerProfile->entries)
          has += (has.empty() ? "" : ", ") + e.device + " tp " +
                 std::to_string(e.tp);
        return err("layer profile: no entry for " + p.device->name + " at tp " +
                   std::to_string(p.tp) + " (it measures " + has + ")");
      }
  }

  // Layer times per stage placement (once when every stage is alike); and
  // under partial full recompute, those of the layers it leaves alone.
  bool partial = s.recompute == Recompute::Full && s.recomputeLayers > 0;
  std::vector<bool> recomputed = fullyRecomputed(chunkOf, sequence);
  std::vector<std::vector<LayerTime>> kindTime(uniform ? 1 : pp),
      kindTimeKept(partial ? kindTime.size() : 0);
  for (size_t i = 0; i < kindTime.size(); ++i)
    for (const LayerKind &k : w.kinds) {
      const LayerKind &layout =
          k.forMicroBatch(s.microBatch, at[i].tp, s.tpBatchSplit);
      kindTime[i].push_back(layerTime(layout, at[i]));
      if (partial)
        kindTimeKept[i].push_back(layerTime(layout, at[i], nullptr, false));
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
  auto secondsOf = [](const LayerTime &t) {
    return t.forwardComputeS + t.forwardTpS + t.forwardCpS + t.forwardEpS +
           t.backwardCpS + t.backwardEpS + t.backwardComputeS +
           t.backwardTpS + t.recomputeS;
  };
  for (const LayerTime &t : kindTime[0])
    r.kindSecondsPerMicroBatch.push_back(secondsOf(t));
  auto stageTimes = [&](int stage) -> const std::vector<LayerTime> & {
    return kindTime[uniform ? 0 : stage];
  };

  // Per chunk: times per micro-batch, boundary bytes, parameters.
  std::vector<double> wS(chunks, 0.0); // weight gradients (zero bubble)
  std::vector<double> fwdS(chunks), bwdS(chunks), tpS(chunks), cpS(chunks),
      cpAllS(chunks), epS(chunks), recompFlops(chunks);
  // Activation offload: per chunk, the kept bytes that go to host memory
  // (every repeated layer's but the chunk's last, which its backward needs
  // first) and the largest of those layers' (the buffers a transfer fills).
  std::vector<double> offloadedBytes(chunks, 0.0), largestLayerBytes(chunks, 0.0);
  std::vector<double> keptBytes(chunks), workingBytes(chunks), params(chunks),
      outBytes(chunks), tpGradParams(chunks), fp8Params(chunks),
      expertParams(chunks), subnetParams(chunks);
  std::vector<double> computeS(chunks), gemmS(chunks);
  // Frozen weights per device and buffers' bytes (fine-tuning).
  std::vector<double> frozenParams(chunks), bufferBytes(chunks);
  for (int ch = 0; ch < chunks; ++ch) {
    const StagePlacement &place = at[s.stageOfChunk(ch)];
    const std::vector<LayerTime> &times = stageTimes(s.stageOfChunk(ch));
    std::vector<bool> kindSeen(w.kinds.size(), false);
    for (int l : chunkOf[ch]) {
      size_t k = sequence[l];
      // Weights every instance shares are held once per chunk.
      bool repeatShared = w.kinds[k].instancesShareWeights && kindSeen[k];
      kindSeen[k] = true;
      const LayerTime &t = partial && !recomputed[l]
                               ? kindTimeKept[uniform ? 0 : s.stageOfChunk(ch)][k]
                               : times[k];
      fwdS[ch] += t.forwardComputeS + t.forwardTpS + t.forwardCpS +
                  t.forwardEpS;
      wS[ch] += t.weightGradS;
      bwdS[ch] += t.backwardComputeS + t.backwardTpS + t.backwardCpS +
                  t.backwardEpS + t.recomputeS;
      epS[ch] += t.forwardEpS + t.backwardEpS +
                 (t.fullRecompute ? t.forwardEpS : 0);
      tpS[ch] += t.forwardTpS + t.backwardTpS +
                 (t.fullRecompute ? t.forwardTpS : 0);
      // Recompute re-runs the exchange (selective: the attention's).
      bool recomputesCp =
          t.fullRecompute || (s.recompute == Recompute::Selective &&
                              s.recomputesKind(w.kinds[k].name));
      cpS[ch] += t.forwardCpS + t.backwardCpS +
                 (recomputesCp ? t.forwardCpS : 0);
      cpAllS[ch] += t.cpTransferS;
      computeS[ch] += t.forwardComputeS + t.backwardComputeS +
                      (t.fullRecompute ? t.forwardComputeS
                                       : t.recomputeS -
                                             (recomputesCp ? t.forwardCpS : 0));
      gemmS[ch] += t.forwardGemmS + t.backwardGemmS +
                   (t.fullRecompute ? t.forwardGemmS : t.recomputeGemmS);
      recompFlops[ch] += t.recomputeFlops;
      keptBytes[ch] += t.keptBytes;
      workingBytes[ch] = std::max(workingBytes[ch], t.workingBytes);
      // A layer kind's parameters are counted at its first instance; the
      // others repeat them (a tied head reuses the embedding's).
      // Per tp rank: the split parameters divided, the replicated whole.
      const LayerKind &kind = w.kinds[k].forMicroBatch(s.microBatch, place.tp, s.tpBatchSplit);
      if (!repeatShared) {
        params[ch] += kind.trainablePerRank(place.tp);
        if (kind.subnetworkBlock)
          subnetParams[ch] += kind.trainablePerRank(place.tp);
        frozenParams[ch] += kind.frozenPerRank(place.tp);
        bufferBytes[ch] += double(kind.bufferBytes);
      }
      tpGradParams[ch] += double(kind.tpGradientParameters);
      // Expert parallelism: a device holds 1/ep of the experts.
      // Folded (etp 1), each held expert whole.
      double expertsAway = 0;
      if (kind.experts > 1 && kind.expertParameters > 0 && !repeatShared) {
        double experts =
            double(kind.expertParameters - kind.expertReplicatedParameters) /
                place.tp +
            double(kind.expertReplicatedParameters);
        double held = (s.expertsFolded() ? double(kind.expertParameters)
                                         : experts) /
                      s.ep;
        expertsAway = experts - held;
        if (kind.expertsFrozen) { // no gradients: held weights only
          frozenParams[ch] -= expertsAway;
        } else {
          params[ch] -= expertsAway;
          expertParams[ch] += held;
        }
      }
      // fp8 copies of the linear weights the device holds (its experts
      // only).
      if (s.precision == Precision::FP8 && kind.count > 1)
        fp8Params[ch] +=
            double(kind.linearParameters - kind.linearReplicatedParameters) /
                place.tp +
            double(kind.linearReplicatedParameters) - expertsAway;
    }
    if (s.offloadActivations) {
      // Transformer Engine's CPU offload (Megatron-Core --cpu-offloading)
      // and DeepSpeed's cpu_checkpointing: each repeated layer's kept
      // activations (under full recompute its checkpointed input) go to
      // pinned host memory as the next layer computes, and come back one
      // layer ahead of the backward, over the host's PCIe link; what the
      // chunk's compute cannot hide is exposed. The chunk's last repeated
      // layer stays (its backward comes first).
      int last = -1;
      for (int l : chunkOf[ch])
        if (w.kinds[sequence[l]].count > 1 && !w.kinds[sequence[l]].noBackward)
          last = l;
      for (int l : chunkOf[ch]) {
        const LayerKind &k = w.kinds[sequence[l]];
        if (k.count > 1 && !k.noBackward && l != last) {
          const LayerTime &t = partial && !recomputed[l]
                                   ? kindTimeKept[uniform ? 0 : s.stageOfChunk(ch)]
                                                 [sequence[l]]
                                   : times[sequence[l]];
          offloadedBytes[ch] += t.keptBytes;
          largestLayerBytes[ch] = std::max(largestLayerBytes[ch], t.keptBytes);
        }
      }
      // Every device of the node moves its share at once: the host's
      // memory bandwidth caps the PCIe links together.
      const LinkSpec *host = hostLinkOf(place);
      double perDevice =
          host->bandwidthBytesPerS * ncclLinkEfficiency(*host);
      if (place.group->hostMemoryBandwidthBytesPerS > 0)
        perDevice = std::min(perDevice,
                             place.group->hostMemoryBandwidthBytesPerS /
                                 std::max(1, place.group->devicesPerNode));
      double xfer = offloadedBytes[ch] / perDevice;
      fwdS[ch] += std::max(0.0, xfer - fwdS[ch]);
      bwdS[ch] += std::max(0.0, xfer - bwdS[ch]);
    }
    outBytes[ch] =
        w.kinds[sequence[chunkOf[ch].back()]].outputBytes * scale() /
        (place.tp > 1 ? place.tp : 1); // Megatron's scatter/gather of p2p
  }

  // Tied weights (a head sharing the embedding's): a stage that uses them
  // without holding their owner keeps a copy (weights, gradients, optimizer
  // state), and the two stages all-reduce its gradient after the backward,
  // in the bytes it is kept in (DeepSpeed's allreduce_tied_weight_gradients
  // reduces weight.grad itself: its fp32_allreduce casts only the
  // data-parallel buckets; Megatron-LM reduces the main gradient).
  std::vector<double> tiedSyncS(pp, 0.0), tiedCopy(pp, 0.0);
  if (parts)
    parts->tiedCopyParams.assign(pp, 0.0);
  if (pp > 1) {
    std::vector<std::vector<bool>> holds(pp,
                                         std::vector<bool>(w.kinds.size()));
    for (int ch = 0; ch < chunks; ++ch)
      for (int l : chunkOf[ch])
        holds[s.stageOfChunk(ch)][sequence[l]] = true;
    std::vector<std::vector<bool>> copied = holds;
    for (int ch = 0; ch < chunks; ++ch) {
      int i = s.stageOfChunk(ch);
      for (int l : chunkOf[ch]) {
        const LayerKind &kind = w.kinds[sequence[l]];
        int owner = kind.tiedWithKind;
        if (kind.tiedParameters <= 0 || owner < 0 || copied[i][owner])
          continue;
        copied[i][owner] = true; // one copy per stage
        double copy = double(kind.tiedParameters -
                             kind.tiedReplicatedParameters) /
                          at[i].tp +
                      double(kind.tiedReplicatedParameters);
        params[ch] += copy;
        // Between the two stages: over the slowest of the pipeline's links
        // (the last stage has no link of its own to the next).
        double sync = 0;
        for (int j = 0; j + 1 < pp; ++j)
          sync = std::max(sync, collectiveTime(CollectiveKind::AllReduce,
                                               copy * a.gradBytesPerParam,
                                               at[j].toNext,
                                               int(a.gradBytesPerParam)));
        tiedSyncS[i] += sync;
        tiedCopy[i] += copy;
        if (parts)
          parts->tiedCopyParams[i] += copy;
        for (int j = 0; j < pp; ++j)
          if (holds[j][owner]) {
            tiedSyncS[j] += sync;
            tiedCopy[j] += copy;
            break;
          }
      }
    }
  }
  // Per stage and layer kind, for balancing uneven stages: seconds per
  // micro-batch, parameters per device, activation bytes one micro-batch
  // keeps.
  r.stageKindSeconds.resize(pp);
  r.stageKindParams.resize(pp);
  r.stageKindKeptBytes.resize(pp);
  for (int i = 0; i < pp; ++i)
    for (size_t k = 0; k < w.kinds.size(); ++k) {
      const LayerTime &t = stageTimes(i)[k];
      const LayerKind &kind = w.kinds[k].forMicroBatch(s.microBatch, at[i].tp, s.tpBatchSplit);
      r.stageKindSeconds[i].push_back(secondsOf(t));
      r.stageKindParams[i].push_back(
          double(kind.parameters - kind.replicatedParameters) / at[i].tp +
          double(kind.replicatedParameters));
      r.stageKindKeptBytes[i].push_back(t.keptBytes);
    }

  // Pipeline transfers: to the next stage, over the link between them;
  // shards gathered whole at the receiver.
  PipelineLinks links = PipelineLinks::none(chunks);
  links.asynchronous = s.overlapP2p;
  // What each tensor-parallel rank sends per micro-batch: its shard of the
  // boundary tensor each way, or (Assumptions) the whole gradient back and
  // the causal mask beside the activation.
  std::vector<double> sendFwdBytes(outBytes), sendBwdBytes(outBytes);
  for (int ch = 0; ch + 1 < chunks; ++ch) {
    if (a.pipelineWholeGradients)
      sendBwdBytes[ch] = outBytes[ch] * at[s.stageOfChunk(ch)].tp;
    if (a.pipelineAttentionMask)
      sendFwdBytes[ch] += attentionMaskBytes(w);
  }
  if (s.cp > 1) {
    links.cpForwardS.assign(chunks, 0.0);
    links.cpBackwardS.assign(chunks, 0.0);
    for (int ch = 0; ch < chunks; ++ch)
      for (int l : chunkOf[ch]) {
        const LayerTime &t = stageTimes(s.stageOfChunk(ch))[sequence[l]];
        links.cpForwardS[ch] += t.forwardCpSendS;
        links.cpBackwardS[ch] += t.backwardCpSendS;
      }
  }
  for (int ch = 0; ch + 1 < chunks && (pp > 1 || dualPipeTurn); ++ch) {
    int a = s.stageOfChunk(ch), b = s.stageOfChunk(ch + 1);
    // The V's turn: the next chunk is on the same stage, or (DualPipe)
    // on its mirror rank, over the link between them.
    if (a == b && !dualPipeTurn)
      continue;
    const StagePlacement &from = at[a], &to = at[b];
    // Back up the V from stage a to b = a - 1 over b's link to a.
    const GroupShape &link = s.vShape() && ch >= pp ? at[b].toNext : from.toNext;
    links.transferS[ch] =
        collectiveTime(CollectiveKind::SendRecv, sendFwdBytes[ch], link);
    links.transferBwdS[ch] =
        collectiveTime(CollectiveKind::SendRecv, sendBwdBytes[ch], link);
    double whole = outBytes[ch] * from.tp;
    if (!s.sequenceParallel) {
      if (to.tp > 1)
        links.gatherFwdS[ch] =
            collectiveTime(CollectiveKind::AllGather, whole, to.tpGroup);
      if (from.tp > 1)
        links.gatherBwdS[ch] =
            collectiveTime(CollectiveKind::AllGather, whole, from.tpGroup);
    }
  }
  for (int ch = 0; ch + 1 < chunks; ++ch)
    r.boundaryBytesPerMicroBatch.push_back(
        sendFwdBytes[ch] * at[s.stageOfChunk(ch)].tp +
        sendBwdBytes[ch] * (a.pipelineWholeGradients
                                ? at[s.stageOfChunk(ch + 1)].tp
                                : at[s.stageOfChunk(ch)].tp));

  // Event simulation. Zero bubble: B tasks take the backward without its
  // weight gradients, W tasks those; the order comes from the times.
  bool zeroBubble = s.splitsWeightGradients() || dualPipeTurn;
  std::vector<double> bS = bwdS;
  if (zeroBubble)
    for (int ch = 0; ch < chunks; ++ch)
      bS[ch] = std::max(0.0, bwdS[ch] - wS[ch]);
  // Each task's expert-parallel all-to-alls, which DualPipeV's pairs
  // overlap (DeepSeek-V3 §3.2.1: a forward chunk's dispatch and combine
  // behind the backward chunk's attention and MLP and the reverse; tensor
  // and context parallelism, which it does not use, stay exposed).
  std::vector<double> fwdCommS(chunks, 0.0), bwdCommS(chunks, 0.0);
  for (int ch = 0; ch < chunks; ++ch) {
    for (int l : chunkOf[ch]) {
      const LayerTime &t = stageTimes(s.stageOfChunk(ch))[sequence[l]];
      fwdCommS[ch] += t.forwardEpS;
    }
    bwdCommS[ch] = std::max(0.0, epS[ch] - fwdCommS[ch]);
  }
  std::shared_ptr<const TaskOrder> orderOf = schedule(m);
  const TaskOrder &order = *orderOf;
  // A search's bar (boundS): what this step takes at least. Every stage's
  // tasks over the stages' mean, which no split of the layers lowers nor a
  // zero-bubble schedule of the same work (DualPipe's overlapped pairs
  // do); and, for this split and schedule, a stage's tasks after the first
  // micro-batch's forward down the chunks before it (and, where its last
  // task is its first chunk's backward, GPipe and 1F1B, that backward's
  // way back up).
  double anySplitS = 0, thisSplitS = 0;
  if (boundS < std::numeric_limits<double>::infinity() && !dualPipeTurn &&
      s.schedule != Schedule::DualPipeV &&
      s.schedule != Schedule::LayerParallelMgrit) {
    std::vector<double> stageBusy(pp, 0.0);
    for (int ch = 0; ch < chunks; ++ch)
      stageBusy[s.stageOfChunk(ch)] += double(m) * (fwdS[ch] + bwdS[ch]);
    bool drains = s.schedule == Schedule::GPipe ||
                  (s.schedule == Schedule::OneFOneB && v == 1);
    double fill = 0, drain = 0;
    for (int i = 0; i < pp; ++i) {
      anySplitS += stageBusy[i] / pp;
      thisSplitS = std::max(thisSplitS, fill + stageBusy[i] + drain);
      fill += fwdS[i]; // chunk i is stage i's first
      if (drains)
        drain += bwdS[i];
    }
  }
  bool pruned = thisSplitS > boundS;
  Timeline tl;
  if (pruned) {
    tl.free.assign(pp, thisSplitS);
    tl.busy.assign(pp, anySplitS);
    tl.lastBackwardS.assign(pp, 0);
    r.pruned = true;
  } else {
    tl = runSchedule(order, chunks, m, fwdS, bS, links,
                     keepTrace ? &r.trace : nullptr, &wS, &fwdCommS, &bwdCommS);
  }
  if (!tl.ok)
    return err("simulator: the schedule deadlocked (an internal error)");
  if (s.schedule == Schedule::LayerParallelMgrit) {
    // Two-level MGRIT (Günther et al. 2020), each replica's batch at once:
    // an iteration relaxes every stage's own layers in parallel (FCF:
    // (2c-1)/c of a pass), sends each stage's last C-point on, and solves
    // the coarse grid (every c-th layer) once through all the stages in
    // turn; K iterations and a last F-relaxation give the forward states.
    // The backward (adjoint) solve does the same with the input-gradient
    // kernels, then every stage computes its weight gradients once.
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
      tl.busy[i] = (K * (2 - 1 / c + 1 / c) + (1 - 1 / c)) *
                       (fwdS[i] + inputGrad[i]) +
                   weightGrad[i];
      tl.lastBackwardS[i] = weightGrad[i];
    }
    if (keepTrace) {
      r.trace.clear();
      for (int i = 0; i < pp; ++i) {
        r.trace.push_back({i, "mgrit forward", "forward", 0, forward});
        r.trace.push_back({i, "mgrit backward", "backward", forward,
                           backward - lastW});
        r.trace.push_back({i, "weight gradients", "backward",
                           forward + backward - lastW, weightGrad[i]});
      }
    }
  }
  std::vector<double> &free = tl.free, &busy = tl.busy,
                      &lastBackwardS = tl.lastBackwardS;

  // Gradients: all-reduce over dp (reduce-scatter + all-gather under ZeRO,
  // the same volume), overlapped with the stage's last backward.
  double stepS = 0;
  int slowest = 0;
  std::vector<double> dpExposed(pp, 0), optS(pp, 0), finish(pp, 0);
  std::vector<double> hostBytesPerNode(pp, 0); // optimizer and activations
  std::vector<double> hostActivationBytes(pp, 0); // of which activations
  if (parts) {
    parts->sequence = sequence;
    parts->chunkOf = chunkOf;
    parts->order = order;
    parts->fwdS = fwdS;
    parts->bwdS = bwdS;
    parts->keptBytes = keptBytes;
    parts->workingBytes = workingBytes;
    parts->outBytes = outBytes;
    parts->transferS = links.transferS;
    parts->transferBwdS = links.transferBwdS;
    parts->sendFwdBytes = sendFwdBytes;
    parts->sendBwdBytes = sendBwdBytes;
    parts->gatherFwdS = links.gatherFwdS;
    parts->gatherBwdS = links.gatherBwdS;
    parts->tiedParams = tiedCopy;
    parts->tiedSyncS = tiedSyncS;
    parts->recomputed = recomputed;
    for (auto *v : {&parts->denseParams, &parts->expertParams,
                    &parts->tpGradParams, &parts->shardParams, &parts->optS,
                    &parts->optBytes})
      v->assign(pp, 0.0);
  }
  for (int i = 0; i < pp; ++i) {
    double p = 0, tpGrad = 0, experts = 0, subnet = 0;
    for (int c2 = 0; c2 < v; ++c2) {
      p += params[s.chunkOnStage(i, c2)];
      tpGrad += tpGradParams[s.chunkOnStage(i, c2)];
      experts += expertParams[s.chunkOnStage(i, c2)];
      subnet += subnetParams[s.chunkOnStage(i, c2)];
    }
    double perDevice = p; // already per tp rank
    // The experts' gradients are reduced over the ranks that hold the same
    // experts (dp x cp / ep), the rest over dp x cp.
    double dense = perDevice - experts;
    bool expertGroup = experts > 0 && s.ep > 1;
    // Gradients: all-reduced over dp, or (ZeRO-1/2, the distributed
    // optimizer) reduce-scattered, the updated 16-bit weights all-gathered
    // after the step. ZeRO-3 reduces gradients layer by layer in backward
    // (priced there).
    bool sharded = s.zeroStage == 1 || s.zeroStage == 2;
    CollectiveKind reduce =
        sharded ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    auto overGroups = [&](CollectiveKind kind, double bytesPerParam) {
      int element = int(bytesPerParam);
      // Subnetwork data parallelism: a block's gradients over its holders,
      // the rest (embedding, head) over every worker (no experts: sdp
      // takes ep 1).
      if (s.subnetworkFraction > 0)
        return collectiveTime(kind, (perDevice - subnet) * bytesPerParam,
                              at[i].dpGroup, element) +
               collectiveTime(kind, subnet * bytesPerParam,
                              at[i].subnetworkGroup, element);
      return expertGroup
                 ? collectiveTime(kind, dense * bytesPerParam, at[i].dpGroup,
                                  element) +
                       collectiveTime(kind, experts * bytesPerParam,
                                      at[i].expertDpGroup, element)
                 : collectiveTime(kind, perDevice * bytesPerParam,
                                  at[i].dpGroup, element);
    };
    double grad = s.zeroStage == 3 ? 0 : overGroups(reduce, a.gradReduceBytes());
    if (reduce == CollectiveKind::AllReduce && s.zeroStage != 3 &&
        at[i].dpGroup.aggregation.kind != InNetworkAggregation::Kind::None) {
      // Whether the switches' sum priced it: what the launch must enable.
      double bytes = dense * a.gradReduceBytes();
      int element = int(a.gradReduceBytes());
      double agg = aggregatedAllReduceTime(bytes, at[i].dpGroup, element);
      GroupShape plain = at[i].dpGroup;
      plain.aggregation = InNetworkAggregation{};
      if (agg >= 0 && agg < collectiveTime(CollectiveKind::AllReduce, bytes,
                                           plain, element))
        r.inNetworkAggregation = aggregationName(at[i].dpGroup.aggregation.kind);
    }
    double gather =
        sharded ? overGroups(CollectiveKind::AllGather, a.weightBytesPerParam)
                : 0;
    // Weights a batch or spatial split keeps whole on every tp rank: their
    // gradients are all-reduced across the tp group too.
    if (at[i].tp > 1 && tpGrad > 0)
      grad += collectiveTime(CollectiveKind::AllReduce,
                             tpGrad * a.gradReduceBytes(), at[i].tpGroup,
                             int(a.gradReduceBytes()));
    // Overlapped (Megatron's --overlap-grad-reduce, DDP's buckets): the
    // reduction runs as the last micro-batch's backward fills the buckets;
    // the parameter all-gather (--overlap-param-gather) with the next
    // step's first forward, layer by layer.
    double firstForward = 0;
    for (int c2 = 0; c2 < v; ++c2)
      firstForward += fwdS[s.chunkOnStage(i, c2)];
    // The bucket holding the stage's first layer fills last and is gathered
    // first: nothing hides its reduction or its gather. A layer that occurs
    // once (an embedding: one table) is one bucket however large.
    double edge = 0;
    if (s.overlapGradReduce || s.overlapParamGather) {
      const LayerKind &first = w.kinds[sequence[chunkOf[i].front()]];
      double firstParams =
          first.count == 1
              ? double(first.parameters - first.replicatedParameters) /
                        at[i].tp +
                    double(first.replicatedParameters)
              : 0;
      double bucket = std::max(
          {a.gradBucketParams, a.gradBucketParamsPerRank * at[i].dpGroup.ranks,
           firstParams});
      edge = std::min(dense, bucket);
    }
    double lastBucket =
        sharded || s.zeroStage == 0
            ? collectiveTime(reduce, edge * a.gradReduceBytes(), at[i].dpGroup,
                             int(a.gradReduceBytes()))
            : 0;
    double firstBucket =
        sharded ? collectiveTime(CollectiveKind::AllGather,
                                 edge * a.weightBytesPerParam, at[i].dpGroup)
                : 0;
    // ZeRO-2 holds only its gradient shard: every micro-batch's backward
    // reduce-scatters its gradients (DeepSpeed's partitioned gradients),
    // each exposed as the last one's is (no pipeline: refused above).
    double reductions = s.zeroStage == 2 ? double(m) : 1.0;
    dpExposed[i] =
        reductions *
            (s.overlapGradReduce ? std::max(lastBucket, grad - lastBackwardS[i])
                                 : grad) +
        (s.overlapParamGather ? std::max(firstBucket, gather - firstForward)
                              : gather) +
        tiedSyncS[i];
    // The distributed optimizer shards over the data-parallel ranks and
    // the context-parallel ones (they hold the same weights).
    double shard = s.zeroStage >= 1 ? double(at[i].dpGroup.ranks) : 1;
    // The parameters of the device's optimizer shard (the experts' shard
    // over dp x cp / ep ranks).
    double shardParams =
        dense / shard + experts / std::max(1.0, expertShard(shard));
    // Megatron-LM's step over the device's shard, per parameter: the
    // gradient read for its norm (clipping) and again by Adam; the fp32
    // master weight, momentum and variance read and written; the master
    // read again and copied into the half-precision weight; the gradient
    // buffer zeroed for the next step. Five kernels.
    double masterBytes = 4;
    double optBytes = shardParams *
                      (3 * a.gradBytesPerParam + 2 * a.optimizerBytesPerParam +
                       masterBytes + a.weightBytesPerParam);
    if (s.offloadOptimizer) {
      // ZeRO-Offload (Ren et al. 2021) and Megatron-Core's CPU optimizer:
      // the host keeps the fp32 master weights, momentum, variance and
      // gradients of each device's shard (16 bytes per parameter); each
      // step the gradients go down over the device's PCIe link and the
      // updated 16-bit weights come back, and the node's CPUs run Adam over
      // every shard on the node at the host's memory bandwidth (it streams:
      // the fp32 state and gradient read, the state and the 16-bit copy
      // written).
      const NodeGroup &g = *at[i].group;
      double pcie = hostLinkOf(at[i])->bandwidthBytesPerS *
                    ncclLinkEfficiency(*hostLinkOf(at[i]));
      double moved = shardParams * (a.gradBytesPerParam + a.weightBytesPerParam);
      double cpuBytes = shardParams * g.devicesPerNode *
                        (2 * a.optimizerBytesPerParam + a.gradBytesPerParam +
                         a.weightBytesPerParam);
      optS[i] = moved / pcie + cpuBytes / g.hostMemoryBandwidthBytesPerS;
      hostBytesPerNode[i] = shardParams * g.devicesPerNode *
                            (a.optimizerBytesPerParam + 4);
    } else {
      optS[i] = opTime(*at[i].device, shardParams * 10, optBytes,
                       KernelClass::Pointwise, 5);
    }
    if (parts) {
      parts->denseParams[i] = dense;
      parts->expertParams[i] = experts;
      parts->tpGradParams[i] = tpGrad;
      parts->shardParams[i] = shardParams;
      parts->optS[i] = optS[i];
      parts->optBytes[i] = optBytes;
    }
    finish[i] = free[i] + dpExposed[i] + optS[i];
    if (finish[i] > stepS) {
      stepS = finish[i];
      slowest = i;
    }
  }

  // Transfers' share of the idle time: the same schedule without them.
  double noTransferEnd =
      detail == Detail::StepTime || pruned || (pp == 1 && !dualPipeTurn)
          ? free[slowest]
          : runSchedule(order, chunks, m, fwdS, bS, PipelineLinks::none(chunks),
                        nullptr, &wS, &fwdCommS, &bwdCommS)
                .free[slowest];

  // Memory per stage: the schedule's peak of kept activations.
  r.stages.resize(pp);
  for (int i = 0; i < pp; ++i) {
    StageReport &st = r.stages[i];
    const DeviceSpec &dev = *at[i].device;
    st.device = dev.name;
    st.capacityBytes = dev.memoryBytes;
    st.tp = at[i].tp;
    st.devices = at[i].tp * s.cp * s.dp;
    double p = 0, live = 0, peak = 0, working = 0, fp8Copies = 0;
    double frozen = 0, buffers = 0;
    for (int c2 = 0; c2 < v; ++c2) {
      int ch = s.chunkOnStage(i, c2);
      p += params[ch];
      frozen += frozenParams[ch];
      buffers += bufferBytes[ch];
      fp8Copies += fp8Params[ch];
      st.numLayers += int(chunkOf[ch].size());
      st.forwardS += fwdS[ch];
      st.backwardS += bwdS[ch];
      st.weightGradS += wS[ch];
      working = std::max(working, workingBytes[ch]);
    }
    st.firstLayer = chunkOf[i].front();
    // Kept until the backward that reads them (ZB-H1 as 1F1B: Qi et al.
    // count what a deferred W reads within 1F1B's peak).
    // Under activation offload the device keeps what is not offloaded,
    // and the host the rest, at the schedule's peak of each.
    double hostLive = 0, hostPeak = 0, inFlight = 0;
    for (const Task &t : order[i]) {
      double offloaded = s.offloadActivations ? offloadedBytes[t.vs] : 0;
      if (!t.backward) {
        live += keptBytes[t.vs] - offloaded;
        hostLive += offloaded;
      } else if (!t.weight) {
        live -= keptBytes[t.vs] - offloaded;
        hostLive -= offloaded;
      }
      peak = std::max(peak, live);
      hostPeak = std::max(hostPeak, hostLive);
      if (t.pairVs >= 0) { // the pair's backward frees its chunk's after
        double pairOff = s.offloadActivations ? offloadedBytes[t.pairVs] : 0;
        live -= keptBytes[t.pairVs] - pairOff;
        hostLive -= pairOff;
      }
    }
    if (s.offloadActivations) {
      // Two layers in flight: the one going out or coming back, and the
      // one computing.
      for (int c2 = 0; c2 < v; ++c2)
        inFlight =
            std::max(inFlight, 2 * largestLayerBytes[s.chunkOnStage(i, c2)]);
      peak += inFlight;
      hostBytesPerNode[i] += hostPeak * at[i].group->devicesPerNode;
      hostActivationBytes[i] = hostPeak * at[i].group->devicesPerNode;
    }
    if (s.recompute == Recompute::Full)
      peak += working;    // the layer being recomputed
    double perDevice = p; // already per tp rank
    // ZeRO shards over the ranks that reduce the gradients: dp x cp (and
    // every aligned replica group's, Hetero.cpp).
    double dp = double(at[i].dpGroup.ranks);
    // ZeRO shards the experts over the ranks that hold them: dp x cp / ep.
    double expertsHere = 0;
    for (int c2 = 0; c2 < v; ++c2)
      expertsHere += expertParams[s.chunkOnStage(i, c2)];
    auto sharded = [&](int stage) {
      if (s.zeroStage < stage)
        return perDevice;
      return (perDevice - expertsHere) / dp +
             expertsHere / std::max(1.0, expertShard(dp));
    };
    MemoryBreakdown &mem = st.memory;
    // fp8 keeps each linear weight in fp8 and transposed (1 byte each)
    // beside its 16-bit copy.
    // Frozen weights at the weights' bytes (sharded by ZeRO-3 as FSDP
    // shards them), buffers at their own types, whole on every device.
    mem.weightsBytes = (sharded(3) + (s.zeroStage >= 3 ? frozen / dp : frozen)) *
                           a.weightBytesPerParam +
                       2 * fp8Copies + buffers;
    mem.gradientsBytes = sharded(2) * a.gradBytesPerParam;
    mem.optimizerBytes =
        s.offloadOptimizer ? 0 : sharded(1) * a.optimizerBytesPerParam;
    mem.activationsBytes = peak * (1 + a.fragmentation);
    mem.workspaceBytes = a.workspaceFor(dev);
    if (mem.total() > r.peakMemoryBytes)
      r.peakMemoryBytes = mem.total();
    if (i == 0 || mem.total() - st.capacityBytes > r.memoryShortfallBytes)
      r.memoryShortfallBytes = mem.total() - st.capacityBytes;
    if (mem.total() > st.capacityBytes && r.fits) {
      r.fits = false;
      char buf[256];
      std::snprintf(
          buf, sizeof buf,
          "stage %d needs %.1f GiB per %s (weights %.1f, gradients %.1f, "
          "optimizer %.1f, "
          "activations %.1f, workspace %.1f) but has %.1f GiB",
          i, mem.total() / (1 << 30), dev.name.c_str(),
          mem.weightsBytes / (1 << 30), mem.gradientsBytes / (1 << 30),
          mem.optimizerBytes / (1 << 30), mem.activationsBytes / (1 << 30),
          mem.workspaceBytes / (1 << 30), st.capacityBytes / (1 << 30));
      r.doesNotFit = buf;
    }
    // The offloaded optimizer state in the node's host memory.
    r.hostMemoryBytesPerNode =
        std::max(r.hostMemoryBytesPerNode, hostBytesPerNode[i]);
    double hostCap = at[i].group->hostMemoryBytes;
    if (hostBytesPerNode[i] > hostCap && r.fits) {
      r.fits = false;
      r.memoryShortfallBytes =
          std::max(r.memoryShortfallBytes, hostBytesPerNode[i] - hostCap);
      char buf[320];
      double acts = hostActivationBytes[i];
      std::string what =
          acts <= 0 ? "the offloaded optimizer state (fp32 master weights, "
                      "momentum, variance and gradients)"
          : acts >= hostBytesPerNode[i] ? "the offloaded activations"
                                        : "the offloaded optimizer state and "
                                          "activations";
      std::snprintf(buf, sizeof buf,
                    "host memory: stage %d's nodes need %.1f GiB each for %s "
                    "but have %.1f GiB (host_memory_bytes)",
                    i, hostBytesPerNode[i] / double(1ull << 30), what.c_str(),
                    hostCap / double(1ull << 30));
      r.doesNotFit = buf;
    }
  }

  // Figures. A pruned step states its bound alone.
  if (pruned)
    stepS = thisSplitS;
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
    hwRecompute += recompFlops[ch] * at[s.stageOfChunk(ch)].tp * s.cp * m * s.dp;
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
      compute += computeS[s.chunkOnStage(i, c2)] * m;
      gemm += gemmS[s.chunkOnStage(i, c2)] * m;
    }
    act.gemmS = gemm;
    act.memoryBoundS =
        std::max(0.0, compute - gemm) + (s.offloadOptimizer ? 0 : optS[i]);
    act.communicationS = std::max(0.0, busy[i] - compute) + dpExposed[i];
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
    compute += computeS[s.chunkOnStage(slowest, c2)] * m;
    tp += tpS[s.chunkOnStage(slowest, c2)] * m;
    cpComm += cpS[s.chunkOnStage(slowest, c2)] * m;
    r.exposedEpCommS += epS[s.chunkOnStage(slowest, c2)] * m;
    r.cpTransferS += cpAllS[s.chunkOnStage(slowest, c2)] * m;
  }
  r.computeS = compute;
  r.exposedTpCommS = tp;
  r.exposedCpCommS = cpComm;
  r.exposedDpCommS = dpExposed[slowest];
  r.optimizerS = optS[slowest];
  double idle = std::max(0.0, free[slowest] - busy[slowest]);
  r.exposedPpCommS =
      std::min(idle, std::max(0.0, free[slowest] - noTransferEnd));
  r.bubbleS = std::max(0.0, idle - r.exposedPpCommS);
  if (pruned) // the part of the bound that this split and schedule add
    r.bubbleS = thisSplitS - anySplitS;
  r.bubbleFraction = r.bubbleS / stepS;
  if (keepTrace)
    for (int i = 0; i < pp; ++i) {
      if (dpExposed[i] > 0)
        r.trace.push_back(
            {i, "gradient all-reduce (exposed)", "dp", free[i], dpExposed[i]});
      r.trace.push_back(
          {i, "optimizer", "optimizer", free[i] + dpExposed[i], optS[i]});
    }
  return r;
}

} // namespace detail

namespace detail {
StagePlacement homogeneousPlacement(const Cluster &c, const Strategy &s) {
  const NodeGroup &g = c.groupOf(0);
  // Gradients are reduced over dp x cp: the context-parallel ranks hold the
  // same weights (adjacent axes under the default order form one group).
  return StagePlacement{
      &c.deviceSpec(0),
      &g,
      s.tp,
      groupShapeIn(g, s.stride("tp"), s.tp),
      groupShapeIn(g, std::min(s.stride("dp"), s.stride("cp")), s.dp * s.cp),
      groupShapeIn(g, s.stride("pp"), 2),
      groupShapeIn(g, s.stride("cp"), s.cp),
      // ep adjacent data-parallel ranks (inside a node first), and the
      // ranks holding the same experts, ep apart; folded (etp 1), ep
      // adjacent ranks of tp x dp and the tp x dp / ep holding the same.
      s.expertsFolded() ? groupShapeIn(g, 1, s.ep)
                        : groupShapeIn(g, s.stride("dp"), s.ep),
      s.expertsFolded()
          ? groupShapeIn(g, s.ep, std::max(1, s.dp * s.tp / std::max(1, s.ep)))
          : groupShapeIn(g, s.stride("dp") * s.ep,
                         std::max(1, s.dp * s.cp / std::max(1, s.ep))),
      // A block's holders: every 1/F-th worker (the blocks dealt round
      // robin, each worker F of them).
      s.subnetworkFraction > 0
          ? groupShapeIn(g,
                         std::max<int64_t>(1, std::llround(s.stride("dp") /
                                                           s.subnetworkFraction)),
                         std::max(1, int(std::llround(s.subnetworkFraction *
                                                      s.dp))))
          : GroupShape{}};
}

/// Subnetwork data parallelism's worker: each repeated run of blocks
/// thinned to F of its blocks (at least one), marked as such.
static llvm::Expected<Workload> subnetworkOf(const Workload &w,
                                             const Strategy &s) {
  double f = s.subnetworkFraction;
  double holders = f * s.dp;
  std::string text = printableNumber(f);
  if (std::fabs(holders - std::llround(holders)) > 1e-9 || holders < 1)
    return err(std::string("strategy: sdp=") + text + " with dp=" +
               std::to_string(s.dp) +
               ": every block must sit on a whole number of workers (sdp x "
               "dp an integer from 1)");
  Workload out = w;
  bool any = false;
  for (LayerKind &k : out.kinds)
    k.count = 0;
  // Backward masking: the blocks outside the subnetwork as a kind of
  // their own, run forward and passing input gradients, their weights
  // held (as frozen ones are) with no weight gradient, gradient or
  // optimizer state.
  std::map<size_t, size_t> maskedKind;
  auto masked = [&](size_t kind) {
    auto it = maskedKind.find(kind);
    if (it != maskedKind.end())
      return it->second;
    LayerKind m = w.kinds[kind];
    m.name += " (masked)";
    m.count = 0;
    m.frozenParameters += m.parameters;
    m.frozenReplicatedParameters += m.replicatedParameters;
    m.parameters = m.replicatedParameters = m.adapterParameters = 0;
    m.tpGradientParameters = 0;
    for (OpCost &op : m.ops)
      if (op.weighted && op.contraction && op.backwardFlops > 0) {
        // dX = dY · Wᵀ only: the forward's FLOPs, one kernel.
        m.backwardFlops -= op.backwardFlops - op.forwardFlops;
        op.backwardFlops = op.forwardFlops;
        op.backwardBytes = op.outputBytes + op.bytesRead;
        op.backwardKernels = 1;
      }
    out.kinds.push_back(std::move(m));
    return maskedKind[kind] = out.kinds.size() - 1;
  };
  std::vector<LayerRun> runs;
  for (LayerRun run : out.layers) {
    if (w.kinds[run.kind].count > 1) {
      int64_t held =
          std::max<int64_t>(1, std::llround(f * double(run.count)));
      out.kinds[run.kind].subnetworkBlock = true;
      any = true;
      if (s.subnetworkBackwardMask && held < run.count) {
        LayerRun rest = run;
        rest.kind = masked(run.kind);
        rest.count = run.count - held;
        run.count = held;
        runs.push_back(run);
        runs.push_back(rest);
        continue;
      }
      run.count = held;
    }
    runs.push_back(run);
  }
  out.layers = runs;
  for (const LayerRun &run : out.layers)
    out.kinds[run.kind].count += run.count;
  if (!any)
    return err("strategy: sdp: the model has no repeated blocks to share "
               "out among the workers");
  return out;
}

std::vector<StagePlacement> homogeneousStages(const Cluster &c,
                                              const Strategy &s) {
  StagePlacement place = homogeneousPlacement(c, s);
  std::vector<StagePlacement> at(std::max(1, s.pp), place);
  const NodeGroup &g = c.groupOf(0);
  int64_t stride = s.stride("pp"), perNode = std::max(1, g.devicesPerNode);
  for (int i = 0; i < s.pp && s.pp > 1; ++i) {
    // Ranks [i·stride, (i+2)·stride) hold stages i and i+1 (replica 0; the
    // others repeat the pattern pp·stride further on). The last stage sends
    // to the first (the next virtual chunk): both in one node only when the
    // whole pipeline is.
    int64_t first = i + 1 < s.pp ? int64_t(i) * stride : 0;
    int64_t last = i + 1 < s.pp ? int64_t(i + 2) * stride - 1
                                : int64_t(s.pp) * stride - 1;
    bool sameNode = first / perNode == last / perNode;
    at[i].toNext.ranksPerNode = sameNode ? 2 : 1;
    // Across nodes the stage's ranks on a node (a block of `stride`) send
    // together and share its cards, each over one at most.
    at[i].toNext.nicSharePerRank =
        std::min(1.0, double(g.nicsPerNode) / std::min(stride, perNode));
  }
  return at;
}
} // namespace detail

/// DualPipe (Strategy::dualPipeFolded): ranks r and pp-1-r run the same
/// order on mirrored directions, so the step is DualPipeV's over pp/2
/// stages with half the micro-batches per direction: stage r stands for
/// both ranks, the V's turn is the transfer from rank pp/2-1 to rank pp/2
/// (their placement's), and a chunk's gradients are reduced over both
/// ranks' replicas. The result is unfolded to the pp ranks, the mirror of
/// stage r its copy.
static llvm::Expected<StepResult> dualPipeStep(const Workload &w,
                                               const Cluster &c,
                                               const Strategy &s,
                                               const Assumptions &a,
                                               bool keepTrace, Detail detail) {
  Strategy v = s.dualPipeFolded();
  std::vector<StagePlacement> at = homogeneousStages(c, s);
  int half = s.pp / 2;
  at.resize(half);
  const NodeGroup &g = c.groupOf(0);
  int64_t stride = s.stride("pp"), perNode = std::max(1, g.devicesPerNode);
  for (int h = 0; h < half; ++h) {
    // Stage h's ranks and its mirror's, [h·stride, (pp-h)·stride): one
    // node only when the pipeline between them is.
    bool sameNode = int64_t(h) * stride / perNode ==
                    (int64_t(s.pp - h) * stride - 1) / perNode;
    for (GroupShape *group : {&at[h].dpGroup, &at[h].expertDpGroup}) {
      group->ranks *= 2;
      if (sameNode)
        group->ranksPerNode = std::min(group->ranks, group->ranksPerNode * 2);
    }
  }
  Simulation sim(w, v, a, at, true);
  sim.detail = detail;
  sim.dualPipeTurn = true;
  auto r = sim.run(keepTrace);
  if (!r)
    return r;
  r->strategy = s;
  for (StageReport &st : r->stages)
    st.devices /= 2;
  auto mirror = [&](auto &perStage) {
    if (int(perStage.size()) != half)
      return;
    perStage.reserve(size_t(s.pp));
    for (int h = half - 1; h >= 0; --h)
      perStage.push_back(perStage[size_t(h)]);
  };
  mirror(r->stages);
  mirror(r->stageKindSeconds);
  mirror(r->stageKindParams);
  mirror(r->stageKindKeptBytes);
  for (int h = half; h < s.pp; ++h)
    if (!r->stages[h].label.empty())
      r->stages[h].label = "stage " + std::to_string(h);
  size_t events = r->trace.size();
  for (size_t e = 0; e < events; ++e) {
    TraceEvent copy = r->trace[e];
    copy.track = s.pp - 1 - copy.track;
    r->trace.push_back(copy);
  }
  return r;
}

llvm::Expected<StepResult> simulateStep(const Workload &w, const Cluster &c,
                                        Strategy s, const Assumptions &a,
                                        bool keepTrace, Detail detail,
                                        double boundS) {
  if (auto e = completeAndValidate(s, w, c))
    return std::move(e);
  if (w.kinds.empty())
    return err("simulator: the model has no layers");
  // A strategy string places one device type at one site; mixed and
  // multi-site clusters take a heterogeneous strategy (Hetero.h).
  if (!c.homogeneous()) {
    std::string types;
    for (int d = 0; d < c.numDevices(); ++d)
      if (types.find(c.deviceSpec(d).name) == std::string::npos)
        types += (types.empty() ? "" : ", ") + c.deviceSpec(d).name;
    return err("simulator: the cluster mixes device types (" + types +
               "), which one strategy string cannot place; plan it with "
               "`orrery plan`, or simulate a heterogeneous plan with "
               "`orrery simulate --plan`");
  }
  if (c.sites.size() > 1)
    return err("simulator: the cluster spans " +
               std::to_string(c.sites.size()) +
               " sites, which one strategy string cannot place; plan it with "
               "`orrery plan`, or simulate a heterogeneous plan with "
               "`orrery simulate --plan`");
  if (s.offloadOptimizer || s.offloadActivations)
    for (const Site &site : c.sites)
      for (const NodeGroup &g : site.nodeGroups)
        if (g.hostMemoryBytes <= 0 || g.hostMemoryBandwidthBytesPerS <= 0)
          return err(std::string("offload=") +
                     (s.offloadOptimizer ? "optimizer" : "activations") +
                     ": the cluster states no host memory "
                     "for its " + g.device->name +
                     " nodes (host_memory_bytes and "
                     "host_memory_bandwidth_bytes_per_s in the spec's nodes, "
                     "docs/cluster.md)");
  std::optional<Workload> subnet;
  if (s.subnetworkFraction > 0) {
    auto thinned = subnetworkOf(w, s);
    if (!thinned)
      return thinned.takeError();
    subnet = std::move(*thinned);
  }
  // Phantom parallelism's layers in place of tensor parallelism's.
  if (s.phantomGhosts > 0) {
    auto phantom = phantomOf(subnet ? *subnet : w, s);
    if (!phantom)
      return phantom.takeError();
    subnet = std::move(*phantom);
  }
  const Workload &model = subnet ? *subnet : w;
  auto r = s.schedule == Schedule::DualPipe
               ? dualPipeStep(model, c, s, a, keepTrace, detail)
           : s.chunkParams > 0
               ? chunkedStep(model, c, s, a, keepTrace, detail)
               : [&] {
                   Simulation sim(model, s, a, homogeneousStages(c, s), true);
                   sim.detail = detail;
                   if (detail == Detail::StepTime)
                     sim.boundS = boundS;
                   return sim.run(keepTrace);
                 }();
  if (r) { // every device of the cluster, with its own price
    r->costUsd = 0;
    for (const Site &site : c.sites)
      for (const NodeGroup &g : site.nodeGroups)
        r->costUsd += double(g.count) * g.devicesPerNode *
                      g.priceUsdPerDeviceHour * r->stepS / 3600.0;
  }
  return r;
}

llvm::Expected<StepResult>
simulatePipeline(const Workload &w, const Strategy &s,
                 const std::vector<StagePlacement> &stages,
                 const Assumptions &a, bool keepTrace) {
  if (w.kinds.empty())
    return err("simulator: the model has no layers");
  if (s.schedule == Schedule::DualPipe)
    return err("simulator: schedule=dualpipe mirrors one device type's "
               "pipeline onto itself; a heterogeneous pipeline takes "
               "dualpipev, zb-v or 1f1b");
  if (s.dp < 1 || s.microBatch < 1 || s.microBatches() < 1 ||
      s.virtualStages != 1)
    return err("simulator: a pipeline needs dp >= 1, one chunk per stage and "
               "at least one micro-batch");
  if (int(stages.size()) != s.pp)
    return err("simulator: " + std::to_string(stages.size()) +
               " stage placements for pp=" + std::to_string(s.pp));
  return Simulation(w, s, a, stages, false).run(keepTrace);
}

std::string chromeTraceJson(const StepResult &r,
                            const std::string &description) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.stages.size(); ++i)
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", i},
         {"args",
          {{"name",
            (r.stages[i].label.empty() ? "stage " + std::to_string(i)
                                       : r.stages[i].label) +
                " (" + r.stages[i].device + " x " +
                std::to_string(r.stages[i].devices) + ")"}}}});
  for (const TraceEvent &e : r.trace)
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", e.track},
                      {"ts", e.startS * 1e6},
                      {"dur", e.durationS * 1e6}});
  nlohmann::ordered_json j;
  j["traceEvents"] = events;
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {
      {"strategy", description.empty() ? r.strategy.str() : description},
      {"step_time_s", r.stepS}};
  return j.dump();
}

} // namespace orrery
