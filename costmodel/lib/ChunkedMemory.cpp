//===- ChunkedMemory.cpp - PatrickStar's chunk-based memory management ---===//
//
// `chunks=M` (Fang et al., "Parallel Training of Pre-trained Models via
// Chunk-based Dynamic Memory Management", TPDS 2022; Tencent/PatrickStar,
// its INSIDE.md and doc/optimization_options.md). What is modelled:
//
// - The model data sits in chunks of M million elements in the order the
//   parameters are created (their order of use). The 16-bit parameters'
//   chunks also hold their gradients (a gradient takes its parameter's
//   place once the backward no longer needs it): 2 bytes per parameter;
//   the fp32 master weights, momentum and variance are chunks of their own
//   (12 bytes). Every chunk lives on one of the dp ranks (1/dp each).
// - Using a chunk it does not hold, every rank all-gathers the group of dp
//   neighbouring chunks and releases the others' chunks after use: an
//   all-gather of the 16-bit model in the forward and again in the
//   backward, and a reduce-scatter of the gradients by group. A fetch waits
//   for its chunks (exposed); the chunk's other tensors come with it.
// - Placement follows the runtime memory tracer: of the device memory
//   PatrickStar may use (overall_gpu_mem_ratio 0.8), what the step's
//   activations, the workspace and one gathered group (dp chunks) leave
//   goes to the rank's own 16-bit chunks, the rest of those on the host;
//   of what is left then, margin_use_ratio 0.8 holds optimizer chunks,
//   which Adam updates on the device (hybrid Adam), the rest on the host
//   (CPU Adam). The host may use overall_cpu_mem_ratio 0.8 of its memory.
// - Chunks on the host cross the device's PCIe link each way they are
//   used: in for the forward, in for the backward, their gradients out;
//   chunks whose optimizer state is on the host send their gradients down
//   and take their updated 16-bit parameters back. Exposed, in chunks.
//
// Approximated: the placement is the step's peak, not the tracer's moment
// by moment (the activations' tide lets more chunks stay between peaks);
// the eviction order, memory-saving communication (broadcast/reduce in
// place of all-gather/reduce-scatter), CPU embedding and tiling are not
// modelled; a parameter tensor larger than a chunk is not checked.
//
//===----------------------------------------------------------------------===//
#include "Simulation.h"

#include "orrery/CostModel/Errors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace orrery {
namespace detail {

namespace {
/// PatrickStar's memory tracer quotas (its defaults, pretrain_demo.py).
constexpr double kGpuMemoryRatio = 0.8, kCpuMemoryRatio = 0.8,
                 kMarginUseRatio = 0.8;
} // namespace

namespace {

/// PatrickStar's chunks of one data-parallel rank: where its share of the
/// 16-bit model and of the optimizer state sits at the step's peak of
/// activations, and what the step moves and computes for them.
struct ChunkPlan {
  double gathered = 0, room = 0, residentHalf = 0, residentState = 0;
  double hostPerNode = 0;
  double commS = 0, moveS = 0, deviceAdamS = 0, hostAdamS = 0;
};

ChunkPlan planChunks(const Workload &w, const Strategy &s, const Assumptions &a,
                     const StagePlacement &place, const StageReport &st) {
  ChunkPlan cp;
  const DeviceSpec &dev = *place.device;
  const NodeGroup &g = *place.group;
  const double dp = s.dp;
  const double params = double(w.parameters());
  const double local = params / dp; // the rank's own share of the chunks
  const double chunk = double(s.chunkParams);
  const double groups = std::max(1.0, std::ceil(params / (chunk * dp)));
  const double half = a.weightBytesPerParam;     // 16-bit parameters/gradients
  const double state = a.optimizerBytesPerParam; // fp32 master, m, v

  // Placement at the step's peak of activations.
  double nonModel = st.memory.activationsBytes + st.memory.workspaceBytes;
  cp.gathered = dp > 1 ? dp * chunk * half : chunk * half;
  cp.room = kGpuMemoryRatio * st.capacityBytes - nonModel - cp.gathered;
  double ownHalf = local * half;
  cp.residentHalf = std::clamp(cp.room, 0.0, ownHalf);
  double margin = kMarginUseRatio * std::max(0.0, cp.room - cp.residentHalf);
  cp.residentState = std::min(margin, local * state);
  double onHost =
      (ownHalf - cp.residentHalf) + (local * state - cp.residentState);
  cp.hostPerNode = onHost * g.devicesPerNode;

  // Communication: the 16-bit model gathered twice and its gradients
  // reduce-scattered, group by group.
  if (dp > 1) {
    double groupBytes = dp * chunk * half;
    double last = params * half - (groups - 1) * groupBytes;
    auto byGroup = [&](CollectiveKind kind) {
      return (groups - 1) * collectiveTime(kind, groupBytes, place.dpGroup) +
             collectiveTime(kind, std::max(0.0, last), place.dpGroup);
    };
    cp.commS = 2 * byGroup(CollectiveKind::AllGather) +
               byGroup(CollectiveKind::ReduceScatter);
  }
  const LinkSpec *host = hostLinkOf(place);
  double pcie = host->bandwidthBytesPerS * ncclLinkEfficiency(*host);
  double hostFraction = ownHalf > 0 ? 1 - cp.residentHalf / ownHalf : 0;
  double stateOnHost = local > 0 ? 1 - cp.residentState / (local * state) : 0;
  // Chunks on the host: in twice, gradients out; resident chunks whose
  // optimizer state is on the host: gradients down, parameters back.
  double moved = 3 * ownHalf * hostFraction +
                 2 * ownHalf * (1 - hostFraction) * stateOnHost;
  cp.moveS = moved / pcie;
  // Adam: on the device over its optimizer chunks (the gradient read, the
  // state read and written, the 16-bit copy written), on the host over
  // every device's others at the host's memory bandwidth.
  double deviceParams = local * (1 - stateOnHost);
  cp.deviceAdamS = deviceParams > 0
                       ? kernelSeconds(dev, a.kernelsFor(dev), s.precision,
                                       deviceParams * 10,
                                       deviceParams * (half + 2 * state + half),
                                       KernelClass::Pointwise, 1)
                       : 0;
  cp.hostAdamS = g.hostMemoryBandwidthBytesPerS > 0
                     ? local * stateOnHost * g.devicesPerNode *
                           (2 * state + 2 * half) /
                           g.hostMemoryBandwidthBytesPerS
                     : 0;
  return cp;
}

/// The stage's memory with the chunks, and whether it fits.
void chunkMemory(const ChunkPlan &cp, const StagePlacement &place,
                 StageReport &st, StepResult &r) {
  const DeviceSpec &dev = *place.device;
  const NodeGroup &g = *place.group;
  double gathered = cp.gathered, room = cp.room, hostPerNode = cp.hostPerNode;
  // Memory: the gathered group and the resident chunks; gradients inside
  // their parameters' chunks.
  st.memory.weightsBytes = gathered + cp.residentHalf;
  st.memory.gradientsBytes = 0;
  st.memory.optimizerBytes = cp.residentState;
  r.peakMemoryBytes = st.memory.total();
  r.memoryShortfallBytes = st.memory.total() - st.capacityBytes;
  r.fits = true;
  r.doesNotFit.clear();
  char buf[320];
  if (room < 0) {
    r.fits = false;
    r.memoryShortfallBytes = std::max(r.memoryShortfallBytes, -room);
    std::snprintf(buf, sizeof buf,
                  "chunks: the activations (%.1f GiB), workspace (%.1f GiB) "
                  "and one gathered chunk group (%.1f GiB) exceed the %.0f "
                  "%% of the %s's %.1f GiB PatrickStar uses",
                  st.memory.activationsBytes / (1 << 30),
                  st.memory.workspaceBytes / (1 << 30), gathered / (1 << 30),
                  kGpuMemoryRatio * 100, dev.name.c_str(),
                  st.capacityBytes / (1 << 30));
    r.doesNotFit = buf;
  } else if (hostPerNode > kCpuMemoryRatio * g.hostMemoryBytes) {
    r.fits = false;
    r.memoryShortfallBytes =
        std::max(r.memoryShortfallBytes,
                 hostPerNode - kCpuMemoryRatio * g.hostMemoryBytes);
    std::snprintf(buf, sizeof buf,
                  "host memory: the chunks on the host take %.1f GiB per "
                  "node, over %.0f %% of its %.1f GiB (host_memory_bytes)",
                  hostPerNode / (1 << 30), kCpuMemoryRatio * 100,
                  g.hostMemoryBytes / (1 << 30));
    r.doesNotFit = buf;
  }
  r.hostMemoryBytesPerNode = hostPerNode;
}

} // namespace

/// The trace without the replaced sync and optimizer, and the chunks'
/// exposed communication and Adam after the last backward.
static void chunkTrace(double computed, double comm, double moveS, double adamS,
                       StepResult &r) {
  std::vector<TraceEvent> kept;
  for (const TraceEvent &e : r.trace)
    if (e.category != "dp" && e.category != "optimizer")
      kept.push_back(e);
  r.trace = std::move(kept);
  // The fetches wait inside the forward and backward; shown after them,
  // summed, as the step's exposed part.
  double t = computed;
  if (comm > 0)
    r.trace.push_back(
        {0, "chunk all-gathers and reduce-scatters (exposed)", "dp", t, comm});
  t += comm;
  if (moveS > 0)
    r.trace.push_back(
        {0, "chunks to and from the host (exposed)", "host", t, moveS});
  t += moveS;
  r.trace.push_back(
      {0, "optimizer (device and host Adam)", "optimizer", t, adamS});
}

llvm::Expected<StepResult> chunkedStep(const Workload &w, const Cluster &c,
                                       const Strategy &s, const Assumptions &a,
                                       bool keepTrace, Detail detail) {
  // The compute, activations and workspace of the data-parallel step; its
  // gradient reduction and optimizer step are replaced below.
  Strategy inner = s;
  inner.chunkParams = 0;
  std::vector<StagePlacement> at = homogeneousStages(c, inner);
  Simulation sim(w, inner, a, at, true);
  sim.detail = detail;
  auto r = sim.run(keepTrace);
  if (!r)
    return r;
  r->strategy = s;
  StageReport &st = r->stages[0];
  ChunkPlan cp = planChunks(w, s, a, at[0], st);
  double comm = cp.commS, moveS = cp.moveS, deviceAdamS = cp.deviceAdamS,
         hostAdamS = cp.hostAdamS;
  double before = r->stepS, oldDp = r->exposedDpCommS, oldOpt = r->optimizerS;
  double computed = before - oldDp - oldOpt; // the last backward's end
  double step = computed + comm + moveS + deviceAdamS + hostAdamS;
  chunkMemory(cp, at[0], st, *r);
  // Times and the figures that follow from them.
  double scale = before / step;
  r->stepS = step;
  r->exposedDpCommS = comm;
  r->hostTransferS = moveS;
  r->optimizerS = deviceAdamS + hostAdamS;
  r->samplesPerS *= scale;
  r->tokensPerS *= scale;
  r->modelTflopsPerDevice *= scale;
  r->mfu *= scale;
  r->hfu *= scale;
  r->bubbleFraction = r->bubbleS / step;
  ActivitySeconds &act = st.activity;
  act.communicationS = std::max(0.0, act.communicationS - oldDp) + comm + moveS;
  act.memoryBoundS = std::max(0.0, act.memoryBoundS - oldOpt) + deviceAdamS;
  act.idleS =
      std::max(0.0, step - act.gemmS - act.memoryBoundS - act.communicationS);
  r->energy = {};
  r->energy.add(act, st.power, double(st.devices));
  r->energyJ = r->energy.total();
  if (keepTrace)
    chunkTrace(computed, comm, moveS, deviceAdamS + hostAdamS, *r);
  return r;
}

} // namespace detail
} // namespace orrery
