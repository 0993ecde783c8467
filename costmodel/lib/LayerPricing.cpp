//===- LayerPricing.cpp - one layer kind's times under a strategy -------===//
//
// Per op: the roofline (or the attention kernel's curve), its backward,
// fp8's casts, the experts' grouped GEMM; then the layer's tensor-,
// context- and expert-parallel communication, recompute and the
// activations it keeps (docs/costmodel.md).
//
//===----------------------------------------------------------------------===//
#include "Simulation.h"
#include "orrery/CostModel/Collective.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>

namespace orrery {
namespace detail {

double Simulation::opTime(const DeviceSpec &dev, double flops, double bytes,
                          KernelClass c, int kernels, Precision precision,
                          double weightBytes) const {
  return kernelSeconds(dev, a.kernelsFor(dev), precision, flops, bytes, c,
                       kernels, weightBytes);
}

/// Transformer Engine's quantization passes before an fp8 GEMM, by recipe
/// (docs/fp8-recipe-sources.md section 2), per 16-bit element:
/// - delayed: one kernel reads it (2 bytes) and writes the fp8 copy and,
///   where the tensor cores take fp8 row-major only (before Blackwell),
///   its transpose for the other GEMM (1 + 1); the amax is recorded in
///   the same pass, and a grouped GEMM's experts share one multi-tensor
///   kernel;
/// - tensorwise (current scaling): an amax pass reads it, a one-thread
///   kernel makes the scale, then the cast as above: three kernels a
///   tensor, each expert one;
/// - blockwise and mxfp8: one kernel writes the row-wise and the
///   column-wise copies from the 16-bit source, with a scale per block
///   (4 bytes a 128 / 1 byte a 32 elements, each copy), each expert one.
/// These passes run at a row reduction's share of HBM bandwidth, not an
/// elementwise one's: TE's GEMM profiling guide measures delayed scaling's
/// quantization on an H200 at 2.19 ms for 1.04e9 elements (4 bytes each,
/// 40 % of HBM), which the reduction class prices at 2.15 ms, and current
/// scaling's at 3.5 ms (priced 3.3).
double Simulation::quantizeTime(const DeviceSpec &dev, double bytes16,
                                int tensors, double &moved) const {
  double elements = bytes16 / 2;
  bool transposeCopy = !dev.hasTensorCores(Precision::MXFP8);
  double write = transposeCopy ? 2 : 1;
  int kernels = 1, perTensor = 1;
  double read = 2;
  if (s.precision == Precision::MXFP8) {
    write = 2 + 2.0 / 32;
    perTensor = tensors;
  } else if (s.fp8Recipe == Fp8Recipe::Blockwise) {
    write = 2 + 2 * 4.0 / 128;
    perTensor = tensors;
  } else if (s.fp8Recipe == Fp8Recipe::Tensorwise) {
    read = 4; // the amax pass, then the cast
    kernels = 3;
    perTensor = tensors;
  }
  moved = elements * (read + write);
  return opTime(dev, 0, moved, KernelClass::Reduction, kernels * perTensor);
}

double Simulation::blockwiseGemmFactor(const DeviceSpec &dev) const {
  auto it = dev.peakFlopPerS.find("fp8_blockwise");
  double rate = it == dev.peakFlopPerS.end() ? 0 : it->second;
  return rate > 0 ? dev.tensorPeak(Precision::FP8) / rate : 1;
}

/// A fused attention kernel's times (the ring's blocks, each a call of its
/// own) and context parallelism's sends, merges or all-to-alls around it.
void Simulation::priceAttention(const OpCost &op, const StagePlacement &p,
                                Precision prec, double f, double b,
                                double bytes, double backMoved, double &fwd,
                                double &bwd, OpPrice &o) const {
  double sc = scale();
  double split = o.split;
  const DeviceSpec &dev = *p.device;
  o.attention = true;
  // PyTorch's scaled_dot_product_attention runs the kernel its backend
  // order picks on this device (FlashAttention-2 on Ampere and Hopper).
  KernelModel km = a.kernelsFor(dev);
  if (attentionBySdpa(a.fusion) && dev.sdpaAttention)
    dev.sdpaAttention->applyTo(km);
  // Context parallelism: each rank holds s/cp of the queries (sc
  // divides by cp). The ring computes them against one s/cp block of
  // keys per step, each block a kernel call of its own; Ulysses runs
  // the whole sequence for heads/cp heads.
  bool ring = s.cp > 1 && s.cpComm == CpComm::Ring;
  double keys = op.attentionKeysPerQuery / (ring ? s.cp : 1);
  int calls = ring ? s.cp : 1;
  o.attentionCalls = calls;
  o.attentionKeys = keys;
  fwd = attentionSeconds(dev, km, prec, f, bytes, keys, false) +
        (calls - 1) * km.kernelLaunchS;
  bwd = attentionSeconds(dev, km, prec, b, backMoved * sc / split, keys, true) +
        (calls - 1) * 2 * km.kernelLaunchS;
  o.attentionForwardS = fwd;
  o.attentionBackwardS = bwd;
  if (ring) {
    // Megatron-Core / Transformer Engine: cp - 1 steps, each sending
    // this rank's K and V block to the next rank while the current
    // block computes (causal load balancing: 2·cp sequence chunks, two
    // per rank, so every step has work); backward the blocks travel
    // again with their dK and dV.
    o.cpRing = true;
    double block = double(op.attentionKvBytes) * sc / split;
    o.cpBlockBytes = block;
    o.cpSendS = collectiveTime(CollectiveKind::SendRecv, block, p.cpGroup);
    o.cpSendBackS =
        collectiveTime(CollectiveKind::SendRecv, 2 * block, p.cpGroup);
    // Each step after the first merges its partial result into the
    // running one (Transformer Engine's out / log-sum-exp correction:
    // O read and written); backward accumulates dQ in fp32 and dK, dV
    // across the steps.
    double out = double(op.bytesWritten) * sc / split;
    double q =
        std::max(0.0, double(op.bytesRead - op.attentionKvBytes)) * sc / split;
    o.cpMergeForwardBytes = 2 * out;
    o.cpMergeBackwardBytes = 4 * q + 2 * block;
    o.cpMergeForwardS =
        (s.cp - 1) * opTime(dev, 0, 2 * out, KernelClass::Pointwise, 1);
    o.cpMergeBackwardS = (s.cp - 1) * opTime(dev, 0, 4 * q + 2 * block,
                                             KernelClass::Pointwise, 2);
  } else if (s.cp > 1) {
    // DeepSpeed-Ulysses: Q, K, V all-to-all (heads scattered, sequence
    // gathered) before the kernel, the output back after it; backward
    // the reverse. Nothing overlaps them.
    o.cpQkvBytes = double(op.bytesRead) * sc / split;
    o.cpOutBytes = double(op.bytesWritten) * sc / split; // O (and rows)
    o.cpQkvAllToAllS =
        collectiveTime(CollectiveKind::AllToAll, o.cpQkvBytes, p.cpGroup);
    o.cpOutAllToAllS =
        collectiveTime(CollectiveKind::AllToAll, o.cpOutBytes, p.cpGroup);
  }
}

/// The tensor-parallel collectives around an op, as bytes per rank and
/// seconds.
void Simulation::priceTpCollectives(const OpCost &op, const GroupShape &tpGroup,
                                    OpPrice &o) const {
  double sc = scale();
  o.tpRowAllReduceBytes = op.tpAllReduceForwardBytes * sc;
  // Megatron-Core's all-gather token dispatcher (ep 1) weights and sums
  // each token's top-k expert outputs before it reduce-scatters them over
  // tp: one row a token, not one a routed copy as the graph's row-parallel
  // expert product writes them. (Its all-to-all dispatcher, ep > 1,
  // reduces the permuted rows.)
  double tokens = double(w.batchSize) * double(w.tokensPerSample);
  if (op.experts > 1 && s.ep == 1 && tokens > 0) {
    double routed = double(op.gemmBatch) * double(op.gemmM) / tokens;
    if (routed > 1)
      o.tpRowAllReduceBytes /= routed;
  }
  o.tpColumnAllReduceBytes = op.tpAllReduceBackwardBytes * sc;
  o.tpGatherBytes = op.tpAllGatherForwardBytes * sc;
  o.tpHaloBytes = op.tpHaloBytes * sc;
  o.tpRowAllReduces = std::max(1, op.tpAllReducesForward);
  o.tpRowAllReduceS =
      o.tpRowAllReduces *
      collectiveTime(CollectiveKind::AllReduce,
                     o.tpRowAllReduceBytes / o.tpRowAllReduces, tpGroup);
  o.tpColumnAllReduceS = collectiveTime(CollectiveKind::AllReduce,
                                        o.tpColumnAllReduceBytes, tpGroup);
  o.tpGatherS =
      collectiveTime(CollectiveKind::AllGather, o.tpGatherBytes, tpGroup);
  o.tpScatterS =
      collectiveTime(CollectiveKind::ReduceScatter, o.tpGatherBytes, tpGroup);
  o.tpHaloS = collectiveTime(CollectiveKind::SendRecv, o.tpHaloBytes, tpGroup);
}

/// The bytes of a weighted contraction's weights, which its kernels move
/// once whatever the batch (0 for other ops, and for a mixture-of-experts
/// GEMM, whose grouped kernel the expert branch prices).
static double weightBytesOf(const OpCost &op) {
  if (!op.weighted || op.experts > 1)
    return 0;
  return std::max(0.0, double(op.bytesRead + op.bytesWritten) -
                           double(op.activationInputBytes) -
                           double(op.outputBytes));
}

/// A grouped expert GEMM's forward and backward on a device (priceOp).
void Simulation::priceGroupedGemm(const OpCost &op, const DeviceSpec &dev,
                                  const GemmWork &w, const GemmKernels &k,
                                  double &fwd, double &bwd, OpPrice &o) const {
  double sc = scale();
  // The device runs its E/ep local experts as one grouped GEMM: E/ep
  // products of the tokens routed to each (FLOPs and the tokens' bytes
  // per device are the same at any ep; each product is ep times larger,
  // and more efficient, as ep grows).
  // The busiest device runs expertLoad times the mean tokens (routing
  // imbalance, or every expert padded to its capacity), and every
  // device waits for it.
  int local = std::max(1, op.experts / std::max(1, s.ep));
  double load = s.expertLoad();
  o.localExperts = local;
  o.expertLoad = load;
  const KernelModel &km = a.kernelsFor(dev);
  // The tokens' bytes are the same on every device; the weights are
  // its own experts' (read once whatever the micro-batch; the backward
  // reads them and writes their gradients).
  double expertWeights =
      op.weighted ? std::max(0.0, w.moved - double(op.activationInputBytes) -
                                      double(op.outputBytes))
                  : 0.0;
  double ownWeights = expertWeights * local / op.experts;
  double tokensFwd = std::max(0.0, w.moved - expertWeights) * sc / w.split,
         tokensBwd =
             std::max(0.0, w.backMoved - 2 * expertWeights) * sc / w.split;
  fwd = local * opTime(dev, load * w.flops / local,
                       (load * tokensFwd + ownWeights / w.split) / local, k.cls,
                       0, k.prec, ownWeights / w.split / local) +
        k.kernels * km.kernelLaunchS;
  bwd = local * opTime(dev, load * w.backFlops / local,
                       (load * tokensBwd + 2 * ownWeights / w.split) / local,
                       k.backCls, 0, k.prec, 2 * ownWeights / w.split / local) +
        k.backKernels * km.kernelLaunchS;
}

/// An fp8 GEMM's quantization, as its recipe does (quantizeTime): its
/// input before the forward GEMM (once for GEMMs sharing it), the output
/// gradient before the backward ones; a grouped GEMM's experts each a
/// tensor of their own, the busiest device's tokens.
void Simulation::priceQuantization(const OpCost &op, const StagePlacement &p,
                                   double split, OpPrice &o) const {
  const DeviceSpec &dev = *p.device;
  double sc = scale();
  int tensors = op.experts > 1 ? std::max(1, o.localExperts) : 1;
  double load = op.experts > 1 ? s.expertLoad() : 1;
  if (!op.inputQuantizedBefore)
    o.castForwardS =
        quantizeTime(dev, load * double(op.activationInputBytes) * sc / split,
                     tensors, o.castForwardBytes);
  o.castBackwardS =
      quantizeTime(dev, load * double(op.outputBytes) * sc / split, tensors,
                   o.castBackwardBytes);
  // Current scaling under sequence parallelism agrees on one amax over the
  // tp ranks, blocking: a column-parallel GEMM's input, a row-parallel
  // one's output gradient (Transformer Engine's with_amax_reduction).
  if (s.precision == Precision::FP8 && s.fp8Recipe == Fp8Recipe::Tensorwise &&
      s.sequenceParallel && p.tp > 1 && op.tensorParallel &&
      !(op.experts > 1 && s.expertsFolded()))
    (op.tpAllReduceForwardBytes > 0 ? o.castBackwardS : o.castForwardS) +=
        collectiveTime(CollectiveKind::AllReduce, 4, p.tpGroup);
}

OpPrice Simulation::priceOp(const OpCost &op, const LayerKind &k,
                            const StagePlacement &p) const {
  OpPrice o;
  double sc = scale();
  const DeviceSpec &dev = *p.device;
  int tpDeg = p.tp;
  bool eager = dispatchesEachOp(w.kernels);
  double split = (op.tensorParallel || s.sequenceParallel) ? tpDeg : 1;
  o.split = split;
  double f = op.forwardFlops * sc / split, b = op.backwardFlops * sc / split;
  double moved = double(op.bytesRead + op.bytesWritten);
  int kernels = 1;
  if (op.fusesWithPrevious && !eager) {
    // One kernel with the op before: the tensor between them is neither
    // written nor read back.
    moved = std::max(0.0, moved - 2.0 * op.fusedIntermediateBytes);
    kernels = 0;
  }
  // A GEMM reads its weight once per kernel whatever the batch: only the
  // activations' bytes grow with the micro-batch (the workload states an
  // op's bytes at its own batch; sc scales them to the micro-batch).
  double weightMoved = std::min(moved, weightBytesOf(op));
  double bytes = ((moved - weightMoved) * sc + weightMoved) / split;
  KernelClass cls = op.contraction ? KernelClass::Gemm : op.kernelClass;
  // fp8 as Transformer Engine runs it (per-tensor, or mxfp8's blocks):
  // the weighted GEMMs of the repeated layers in fp8, attention and the
  // once-only layers (the embedding, the output head) in bf16.
  bool fp8 = isFp8(s.precision) && op.weighted && k.count > 1;
  Precision prec =
      isFp8(s.precision) && !fp8 ? Precision::BF16 : s.precision;
  // Blockwise scaling: Blackwell runs its GEMMs as mxfp8; Hopper's cuBLAS
  // emulates the block scales in software, at the catalog's fp8_blockwise
  // rate (the GEMM's work priced that much larger; its FLOPs stay).
  double work = 1;
  if (fp8 && s.precision == Precision::FP8 &&
      s.fp8Recipe == Fp8Recipe::Blockwise) {
    if (dev.hasTensorCores(Precision::MXFP8))
      prec = Precision::MXFP8;
    else
      work = blockwiseGemmFactor(dev);
  }
  double fwd = opTime(dev, f * work, bytes, cls, kernels, prec,
                      weightMoved / split);
  // Backward: what the op's gradients read and write, else two kernels per
  // contraction (input and weight gradients), each moving about the
  // forward's bytes. A fused chain's backward is fused too.
  double backMoved = op.backwardBytes >= 0
                         ? double(op.backwardBytes)
                         : 2 * double(op.bytesRead + op.bytesWritten);
  int backKernels = op.backwardKernels >= 0 ? op.backwardKernels
                    : op.contraction        ? 2
                                            : 1;
  if (op.fusesWithPrevious && !eager) {
    backMoved = std::max(0.0, backMoved - 2.0 * op.fusedIntermediateBytes);
    backKernels = 0;
  }
  // Dropout's backward multiplies by the mask its forward kept: an
  // elementwise kernel that draws no random numbers.
  KernelClass backCls =
      cls == KernelClass::Random ? KernelClass::Pointwise : cls;
  // Without its own backward bytes, a weighted GEMM's input gradient reads
  // the weight and its weight gradient writes one: twice the weight.
  double backWeight =
      op.backwardBytes >= 0 ? 0 : std::min(backMoved, 2 * weightMoved);
  double bwd =
      opTime(dev, b * work, ((backMoved - backWeight) * sc + backWeight) / split,
             backCls, backKernels, prec, backWeight / split);
  if (op.experts > 1)
    priceGroupedGemm(op, dev, {f * work, b * work, moved, backMoved, split},
                     {cls, backCls, kernels, backKernels, prec}, fwd, bwd, o);
  if (fp8) {
    priceQuantization(op, p, split, o);
    fwd += o.castForwardS;
    bwd += o.castBackwardS;
  }
  if (cls == KernelClass::Attention)
    priceAttention(op, p, prec, f, b, bytes, backMoved, fwd, bwd, o);
  if (eager) { // a kernel shorter than the host's dispatch waits for it
    fwd = std::max(fwd, kernels * a.hostDispatchS);
    bwd = std::max(bwd, backKernels * a.hostDispatchS);
  }
  o.forwardS = fwd;
  o.backwardS = bwd;
  o.kernels = kernels;
  o.backwardKernels = backKernels;
  o.kernelClass = cls;
  o.backwardClass = backCls;
  o.precision = prec;
  o.forwardFlops = f;
  o.backwardFlops = b;
  o.forwardBytes = bytes;
  o.backwardBytes = backMoved * sc / split;
  // Folded experts (etp 1) run whole on the tokens sequence parallelism
  // gave each tp rank: the FLOPs per rank are the same (tokens / tp
  // instead of features / tp) and no tp collective surrounds them.
  o.foldedExperts = op.experts > 1 && s.expertsFolded();
  if (tpDeg > 1 && !o.foldedExperts)
    priceTpCollectives(op, p.tpGroup, o);
  return o;
}

double Simulation::profiledHostS(const LayerKind &k,
                                 const StagePlacement &p) const {
  int kind = w.repeatedKind();
  const LayerProfile::Entry *e =
      a.layerProfile ? a.layerProfile->find(p.device->name, p.tp) : nullptr;
  if (kind < 0 || !e || k.name != w.kinds[kind].name)
    return 0;
  // The same layer priced as the profile ran it: its micro-batch, the
  // device model alone.
  Strategy measured = s;
  measured.microBatch = e->microBatch;
  Assumptions alone = a;
  alone.layerProfile.reset();
  Simulation probe(w, measured, alone, {p}, true);
  LayerTime t =
      probe.layerTime(w.kinds[kind].forMicroBatch(measured.microBatch, p.tp,
                                                  measured.tpBatchSplit),
                      p);
  double modelled =
      t.forwardComputeS + t.forwardTpS + t.forwardCpS + t.forwardEpS;
  return std::max(0.0, e->forwardS - modelled);
}

/// A contraction's compute and the tensor-parallel collectives that may
/// overlap it (Megatron-Core's --tp-comm-overlap).
struct TpOverlap {
  double fwd, bwd, rowAr, colAr;
};

/// Context parallelism's exchange of one attention op: the ring's sends
/// past what its blocks' compute hides, or Ulysses' all-to-alls.
void Simulation::addContextParallel(const OpPrice &o, LayerTime &t) const {
  if (o.cpRing) {
    t.forwardCpS +=
        (s.cp - 1) * std::max(0.0, o.cpSendS - o.attentionForwardS / s.cp);
    t.backwardCpS +=
        (s.cp - 1) * std::max(0.0, o.cpSendBackS - o.attentionBackwardS / s.cp);
    t.cpTransferS += (s.cp - 1) * (o.cpSendS + o.cpSendBackS);
    t.forwardCpSendS += (s.cp - 1) * o.cpSendS;
    t.backwardCpSendS += (s.cp - 1) * o.cpSendBackS;
  } else if (s.cp > 1 && o.attention) {
    double both = o.cpQkvAllToAllS + o.cpOutAllToAllS;
    t.forwardCpS += both;
    t.backwardCpS += both;
    t.cpTransferS += 2 * both;
    t.forwardCpSendS += both;
    t.backwardCpSendS += both;
  }
}

/// One op's time in the layer's per-kernel breakdown (`orrery simulate
/// --trace`): ops that share a kernel with the one before are part of its
/// time.
static void noteKernel(LayerBreakdown &b, const OpCost &op, const OpPrice &o,
                       double fwd, double bwd) {
  // Ops that share a kernel with the one before are part of its time.
  std::string name = op.name;
  if (llvm::StringRef(name).starts_with("orrery."))
    name = name.substr(7);
  if (o.kernels == 0 && !b.kernels.empty()) {
    b.kernels.back().forwardS += fwd;
    b.kernels.back().backwardS += bwd;
  } else {
    auto it = llvm::find_if(
        b.kernels, [&](const KernelTime &x) { return x.name == name; });
    if (it == b.kernels.end())
      it = b.kernels.insert(b.kernels.end(), KernelTime{name, 0, 0, 0});
    it->count++;
    it->forwardS += fwd;
    it->backwardS += bwd;
  }
}

/// Megatron-Core's --tp-comm-overlap (Transformer Engine's userbuffers)
/// splits each GEMM into tp chunks and moves one chunk's data while the
/// next computes: forward, a row-parallel GEMM's reduce-scatter with that
/// GEMM and the all-gather that follows it with the next column-parallel
/// GEMM (the first one's of the layer after the last); backward, a
/// column-parallel GEMM's reduce-scatter of the input gradient with its
/// weight-gradient GEMM (half its backward). At least one chunk's transfer
/// stays exposed. The reduce-scatters' GEMMs run on the SMs the
/// communication leaves (`margin`: SMs / (SMs - communication SMs); 1
/// where nothing is known), the all-gather's ring exchange on all of them.
static void addTpOverlap(const std::vector<TpOverlap> &overlapped, int tpDeg,
                         double margin, LayerTime &t) {
  auto exposed = [&](double comm, double gemm) {
    return std::max(comm / tpDeg, comm - gemm);
  };
  std::vector<size_t> columns;
  for (size_t i = 0; i < overlapped.size(); ++i)
    if (overlapped[i].colAr > 0)
      columns.push_back(i);
  for (size_t i = 0; i < overlapped.size(); ++i) {
    const TpOverlap &o = overlapped[i];
    if (o.rowAr > 0) {
      auto next = llvm::upper_bound(columns, i);
      double gather = next != columns.end() ? overlapped[*next].fwd
                      : columns.empty()     ? 0.0
                                            : overlapped[columns.front()].fwd;
      t.forwardComputeS += (margin - 1) * o.fwd;
      t.forwardTpS += exposed(o.rowAr / 2, margin * o.fwd) +
                      exposed(o.rowAr / 2, gather);
    }
    if (o.colAr > 0) {
      t.backwardComputeS += (margin - 1) * o.bwd / 2;
      t.backwardTpS += exposed(o.colAr, margin * o.bwd / 2);
    }
  }
}

/// What the GEMMs a tensor-parallel reduce-scatter overlaps give up: under
/// Transformer Engine's userbuffers (the fused kernels) the pipelined and
/// bulk overlaps launch the GEMM on the SMs the communication leaves
/// (transformer_engine/pytorch/module/base.py's default configuration:
/// num_sm 16, set_sm_margin; comm_gemm_overlap.cpp: math SMs = SMs - 16).
/// Other stacks' overlaps (torchtitan's async TP over symmetric memory)
/// are not priced so; nor a device whose SM count the catalog does not
/// state.
double Simulation::tpOverlapMargin(const DeviceSpec &dev) const {
  constexpr int kTeCommSms = 16;
  if (a.fusion != KernelFusion::Fused || dev.smCount <= 2 * kTeCommSms)
    return 1.0;
  return double(dev.smCount) / double(dev.smCount - kTeCommSms);
}

/// The slowdown of compute an expert all-to-all overlaps (overlap=ep):
/// its kernels hold 32 SMs while they run, as Megatron-Bridge configures
/// HybridEP (moe_hybridep_num_sms = 32, scripts/performance/utils/
/// overrides.py) and as NCCL's all-to-all may (its point-to-point channels,
/// a CTA each, up to NCCL_MAX_P2P_NCHANNELS = MAXCHANNELS = 32); none where
/// the catalog states no SM count.
double Simulation::epOverlapMargin(const DeviceSpec &dev) const {
  constexpr int kEpCommSms = 32;
  if (dev.smCount <= 2 * kEpCommSms)
    return 1.0;
  return double(dev.smCount) / double(dev.smCount - kEpCommSms);
}

WeightTraffic Simulation::weightTraffic(const LayerKind &k,
                                        const StagePlacement &p) const {
  WeightTraffic w;
  int tpDeg = p.tp;
  if (!a.fusedGradientAccumulation && k.parameters > 0) {
    // The fp32 main gradient and the 16-bit gradient read, the sum written.
    w.accumulate = true;
    w.accumulateParams = k.trainablePerRank(tpDeg);
    w.accumulateBytes =
        w.accumulateParams * (2 * a.gradBytesPerParam + a.weightBytesPerParam);
    w.accumulateS =
        opTime(*p.device, w.accumulateParams, w.accumulateBytes,
               KernelClass::Pointwise, std::max(1, k.weightTensors));
  }
  if (s.zeroStage == 3 && p.dpGroup.ranks > 1 &&
      k.parameters + k.frozenParameters > 0) {
    // Frozen weights are gathered too, and have no gradient.
    int tensors = std::max(1, k.weightTensors);
    double trainable = k.trainablePerRank(tpDeg);
    w.zero3 = true;
    w.zero3GatherParams = trainable + k.frozenPerRank(tpDeg);
    w.zero3GatherBytes = w.zero3GatherParams * a.weightBytesPerParam;
    w.zero3GatherS = tensors * collectiveTime(CollectiveKind::AllGather,
                                              w.zero3GatherParams / tensors *
                                                  a.weightBytesPerParam,
                                              p.dpGroup);
    if (k.parameters > 0) {
      w.zero3ScatterBytes = trainable * a.gradReduceBytes();
      w.zero3ScatterS =
          tensors * collectiveTime(CollectiveKind::ReduceScatter,
                                   trainable / tensors * a.gradReduceBytes(),
                                   p.dpGroup);
    }
    // Under pipeline stages the weights stay whole from the first
    // micro-batch's forward to the last one's backward (ModelShare::
    // unshardedAcrossMicroBatches): one gather, behind the first
    // micro-batch's forward, and one reduce-scatter, behind the last one's
    // backward, a step; what those cannot hide is spread over the
    // micro-batches (addWeightTraffic).
    if (s.pp > 1)
      w.zero3Spread = double(std::max<int64_t>(1, s.microBatches()));
  }
  if (k.experts > 1 && s.ep > 1 && k.expertDispatchBytes > 0) {
    // Megatron-Core's alltoall token dispatcher: each token's hidden state
    // to the ranks of its top-k experts and back (dispatch, combine), each
    // way again for the gradients; (ep - 1)/ep of the bytes leave the
    // device.
    // DeepEP's kernels (moe_dispatcher=deepep) send each token once to a
    // node and once to a rank of its experts instead (routedDispatchTime).
    w.expertParallel = true;
    w.expertTokensBytes = expertDispatchBytes(k, tpDeg);
    w.expertAllToAllS =
        s.dispatcher == MoeDispatcher::DeepEP && k.expertTopK > 0
            ? routedDispatchTime(w.expertTokensBytes / k.expertTopK,
                                 k.experts, k.expertTopK, p.epGroup)
            : collectiveTime(CollectiveKind::AllToAll, w.expertTokensBytes,
                             p.epGroup);
  }
  return w;
}

/// The layer's weights: separate gradient accumulation, ZeRO-3's gathers
/// and reduce-scatters, expert parallelism's token all-to-alls.
void Simulation::addWeightTraffic(const LayerKind &k, const StagePlacement &p,
                                  LayerTime &t) const {
  WeightTraffic w = weightTraffic(k, p);
  t.backwardComputeS += w.accumulateS;
  t.weightGradS += w.accumulateS;
  if (w.zero3) {
    // ZeRO-3's collectives are prefetched while the layer computes: what
    // the compute cannot hide is exposed. Only what the prefetch holds is
    // gathered ahead (the layer before computing); the rest is fetched
    // when the layer needs it, exposed.
    double held = w.zero3GatherParams;
    double ahead = a.zero3PrefetchParams > 0 && held > 0
                       ? std::min(1.0, a.zero3PrefetchParams / held)
                       : 1.0;
    double onDemand = w.zero3GatherS * (1 - ahead),
           early = w.zero3GatherS * ahead;
    t.forwardTpS +=
        (onDemand + std::max(0.0, early - t.forwardComputeS)) / w.zero3Spread;
    if (!k.noBackward)
      t.backwardTpS += (onDemand + std::max(0.0, early + w.zero3ScatterS -
                                                     t.backwardComputeS)) /
                       w.zero3Spread;
  }
  double a2a = w.expertAllToAllS;
  if (!s.overlapEp || a2a <= 0) {
    // Nothing overlaps the expert all-to-alls.
    t.forwardEpS += 2 * a2a;
    t.backwardEpS += 2 * a2a;
    return;
  }
  // Megatron-Core's --overlap-moe-expert-parallel-comm (combined 1F1B): a
  // micro-batch's forward of the layer runs beside another's backward, each
  // all-to-all on a stream of its own against the other's compute
  // (model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):
  //   comm: combine_bwd  | dispatch_fwd -> dispatch_bwd     | combine_fwd
  //   comp: attn_fwd     | mlp_bwd -> mlp_bwd_dw -> mlp_fwd | attn_bwd
  // where mlp is the expert block and attn the rest of the layer; each
  // phase ends when both streams have. While an all-to-all runs, its
  // kernels hold SMs the compute loses (epOverlapMargin). What the pair
  // takes beyond its compute is the all-to-alls' exposed share, half to
  // each pass.
  double m = epOverlapMargin(*p.device);
  auto phase = [m](double comm, double comp) {
    return comm >= comp * m ? comm : comp + comm * (1 - 1 / m);
  };
  double mlpF = t.expertForwardS, mlpB = t.expertBackwardS;
  double attnF = std::max(0.0, t.forwardComputeS - mlpF),
         attnB = std::max(0.0, t.backwardComputeS - mlpB);
  // Its input gradients, then its weights'.
  double mlpDgrad = std::max(0.0, mlpB - t.expertWeightGradS);
  double middle = std::max({phase(2 * a2a, mlpB + mlpF),
                            std::max(a2a, mlpDgrad) + a2a,
                            std::max(mlpB, a2a) + mlpF});
  double pair = phase(a2a, attnF) + middle + phase(a2a, attnB);
  double exposed =
      std::max(0.0, pair - (t.forwardComputeS + t.backwardComputeS));
  t.forwardEpS += exposed / 2;
  t.backwardEpS += exposed / 2;
}

/// The activations the layer keeps and works in, by recompute.
void Simulation::layerMemory(const LayerKind &k, Recompute strategyRecompute,
                             int tpDeg, LayerTime &t) const {
  double sc = scale();
  double tp = tpDeg, stream = s.sequenceParallel ? tp : 1;
  double all = k.savedReplicatedBytes * sc / stream +
               k.savedShardedBytes * sc / tp + k.savedCoreBytes * sc / tp;
  // Transformer Engine keeps an fp8 GEMM's input in fp8 for the weight
  // gradient: half the bytes of a 16-bit one (mxfp8's scales a 32nd more).
  if (isFp8(s.precision) && k.count > 1)
    all -= (1 - precisionBytes(s.precision) / 2) *
           (k.savedLinearInputReplicatedBytes * sc / stream +
            k.savedLinearInputShardedBytes * sc / tp);
  // The busiest device also keeps its extra tokens' expert GEMM inputs.
  if (double load = s.expertLoad(); load != 1)
    for (const OpCost &op : k.ops)
      if (op.experts > 1 && op.contraction && !op.view)
        all += (load - 1) * double(op.activationInputBytes) * sc /
               (op.tensorParallel || s.sequenceParallel ? tp : 1);
  // What exists only while one layer computes: a recomputed layer's own
  // tensors (full and per-op recompute), and the training loss's transient
  // beyond the probabilities it keeps.
  t.workingBytes = all;
  // Recomputation checkpoints the repeated layers (Megatron-LM's
  // transformer layers); a layer that occurs once (the embedding, the head
  // and its loss) keeps its activations.
  Recompute recompute =
      k.count > 1 && !k.noBackward ? strategyRecompute : Recompute::None;
  if (recompute == Recompute::None || recompute == Recompute::Selective)
    t.workingBytes = 0;
  for (const OpCost &op : k.ops)
    if (llvm::StringRef(op.name).ends_with("softmax_cross_entropy") ||
        op.name == "onnx_op:SoftmaxCrossEntropyLoss") {
      double logits = op.forwardFlops / 5; // 5 FLOP a logit
      double split = op.tensorParallel ? tp : 1;
      t.workingBytes = std::max(
          t.workingBytes, (a.lossFp32Copy ? 6 : 2) * logits * sc / split);
    }
  switch (recompute) {
  case Recompute::None:
    t.keptBytes = all;
    break;
  case Recompute::Selective: {
    // The checkpointed modules' own tensors (the attention core's, and
    // what the ops of the other modules made) are dropped.
    unsigned modules = s.selectiveModules();
    t.keptBytes = all;
    if (modules & kRecomputeCoreAttn)
      t.keptBytes -= k.savedCoreBytes * sc / tp;
    for (const LayerKind::ModuleSaved &m : k.savedByModules)
      if (m.modules & modules)
        t.keptBytes -= m.replicatedBytes * sc / stream + m.shardedBytes * sc / tp;
    break;
  }
  case Recompute::Op: // the block's input and what the policy saved
    t.keptBytes = k.inputBytes * sc / stream + t.opSavedBytes;
    break;
  case Recompute::Full:
    t.fullRecompute = true;
    t.keptBytes = k.inputBytes * sc / stream;
    t.recomputeS =
        t.forwardComputeS + t.forwardTpS + t.forwardCpS + t.forwardEpS;
    t.recomputeGemmS = t.forwardGemmS;
    t.recomputeFlops = 0;
    for (const OpCost &op : k.ops)
      t.recomputeFlops += op.forwardFlops * sc /
                          ((op.tensorParallel || s.sequenceParallel) ? tp : 1);
    break;
  }
  if (k.noBackward) { // frozen, and nothing before it trains
    t.backwardComputeS = t.backwardTpS = t.backwardCpS = t.backwardEpS = 0;
    t.weightGradS = t.backwardGemmS = t.recomputeGemmS = 0;
    t.backwardCpSendS = t.recomputeS = t.recomputeFlops = 0;
  }
}

/// The layer's expert block: its ops from the first expert GEMM to the
/// last (first > last where it has none).
static std::pair<size_t, size_t> expertBlock(const LayerKind &k) {
  size_t first = k.ops.size(), last = 0;
  for (size_t i = 0; i < k.ops.size(); ++i)
    if (k.ops[i].experts > 1) {
      first = std::min(first, i);
      last = i;
    }
  return {first, last};
}

LayerTime Simulation::layerTime(const LayerKind &k, const StagePlacement &p,
                                LayerBreakdown *breakdown,
                                bool recomputed) const {
  LayerTime t;
  Recompute strategyRecompute =
      recomputed && s.recomputesKind(k.name) ? s.recompute : Recompute::None;
  int tpDeg = p.tp;
  // Contractions with tensor-parallel collectives, when they overlap.
  std::vector<TpOverlap> overlapped;
  bool perOp = strategyRecompute == Recompute::Op && !k.noBackward;
  int matmuls = 0; // recompute=op counts the block's matmuls
  auto [firstExpert, lastExpert] = expertBlock(k);
  for (size_t i = 0; i < k.ops.size(); ++i) {
    const OpCost &op = k.ops[i];
    if (op.view)
      continue;
    OpPrice o = priceOp(op, k, p);
    if (i >= firstExpert && i <= lastExpert) {
      t.expertForwardS += o.forwardS;
      t.expertBackwardS += o.backwardS;
    }
    t.forwardComputeS += o.cpMergeForwardS;
    t.backwardComputeS += o.cpMergeBackwardS;
    addContextParallel(o, t);
    double fwd = o.forwardS, bwd = o.backwardS;
    t.forwardComputeS += fwd;
    t.backwardComputeS += bwd;
    auto tensorMath = [](KernelClass c) {
      return c == KernelClass::Gemm || c == KernelClass::Attention;
    };
    if (tensorMath(o.kernelClass))
      t.forwardGemmS += fwd;
    if (tensorMath(o.backwardClass))
      t.backwardGemmS += bwd;
    // A weighted contraction's backward is two GEMMs of the forward's
    // FLOPs each: the input gradient, then the weight gradient.
    if (op.weighted && o.backwardKernels == 2) {
      t.weightGradS += (bwd - o.castBackwardS) / 2; // Lowering's wgrad GEMM
      if (i >= firstExpert && i <= lastExpert)
        t.expertWeightGradS += (bwd - o.castBackwardS) / 2;
    }
    if (breakdown)
      noteKernel(*breakdown, op, o, fwd, bwd);
    if (tpDeg > 1) {
      if (s.overlapTpComm) {
        // Priced after the loop, against the GEMMs they overlap.
        overlapped.push_back(
            {fwd, bwd, o.tpRowAllReduceS, o.tpColumnAllReduceS});
      } else {
        t.forwardTpS += o.tpRowAllReduceS;
        t.backwardTpS += o.tpColumnAllReduceS;
      }
      // A batch or spatial split gathered whole, and its gradient scattered
      // back; a spatial split's halo each way.
      t.forwardTpS += o.tpGatherS;
      t.forwardTpS += o.tpHaloS;
      if (!k.noBackward) {
        t.backwardTpS += o.tpScatterS;
        t.backwardTpS += o.tpHaloS;
      }
    }
    unsigned modules = strategyRecompute == Recompute::Selective
                           ? s.selectiveModules()
                           : 0u;
    bool recomputed =
        ((modules & kRecomputeCoreAttn) && op.attentionCore) ||
        (op.recomputeModules & modules) != 0;
    if (perOp) {
      // torchtitan's policy: SDPA's output saved, and every other matmul's
      // (aten.mm: the linear layers; grouped expert GEMMs are not mm).
      bool mm = op.weighted && op.contraction && op.experts <= 1;
      matmuls += mm;
      bool saved = op.kernelClass == KernelClass::Attention ||
                   (mm && matmuls % 2 == 1);
      // (A contraction states its result's bytes; SDPA writes its output
      // and its log-sum-exp rows, both saved.)
      double out = op.outputBytes > 0 ? double(op.outputBytes)
                                      : double(op.bytesWritten);
      if (saved)
        t.opSavedBytes += out * scale() /
                          (op.tensorParallel || s.sequenceParallel ? tpDeg : 1);
      recomputed = !saved;
    }
    if (recomputed && !k.noBackward) {
      t.recomputeS += fwd;
      // A checkpointed MLP re-runs its tensor-parallel collectives too.
      if (op.recomputeModules & modules)
        t.recomputeS += o.tpRowAllReduceS + o.tpGatherS;
      if (tensorMath(o.kernelClass))
        t.recomputeGemmS += fwd;
      t.recomputeFlops += o.forwardFlops;
    }
  }
  if (!overlapped.empty())
    addTpOverlap(overlapped, tpDeg, tpOverlapMargin(*p.device), t);
  addWeightTraffic(k, p, t);
  // A layer profile's host time (docs/costmodel.md, "Layer profiles"):
  // it runs between the kernels, adds to them, and repeats in backward
  // (and in a full recompute, which re-runs the forward).
  if (a.layerProfile) {
    t.forwardHostS = profiledHostS(k, p);
    t.backwardHostS = kLayerProfileBackwardRatio * t.forwardHostS;
    t.forwardComputeS += t.forwardHostS;
    t.backwardComputeS += t.backwardHostS;
  }
  // Selective recompute re-runs the attention with its exchange; per-op
  // recompute re-runs the sequence-parallel all-gathers (the
  // reduce-scatters' outputs are saved: half the forward's collectives).
  unsigned modules = strategyRecompute == Recompute::Selective
                         ? s.selectiveModules()
                         : 0u;
  if ((modules & kRecomputeCoreAttn) && !k.noBackward)
    t.recomputeS += t.forwardCpS;
  // A checkpointed mixture-of-experts layer dispatches and combines again
  // (Megatron-Core's moe recompute runs the all-to-alls in backward).
  if ((modules & kRecomputeMoe) && !k.noBackward)
    t.recomputeS += t.forwardEpS;
  if (perOp)
    t.recomputeS += t.forwardTpS / 2;
  layerMemory(k, strategyRecompute, tpDeg, t);
  return t;
}

} // namespace detail
} // namespace orrery
