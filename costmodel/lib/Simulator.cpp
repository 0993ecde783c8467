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

const LinkSpec *detail::hostLinkOf(const StagePlacement &place) {
  return orrery::hostLinkOf(*place.group);
}

using namespace detail;

GroupShape groupShapeIn(const NodeGroup &group, int stride, int ranks) {
  // A group of `ranks` ranks `stride` apart (the strategy's order decides
  // the stride) shares a node, or a scale-up domain of several, with as
  // many of its ranks as fit; the network cards stay each node's.
  GroupShape g;
  g.ranks = ranks;
  int perDomain = group.scaleUpDevices(), perNode = group.devicesPerNode;
  g.ranksPerNode = stride >= perDomain
                       ? 1
                       : std::max(1, std::min(ranks, perDomain / stride));
  g.intraLink = group.intraNodeLink;
  g.nic = group.nic;
  g.nicSharePerRank = double(group.nicsPerNode) / group.devicesPerNode;
  g.aggregation = group.aggregation;
  if (g.intraLink && !g.intraLink->fallbackLink.empty())
    g.fallback = HardwareCatalog::builtin().link(g.intraLink->fallbackLink);
  placeOnTiers(g, group.tiers, perNode, stride);
  return g;
}

StagePlacement placementOf(const Cluster &c, const Strategy &s) {
  return detail::homogeneousPlacement(c, s);
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
                     KernelClass c, int kernels, double weightBytes) {
  bool gemm = c == KernelClass::Gemm;
  double peak = gemm ? dev.tensorPeak(precision) : dev.vectorPeak();
  double compute = 0;
  if (flops > 0) {
    double ideal = flops / peak;
    double eff =
        gemm ? k.gemmEfficiency * ideal / (ideal + k.gemmHalfEfficiencyS) : 1.0;
    compute = ideal / std::max(eff, 1e-6);
  }
  double bandwidth = dev.memoryBandwidthBytesPerS * k.memoryEfficiency(c);
  double memory = bytes / bandwidth;
  // A GEMM over few rows (a decode step's tokens) has few output tiles,
  // each streaming its slice of the weights: the tensor cores wait on the
  // stream and the stream on them, so the weights' read and the math at
  // peak add up. DeepGEMM's M = 64-256 GEMMs on H800 and the H200's
  // 512 x 4096^2 sit at the sum; products of two activations (attention's)
  // overlap, at the larger of the two.
  if (gemm && weightBytes > 0 && flops > 0)
    memory = std::max(memory,
                      std::min(weightBytes, bytes) / bandwidth + flops / peak);
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

llvm::Error Simulation::checkDevices(StepResult &r) const {
  if (a.fusion != w.kernels)
    return err(std::string("simulator: the model was built for --kernels ") +
               kernelFusionName(w.kernels) + " but is priced as " +
               kernelFusionName(a.fusion));
  if (isFp4(s.precision))
    return err(std::string("strategy: precision=") +
               precisionName(s.precision) +
               ": training in 4-bit formats is not priced (nvfp4 and mxfp4 "
               "are serving precisions: orrery serve --precision); train in "
               "mxfp8, fp8 or bf16");
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
    if (s.precision == Precision::FP8 &&
        s.fp8Recipe == Fp8Recipe::Blockwise &&
        !p.device->hasTensorCores(Precision::MXFP8) &&
        !p.device->peakFlopPerS.count("fp8_blockwise"))
      return err("strategy: fp8_recipe=blockwise: " + p.device->name +
                 " runs no block-scaled fp8 GEMM (Transformer Engine's "
                 "blockwise recipe runs on Hopper, emulated by cuBLAS, and "
                 "on Blackwell as mxfp8; the catalog lists no fp8_blockwise "
                 "or mxfp8 rate for it)");
    if (!p.device->hasTensorCores(s.precision) &&
        !llvm::is_contained(r.precisionFallbackDevices, p.device->name))
      r.precisionFallbackDevices.push_back(p.device->name);
  }
  for (const StagePlacement &p : at)
    if (a.useMeasuredKernels && p.device->measuredKernels &&
        !llvm::is_contained(r.measuredKernelDevices, p.device->name))
      r.measuredKernelDevices.push_back(p.device->name);
  return llvm::Error::success();
}

llvm::Error Simulation::checkAssumptions() const {
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
  if (!a.layerProfile)
    return llvm::Error::success();
  // Every stage's device and tp must be measured: a host time guessed for
  // one that is not would be a silent wrong price.
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
  return llvm::Error::success();
}

llvm::Expected<StepResult> Simulation::run(bool keepTrace) {
  StepResult r;
  r.strategy = s;
  if (auto e = checkDevices(r))
    return std::move(e);
  r.assumptions = a;
  if (std::optional<double> least = leastBusyS(); least && *least > boundS) {
    if (auto e = checkAssumptions())
      return std::move(e);
    r.pruned = r.boundOnly = true;
    r.stepS = *least;
    return r;
  }
  auto layout = layOut(r, keepTrace);
  if (!layout)
    return layout.takeError();
  PipelineTransfers transfers = pipelineTransfers(*layout, r);
  auto sch = scheduleStep(*layout, transfers, r, keepTrace);
  if (!sch)
    return sch.takeError();
  GradientSync sync = syncGradients(*layout, sch->timeline, r);
  // Transfers' share of the idle time: the same schedule without them.
  int chunks = s.pp * s.virtualStages;
  double noTransferEnd =
      detail == Detail::StepTime || sch->pruned || (s.pp == 1 && !dualPipeTurn)
          ? sch->timeline.free[sync.slowest]
          : runSchedule(sch->order->tasks, chunks, int(s.microBatches()),
                        layout->fwdS, sch->bS, PipelineLinks::none(chunks),
                        nullptr, &layout->wS, &sch->fwdCommS, &sch->bwdCommS)
                .free[sync.slowest];
  stageMemory(*layout, *sch->order, sync, r);
  figures(*layout, *sch, sync, noTransferEnd, keepTrace, r);
  if (phases)
    *phases = {std::move(*layout), std::move(transfers), std::move(sync)};
  return r;
}

} // namespace detail

namespace detail {
StagePlacement homogeneousPlacement(const Cluster &c, const Strategy &s) {
  const NodeGroup &g = c.groupOf(0);
  // Gradients are reduced over dp x cp: the context-parallel ranks hold the
  // same weights (adjacent axes under the default order form one group).
  return StagePlacement{
      &c.deviceSpec(0), &g, s.tp, groupShapeIn(g, s.stride("tp"), s.tp),
      groupShapeIn(g, std::min(s.stride("dp"), s.stride("cp")), s.dp * s.cp),
      groupShapeIn(g, s.stride("pp"), 2), groupShapeIn(g, s.stride("cp"), s.cp),
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
          ? groupShapeIn(
                g,
                std::max<int64_t>(
                    1, std::llround(s.stride("dp") / s.subnetworkFraction)),
                std::max(1, int(std::llround(s.subnetworkFraction * s.dp))))
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
    return err(std::string("strategy: sdp=") + text +
               " with dp=" + std::to_string(s.dp) +
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
      int64_t held = std::max<int64_t>(1, std::llround(f * double(run.count)));
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
  int64_t stride = s.stride("pp"), perNode = std::max(1, g.devicesPerNode),
          perDomain = std::max(1, g.scaleUpDevices());
  for (int i = 0; i < s.pp && s.pp > 1; ++i) {
    // Ranks [i·stride, (i+2)·stride) hold stages i and i+1 (replica 0; the
    // others repeat the pattern pp·stride further on). The last stage sends
    // to the first (the next virtual chunk): both in one node only when the
    // whole pipeline is.
    int64_t first = i + 1 < s.pp ? int64_t(i) * stride : 0;
    int64_t last =
        i + 1 < s.pp ? int64_t(i + 2) * stride - 1 : int64_t(s.pp) * stride - 1;
    bool sameNode = first / perDomain == last / perDomain;
    at[i].toNext.ranksPerNode = sameNode ? 2 : 1;
    // Across nodes the stage's ranks on a node (a block of `stride`) send
    // together and share its cards, each over one at most.
    at[i].toNext.nicSharePerRank =
        std::min(1.0, double(g.nicsPerNode) / std::min(stride, perNode));
    // Across a fabric tier's blocks every rank of the stage in the block
    // sends out at once, through uplinks k times fewer than the block's
    // cards.
    at[i].toNext.ringTierFactor = 1;
    at[i].toNext.allToAllTierFactor = 0;
    for (const FabricTier &t : g.tiers) {
      int64_t block = int64_t(t.nodes) * perNode;
      if (first / block != last / block)
        at[i].toNext.ringTierFactor =
            std::max(at[i].toNext.ringTierFactor,
                     t.oversubscription * double(std::min(stride, block)) /
                         double(block));
    }
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
static llvm::Expected<StepResult>
dualPipeStep(const Workload &w, const Cluster &c, const Strategy &s,
             const Assumptions &a, bool keepTrace, Detail detail,
             double boundS) {
  Strategy v = s.dualPipeFolded();
  std::vector<StagePlacement> at = homogeneousStages(c, s);
  int half = s.pp / 2;
  at.resize(half);
  const NodeGroup &g = c.groupOf(0);
  int64_t stride = s.stride("pp"), perDomain = std::max(1, g.scaleUpDevices());
  for (int h = 0; h < half; ++h) {
    // Stage h's ranks and its mirror's, [h·stride, (pp-h)·stride): one
    // node (or scale-up domain) only when the pipeline between them is.
    bool sameNode = int64_t(h) * stride / perDomain ==
                    (int64_t(s.pp - h) * stride - 1) / perDomain;
    for (GroupShape *group : {&at[h].dpGroup, &at[h].expertDpGroup}) {
      group->ranks *= 2;
      if (sameNode)
        group->ranksPerNode = std::min(group->ranks, group->ranksPerNode * 2);
    }
  }
  Simulation sim(w, v, a, at, true);
  sim.detail = detail;
  sim.dualPipeTurn = true;
  if (detail == Detail::StepTime) // the folded step is the step
    sim.boundS = boundS;
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
                     "for its " +
                     g.device->name +
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
               ? dualPipeStep(model, c, s, a, keepTrace, detail, boundS)
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
          {{"name", (r.stages[i].label.empty() ? "stage " + std::to_string(i)
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
