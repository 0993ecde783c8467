//===- Lowering.cpp - a plan's step as one program per rank --------------===//
//
// Per rank, in its stage's schedule order (Simulation::schedule), each task
// becomes: the receive of its input from the previous chunk's rank (and its
// gather over tp), an allocation of the activations it keeps, every op of
// every layer of the chunk as the simulator prices it (priceOp: GEMMs,
// fused attention with context parallelism's ring or all-to-alls, memory-
// bound kernels, fp8 casts, tensor-parallel collectives, expert all-to-
// alls, ZeRO-3 gathers, recompute), the send of its output. Backward tasks
// run the layers' ops in reverse and free the activations; during the last
// micro-batch's backward each layer's gradients are reduced as their
// bucket fills (--overlap-grad-reduce). The step ends with the tied
// embedding's all-reduce, a wait for every stream, the optimizer step and
// the distributed optimizer's parameter all-gather.
//
//===----------------------------------------------------------------------===//

#include "orrery/CostModel/Lowering.h"
#include "Simulation.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Errors.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

namespace orrery {

static llvm::Error err(const std::string &msg) { return inputError(msg); }

namespace detail {
namespace {

/// World rank of (stage, tp rank, cp rank, replica).
using RankOf = std::function<int(int, int, int, int)>;

struct Groups {
  ProgramSet &set;
  std::map<std::vector<int>, int> ids;
  /// The group's index (-1 for a group of one rank).
  int get(std::vector<int> ranks, const std::string &name) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    if (ranks.size() < 2)
      return -1;
    auto [it, added] = ids.emplace(ranks, int(set.groups.size()));
    if (added) {
      set.groups.push_back(ranks);
      set.groupNames.push_back(name);
    }
    return it->second;
  }
};

std::string shortName(const std::string &op) {
  for (const char *prefix : {"orrery.", "onnx_op:"})
    if (op.rfind(prefix, 0) == 0)
      return op.substr(std::string(prefix).size());
  return op;
}

int64_t roundUp(double x) {
  return std::max<int64_t>(1, int64_t(std::llround(x)));
}

/// Lowers one pipeline (a homogeneous step, or a replica group).
class PipelineLowering {
public:
  PipelineLowering(const Workload &w, const Strategy &s, const Assumptions &a,
                   const Simulation &sim, const StepPhases &step,
                   const StepResult &r, RankOf rankOf, Groups &groups,
                   int replicaGroup)
      : w(w), s(s), a(a), sim(sim), step(step), r(r), rankOf(std::move(rankOf)),
        groups(groups), replicaGroup(replicaGroup) {}

  /// The program of one rank, running `microBatches` micro-batches.
  Program lower(int stage, int t, int c, int d, int64_t microBatches);

  /// The world ranks of the data-parallel group of (stage, tp rank t),
  /// when not this pipeline's dp x cp replicas (aligned replica groups
  /// reduce together: Hetero.cpp).
  std::function<void(int stage, int t, std::vector<int> &)> dpMembers;

private:
  const Workload &w;
  const Strategy &s;
  const Assumptions &a;
  const Simulation &sim;
  const StepPhases &step;
  const StepResult &r;
  RankOf rankOf;
  Groups &groups;
  int replicaGroup;

  // The rank being lowered.
  Program *prog = nullptr;
  int stage = 0, t = 0, c = 0, d = 0;
  int64_t m = 1;
  int tpG = -1, cpG = -1, dpG = -1, epG = -1, edpG = -1;
  int cpNext = -1, cpPrev = -1;
  int64_t cpTag = 0;
  std::string span;
  /// Instructions the next compute instruction waits for.
  std::vector<int> pending;
  int lastCompute = -1;
  /// Per chunk, the micro-batch whose backward computes its weight
  /// gradients last (it fills the last gradient bucket); zero bubble's W.
  std::vector<int64_t> lastBackwardOf;
  bool zeroBubble = false;
  /// The micro-batch the current task runs.
  int64_t taskMb = 0;
  /// ZeRO-3 under pipeline stages: a chunk's weights stay whole from its
  /// first micro-batch's forward to its last one's backward (ModelShare::
  /// unshardedAcrossMicroBatches), gathered once and reduce-scattered once
  /// a step, as the simulator prices them (LayerPricing's zero3Spread).
  bool wholeAcrossMicroBatches() const { return s.zeroStage == 3 && s.pp > 1; }
  void buildGroups();
  void pipeTransfer(int fromChunk, bool backward, int64_t mb, bool sending);
  void runTask(const Task &task);
  void stepEnd(Program &out);
  /// Backward: fused ops' kernels, carried to the op they fuse with.
  double carryS = 0, carryBytes = 0, carryFlops = 0;

  const StagePlacement &place() const { return sim.placement(stage); }
  int tp() const { return place().tp; }
  /// The ranks that reduce this stage's gradients (dp x cp, or every
  /// aligned group's replicas).
  int dpRanks() const { return place().dpGroup.ranks; }

  int push(Instruction in) {
    in.span = span;
    prog->code.push_back(std::move(in));
    return int(prog->code.size()) - 1;
  }
  int compute(Instruction in) {
    in.stream = StreamKind::Compute;
    in.deps = pending;
    pending.clear();
    lastCompute = push(std::move(in));
    return lastCompute;
  }
  /// A collective after the last compute; the next compute waits for it
  /// when `blocking`.
  int collective(CollectiveKind kind, int group, double bytes, double seconds,
                 const std::string &name, StreamKind stream, bool blocking) {
    if (group < 0 || bytes <= 0)
      return -1;
    Instruction in;
    in.kind = InstrKind::Collective;
    in.stream = stream;
    in.collective = kind;
    in.group = group;
    in.bytes = bytes;
    in.name = name;
    in.predictedS = seconds;
    if (lastCompute >= 0)
      in.deps.push_back(lastCompute);
    int i = push(std::move(in));
    if (blocking)
      pending.push_back(i);
    return i;
  }
  Instruction kernel(const std::string &name, KernelClass cls, double bytes,
                     double flops, double seconds) {
    Instruction in;
    in.kind = InstrKind::Kernel;
    in.name = name;
    in.kernelClass = cls;
    in.bytes = bytes;
    in.flops = flops;
    in.predictedS = seconds;
    return in;
  }

  Instruction gemm(const OpCost &op, const OpPrice &o, bool backward,
                   int part) const;
  Instruction attention(const OpCost &op, const OpPrice &o, bool backward,
                        int calls) const;
  void ringStep(double bytes, double seconds, const std::string &name);
  void opForward(const OpCost &op, const OpPrice &o);
  void opBackward(const OpCost &op, const OpPrice &o);
  void layerForward(const LayerKind &k, bool coreOnly, bool recompute);
  /// `recomputed`: full recompute re-runs the layer's forward first
  /// (StepParts::recomputed).
  void layerBackward(const LayerKind &k, bool lastMicroBatch,
                     bool recomputed = false);
  /// Which part of a backward layerBackward emits: all of it, the input
  /// gradients (a zero-bubble B task) or the weight gradients (W).
  enum class Part { Both, Input, Weight } part = Part::Both;
  double layerParams(const LayerKind &k) const;
  void gradientBuckets(double dense, double experts);

  /// Activation offload: the chunk's bytes that live in host memory
  /// between its forward and its backward (StepLayout::offloadedBytes).
  double offloaded(int vs) const {
    return s.offloadActivations ? step.layout.offloadedBytes[vs] : 0;
  }
  /// The copy out (forward) or back (backward) of a task's offloaded
  /// activations, on the host-copy stream beside the task's compute,
  /// through a staging buffer of two layers (the one moving, the one
  /// computing: StepMemory's in-flight bytes); hostCopyDone ends the task
  /// when the copy is done, so the task takes the longer of the two, as
  /// the simulator prices it (StepLayout's offloadChunk).
  int copyAt = -1;
  void hostCopy(const Task &task, bool back);
  /// torchtitan's per-op recompute before a layer's backward.
  void recomputePerOp(const LayerKind &k);
  /// The optimizer step on the host (ZeRO-Offload): gradients down,
  /// Adam there, weights up, on the host-copy stream.
  void hostOptimizer(Instruction opt);
  void hostCopyDone(const Task &task);
};

/// The sequence-parallel all-gathers again (the policy saves the
/// reduce-scatters' outputs: half the forward's tensor-parallel traffic),
/// and the ops the policy did not save (SDPA's output and every other
/// matmul's are), as LayerPricing prices the recompute.
void PipelineLowering::recomputePerOp(const LayerKind &k) {
  const StagePlacement &p = place();
  int matmuls = 0;
  for (const OpCost &op : k.ops) {
    if (op.view)
      continue;
    OpPrice o = sim.priceOp(op, k, p);
    if (tp() > 1)
      for (int j = 0; j < o.tpRowAllReduces; ++j)
        collective(CollectiveKind::AllGather, tpG,
                   o.tpRowAllReduceBytes / o.tpRowAllReduces,
                   o.tpRowAllReduceS / o.tpRowAllReduces / 2,
                   "recompute all-gather", StreamKind::Comm, true);
    bool mm = op.weighted && op.contraction && op.experts <= 1;
    matmuls += mm;
    if (op.kernelClass == KernelClass::Attention || (mm && matmuls % 2 == 1))
      continue; // saved
    Instruction in = op.contraction
                         ? gemm(op, o, false, 0)
                         : kernel(shortName(op.name), o.kernelClass,
                                  o.forwardBytes, o.forwardFlops, o.forwardS);
    in.name = "recompute " + in.name;
    compute(in);
  }
}

void PipelineLowering::hostOptimizer(Instruction opt) {
  // The shard's gradients down the device's host link, Adam on the host's
  // cores, the 16-bit weights back (GradientSync's optimizerStep): the
  // link's share of the simulator's figure at its rate, the host's the
  // rest.
  const LinkSpec *host = hostLinkOf(*place().group);
  double pcie = host->bandwidthBytesPerS * ncclLinkEfficiency(*host);
  double shard = step.sync.shardParams[stage];
  Instruction down;
  down.kind = InstrKind::Copy;
  down.stream = StreamKind::HostCopy;
  down.name = "gradients";
  down.buffer = kHeldBuffer;
  down.bytes = shard * a.gradBytesPerParam;
  down.predictedS = down.bytes / pcie;
  down.deps = {lastCompute};
  push(down);
  Instruction up = down;
  up.name = "weights";
  up.backward = true;
  up.bytes = shard * a.weightBytesPerParam;
  up.predictedS = up.bytes / pcie;
  up.deps.clear();
  opt.stream = StreamKind::HostCopy; // on the host: after the copy down
  opt.name += " on the host";
  // The host streams the shard's fp32 state and gradient, writes the
  // state and the 16-bit copy.
  opt.bytes = shard * (2 * a.optimizerBytesPerParam + a.gradBytesPerParam +
                       a.weightBytesPerParam);
  opt.predictedS =
      std::max(0.0, opt.predictedS - down.predictedS - up.predictedS);
  push(opt);
  pending.push_back(push(up));
  Instruction done;
  done.kind = InstrKind::Wait;
  done.name = "weights";
  compute(done);
}

void PipelineLowering::hostCopy(const Task &task, bool back) {
  copyAt = -1;
  if (offloaded(task.vs) <= 0)
    return;
  Instruction staging;
  staging.kind = InstrKind::Alloc;
  staging.name = "offload staging";
  staging.buffer = -1 - int(task.vs * m + task.mb); // apart from activations
  staging.bytes = 2 * step.layout.largestLayerBytes[task.vs];
  compute(staging);
  Instruction in;
  in.kind = InstrKind::Copy;
  in.stream = StreamKind::HostCopy;
  in.name = "activations";
  in.backward = back;
  in.bytes = offloaded(task.vs);
  in.predictedS = step.layout.offloadS[task.vs];
  in.buffer = staging.buffer; // through the staging buffer
  in.deps = {lastCompute};
  copyAt = push(std::move(in));
}

void PipelineLowering::hostCopyDone(const Task &task) {
  if (copyAt < 0)
    return;
  Instruction free;
  free.kind = InstrKind::Free;
  free.name = "offload staging";
  free.buffer = -1 - int(task.vs * m + task.mb);
  free.bytes = 2 * step.layout.largestLayerBytes[task.vs];
  pending.push_back(copyAt);
  compute(free);
  copyAt = -1;
}

Instruction PipelineLowering::gemm(const OpCost &op, const OpPrice &o,
                                   bool backward, int part) const {
  // The op's GEMM at the micro-batch (tokens per rank: / cp), split as
  // tensor parallelism splits it: a row-parallel product's k, an
  // activation-activation product's heads, another split product's n.
  double sc = sim.scale();
  int64_t batch = std::max<int64_t>(1, op.gemmBatch), mm = op.gemmM,
          nn = op.gemmN, kk = op.gemmK;
  double rows = double(mm) * sc;
  if (op.experts > 1 && o.localExperts > 0) {
    // tokens per local expert, on the busiest device
    rows *= double(batch) / o.localExperts * o.expertLoad;
    batch = o.localExperts;
  }
  if (o.split > 1) {
    // Sequence parallelism splits the tokens (and those of folded experts).
    if (!op.tensorParallel || o.foldedExperts)
      rows /= o.split;
    else if (op.tpAllReduceForwardBytes > 0 && op.weighted)
      kk = roundUp(double(kk) / o.split);
    else if (!op.weighted && batch % int64_t(o.split) == 0)
      batch /= int64_t(o.split);
    else
      nn = roundUp(double(nn) / o.split);
  }
  Instruction in;
  in.kind = InstrKind::Gemm;
  in.precision = o.precision;
  in.name = shortName(op.name);
  in.batch = batch;
  in.m = roundUp(rows);
  in.n = std::max<int64_t>(1, nn);
  in.k = std::max<int64_t>(1, kk);
  if (backward) {
    // Input gradient [m, n] x [n, k], then the weight's [k, m] x [m, n].
    int64_t m0 = in.m, n0 = in.n, k0 = in.k;
    in.name += part == 0 ? " dgrad" : " wgrad";
    if (part == 0) {
      in.n = k0;
      in.k = n0;
    } else {
      in.m = k0;
      in.k = m0;
    }
    int parts = std::max(1, o.backwardKernels);
    in.flops = o.backwardFlops / parts;
    in.predictedS = (o.backwardS - o.castBackwardS) / parts;
  } else {
    in.flops = o.forwardFlops;
    in.predictedS = o.forwardS - o.castForwardS;
  }
  return in;
}

Instruction PipelineLowering::attention(const OpCost &op, const OpPrice &o,
                                        bool backward, int calls) const {
  bool ring = s.cp > 1 && s.cpComm == CpComm::Ring;
  Instruction in;
  in.kind = InstrKind::Attention;
  in.name = "fused_attention";
  in.precision = o.precision;
  in.backward = backward;
  in.causal = op.attentionCausal;
  in.window = op.attentionWindow;
  in.batch =
      roundUp(double(std::max<int64_t>(1, op.attentionBatch)) *
              double(s.microBatch) / double(std::max<int64_t>(1, w.batchSize)));
  int64_t heads = std::max<int64_t>(1, op.attentionQueryHeads),
          kvHeads = std::max<int64_t>(1, op.attentionKvHeads);
  double headSplit = o.split * (s.cp > 1 && !ring ? s.cp : 1);
  in.heads = roundUp(double(heads) / headSplit);
  in.kvHeads = roundUp(double(kvHeads) / headSplit);
  in.qLen =
      roundUp(double(op.attentionQueryLen) / (s.cp > 1 && ring ? s.cp : 1));
  in.kvLen = roundUp(double(op.attentionKvLen) / (ring ? s.cp : 1));
  in.headDim = op.attentionHeadDim;
  in.valueDim = op.attentionValueDim;
  in.flops = (backward ? o.backwardFlops : o.forwardFlops) / calls;
  in.bytes = (backward ? o.backwardBytes : o.forwardBytes) / calls;
  in.predictedS = (backward ? o.backwardS : o.forwardS) / calls;
  return in;
}

/// One step of context parallelism's ring: this rank's block to the next
/// cp rank and the previous rank's block in, as one NCCL group; the next
/// attention block waits for it.
void PipelineLowering::ringStep(double bytes, double seconds,
                                const std::string &name) {
  Instruction send;
  send.kind = InstrKind::Send;
  send.stream = StreamKind::Comm;
  send.name = name;
  send.peer = cpNext;
  send.bytes = bytes;
  send.tag = (int64_t(1) << 40) + cpTag;
  send.predictedS = seconds;
  if (lastCompute >= 0)
    send.deps.push_back(lastCompute);
  send.p2pGroup = int(prog->code.size());
  int first = push(send);
  Instruction recv = send;
  recv.kind = InstrKind::Recv;
  recv.peer = cpPrev;
  recv.deps.clear();
  recv.p2pGroup = first;
  recv.predictedS = 0;
  pending.push_back(push(recv));
  ++cpTag;
}

void PipelineLowering::opForward(const OpCost &op, const OpPrice &o) {
  if (o.kernels == 0 && lastCompute >= 0 &&
      prog->code[lastCompute].kind == InstrKind::Kernel) {
    // Fused into the kernel before it.
    Instruction &prev = prog->code[lastCompute];
    prev.predictedS += o.forwardS;
    prev.bytes += o.forwardBytes;
    prev.flops += o.forwardFlops;
    prev.name += "+" + shortName(op.name);
    return;
  }
  if (o.castForwardS > 0)
    compute(kernel("fp8 cast", KernelClass::Reduction, o.castForwardBytes, 0,
                   o.castForwardS));
  if (o.attention) {
    bool ring = o.cpRing;
    if (s.cp > 1 && !ring)
      collective(CollectiveKind::AllToAll, cpG, o.cpQkvBytes, o.cpQkvAllToAllS,
                 "qkv all-to-all", StreamKind::Comm, true);
    int calls = std::max(1, o.attentionCalls);
    for (int j = 0; j < calls; ++j) {
      if (ring && j + 1 < calls)
        ringStep(o.cpBlockBytes, o.cpSendS, "kv block");
      compute(attention(op, o, false, calls));
      if (ring && j > 0)
        compute(kernel("attention merge", KernelClass::Pointwise,
                       o.cpMergeForwardBytes, 0,
                       o.cpMergeForwardS / (s.cp - 1)));
    }
    if (s.cp > 1 && !ring)
      collective(CollectiveKind::AllToAll, cpG, o.cpOutBytes, o.cpOutAllToAllS,
                 "output all-to-all", StreamKind::Comm, true);
  } else if (op.contraction) {
    compute(gemm(op, o, false, 0));
  } else {
    compute(kernel(shortName(op.name), o.kernelClass, o.forwardBytes,
                   o.forwardFlops, o.forwardS));
  }
  if (tp() > 1) {
    for (int k = 0; k < o.tpRowAllReduces; ++k)
      collective(CollectiveKind::AllReduce, tpG,
                 o.tpRowAllReduceBytes / o.tpRowAllReduces,
                 o.tpRowAllReduceS / o.tpRowAllReduces,
                 "row-parallel all-reduce", StreamKind::Comm, true);
    collective(CollectiveKind::AllGather, tpG, o.tpGatherBytes, o.tpGatherS,
               "split gather", StreamKind::Comm, true);
    collective(CollectiveKind::SendRecv, tpG, o.tpHaloBytes, o.tpHaloS, "halo",
               StreamKind::Comm, true);
  }
}

void PipelineLowering::opBackward(const OpCost &op, const OpPrice &o) {
  // A W task: the weight-gradient GEMMs alone (LayerPricing's weightGradS).
  if (part == Part::Weight) {
    if (op.contraction && op.weighted && o.backwardKernels == 2)
      compute(gemm(op, o, true, 1));
    return;
  }
  if (o.backwardKernels == 0) { // fused: runs in the kernel of the op before
    carryS += o.backwardS;
    carryBytes += o.backwardBytes;
    carryFlops += o.backwardFlops;
    return;
  }
  auto withCarry = [&](Instruction in) {
    in.predictedS += carryS;
    in.bytes += carryBytes;
    in.flops += carryFlops;
    carryS = carryBytes = carryFlops = 0;
    return in;
  };
  if (tp() > 1) {
    collective(CollectiveKind::SendRecv, tpG, o.tpHaloBytes, o.tpHaloS, "halo",
               StreamKind::Comm, true);
    collective(CollectiveKind::ReduceScatter, tpG, o.tpGatherBytes,
               o.tpScatterS, "split gradient reduce-scatter", StreamKind::Comm,
               true);
  }
  if (o.castBackwardS > 0)
    compute(kernel("fp8 cast", KernelClass::Reduction, o.castBackwardBytes,
                   0, o.castBackwardS));
  if (o.attention) {
    bool ring = o.cpRing;
    if (s.cp > 1 && !ring)
      collective(CollectiveKind::AllToAll, cpG, o.cpOutBytes, o.cpOutAllToAllS,
                 "output gradient all-to-all", StreamKind::Comm, true);
    int calls = std::max(1, o.attentionCalls);
    for (int j = 0; j < calls; ++j) {
      if (ring && j + 1 < calls)
        ringStep(2 * o.cpBlockBytes, o.cpSendBackS, "kv block and gradients");
      compute(withCarry(attention(op, o, true, calls)));
      if (ring && j > 0)
        compute(kernel("attention gradient merge", KernelClass::Pointwise,
                       o.cpMergeBackwardBytes, 0,
                       o.cpMergeBackwardS / (s.cp - 1)));
    }
    if (s.cp > 1 && !ring)
      collective(CollectiveKind::AllToAll, cpG, o.cpQkvBytes, o.cpQkvAllToAllS,
                 "qkv gradient all-to-all", StreamKind::Comm, true);
  } else if (op.contraction && o.backwardKernels == 2) {
    compute(withCarry(gemm(op, o, true, 0)));
    if (tp() > 1)
      collective(CollectiveKind::AllReduce, tpG, o.tpColumnAllReduceBytes,
                 o.tpColumnAllReduceS, "column-parallel all-reduce",
                 StreamKind::Comm, true);
    // A weighted one's weight gradient waits for its W task.
    if (!(part == Part::Input && op.weighted))
      compute(gemm(op, o, true, 1));
    return;
  } else if (op.contraction) {
    Instruction g = gemm(op, o, true, 0);
    g.name = shortName(op.name) + " backward";
    g.flops = o.backwardFlops;
    g.predictedS = o.backwardS - o.castBackwardS;
    compute(withCarry(g));
  } else {
    compute(withCarry(kernel(shortName(op.name) + " backward", o.backwardClass,
                             o.backwardBytes, o.backwardFlops, o.backwardS)));
  }
  if (tp() > 1)
    collective(CollectiveKind::AllReduce, tpG, o.tpColumnAllReduceBytes,
               o.tpColumnAllReduceS, "column-parallel all-reduce",
               StreamKind::Comm, true);
}

double PipelineLowering::layerParams(const LayerKind &k) const {
  return k.trainablePerRank(tp());
}

void PipelineLowering::layerForward(const LayerKind &k, bool coreOnly,
                                    bool recompute) {
  const StagePlacement &p = place();
  WeightTraffic wt = sim.weightTraffic(k, p);
  if (!coreOnly && wt.zero3 &&
      (!wholeAcrossMicroBatches() || (taskMb == 0 && !recompute)))
    collective(CollectiveKind::AllGather, dpG, wt.zero3GatherBytes,
               wt.zero3GatherS, "zero-3 weight gather",
               StreamKind::DataParallel, true);
  bool ep = !coreOnly && wt.expertParallel;
  double tokens = wt.expertTokensBytes, a2a = wt.expertAllToAllS;
  int lastExpert = -1;
  for (int i = 0; i < int(k.ops.size()); ++i)
    if (k.ops[i].experts > 1 && !k.ops[i].view)
      lastExpert = i;
  bool dispatched = false;
  for (int i = 0; i < int(k.ops.size()); ++i) {
    const OpCost &op = k.ops[i];
    if (op.view || (coreOnly && !op.attentionCore))
      continue;
    if (ep && op.experts > 1 && !dispatched) {
      collective(CollectiveKind::AllToAll, epG, tokens, a2a, "expert dispatch",
                 StreamKind::Comm, true);
      dispatched = true;
    }
    size_t before = prog->code.size();
    opForward(op, sim.priceOp(op, k, p));
    if (recompute)
      for (size_t j = before; j < prog->code.size(); ++j)
        if (prog->code[j].stream == StreamKind::Compute &&
            prog->code[j].name.rfind("recompute ", 0) != 0)
          prog->code[j].name = "recompute " + prog->code[j].name;
    if (ep && i == lastExpert)
      collective(CollectiveKind::AllToAll, epG, tokens, a2a, "expert combine",
                 StreamKind::Comm, true);
  }
}

void PipelineLowering::layerBackward(const LayerKind &k, bool lastMicroBatch,
                                     bool recomputed) {
  if (k.noBackward) // frozen, and nothing before it trains (LayerPricing)
    return;
  const StagePlacement &p = place();
  bool inputPart = part != Part::Weight, weightPart = part != Part::Input;
  if (!inputPart) { // a W task: the weight-gradient GEMMs, in reverse
    for (int i = int(k.ops.size()) - 1; i >= 0; --i)
      if (!k.ops[i].view)
        opBackward(k.ops[i], sim.priceOp(k.ops[i], k, p));
  }
  if (inputPart && recomputed)
    layerForward(k, false, true);
  if (inputPart && s.recompute == Recompute::Op && s.recomputesKind(k.name))
    recomputePerOp(k);
  WeightTraffic wt = sim.weightTraffic(k, p);
  if (wt.zero3 && inputPart && !wholeAcrossMicroBatches())
    collective(CollectiveKind::AllGather, dpG, wt.zero3GatherBytes,
               wt.zero3GatherS, "zero-3 weight gather",
               StreamKind::DataParallel, true);
  if (inputPart) {
    bool ep = wt.expertParallel;
    double tokens = wt.expertTokensBytes, a2a = wt.expertAllToAllS;
    int firstExpert = -1, lastCore = -1;
    for (int i = int(k.ops.size()) - 1; i >= 0; --i) {
      if (k.ops[i].view)
        continue;
      if (k.ops[i].experts > 1)
        firstExpert = i;
      if (k.ops[i].attentionCore && lastCore < 0)
        lastCore = i;
    }
    bool combined = false;
    carryS = carryBytes = carryFlops = 0;
    for (int i = int(k.ops.size()) - 1; i >= 0; --i) {
      const OpCost &op = k.ops[i];
      if (op.view)
        continue;
      if (i == lastCore && (s.selectiveModules() & kRecomputeCoreAttn) &&
          k.count > 1 &&
          s.recomputesKind(k.name))
        layerForward(k, true, true); // the attention core again
      if (ep && op.experts > 1 && !combined) {
        collective(CollectiveKind::AllToAll, epG, tokens, a2a,
                   "expert combine gradient", StreamKind::Comm, true);
        combined = true;
      }
      opBackward(op, sim.priceOp(op, k, p));
      if (ep && i == firstExpert)
        collective(CollectiveKind::AllToAll, epG, tokens, a2a,
                   "expert dispatch gradient", StreamKind::Comm, true);
    }
    if (carryS > 0 && lastCompute >= 0) { // a fused chain at the layer's start
      prog->code[lastCompute].predictedS += carryS;
      carryS = carryBytes = carryFlops = 0;
    }
  }
  if (weightPart && wt.accumulate)
    compute(kernel("gradient accumulation", KernelClass::Pointwise,
                   wt.accumulateBytes, wt.accumulateParams, wt.accumulateS));
  if (wt.zero3 && weightPart && k.parameters > 0 &&
      (!wholeAcrossMicroBatches() || lastMicroBatch))
    collective(CollectiveKind::ReduceScatter, dpG, wt.zero3ScatterBytes,
               wt.zero3ScatterS, "zero-3 gradient reduce-scatter",
               StreamKind::DataParallel, false);
  // ZeRO-2 reduces every micro-batch's gradients (Simulator.cpp).
  if (weightPart && (lastMicroBatch || s.zeroStage == 2) &&
      s.overlapGradReduce && s.zeroStage != 3 && dpRanks() > 1) {
    // This layer's bucket is full: reduce it while the backward goes on.
    double params = layerParams(k);
    double experts = 0;
    if (k.experts > 1 && k.expertParameters > 0 && !k.expertsFrozen) {
      double split =
          double(k.expertParameters - k.expertReplicatedParameters) / tp() +
          double(k.expertReplicatedParameters);
      // Held: 1/ep of them, whole when folded (etp 1).
      experts = (s.expertsFolded() ? double(k.expertParameters) : split) / s.ep;
      params -= split;
    }
    gradientBuckets(params, experts);
  }
}

/// Gradient reduction of `dense` and `experts` parameters per device over
/// the data-parallel (and expert data-parallel) groups.
void PipelineLowering::gradientBuckets(double dense, double experts) {
  const StagePlacement &p = place();
  bool sharded = s.zeroStage == 1 || s.zeroStage == 2;
  CollectiveKind kind =
      sharded ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
  bool expertGroup = experts > 0 && s.ep > 1;
  if (!expertGroup) {
    dense += experts;
    experts = 0;
  }
  collective(kind, dpG, dense * a.gradReduceBytes(),
             sim.gradientReduceS(kind, dense, p.dpGroup),
             "gradient " + std::string(collectiveKindName(kind)),
             StreamKind::DataParallel, false);
  if (expertGroup)
    collective(kind, edpG, experts * a.gradReduceBytes(),
               sim.gradientReduceS(kind, experts, p.expertDpGroup),
               "expert gradient " + std::string(collectiveKindName(kind)),
               StreamKind::DataParallel, false);
}

Program PipelineLowering::lower(int stage_, int t_, int c_, int d_,
                                int64_t microBatches) {
  Program out;
  prog = &out;
  stage = stage_;
  t = t_;
  c = c_;
  d = d_;
  m = microBatches;
  pending.clear();
  lastCompute = -1;
  cpTag = 0;
  int T = tp();
  out.rank = rankOf(stage, t, c, d);
  out.device = place().device->name;
  out.stage = stage;
  out.replicaGroup = replicaGroup;
  out.tpRank = t;
  out.tp = T;
  out.cpRank = c;
  out.cp = s.cp;
  out.dpRank = d;
  out.dp = s.dp;
  const StageReport &rep = r.stages[stage];
  out.predictedPeakBytes = rep.memory.total();
  out.staticBytes = rep.memory.total() - rep.memory.activationsBytes;

  buildGroups();
  // The schedule of this stage at this replica's micro-batches.
  std::shared_ptr<const ScheduleOrder> order = sim.schedule(int(m));
  const std::vector<Task> &tasks = order->tasks[stage];
  // The last task that computes a chunk's weight gradients (its W under
  // zero bubble) fills the last gradient bucket.
  zeroBubble = s.splitsWeightGradients();
  lastBackwardOf.assign(size_t(s.pp * s.virtualStages), -1);
  for (const Task &task : tasks) {
    if (task.backward && (task.weight || task.full || !zeroBubble))
      lastBackwardOf[task.vs] = task.mb;
    if (task.pairVs >= 0) // the pair's backward is a full one
      lastBackwardOf[task.pairVs] = task.pairMb;
  }
  for (const Task &task : tasks) {
    if (task.pairVs < 0) {
      runTask(task);
      continue;
    }
    // DualPipeV's pair, one after the other on the compute stream (as
    // PyTorch runs OVERLAP_F_B without a model's own overlapped
    // forward-backward): the forward, then the other chunk's full backward.
    Task forward = task, backward{task.pairVs, task.pairMb, true};
    forward.pairVs = forward.pairMb = -1;
    backward.full = true;
    runTask(forward);
    runTask(backward);
  }

  stepEnd(out);
  prog = nullptr;
  return out;
}

/// The groups of this rank: tp, cp, dp (or the aligned groups'), ep and
/// the experts' dp, and its ring neighbours in cp.
void PipelineLowering::buildGroups() {
  int T = tp();
  std::vector<int> ranks;
  auto build = [&](auto member, const std::string &name) {
    ranks.clear();
    member();
    return groups.get(ranks, name);
  };
  tpG = build(
      [&] {
        for (int x = 0; x < T; ++x)
          ranks.push_back(rankOf(stage, x, c, d));
      },
      "tp");
  cpG = build(
      [&] {
        for (int x = 0; x < s.cp; ++x)
          ranks.push_back(rankOf(stage, t, x, d));
      },
      "cp");
  dpG = build(
      [&] {
        if (dpMembers)
          return dpMembers(stage, t, ranks);
        for (int y = 0; y < s.dp; ++y)
          for (int x = 0; x < s.cp; ++x)
            ranks.push_back(rankOf(stage, t, x, y));
      },
      "dp");
  int ep = std::max(1, s.ep);
  if (s.expertsFolded()) {
    // Folded experts (etp 1, cp 1): the ep group is ep adjacent ranks of
    // the tp x dp ones (q = dp rank x tp + tp rank), the expert-dp group
    // those ep apart.
    int q = d * T + t;
    epG = build(
        [&] {
          for (int x = q / ep * ep; x < q / ep * ep + ep; ++x)
            ranks.push_back(rankOf(stage, x % T, c, x / T));
        },
        "ep");
    edpG = build(
        [&] {
          for (int x = q % ep; x < T * s.dp; x += ep)
            ranks.push_back(rankOf(stage, x % T, c, x / T));
        },
        "expert-dp");
  } else {
    epG = build(
        [&] {
          for (int y = d / ep * ep; y < d / ep * ep + ep && y < s.dp; ++y)
            ranks.push_back(rankOf(stage, t, c, y));
        },
        "ep");
    edpG = build(
        [&] {
          for (int y = d % ep; y < s.dp; y += ep)
            for (int x = 0; x < s.cp; ++x)
              ranks.push_back(rankOf(stage, t, x, y));
        },
        "expert-dp");
  }
  cpNext = rankOf(stage, t, (c + 1) % s.cp, d);
  cpPrev = rankOf(stage, t, (c + s.cp - 1) % s.cp, d);
}

/// Chunk ch runs on stage s.stageOfChunk(ch); tp shards pair up as n =
/// max(tp_from, tp_to) messages, shard q from tp rank q % tp_from to
/// q % tp_to. Forward: chunk fromChunk's output to fromChunk + 1;
/// backward: its gradient back. At the V's turn both chunks are on this
/// stage.
void PipelineLowering::pipeTransfer(int fromChunk, bool backward, int64_t mb,
                                    bool sending) {
  // Forward: chunk fromChunk's output to fromChunk + 1; backward: its
  // gradient back. At the V's turn both chunks are on this stage.
  int a = s.stageOfChunk(fromChunk), b = s.stageOfChunk(fromChunk + 1);
  if (a == b)
    return;
  int src = backward ? b : a, dst = backward ? a : b;
  int tpSrc = sim.placement(src).tp, tpDst = sim.placement(dst).tp;
  int n = std::max(tpSrc, tpDst);
  double whole = step.layout.outBytes[fromChunk] * sim.placement(a).tp;
  for (int q = 0; q < n; ++q) {
    if ((sending ? q % tpSrc : q % tpDst) != t)
      continue;
    Instruction in;
    in.kind = sending ? InstrKind::Send : InstrKind::Recv;
    in.stream = sending ? StreamKind::PipeSend : StreamKind::PipeRecv;
    in.name = backward ? "gradient" : "activation";
    in.backward = backward; // its own queue per link and direction
    in.peer =
        sending ? rankOf(dst, q % tpDst, c, d) : rankOf(src, q % tpSrc, c, d);
    // Beyond its shard: what the pipeline sends besides (the whole
    // gradient from every rank, the attention mask; Assumptions: one tp
    // on every stage then, so n = tp and one message a rank).
    const std::vector<double> &sent =
        backward ? step.transfers.sendBwdBytes : step.transfers.sendFwdBytes;
    in.bytes = whole / n + (sent[fromChunk] - step.layout.outBytes[fromChunk]);
    in.tag =
        ((int64_t(fromChunk) * m + mb) * 2 + (backward ? 1 : 0)) * 1024 + q;
    in.predictedS = !sending   ? 0
                    : backward ? step.transfers.links.transferBwdS[fromChunk]
                               : step.transfers.links.transferS[fromChunk];
    if (sending && lastCompute >= 0)
      in.deps.push_back(lastCompute);
    int i = push(in);
    if (!sending || !s.overlapP2p)
      pending.push_back(i);
  }
}

/// One task of the schedule: a forward, a backward (input and weight
/// gradients, or the input's alone under zero bubble) or a deferred W.
void PipelineLowering::runTask(const Task &task) {
  int pp = s.pp, chunks = pp * s.virtualStages, T = tp(), v = s.virtualStages;
  span = std::string(task.weight     ? "W"
                     : task.backward ? "B"
                                     : "F") +
         std::to_string(task.mb) +
         (v > 1 ? "." + std::to_string(task.vs / pp) : "");
  const std::vector<int> &layers = step.layout.chunkOf[task.vs];
  taskMb = task.mb;
  if (task.weight) { // zero bubble: the deferred weight gradients
    part = Part::Weight;
    bool last = task.mb == lastBackwardOf[task.vs];
    for (auto it = layers.rbegin(); it != layers.rend(); ++it)
      layerBackward(sim.layout(w.kinds[step.layout.sequence[*it]], stage),
                    last);
    part = Part::Both;
    return;
  }
  if (!task.backward) {
    if (task.vs > 0) {
      pipeTransfer(task.vs - 1, false, task.mb, false);
      if (!s.sequenceParallel && T > 1)
        collective(CollectiveKind::AllGather, tpG,
                   step.layout.outBytes[task.vs - 1] *
                       sim.placement(s.stageOfChunk(task.vs - 1)).tp,
                   step.transfers.links.gatherFwdS[task.vs - 1], "input gather",
                   StreamKind::Comm, true);
    }
    Instruction alloc;
    alloc.kind = InstrKind::Alloc;
    alloc.name = "activations";
    alloc.buffer = int(task.vs * m + task.mb);
    alloc.bytes = step.layout.keptBytes[task.vs] - offloaded(task.vs);
    compute(alloc);
    hostCopy(task, false);
    for (int l : layers)
      layerForward(sim.layout(w.kinds[step.layout.sequence[l]], stage), false,
                   false);
    hostCopyDone(task);
    if (task.vs + 1 < chunks)
      pipeTransfer(task.vs, false, task.mb, true);
  } else {
    if (task.vs + 1 < chunks) {
      pipeTransfer(task.vs, true, task.mb, false);
      if (!s.sequenceParallel && T > 1)
        collective(CollectiveKind::AllGather, tpG,
                   step.layout.outBytes[task.vs] *
                       sim.placement(s.stageOfChunk(task.vs)).tp,
                   step.transfers.links.gatherBwdS[task.vs], "gradient gather",
                   StreamKind::Comm, true);
    }
    bool last = task.mb == lastBackwardOf[task.vs];
    part = zeroBubble && !task.full ? Part::Input : Part::Both;
    hostCopy(task, true);
    for (auto it = layers.rbegin(); it != layers.rend(); ++it)
      layerBackward(sim.layout(w.kinds[step.layout.sequence[*it]], stage), last,
                    step.layout.recomputed[*it]);
    hostCopyDone(task);
    part = Part::Both;
    // ZeRO-2 without overlap: this micro-batch's gradients, reduced now.
    if (s.zeroStage == 2 && !s.overlapGradReduce && dpRanks() > 1)
      gradientBuckets(step.sync.denseParams[stage],
                      step.sync.expertParams[stage]);
    Instruction free;
    free.kind = InstrKind::Free;
    free.name = "activations";
    free.buffer = int(task.vs * m + task.mb);
    free.bytes = step.layout.keptBytes[task.vs] - offloaded(task.vs);
    compute(free);
    if (task.vs > 0)
      pipeTransfer(task.vs - 1, true, task.mb, true);
  }
}

/// After the schedule: the gradients' reductions not yet run, the tied
/// weights' all-reduce, every stream waited for, the optimizer step over
/// this rank's shard and the updated weights gathered.
void PipelineLowering::stepEnd(Program &out) {
  int pp = s.pp, T = tp();
  span = "step";
  double dense = step.sync.denseParams[stage],
         experts = step.sync.expertParams[stage];
  bool bucketsRan = s.overlapGradReduce && s.zeroStage != 3 && dpRanks() > 1;
  if (s.zeroStage != 3 && s.zeroStage != 2 && dpRanks() > 1) {
    if (bucketsRan) {
      // The tied copy's gradient, which no layer's bucket holds.
      if (step.layout.tiedCopyParams[stage] > 0)
        gradientBuckets(step.layout.tiedCopyParams[stage], 0);
    } else {
      gradientBuckets(dense, experts);
    }
  }
  if (T > 1 && step.sync.tpGradParams[stage] > 0)
    collective(
        CollectiveKind::AllReduce, tpG,
        step.sync.tpGradParams[stage] * a.gradReduceBytes(),
        sim.gradientReduceS(CollectiveKind::AllReduce,
                            step.sync.tpGradParams[stage], place().tpGroup),
        "split-weight gradient all-reduce", StreamKind::DataParallel, false);
  if (step.layout.tiedSyncS[stage] > 0) {
    // The stages that hold the tied weights (the embedding and the head's
    // copy) all-reduce its gradient: shard q of g (the smallest tp of
    // those stages) between the ranks whose tp rank is q modulo g.
    int g = T;
    double bytes = step.layout.tiedCopy[stage];
    for (int j = 0; j < pp; ++j)
      if (step.layout.tiedSyncS[j] > 0 && sim.placement(j).tp <= g) {
        g = sim.placement(j).tp;
        bytes = step.layout.tiedCopy[j];
      }
    std::vector<int> ranks;
    for (int j = 0; j < pp; ++j)
      if (step.layout.tiedSyncS[j] > 0)
        for (int x = t % g; x < sim.placement(j).tp; x += g)
          ranks.push_back(rankOf(j, x, c, d));
    int tied = groups.get(ranks, "embedding");
    collective(CollectiveKind::AllReduce, tied, bytes * a.gradBytesPerParam,
               step.layout.tiedSyncS[stage], "tied embedding all-reduce",
               StreamKind::DataParallel, false);
  }
  // Every stream done, then the optimizer step over this rank's shard.
  Instruction wait;
  wait.kind = InstrKind::Wait;
  wait.name = "gradients";
  for (int i = int(out.code.size()) - 1; i >= 0; --i)
    if (out.code[i].stream != StreamKind::Compute &&
        std::none_of(wait.deps.begin(), wait.deps.end(), [&](int x) {
          return out.code[x].stream == out.code[i].stream;
        }))
      wait.deps.push_back(i);
  wait.deps.insert(wait.deps.end(), pending.begin(), pending.end());
  std::sort(wait.deps.begin(), wait.deps.end());
  wait.deps.erase(std::unique(wait.deps.begin(), wait.deps.end()),
                  wait.deps.end());
  wait.stream = StreamKind::Compute;
  wait.span = span;
  pending.clear();
  out.code.push_back(wait);
  lastCompute = int(out.code.size()) - 1;
  Instruction opt;
  opt.kind = InstrKind::Optimizer;
  opt.name = s.zeroStage >= 1 ? "adam (sharded)" : "adam";
  opt.bytes = step.sync.optBytes[stage];
  opt.flops = step.sync.shardParams[stage] * 10;
  opt.predictedS = step.sync.optS[stage];
  if (s.offloadOptimizer)
    hostOptimizer(opt);
  else
    compute(opt);
  if ((s.zeroStage == 1 || s.zeroStage == 2) && dpRanks() > 1)
    collective(CollectiveKind::AllGather, dpG, dense * a.weightBytesPerParam,
               sim.weightGatherS(dense, place().dpGroup),
               "parameter all-gather", StreamKind::DataParallel, false);
}
} // namespace
} // namespace detail

static llvm::Error refuseUnsupported(const Strategy &s) {
  if (s.phantomGhosts > 0)
    return err("lower: phantom: the lowering does not write phantom "
               "parallelism's ghost layers yet (simulate takes it)");
  if (s.chunkParams > 0)
    return err("lower: chunks: the runtime does not manage PatrickStar's "
               "chunks between host and device yet (simulate and plan take "
               "it)");
  if (s.schedule == Schedule::DualPipe)
    return err("lower: schedule=dualpipe: the lowering does not write the "
               "two directions' programs yet (simulate and plan take it; "
               "dualpipev lowers)");
  if (s.schedule == Schedule::ZeroBubble2p)
    return err("lower: schedule=zb-2p: its weight gradients move into the "
               "idle time the priced run finds, which the lowering's fixed "
               "orders do not write yet (simulate and plan take it; zb-h1 "
               "lowers)");
  if (s.schedule == Schedule::LayerParallelMgrit)
    return err("lower: schedule=mgrit: the lowering does not write MGRIT's "
               "relaxations and coarse solves yet (simulate takes it)");
  if (s.subnetworkFraction > 0)
    return err("lower: sdp: the lowering does not write each worker's "
               "subnetwork and its holders' reductions yet (simulate and "
               "plan take it)");
  if (s.selectiveModules() & ~unsigned(kRecomputeCoreAttn))
    return err("lower: recompute_modules: the lowering re-runs the attention "
               "core only (simulate, plan and the Megatron-LM export take "
               "the other modules)");
  if (s.overlapEp)
    return err("lower: overlap=ep: the lowering does not write Megatron-"
               "Core's paired forward and backward layers (combined 1F1B)");
  if (s.dispatcher == MoeDispatcher::DeepEP)
    return err("lower: moe_dispatcher=deepep: the runtime moves tokens by "
               "NCCL's all-to-all, not DeepEP's kernels (simulate, plan and "
               "the Megatron-LM export take it; moe_dispatcher=alltoall "
               "lowers)");
  return llvm::Error::success();
}

/// Lowers what `only` selects through `lowerWhere(pred)`, which lowers each
/// rank `pred` accepts: every rank, or the selected ones and then the ranks
/// they must match until none is missing (a peer's program may register a
/// group that names one more).
using LowerWhere = std::function<void(const std::function<bool(int)> &)>;
static llvm::Error lowerSelection(ProgramSet &set, const RankSelection &only,
                                  const LowerWhere &lowerWhere) {
  for (int r = 0; r < set.worldSize; ++r) {
    set.ranks[r].rank = r;
    set.ranks[r].lowered = false;
  }
  if (only.ranks.empty()) {
    lowerWhere([](int) { return true; });
    return llvm::Error::success();
  }
  std::vector<char> want(size_t(set.worldSize), 0);
  for (int r : only.ranks) {
    if (r < 0 || r >= set.worldSize)
      return err("rank " + std::to_string(r) + ": the plan has " +
                 std::to_string(set.worldSize) + " ranks (0 to " +
                 std::to_string(set.worldSize - 1) + ")");
    want[r] = 1;
  }
  lowerWhere([&](int r) { return want[r] != 0; });
  while (only.peers) {
    bool more = false;
    for (int r : only.ranks)
      for (int q : peersToMatch(set, r))
        if (!want[q])
          want[q] = 1, more = true;
    if (!more)
      break;
    lowerWhere([&](int r) { return want[r] && !set.ranks[r].lowered; });
  }
  return llvm::Error::success();
}

llvm::Expected<ProgramSet> lowerStep(const Workload &w, const Cluster &c,
                                     Strategy s, const Assumptions &a,
                                     const RankSelection &only) {
  if (auto e = refuseUnsupported(s))
    return std::move(e);
  auto result = simulateStep(w, c, s, a);
  if (!result)
    return result.takeError();
  s = result->strategy;
  detail::Simulation sim(w, s, a, detail::homogeneousStages(c, s), true);
  detail::StepPhases phases;
  sim.phases = &phases;
  auto again = sim.run(false);
  if (!again)
    return again.takeError();
  ProgramSet set;
  set.worldSize = s.tp * s.cp * s.dp * s.pp;
  set.ranks.resize(set.worldSize);
  set.memoryAllowanceBytes = kProgramMemoryAllowanceBytes;
  set.predictedStepS = again->stepS;
  set.schedule = scheduleName(s.schedule);
  set.pipeSends = s.pp > 1;
  set.ringSends = s.cp > 1;
  detail::Groups groups{set, {}};
  int st = s.stride("tp"), sc = s.stride("cp"), sd = s.stride("dp"),
      sp = s.stride("pp");
  auto rankOf = [=](int stage, int t, int cc, int d) {
    return t * st + cc * sc + d * sd + stage * sp;
  };
  detail::PipelineLowering lowering(w, s, a, sim, phases, *again, rankOf,
                                    groups, 0);
  auto lowerWhere = [&](const std::function<bool(int)> &pred) {
    for (int stage = 0; stage < s.pp; ++stage)
      for (int d = 0; d < s.dp; ++d)
        for (int cc = 0; cc < s.cp; ++cc)
          for (int t = 0; t < s.tp; ++t)
            if (pred(rankOf(stage, t, cc, d)))
              set.ranks[rankOf(stage, t, cc, d)] =
                  lowering.lower(stage, t, cc, d, s.microBatches());
  };
  if (auto e = lowerSelection(set, only, lowerWhere))
    return std::move(e);
  return set;
}

namespace detail {
namespace {
/// One replica group's pipeline, simulated, and its lowering (the
/// lowering keeps references to the rest: held in place).
struct GroupPipeline {
  Strategy st;
  std::vector<StagePlacement> at;
  std::unique_ptr<Simulation> sim;
  StepPhases phases;
  StepResult result;
  std::unique_ptr<PipelineLowering> lowering;
};

/// Across replica groups: ring q joins the q-th device of every group (in
/// the group's device order) and all-reduces 1/n of the gradients
/// (Hetero.cpp); its groups are registered before any rank is lowered, so
/// that a rank's peers include its ring's next member.
struct CrossGroupRings {
  std::vector<int> ids;
  double bytes = 0, seconds = 0;
};

/// Inserts rank's share of the cross-group all-reduce before its
/// optimizer, after the wait for its own streams.
void insertCrossGroupReduce(Program &p, int id, const CrossGroupRings &x) {
  auto opt =
      std::find_if(p.code.begin(), p.code.end(), [](const Instruction &in) {
        return in.kind == InstrKind::Optimizer;
      });
  int at = int(opt - p.code.begin());
  Instruction in;
  in.kind = InstrKind::Collective;
  in.stream = StreamKind::DataParallel;
  in.collective = CollectiveKind::AllReduce;
  in.group = id;
  in.bytes = x.bytes;
  in.name = "gradient all-reduce across groups";
  in.span = "step";
  in.predictedS = x.seconds;
  in.deps = {at - 1}; // the wait for this rank's own streams
  p.code.insert(p.code.begin() + at, in);
  // The optimizer, now one later, waits for it; later deps shift.
  for (size_t i = size_t(at) + 1; i < p.code.size(); ++i)
    for (int &dep : p.code[i].deps)
      if (dep >= at)
        ++dep;
  p.code[at + 1].deps.push_back(at);
}
} // namespace
} // namespace detail

llvm::Expected<ProgramSet> lowerHetero(const Workload &w, const Cluster &c,
                                       HeteroStrategy s, const Assumptions &a,
                                       const RankSelection &only) {
  if (auto e = placeDevices(s, w, c))
    return std::move(e);
  auto result = simulateHetero(w, c, s, a);
  if (!result)
    return result.takeError();
  std::vector<Pool> pools = clusterPools(c);
  // World ranks: the devices used, in cluster order.
  std::vector<int> used;
  for (const ReplicaGroup &rg : s.groups)
    for (const HeteroStage &hs : rg.stages)
      used.insert(used.end(), hs.devices.begin(), hs.devices.end());
  std::sort(used.begin(), used.end());
  std::map<int, int> rankOfDevice;
  for (size_t i = 0; i < used.size(); ++i)
    rankOfDevice[used[i]] = int(i);
  ProgramSet set;
  set.worldSize = int(used.size());
  set.ranks.resize(set.worldSize);
  set.memoryAllowanceBytes = kProgramMemoryAllowanceBytes;
  set.predictedStepS = result->stepS;
  set.schedule = scheduleName(Schedule::OneFOneB);
  detail::Groups groups{set, {}};
  int G = int(s.groups.size());
  std::vector<std::unique_ptr<detail::GroupPipeline>> pipes;
  for (int g = 0; g < G; ++g) {
    const ReplicaGroup &rg = s.groups[g];
    auto x = std::make_unique<detail::GroupPipeline>();
    detail::groupPipeline(c, s, g, pools, x->st, x->at);
    set.pipeSends |= x->st.pp > 1;
    x->sim = std::make_unique<detail::Simulation>(w, x->st, a, x->at, false);
    x->sim->phases = &x->phases;
    auto sr = x->sim->run(false);
    if (!sr)
      return sr.takeError();
    x->result = std::move(*sr);
    // HeteroStage::devices: replica by replica, tp consecutive devices.
    auto rankOf = [&rg, &rankOfDevice](int stage, int t, int, int d) {
      const HeteroStage &hs = rg.stages[stage];
      return rankOfDevice.at(hs.devices[size_t(d) * hs.tp + t]);
    };
    x->lowering = std::make_unique<detail::PipelineLowering>(
        w, x->st, a, *x->sim, x->phases, x->result, rankOf, groups, g);
    if (detail::alignedGroups(c, s))
      x->lowering->dpMembers = [&s, &rankOfDevice](int stage, int t,
                                                   std::vector<int> &ranks) {
        for (const ReplicaGroup &o : s.groups) {
          const HeteroStage &hs = o.stages[stage];
          for (int y = 0; y < o.replicas; ++y)
            ranks.push_back(rankOfDevice.at(hs.devices[size_t(y) * hs.tp + t]));
        }
      };
    pipes.push_back(std::move(x));
  }
  detail::CrossGroupRings cross;
  if (G > 1 && result->crossGroupSyncS > 0) {
    int streams = s.groups.front().devices();
    for (const ReplicaGroup &rg : s.groups)
      streams = std::min(streams, rg.devices());
    cross.bytes =
        double(w.parameters()) * a.gradReduceBytes() / std::max(1, streams);
    cross.seconds = result->crossGroupSyncS;
    std::vector<std::vector<int>> devicesOf(G);
    for (int g = 0; g < G; ++g)
      for (const HeteroStage &hs : s.groups[g].stages)
        for (int dev : hs.devices)
          devicesOf[g].push_back(rankOfDevice.at(dev));
    for (int q = 0; q < streams; ++q) {
      std::vector<int> ring;
      for (int g = 0; g < G; ++g)
        ring.push_back(devicesOf[g][q]);
      cross.ids.push_back(groups.get(ring, "cross-group"));
    }
  }
  auto lowerWhere = [&](const std::function<bool(int)> &pred) {
    for (int g = 0; g < G; ++g) {
      const ReplicaGroup &rg = s.groups[g];
      for (int stage = 0; stage < pipes[g]->st.pp; ++stage)
        for (int d = 0; d < rg.replicas; ++d)
          for (int t = 0; t < rg.stages[stage].tp; ++t) {
            const HeteroStage &hs = rg.stages[stage];
            int rank = rankOfDevice.at(hs.devices[size_t(d) * hs.tp + t]);
            if (pred(rank))
              set.ranks[rank] =
                  pipes[g]->lowering->lower(stage, t, 0, d, rg.microBatches[d]);
          }
    }
  };
  if (auto e = lowerSelection(set, only, lowerWhere))
    return std::move(e);
  for (int id : cross.ids)
    for (int rank : set.groups[id])
      if (set.ranks[rank].lowered)
        detail::insertCrossGroupReduce(set.ranks[rank], id, cross);
  return set;
}

} // namespace orrery
