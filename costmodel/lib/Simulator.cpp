//===- Simulator.cpp - one training step, event by event -----------------===//
//
// 1. Layers -> pipeline chunks (Megatron's split: the repeated layers evenly
//    over pp x vpp chunks, the layers before them in the first chunk, the
//    layers after in the last), or the strategy's own split.
// 2. Per chunk and micro-batch: forward and backward time from the ops
//    (roofline with an efficiency curve), tensor-parallel collectives on the
//    critical path, recompute.
// 3. The schedule (GPipe, 1F1B, interleaved 1F1B) as an ordered task list per
//    pipeline stage, simulated event by event with the transfers between
//    stages as delays on the dependencies.
// 4. Data-parallel gradient reduction overlapped with each stage's last
//    backward, then the optimizer step.
// 5. Memory per stage: weights, gradients, optimizer state by ZeRO stage,
//    the activations the schedule holds at its peak, workspace.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Simulator.h"
#include "orrery/CostModel/Collective.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

namespace {

/// Per micro-batch times of one layer kind under the strategy.
struct LayerTime {
  double forwardComputeS = 0, backwardComputeS = 0;
  double forwardTpS = 0, backwardTpS = 0;
  double recomputeS = 0; ///< extra forward work in backward (compute + comm)
  double recomputeFlops = 0;
  /// Activation bytes one micro-batch keeps for this layer, per device.
  double keptBytes = 0;
  /// Bytes one micro-batch needs while this layer runs its backward.
  double workingBytes = 0;
};

struct Task {
  int vs = 0, mb = 0;
  bool backward = false;
};

class Simulation {
public:
  Simulation(const Workload &w, const Cluster &c, const Strategy &s,
             const Assumptions &a)
      : w(w), c(c), s(s), a(a), dev(c.deviceSpec(0)), group(c.groupOf(0)) {}

  llvm::Expected<StepResult> run(bool keepTrace);

private:
  const Workload &w;
  const Cluster &c;
  const Strategy &s;
  const Assumptions &a;
  const DeviceSpec &dev;
  const NodeGroup &group;

  double scale() const {
    return double(s.microBatch) / double(std::max<int64_t>(1, w.batchSize)) /
           s.cp;
  }
  GroupShape shapeOf(int stride, int ranks) const;
  double opTime(double flops, double bytes, bool contraction,
                int kernels) const;
  LayerTime layerTime(const LayerKind &k) const;
  std::vector<std::vector<int>>
  chunkLayers(std::vector<size_t> &sequence) const;
  std::vector<std::vector<Task>> schedule(int microBatches) const;
};

GroupShape Simulation::shapeOf(int stride, int ranks) const {
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
  if (g.intraLink && !g.intraLink->fallbackLink.empty())
    g.fallback = HardwareCatalog::builtin().link(g.intraLink->fallbackLink);
  return g;
}

double Simulation::opTime(double flops, double bytes, bool contraction,
                          int kernels) const {
  double peak = contraction ? dev.tensorPeak(s.precision) : dev.vectorPeak();
  double compute = 0;
  if (flops > 0) {
    double ideal = flops / peak;
    double eff =
        contraction ? a.gemmEfficiency * ideal / (ideal + a.gemmHalfEfficiencyS)
                    : 1.0;
    compute = ideal / std::max(eff, 1e-6);
  }
  double memory = bytes / (dev.memoryBandwidthBytesPerS * a.memoryEfficiency);
  return std::max(compute, memory) + kernels * a.kernelLaunchS;
}

LayerTime Simulation::layerTime(const LayerKind &k) const {
  LayerTime t;
  double sc = scale();
  GroupShape tpGroup = shapeOf(s.stride("tp"), s.tp);
  for (const OpCost &op : k.ops) {
    if (op.view)
      continue;
    double split = (op.tensorParallel || s.sequenceParallel) ? s.tp : 1;
    double f = op.forwardFlops * sc / split, b = op.backwardFlops * sc / split;
    double moved = double(op.bytesRead + op.bytesWritten);
    int kernels = 1;
    if (op.fusesWithPrevious) {
      // One kernel with the op before: the tensor between them is neither
      // written nor read back.
      moved = std::max(0.0, moved - 2.0 * op.fusedIntermediateBytes);
      kernels = 0;
    }
    double bytes = moved * sc / split;
    double fwd = opTime(f, bytes, op.contraction, kernels);
    // Backward: two kernels per contraction (input and weight gradients),
    // each moving about the forward's bytes.
    double bwd =
        opTime(b, 2 * bytes, op.contraction, op.contraction ? 2 : kernels);
    t.forwardComputeS += fwd;
    t.backwardComputeS += bwd;
    if (s.tp > 1) {
      t.forwardTpS += collectiveTime(CollectiveKind::AllReduce,
                                     op.tpAllReduceForwardBytes * sc, tpGroup);
      t.backwardTpS += collectiveTime(
          CollectiveKind::AllReduce, op.tpAllReduceBackwardBytes * sc, tpGroup);
    }
    if (s.recompute == Recompute::Selective && op.attentionCore) {
      t.recomputeS += fwd;
      t.recomputeFlops += op.forwardFlops * sc / split;
    }
  }
  if (s.zeroStage == 3 && s.dp > 1 && k.parameters > 0) {
    // ZeRO-3 gathers each weight tensor before use (forward, and again in
    // backward) and reduce-scatters its gradient: one collective per tensor,
    // prefetched while the layer computes. What the compute cannot hide is
    // exposed.
    GroupShape dpGroup = shapeOf(s.stride("dp"), s.dp);
    int tensors = std::max(1, k.weightTensors);
    double perTensor = (double(k.parameters - k.replicatedParameters) / s.tp +
                        double(k.replicatedParameters)) /
                       tensors;
    double gather =
        tensors * collectiveTime(CollectiveKind::AllGather,
                                 perTensor * a.weightBytesPerParam, dpGroup);
    double scatter =
        tensors * collectiveTime(CollectiveKind::ReduceScatter,
                                 perTensor * a.gradBytesPerParam, dpGroup);
    t.forwardTpS += std::max(0.0, gather - t.forwardComputeS);
    t.backwardTpS += std::max(0.0, gather + scatter - t.backwardComputeS);
  }
  double tp = s.tp, stream = s.sequenceParallel ? tp : 1;
  double all = k.savedReplicatedBytes * sc / stream +
               k.savedShardedBytes * sc / tp + k.savedCoreBytes * sc / tp;
  t.workingBytes = all;
  switch (s.recompute) {
  case Recompute::None:
    t.keptBytes = all;
    break;
  case Recompute::Selective:
    t.keptBytes = all - k.savedCoreBytes * sc / tp;
    break;
  case Recompute::Full:
    t.keptBytes = k.inputBytes * sc / stream;
    t.recomputeS = t.forwardComputeS + t.forwardTpS;
    t.recomputeFlops = 0;
    for (const OpCost &op : k.ops)
      t.recomputeFlops += op.forwardFlops * sc /
                          ((op.tensorParallel || s.sequenceParallel) ? tp : 1);
    break;
  }
  return t;
}

std::vector<std::vector<int>>
Simulation::chunkLayers(std::vector<size_t> &sequence) const {
  for (const LayerRun &run : w.layers)
    for (int64_t i = 0; i < run.count; ++i)
      sequence.push_back(run.kind);
  int chunks = s.pp * s.virtualStages;
  std::vector<int> sizes;
  if (!s.stageLayers.empty()) {
    sizes = s.stageLayers;
  } else {
    // The longest run is the body; what precedes it joins the first chunk,
    // what follows the last.
    size_t bodyRun = 0;
    for (size_t r = 0; r < w.layers.size(); ++r)
      if (w.layers[r].count > w.layers[bodyRun].count)
        bodyRun = r;
    int64_t before = 0, after = 0;
    for (size_t r = 0; r < w.layers.size(); ++r)
      (r < bodyRun   ? before
       : r > bodyRun ? after
                     : before) += r == bodyRun ? 0 : w.layers[r].count;
    int64_t body = w.layers[bodyRun].count;
    if (body < chunks) { // too few repeats: split all layers evenly
      body = int64_t(sequence.size());
      before = after = 0;
    }
    for (int i = 0; i < chunks; ++i)
      sizes.push_back(int(body / chunks + (i < body % chunks ? 1 : 0)));
    sizes.front() += int(before);
    sizes.back() += int(after);
  }
  std::vector<std::vector<int>> out(chunks);
  int next = 0;
  for (int i = 0; i < chunks; ++i)
    for (int j = 0; j < sizes[i]; ++j)
      out[i].push_back(next++);
  return out;
}

std::vector<std::vector<Task>> Simulation::schedule(int m) const {
  int pp = s.pp, v = s.virtualStages;
  std::vector<std::vector<Task>> order(pp);
  for (int i = 0; i < pp; ++i) {
    auto &o = order[i];
    if (s.schedule == Schedule::GPipe) {
      for (int mb = 0; mb < m; ++mb)
        for (int c = 0; c < v; ++c)
          o.push_back({c * pp + i, mb, false});
      for (int mb = 0; mb < m; ++mb)
        for (int c = v - 1; c >= 0; --c)
          o.push_back({c * pp + i, mb, true});
      continue;
    }
    // Megatron-LM's (interleaved) 1F1B: forward k runs chunk (k/pp)%v of
    // micro-batch (k/(pp*v))*pp + k%pp; backwards visit chunks in reverse.
    int total = m * v;
    auto task = [&](int k, bool backward) {
      int inGroup = k % (pp * v);
      int chunk = inGroup / pp;
      if (backward)
        chunk = v - 1 - chunk;
      int mb = (k / (pp * v)) * pp + k % pp;
      return Task{chunk * pp + i, mb, backward};
    };
    int warmup = v == 1 ? std::min(pp - i - 1, m)
                        : std::min((pp - i - 1) * 2 + (v - 1) * pp, total);
    int f = 0, b = 0;
    for (; f < warmup; ++f)
      o.push_back(task(f, false));
    while (f < total) {
      o.push_back(task(f++, false));
      o.push_back(task(b++, true));
    }
    while (b < total)
      o.push_back(task(b++, true));
  }
  return order;
}

/// Per stage: when it finishes, how long it computed, its last backward.
struct Timeline {
  bool ok = true;
  std::vector<double> free, busy, lastBackwardS;
};

/// Runs each stage's task list in order; a task starts when its stage is
/// free and its inputs have arrived (`transfer(chunk)` after the producing
/// task of chunk `chunk`).
Timeline runSchedule(const std::vector<std::vector<Task>> &order, int chunks,
                     int m, const std::vector<double> &fwdS,
                     const std::vector<double> &bwdS,
                     const std::function<double(int)> &transfer,
                     std::vector<TraceEvent> *trace) {
  int pp = int(order.size());
  int v = chunks / pp;
  Timeline tl;
  tl.free.assign(pp, 0);
  tl.busy.assign(pp, 0);
  tl.lastBackwardS.assign(pp, 0);
  std::vector<double> fDone(size_t(chunks) * m, -1),
      bDone(size_t(chunks) * m, -1);
  auto idx = [&](int vs, int mb) { return size_t(vs) * m + mb; };
  std::vector<size_t> next(pp, 0);
  size_t remaining = 0;
  for (const auto &o : order)
    remaining += o.size();
  while (remaining) {
    bool progress = false;
    for (int i = 0; i < pp; ++i) {
      while (next[i] < order[i].size()) {
        const Task &t = order[i][next[i]];
        double ready = 0;
        if (!t.backward) {
          if (t.vs > 0) {
            double dep = fDone[idx(t.vs - 1, t.mb)];
            if (dep < 0)
              break;
            ready = dep + transfer(t.vs - 1);
          }
        } else {
          double own = fDone[idx(t.vs, t.mb)];
          if (own < 0)
            break;
          ready = own;
          if (t.vs + 1 < chunks) {
            double dep = bDone[idx(t.vs + 1, t.mb)];
            if (dep < 0)
              break;
            ready = std::max(ready, dep + transfer(t.vs));
          }
        }
        double start = std::max(tl.free[i], ready);
        double dur = t.backward ? bwdS[t.vs] : fwdS[t.vs];
        tl.free[i] = start + dur;
        tl.busy[i] += dur;
        (t.backward ? bDone : fDone)[idx(t.vs, t.mb)] = tl.free[i];
        if (t.backward)
          tl.lastBackwardS[i] = dur;
        if (trace)
          trace->push_back({i,
                            std::string(t.backward ? "B" : "F") +
                                std::to_string(t.mb) +
                                (v > 1 ? "." + std::to_string(t.vs / pp) : ""),
                            t.backward ? "backward" : "forward", start, dur});
        ++next[i];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      tl.ok = false;
      return tl;
    }
  }
  return tl;
}

llvm::Expected<StepResult> Simulation::run(bool keepTrace) {
  StepResult r;
  r.strategy = s;
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

  std::vector<LayerTime> kindTime;
  for (const LayerKind &k : w.kinds) {
    kindTime.push_back(layerTime(k));
    const LayerTime &t = kindTime.back();
    r.kindSecondsPerMicroBatch.push_back(t.forwardComputeS + t.forwardTpS +
                                         t.backwardComputeS + t.backwardTpS +
                                         t.recomputeS);
  }

  // Per chunk: times per micro-batch, boundary bytes, parameters.
  std::vector<double> fwdS(chunks), bwdS(chunks), tpS(chunks),
      recompFlops(chunks);
  std::vector<double> keptBytes(chunks), workingBytes(chunks), params(chunks),
      outBytes(chunks);
  std::vector<double> computeS(chunks);
  for (int ch = 0; ch < chunks; ++ch) {
    for (int l : chunkOf[ch]) {
      size_t k = sequence[l];
      const LayerTime &t = kindTime[k];
      fwdS[ch] += t.forwardComputeS + t.forwardTpS;
      bwdS[ch] += t.backwardComputeS + t.backwardTpS + t.recomputeS;
      tpS[ch] += t.forwardTpS + t.backwardTpS +
                 (s.recompute == Recompute::Full ? t.forwardTpS : 0);
      computeS[ch] +=
          t.forwardComputeS + t.backwardComputeS +
          (s.recompute == Recompute::Full ? t.forwardComputeS : t.recomputeS);
      recompFlops[ch] += t.recomputeFlops;
      keptBytes[ch] += t.keptBytes;
      workingBytes[ch] = std::max(workingBytes[ch], t.workingBytes);
      // A layer kind's parameters are counted at its first instance; the
      // others repeat them (a tied head reuses the embedding's).
      // Per tp rank: the split parameters divided, the replicated whole.
      const LayerKind &kind = w.kinds[k];
      params[ch] += double(kind.parameters - kind.replicatedParameters) / s.tp +
                    double(kind.replicatedParameters);
    }
    if (s.offloadActivations) {
      // Kept activations go to host memory in forward and come back in
      // backward over the host's PCIe link, overlapped with compute.
      bool gen5 =
          group.intraNodeLink && (group.intraNodeLink->name == "NVLink4" ||
                                  group.intraNodeLink->name == "NVLink5" ||
                                  group.intraNodeLink->name == "PCIe5");
      const LinkSpec *host =
          HardwareCatalog::builtin().link(gen5 ? "PCIe5" : "PCIe4");
      double xfer = keptBytes[ch] /
                    (host->bandwidthBytesPerS * ncclLinkEfficiency(*host));
      fwdS[ch] += std::max(0.0, xfer - fwdS[ch]);
      bwdS[ch] += std::max(0.0, xfer - bwdS[ch]);
    }
    outBytes[ch] =
        w.kinds[sequence[chunkOf[ch].back()]].outputBytes * scale() /
        (s.tp > 1 ? s.tp : 1); // Megatron's scatter/gather of p2p tensors
  }

  // Pipeline transfers: neighbours tp*cp*dp ranks apart.
  GroupShape ppPair = shapeOf(s.stride("pp"), 2);
  auto transferS = [&](int fromChunk) {
    if (pp == 1 || fromChunk + 1 >= chunks)
      return 0.0;
    return collectiveTime(CollectiveKind::SendRecv, outBytes[fromChunk],
                          ppPair);
  };

  // Event simulation.
  std::vector<std::vector<Task>> order = schedule(m);
  Timeline tl = runSchedule(order, chunks, m, fwdS, bwdS, transferS,
                            keepTrace ? &r.trace : nullptr);
  if (!tl.ok)
    return err("simulator: the schedule deadlocked (an internal error)");
  std::vector<double> &free = tl.free, &busy = tl.busy,
                      &lastBackwardS = tl.lastBackwardS;

  // Gradients: all-reduce over dp (reduce-scatter + all-gather under ZeRO,
  // the same volume), overlapped with the stage's last backward.
  GroupShape dpGroup = shapeOf(s.stride("dp"), s.dp);
  double stepS = 0;
  int slowest = 0;
  std::vector<double> dpExposed(pp, 0), optS(pp, 0), finish(pp, 0);
  for (int i = 0; i < pp; ++i) {
    double p = 0;
    for (int c2 = 0; c2 < v; ++c2)
      p += params[c2 * pp + i];
    double perDevice = p; // already per tp rank
    // ZeRO-3 reduces gradients layer by layer in backward (priced there).
    double grad =
        s.zeroStage == 3
            ? 0
            : collectiveTime(CollectiveKind::AllReduce,
                             perDevice * a.gradBytesPerParam, dpGroup);
    dpExposed[i] = std::max(0.0, grad - lastBackwardS[i]);
    double shard = s.zeroStage >= 1 ? s.dp : 1;
    double optBytes = perDevice / shard *
                      (a.weightBytesPerParam + a.gradBytesPerParam +
                       2 * a.optimizerBytesPerParam);
    optS[i] = s.offloadOptimizer
                  ? perDevice / shard * 16 / 31.5e9
                  : opTime(perDevice / shard * 10, optBytes, false, 4);
    finish[i] = free[i] + dpExposed[i] + optS[i];
    if (finish[i] > stepS) {
      stepS = finish[i];
      slowest = i;
    }
  }

  // Transfers' share of the idle time: the same schedule without them.
  double noTransferEnd =
      runSchedule(
          order, chunks, m, fwdS, bwdS, [](int) { return 0.0; }, nullptr)
          .free[slowest];

  // Memory per stage: the schedule's peak of kept activations.
  r.stages.resize(pp);
  for (int i = 0; i < pp; ++i) {
    StageReport &st = r.stages[i];
    st.device = dev.name;
    st.capacityBytes = dev.memoryBytes;
    double p = 0, live = 0, peak = 0, working = 0;
    for (int c2 = 0; c2 < v; ++c2) {
      int ch = c2 * pp + i;
      p += params[ch];
      st.numLayers += int(chunkOf[ch].size());
      st.forwardS += fwdS[ch];
      st.backwardS += bwdS[ch];
      working = std::max(working, workingBytes[ch]);
    }
    st.firstLayer = chunkOf[i].front();
    for (const Task &t : order[i]) {
      live += (t.backward ? -1 : 1) * keptBytes[t.vs];
      peak = std::max(peak, live);
    }
    if (s.offloadActivations)
      peak = v * keptBytes[i]; // one micro-batch per chunk stays on the device
    if (s.recompute == Recompute::Full)
      peak += working;    // the layer being recomputed
    double perDevice = p; // already per tp rank
    double dp = s.dp;
    MemoryBreakdown &mem = st.memory;
    mem.weightsBytes =
        perDevice * a.weightBytesPerParam / (s.zeroStage >= 3 ? dp : 1);
    mem.gradientsBytes =
        perDevice * a.gradBytesPerParam / (s.zeroStage >= 2 ? dp : 1);
    mem.optimizerBytes = s.offloadOptimizer
                             ? 0
                             : perDevice * a.optimizerBytesPerParam /
                                   (s.zeroStage >= 1 ? dp : 1);
    mem.activationsBytes = peak * (1 + a.fragmentation);
    mem.workspaceBytes = a.workspaceBytes;
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
  }

  // Figures.
  double samples = double(s.globalBatch);
  double perSample = 1.0 / std::max<int64_t>(1, w.batchSize);
  r.stepS = stepS;
  r.samplesPerS = samples / stepS;
  r.tokensPerS = r.samplesPerS * double(w.tokensPerSample); // 0 without tokens
  r.modelFlopsPerStep =
      double(w.forwardFlops() + w.backwardFlops()) * perSample * samples;
  double recompute = 0;
  for (int ch = 0; ch < chunks; ++ch)
    recompute += recompFlops[ch];
  // recompFlops are per device per micro-batch; scale to the whole step.
  r.hardwareFlopsPerStep =
      r.modelFlopsPerStep + recompute * s.tp * s.cp * m * s.dp;
  int devices = c.numDevices();
  double peakFlops = dev.tensorPeak(s.precision);
  r.modelTflopsPerDevice = r.modelFlopsPerStep / stepS / devices / 1e12;
  r.mfu = r.modelFlopsPerStep / stepS / devices / peakFlops;
  r.hfu = r.hardwareFlopsPerStep / stepS / devices / peakFlops;
  double compute = 0, tp = 0;
  for (int c2 = 0; c2 < v; ++c2) {
    compute += computeS[c2 * pp + slowest] * m;
    tp += tpS[c2 * pp + slowest] * m;
  }
  r.computeS = compute;
  r.exposedTpCommS = tp;
  r.exposedDpCommS = dpExposed[slowest];
  r.optimizerS = optS[slowest];
  double idle = std::max(0.0, free[slowest] - busy[slowest]);
  r.exposedPpCommS =
      std::min(idle, std::max(0.0, free[slowest] - noTransferEnd));
  r.bubbleS = std::max(0.0, idle - r.exposedPpCommS);
  r.bubbleFraction = r.bubbleS / stepS;
  for (int d = 0; d < devices; ++d) {
    const NodeGroup &g = c.groupOf(d);
    r.energyJ += g.powerW * stepS;
    r.costUsd += g.priceUsdPerDeviceHour * stepS / 3600.0;
  }
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

} // namespace

llvm::Expected<StepResult> simulateStep(const Workload &w, const Cluster &c,
                                        Strategy s, const Assumptions &a,
                                        bool keepTrace) {
  if (auto e = completeAndValidate(s, w, c))
    return std::move(e);
  if (w.kinds.empty())
    return err("simulator: the model has no layers");
  // This version prices one device type at one site; a mixed or multi-site
  // cluster would be priced wrongly, so it is refused.
  if (!c.homogeneous()) {
    std::string types;
    for (int d = 0; d < c.numDevices(); ++d)
      if (types.find(c.deviceSpec(d).name) == std::string::npos)
        types += (types.empty() ? "" : ", ") + c.deviceSpec(d).name;
    return err("simulator: the cluster mixes device types (" + types +
               "); this version prices clusters of one type");
  }
  if (c.sites.size() > 1)
    return err("simulator: the cluster spans " +
               std::to_string(c.sites.size()) +
               " sites; this version prices clusters at one site");
  return Simulation(w, c, s, a).run(keepTrace);
}

std::string chromeTraceJson(const StepResult &r) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.stages.size(); ++i)
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", i},
         {"args",
          {{"name",
            "stage " + std::to_string(i) + " (" + r.stages[i].device + " x " +
                std::to_string(r.strategy.tp * r.strategy.cp * r.strategy.dp) +
                ")"}}}});
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
  j["otherData"] = {{"strategy", r.strategy.str()}, {"step_time_s", r.stepS}};
  return j.dump();
}

} // namespace orrery
