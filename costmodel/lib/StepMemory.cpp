//===- StepMemory.cpp - memory per stage and whether the step fits --------===//
//
// Per stage: weights, gradients and optimizer state by ZeRO stage (experts
// sharded over the ranks that hold them), fp8 copies, frozen weights and
// buffers; the activations the schedule holds at its peak (less what
// activation offload keeps on the host, plus the layers in flight and the
// layer being recomputed); workspace. Host memory per node: the offloaded
// optimizer state and activations.
//
//===----------------------------------------------------------------------===//

#include "Simulation.h"
#include "orrery/CostModel/CommunicatorMemory.h"
#include "orrery/CostModel/ModelState.h"

#include <algorithm>
#include <cstdio>

namespace orrery {
namespace detail {

void Simulation::stageMemory(const StepLayout &l, const ScheduleOrder &order,
                             const GradientSync &sync, StepResult &r) const {
  r.stages.resize(s.pp);
  for (int i = 0; i < s.pp; ++i)
    memoryOf(i, l, order, sync, r);
}

/// The "does not fit" reasons, one line each.
static std::string deviceShortfall(int stage, const MemoryBreakdown &mem,
                                   const std::string &device,
                                   double capacityBytes, double headroom) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "stage %d needs %.1f GiB per %s (weights %.1f, gradients %.1f, "
                "optimizer %.1f, "
                "activations %.1f, workspace and communicators %.1f) but has "
                "%.1f GiB",
                stage, mem.total() / (1 << 30), device.c_str(),
                mem.weightsBytes / (1 << 30), mem.gradientsBytes / (1 << 30),
                mem.optimizerBytes / (1 << 30),
                mem.activationsBytes / (1 << 30),
                mem.workspaceBytes / (1 << 30),
                capacityBytes * (1 - headroom) / (1 << 30));
  std::string text = buf;
  if (headroom > 0) {
    std::snprintf(buf, sizeof buf,
                  " (of %.1f, %.0f %% held back: --memory-headroom)",
                  capacityBytes / (1 << 30), 100 * headroom);
    text += buf;
  }
  return text;
}

/// NCCL's buffers for the communicators a rank of placement `p` joins:
/// the tensor- and data-parallel rings, the pipeline's two neighbours, the
/// context-parallel ring's, the expert all-to-all's peers and the experts'
/// data-parallel ring (CommunicatorMemory.h).
double Simulation::communicatorsBytes(const StagePlacement &p) const {
  double b =
      communicatorBytes(p.tpGroup, {}) + communicatorBytes(p.dpGroup, {});
  if (s.pp > 1)
    b += communicatorBytes(p.toNext, {false, std::min(2, s.pp - 1)});
  if (s.cp > 1)
    b += communicatorBytes(p.cpGroup, {false, std::min(2, s.cp - 1)});
  if (s.ep > 1)
    b += communicatorBytes(p.epGroup, {false, p.epGroup.ranks - 1}) +
         communicatorBytes(p.expertDpGroup, {});
  return b;
}

static std::string hostShortfall(int stage, double hostBytes,
                                 double activationBytes, double hostCap) {
  char buf[320];
  std::string what =
      activationBytes <= 0
          ? "the offloaded optimizer state (fp32 master weights, "
            "momentum, variance and gradients)"
      : activationBytes >= hostBytes ? "the offloaded activations"
                                     : "the offloaded optimizer state and "
                                       "activations";
  std::snprintf(buf, sizeof buf,
                "host memory: stage %d's nodes need %.1f GiB each for %s "
                "but have %.1f GiB (host_memory_bytes)",
                stage, hostBytes / double(1ull << 30), what.c_str(),
                hostCap / double(1ull << 30));
  return buf;
}

void Simulation::memoryOf(int i, const StepLayout &l,
                          const ScheduleOrder &order, const GradientSync &sync,
                          StepResult &r) const {
  int v = s.virtualStages;
  StageReport &st = r.stages[i];
  const DeviceSpec &dev = *at[i].device;
  st.device = dev.name;
  st.capacityBytes = dev.memoryBytes;
  st.tp = at[i].tp;
  st.devices = at[i].tp * s.cp * s.dp;
  double p = 0, peak = 0, working = 0, fp8Copies = 0;
  double frozen = 0, buffers = 0;
  for (int c2 = 0; c2 < v; ++c2) {
    int ch = s.chunkOnStage(i, c2);
    p += l.params[ch];
    frozen += l.frozenParams[ch];
    buffers += l.bufferBytes[ch];
    fp8Copies += l.fp8Params[ch];
    st.numLayers += int(l.chunkOf[ch].size());
    st.forwardS += l.fwdS[ch];
    st.backwardS += l.bwdS[ch];
    st.weightGradS += l.wS[ch];
    working = std::max(working, l.workingBytes[ch]);
  }
  st.firstLayer = l.chunkOf[i].front();
  // Kept until the backward that reads them (ZB-H1 as 1F1B: Qi et al.
  // count what a deferred W reads within 1F1B's peak).
  // Under activation offload the device keeps what is not offloaded,
  // and the host the rest, at the schedule's peak of each.
  // The peaks of the micro-batches held per chunk (ScheduleOrder): the
  // bytes each chunk keeps, less what it offloads, are not negative.
  double hostPeak = 0, inFlight = 0;
  for (const std::vector<int> &held : order.heldPeaks[i]) {
    double live = 0, hostLive = 0;
    for (int c2 = 0; c2 < v; ++c2) {
      int ch = s.chunkOnStage(i, c2);
      double offloaded = s.offloadActivations ? l.offloadedBytes[ch] : 0;
      live += held[c2] * (l.keptBytes[ch] - offloaded);
      hostLive += held[c2] * offloaded;
    }
    peak = std::max(peak, live);
    hostPeak = std::max(hostPeak, hostLive);
  }
  double hostBytes = sync.hostBytesPerNode[i], hostActivationBytes = 0;
  if (s.offloadActivations) {
    // Two layers in flight: the one going out or coming back, and the
    // one computing.
    for (int c2 = 0; c2 < v; ++c2)
      inFlight =
          std::max(inFlight, 2 * l.largestLayerBytes[s.chunkOnStage(i, c2)]);
    peak += inFlight;
    hostBytes += hostPeak * at[i].group->devicesPerNode;
    hostActivationBytes = hostPeak * at[i].group->devicesPerNode;
  }
  peak += working; // a layer being recomputed, or the loss's transient
  // ZeRO shards over the ranks that reduce the gradients: dp x cp (and
  // every aligned replica group's, Hetero.cpp); the experts over the ranks
  // that hold them: dp x cp / ep.
  double dp = double(at[i].dpGroup.ranks);
  double expertsHere = 0;
  for (int c2 = 0; c2 < v; ++c2)
    expertsHere += l.expertParams[s.chunkOnStage(i, c2)];
  ModelState state =
      modelState({p, expertsHere, frozen, s.zeroStage, dp, expertShard(dp),
                  s.offloadOptimizer, s.pp > 1 && dp > 1},
                 a);
  MemoryBreakdown &mem = st.memory;
  // fp8 keeps each linear weight in fp8 and transposed (1 byte each)
  // beside its 16-bit copy; buffers at their own types, whole on every
  // device.
  // Under ZeRO-3 the weights are whole only while gathered: their fp8
  // copies are cast as they gather (torchao's float8 all-gather under
  // FSDP2), sharded as the weights are.
  if (s.zeroStage == 3)
    fp8Copies /= dp;
  mem.weightsBytes = state.weightsBytes + 2 * fp8Copies + buffers;
  mem.gradientsBytes = state.gradientsBytes;
  mem.optimizerBytes = state.optimizerBytes;
  mem.activationsBytes = peak * (1 + a.fragmentation);
  mem.workspaceBytes = a.workspaceFor(dev) + communicatorsBytes(at[i]);
  if (mem.total() > r.peakMemoryBytes)
    r.peakMemoryBytes = mem.total();
  // What a plan may use: the device less the headroom.
  double usable = st.capacityBytes * (1 - a.memoryHeadroom);
  if (i == 0 || mem.total() - usable > r.memoryShortfallBytes)
    r.memoryShortfallBytes = mem.total() - usable;
  if (mem.total() > usable && r.fits) {
    r.fits = false;
    r.doesNotFit =
        deviceShortfall(i, mem, dev.name, st.capacityBytes, a.memoryHeadroom);
  }
  // The offloaded optimizer state in the node's host memory.
  r.hostMemoryBytesPerNode = std::max(r.hostMemoryBytesPerNode, hostBytes);
  double hostCap = at[i].group->hostMemoryBytes;
  if (hostBytes > hostCap && r.fits) {
    r.fits = false;
    r.memoryShortfallBytes =
        std::max(r.memoryShortfallBytes, hostBytes - hostCap);
    r.doesNotFit = hostShortfall(i, hostBytes, hostActivationBytes, hostCap);
  }
}

} // namespace detail
} // namespace orrery
