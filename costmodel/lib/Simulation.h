//===- Simulation.h - the step simulator's internals -------------------===//
//
// Shared by Simulator.cpp (chunks, the step), Schedule.cpp (the
// schedules' task orders and running them) and LayerPricing.cpp (one
// layer kind's times under a strategy). Not part of
// the public API.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_LIB_SIMULATION_H
#define ORRERY_COSTMODEL_LIB_SIMULATION_H

#include "orrery/CostModel/Hetero.h"
#include "orrery/CostModel/Simulator.h"

#include <limits>
#include <memory>
#include <optional>
#include <vector>

namespace orrery {
namespace detail {

/// Per micro-batch times of one layer kind under the strategy.
struct LayerTime {
  double forwardComputeS = 0, backwardComputeS = 0;
  /// Of the compute, the tensor-core math (GEMMs, fused attention): what
  /// draws PowerByActivity::gemmW; the rest is memory-bound. Recompute's
  /// share of recomputeS.
  double forwardGemmS = 0, backwardGemmS = 0, recomputeGemmS = 0;
  double forwardTpS = 0, backwardTpS = 0;
  /// Context parallelism's key-value exchange, exposed, and all of it.
  double forwardCpS = 0, backwardCpS = 0, cpTransferS = 0;
  double forwardCpSendS = 0, backwardCpSendS = 0;
  /// Expert parallelism's token all-to-alls (dispatch and combine).
  double forwardEpS = 0, backwardEpS = 0;
  /// Of the compute, the expert block's (from the first expert GEMM to the
  /// last): what the other side of the layer's all-to-alls overlaps under
  /// overlap=ep.
  double expertForwardS = 0, expertBackwardS = 0;
  /// Of expertBackwardS, the expert GEMMs' weight gradients.
  double expertWeightGradS = 0;
  /// Of backwardComputeS, the weight gradients: the second GEMM of each
  /// weighted contraction and the separate gradient accumulation (what a
  /// zero-bubble schedule defers as its W pass).
  double weightGradS = 0;
  /// Of the compute, the host time a layer profile adds (forward, backward).
  double forwardHostS = 0, backwardHostS = 0;
  double recomputeS = 0; ///< extra forward work in backward (compute + comm)
  double recomputeFlops = 0;
  /// Activation bytes one micro-batch keeps for this layer, per device.
  /// recompute=op: the outputs its policy saves (SDPA's, every other
  /// matmul's), per micro-batch on a device.
  double opSavedBytes = 0;
  double keptBytes = 0;
  /// Bytes one micro-batch needs while this layer runs its backward.
  double workingBytes = 0;
  /// Its forward runs again in backward (full recompute of a repeated layer).
  bool fullRecompute = false;
};

/// A layer's weight traffic per micro-batch on a device of a stage: what
/// the simulator sums into its LayerTime and what the lowering writes as
/// instructions (Simulation::weightTraffic).
struct WeightTraffic {
  /// ZeRO-3: every weight gathered before use (forward, and again in
  /// backward), the trainable ones' gradients reduce-scattered; one
  /// collective per weight tensor.
  bool zero3 = false;
  double zero3GatherParams = 0, zero3GatherBytes = 0, zero3GatherS = 0;
  double zero3ScatterBytes = 0, zero3ScatterS = 0;
  /// The micro-batches one gather and reduce-scatter serve (pipeline
  /// stages keep the weights whole across them; else 1).
  double zero3Spread = 1;
  /// Expert parallelism: the tokens one all-to-all moves (dispatch,
  /// combine and their gradients each move as many) and its time.
  bool expertParallel = false;
  double expertTokensBytes = 0, expertAllToAllS = 0;
  /// A separate gradient accumulation kernel (Assumptions).
  bool accumulate = false;
  double accumulateParams = 0, accumulateBytes = 0, accumulateS = 0;
};

/// One op's kernels and collectives under the strategy, per micro-batch on
/// one device of a stage: what the simulator sums into a layer's time and
/// what the lowering (Lowering.cpp) writes as instructions. Times include
/// launches; fused ops (kernels == 0) belong to the kernel before them.
struct OpPrice {
  double split = 1; ///< the tensor-parallel (or sequence-parallel) divisor
  double forwardS = 0, backwardS = 0; ///< compute, casts included
  double forwardFlops = 0, backwardFlops = 0, forwardBytes = 0,
         backwardBytes = 0;
  int kernels = 1, backwardKernels = 1;
  KernelClass kernelClass = KernelClass::Pointwise,
              backwardClass = KernelClass::Pointwise;
  Precision precision = Precision::BF16;
  int localExperts = 0; ///< a grouped expert GEMM's products on the device
  /// A grouped expert GEMM's tokens over the balanced mean on the busiest
  /// device (Strategy::expertLoad).
  double expertLoad = 1;
  /// Folded experts (etp 1): the GEMM runs whole experts on the tokens the
  /// tp ranks split (split divides its rows), with no tp collectives.
  bool foldedExperts = false;
  /// fp8: the casts before the forward and the backward GEMMs (the fp8
  /// recipe's quantization passes), and the bytes they move.
  double castForwardS = 0, castBackwardS = 0;
  double castForwardBytes = 0, castBackwardBytes = 0;
  /// Tensor-parallel collectives (bytes per rank, seconds).
  double tpRowAllReduceBytes = 0, tpColumnAllReduceBytes = 0, tpGatherBytes = 0,
         tpHaloBytes = 0;
  /// The forward all-reduces tpRowAllReduceBytes take (OpCost's).
  int tpRowAllReduces = 1;
  double tpRowAllReduceS = 0, tpColumnAllReduceS = 0, tpGatherS = 0,
         tpScatterS = 0, tpHaloS = 0;
  /// Fused attention: kernel calls (cp blocks under the ring), keys per
  /// query row of each, and their times before host dispatch.
  bool attention = false;
  int attentionCalls = 1;
  double attentionKeys = 0, attentionForwardS = 0, attentionBackwardS = 0;
  /// Context parallelism: the ring's block and its sends (forward, and
  /// backward with dK/dV), the merge kernels of its cp - 1 steps; Ulysses'
  /// all-to-alls around the kernel.
  bool cpRing = false;
  double cpBlockBytes = 0, cpSendS = 0, cpSendBackS = 0;
  double cpMergeForwardBytes = 0, cpMergeBackwardBytes = 0, cpMergeForwardS = 0,
         cpMergeBackwardS = 0;
  double cpQkvBytes = 0, cpOutBytes = 0, cpQkvAllToAllS = 0, cpOutAllToAllS = 0;
};

struct Task {
  int vs = 0, mb = 0;
  bool backward = false;
  /// Of a backward, the weight-gradient pass alone (W, zero-bubble
  /// schedules: the B task before it computed the input gradient).
  bool weight = false;
  /// A forward whose output leaves with the next task's gradient, in one
  /// communication after both (Megatron-LM's interleaved 1F1B in its steady
  /// state: send_forward_backward_recv_forward_backward).
  bool sendsWithNext = false;
  /// In a schedule that splits backwards (zero bubble), a backward that
  /// computes its weight gradients too (DualPipeV's full backward).
  bool full = false;
  /// A W that runs here at the latest (ZB-2p): the run moves it earlier,
  /// into the first idle time its stage meets after its B.
  bool deferrable = false;
  /// DualPipeV's overlapped pair: this forward runs with the full
  /// backward of chunk pairVs, micro-batch pairMb (-1: none).
  int pairVs = -1, pairMb = -1;
};

/// Per stage, its tasks in order.
using TaskOrder = std::vector<std::vector<Task>>;

/// A schedule: its task lists, and per stage the activations it holds at
/// its peaks, as counts of micro-batches per chunk of the stage (the k-th
/// count is chunkOnStage(stage, k)'s forwards run less its backwards run).
/// The peaks are the points no other point of the run reaches in every
/// chunk: any non-negative bytes per micro-batch and chunk peak at one of
/// them (StepMemory.cpp).
struct ScheduleOrder {
  TaskOrder tasks;
  std::vector<std::vector<std::vector<int>>> heldPeaks;
};

/// Per stage: when it finishes, how long it computed, its last backward.
struct Timeline {
  bool ok = true;
  std::vector<double> free, busy, lastBackwardS;
};

/// What moving one micro-batch's boundary tensor costs between the chunk
/// `c` and the chunk `c + 1`. Megatron-LM's pipeline communication
/// (p2p_communication._communicate: batch_isend_irecv, wait on every
/// request, synchronize) and DeepSpeed's pipeline engine block the stage
/// until its sends and receives are done: a stage that sends is busy for the
/// transfer, and the receiver gets the tensor when the sender is done. A
/// tensor sent as 1/tp shards (Megatron's scatter/gather, without sequence
/// parallelism) is all-gathered over the receiver's tensor-parallel group
/// before it is used.
struct PipelineLinks {
  std::vector<double> transferS;    ///< chunk c -> c + 1: the activation
  std::vector<double> transferBwdS; ///< chunk c + 1 -> c: its gradient
  std::vector<double> gatherFwdS;   ///< at the receiver of c's activation
  std::vector<double> gatherBwdS;   ///< at the receiver of c + 1's gradient
  /// Sends overlap the sender's next compute (Megatron-Core's
  /// --overlap-p2p-communication): the stage is free when it has computed.
  bool asynchronous = false;
  /// Per chunk: the context-parallel transfers of one forward and one
  /// backward (shown in the trace beside the compute they overlap).
  std::vector<double> cpForwardS, cpBackwardS;
  static PipelineLinks none(int chunks) {
    return {std::vector<double>(chunks, 0.0),
            std::vector<double>(chunks, 0.0),
            std::vector<double>(chunks, 0.0),
            std::vector<double>(chunks, 0.0),
            false,
            {},
            {}};
  }
};

/// Runs each stage's task list in order; a task starts when its stage is
/// free and its inputs have arrived (when the producing task, which waits
/// for its send, is done).
Timeline runSchedule(const std::vector<std::vector<Task>> &order, int chunks,
                     int m, const std::vector<double> &fwdS,
                     const std::vector<double> &bwdS,
                     const PipelineLinks &links, std::vector<TraceEvent> *trace,
                     const std::vector<double> *weightS = nullptr,
                     const std::vector<double> *fwdCommS = nullptr,
                     const std::vector<double> *bwdCommS = nullptr);

/// The step's layers as the pipeline holds them, priced once
/// (StepLayout.cpp): what the later phases (pipeline transfers, the
/// schedule, gradient sync and the optimizer, memory, the figures) and the
/// lowering read. Per chunk values are per micro-batch on one device of
/// the chunk's stage.
struct StepLayout {
  std::vector<size_t> sequence;          ///< layer (model order) -> kind
  std::vector<std::vector<int>> chunkOf; ///< chunk -> its layers
  /// Per layer: whether recompute=full re-runs its forward.
  std::vector<bool> recomputed;
  /// Per stage placement (one when every stage is alike) and layer kind:
  /// its times; under partial full recompute (`partial`), kindTimeKept
  /// holds those of the layers it leaves alone.
  std::vector<std::vector<LayerTime>> kindTime, kindTimeKept;
  bool uniform = true, partial = false;
  /// Per chunk: forward, backward (with recompute) and weight-gradient
  /// seconds; the tp, cp (exposed, and all of it) and ep collectives;
  /// compute and its tensor-core share; recomputed FLOPs and the seconds
  /// of the recompute in bwdS.
  std::vector<double> fwdS, bwdS, wS, tpS, cpS, cpAllS, epS, computeS, gemmS,
      recompFlops, recomputeS;
  /// Per chunk: activation bytes kept per micro-batch, the working bytes of
  /// its largest backward, the boundary tensor's bytes per tp rank, and
  /// under activation offload the bytes offloaded and the largest layer's.
  std::vector<double> keptBytes, workingBytes, outBytes, offloadedBytes,
      largestLayerBytes;
  /// Activation offload: seconds to move a chunk's offloaded bytes each
  /// way (beside its forward and its backward).
  std::vector<double> offloadS;
  /// Per chunk, per device: trainable parameters (tied copies included),
  /// those a batch split keeps whole on every tp rank, fp8 weight copies,
  /// held experts, a subnetwork's blocks, frozen weights; buffer bytes.
  std::vector<double> params, tpGradParams, fp8Params, expertParams,
      subnetParams, frozenParams, bufferBytes;
  /// Per stage: the tied weights' all-reduce and the copies it reduces
  /// (both stages), and the copies a stage holds of another's weights.
  std::vector<double> tiedSyncS, tiedCopy, tiedCopyParams;

  const std::vector<LayerTime> &stageTimes(int stage) const {
    return kindTime[uniform ? 0 : size_t(stage)];
  }
  /// Layer `l`'s times on `stage` (the kept ones where partial recompute
  /// leaves it alone).
  const LayerTime &timeOf(int l, int stage) const {
    return partial && !recomputed[size_t(l)]
               ? kindTimeKept[uniform ? 0 : size_t(stage)][sequence[size_t(l)]]
               : stageTimes(stage)[sequence[size_t(l)]];
  }
};

/// What the pipeline sends between chunks (PipelineTransfers.cpp): the
/// transfers' seconds and the bytes each tensor-parallel rank sends per
/// micro-batch with an activation and with a gradient.
struct PipelineTransfers {
  PipelineLinks links;
  std::vector<double> sendFwdBytes, sendBwdBytes;
};

/// The schedule run (StepSchedule.cpp): its task order, each stage's
/// timeline, and the per-chunk times it ran with (B without W under a
/// zero-bubble schedule; the ep collectives DualPipeV's pairs overlap).
/// `pruned`: above the search's bar, the timeline is the bound's.
struct ScheduledStep {
  std::shared_ptr<const ScheduleOrder> order;
  Timeline timeline;
  std::vector<double> bS, fwdCommS, bwdCommS;
  bool pruned = false;
  double anySplitS = 0, thisSplitS = 0;
};

/// Per stage, the gradient reduction and the optimizer step after the
/// schedule (GradientSync.cpp), and the step's end on the slowest stage.
struct GradientSync {
  std::vector<double> dpExposedS, optS, finishS, hostBytesPerNode;
  /// Parameters per device: dense, experts, kept whole across tp, and the
  /// optimizer's shard; the optimizer step's bytes.
  std::vector<double> denseParams, expertParams, tpGradParams, shardParams,
      optBytes;
  double stepS = 0;
  int slowest = 0;
};

/// What the lowering takes from a simulated step (Simulation::phases): the
/// phases' own results, from which the step was priced, so programs and
/// prices cannot drift apart.
struct StepPhases {
  StepLayout layout;
  PipelineTransfers transfers;
  GradientSync sync;
};

class Simulation {
public:
  /// `at[i]` says where pipeline stage i runs; `uniform` when every stage
  /// runs on the same placement (layer times are then priced once).
  Simulation(const Workload &w, const Strategy &s, const Assumptions &a,
             std::vector<StagePlacement> at, bool uniform)
      : w(w), s(s), a(a), at(std::move(at)), uniform(uniform) {}

  /// One step: the phases below, in order.
  llvm::Expected<StepResult> run(bool keepTrace);
  /// The devices take the strategy's precision; the fallbacks noted.
  llvm::Error checkDevices(StepResult &r) const;
  /// The framework assumptions apply to this model and these stages.
  llvm::Error checkAssumptions() const;
  /// Layers into chunks, each layer kind priced per stage placement, the
  /// chunks' sums, tied copies (StepLayout.cpp).
  llvm::Expected<StepLayout> layOut(StepResult &r, bool keepTrace) const;
  /// Before the layout, a search's bound of the step: the stages' mean
  /// busy time over every layer's forward and backward without recompute
  /// (StepSchedule.cpp); none where scheduleStep bounds nothing or stages
  /// differ.
  std::optional<double> leastBusyS() const;
  /// The layer kinds leastBusyS priced on stage 0's placement (the
  /// layout's kindTime where every stage is alike).
  mutable std::vector<LayerTime> pricedKinds;
  /// The boundary tensors' sends between chunks (PipelineTransfers.cpp).
  PipelineTransfers pipelineTransfers(const StepLayout &l, StepResult &r) const;
  /// The schedule run event by event, bounded, or MGRIT's solves
  /// (StepSchedule.cpp).
  llvm::Expected<ScheduledStep> scheduleStep(const StepLayout &l,
                                             const PipelineTransfers &x,
                                             StepResult &r,
                                             bool keepTrace) const;
  /// Gradient reduction and the optimizer step per stage
  /// (GradientSync.cpp).
  GradientSync syncGradients(const StepLayout &l, const Timeline &tl,
                             StepResult &r) const;
  /// Memory per stage and whether it fits (StepMemory.cpp).
  void stageMemory(const StepLayout &l, const ScheduleOrder &order,
                   const GradientSync &sync, StepResult &r) const;
  /// Throughput, FLOPs, energy and the slowest stage's breakdown
  /// (StepFigures.cpp).
  void figures(const StepLayout &l, const ScheduledStep &sch,
               const GradientSync &sync, double noTransferEnd, bool keepTrace,
               StepResult &r) const;
  Detail detail = Detail::Full;
  /// simulateStep's bound (Detail::StepTime): above it the schedule is not
  /// run.
  double boundS = std::numeric_limits<double>::infinity();
  /// Filled by run() when set.
  StepPhases *phases = nullptr;
  /// A folded DualPipe step (Strategy::dualPipeFolded): the V's turn
  /// crosses from the last stage to its mirror rank over its toNext link.
  bool dualPipeTurn = false;
  /// One op's price, and the layer layout a stage runs (for the lowering).
  OpPrice priceOp(const OpCost &op, const LayerKind &k,
                  const StagePlacement &p) const;
  const LayerKind &layout(const LayerKind &k, int stage) const {
    return k.forMicroBatch(s.microBatch, at[stage].tp, s.tpBatchSplit);
  }
  const StagePlacement &placement(int stage) const { return at[stage]; }
  /// Per layer (model order): whether recompute=full re-runs it: a
  /// repeated layer that trains, and under recompute_layers=K one of the
  /// first K of them in its chunk (Megatron-LM's block method).
  std::vector<bool>
  fullyRecomputed(const std::vector<std::vector<int>> &chunkOf,
                  const std::vector<size_t> &sequence) const;
  /// Per stage, its tasks in the order the strategy's schedule runs them.
  /// Shared: the orders built serve every later step of the same shape,
  /// on any thread (ScheduleCache.cpp).
  std::shared_ptr<const ScheduleOrder> schedule(int microBatches) const;
  TaskOrder buildSchedule(int microBatches) const;
  /// The held activations' peaks of `tasks` (ScheduleOrder).
  void findHeldPeaks(ScheduleOrder &order) const;
  /// Stage i's tasks under ZB-V and DualPipeV (Schedule.cpp).
  void zeroBubbleV(int i, int m, std::vector<Task> &o) const;
  void zeroBubble2p(int i, int m, std::vector<Task> &o) const;
  void dualPipeV(int i, int m, std::vector<Task> &o) const;
  double scale() const {
    return double(s.microBatch) / double(std::max<int64_t>(1, w.batchSize)) /
           s.cp;
  }
  /// Bytes of the tokens one device sends to (and takes back from) the
  /// experts of layer `k` per micro-batch: each token's hidden state once
  /// for each of its top-k experts, the tokens sequence parallelism gave
  /// the device, times the busiest device's load (Strategy::expertLoad).
  double expertDispatchBytes(const LayerKind &k, int tp) const {
    return double(k.expertDispatchBytes) * scale() /
           (s.sequenceParallel ? tp : 1) * s.expertLoad();
  }
  /// kernelSeconds on `dev` with its kernel model; `weightBytes` of
  /// `bytes` are a GEMM's weights.
  double opTime(const DeviceSpec &dev, double flops, double bytes,
                KernelClass c, int kernels, Precision precision,
                double weightBytes = 0) const;
  /// The fp8 recipe's quantization of a GEMM operand of `bytes16` bytes in
  /// 16 bits, held as `tensors` tensors (a grouped GEMM's experts):
  /// seconds, and the bytes its passes move into `moved`.
  double quantizeTime(const DeviceSpec &dev, double bytes16, int tensors,
                      double &moved) const;
  /// What a GEMM does on a device (its FLOPs priced, the bytes it moves
  /// at the workload's batch, its split over tp) and how it runs.
  struct GemmWork {
    double flops, backFlops, moved, backMoved, split;
  };
  struct GemmKernels {
    KernelClass cls, backCls;
    int kernels, backKernels;
    Precision prec;
  };
  /// A grouped expert GEMM's forward and backward on dev.
  void priceGroupedGemm(const OpCost &op, const DeviceSpec &dev,
                        const GemmWork &w, const GemmKernels &k, double &fwd,
                        double &bwd, OpPrice &o) const;
  /// An fp8 GEMM's quantization passes into o's cast times and bytes.
  void priceQuantization(const OpCost &op, const StagePlacement &p,
                         double split, OpPrice &o) const;
  /// How much longer than a per-tensor one a blockwise-scaled fp8 GEMM
  /// takes on dev (1 where the device runs it as mxfp8).
  double blockwiseGemmFactor(const DeviceSpec &dev) const;
  /// The slowdown of compute an expert all-to-all overlaps (overlap=ep).
  double epOverlapMargin(const DeviceSpec &dev) const;
  /// Layer k's weight traffic on placement p (LayerPricing.cpp).
  /// The slowdown of GEMMs a tensor-parallel reduce-scatter overlaps
  /// (Transformer Engine's communication SMs), 1 for none.
  double tpOverlapMargin(const DeviceSpec &dev) const;
  WeightTraffic weightTraffic(const LayerKind &k,
                              const StagePlacement &p) const;
  /// Reducing `params` gradients over `g` as the framework does (its
  /// bytes on the wire, Assumptions::gradReduceBytes), and gathering
  /// `params` 16-bit weights (GradientSync.cpp).
  double gradientReduceS(CollectiveKind kind, double params,
                         const GroupShape &g) const;
  double weightGatherS(double params, const GroupShape &g) const;
  /// Of `dpRanks` data-parallel ranks, those holding the same experts (the
  /// distributed optimizer shards their state over them): dp / ep, or
  /// folded (etp 1) dp x tp / ep.
  double expertShard(double dpRanks) const {
    return dpRanks * (s.expertsFolded() ? s.tp : 1) / std::max(1, s.ep);
  }

private:
  const Workload &w;
  const Strategy &s;
  const Assumptions &a;
  std::vector<StagePlacement> at;
  bool uniform;

  double opTime(const DeviceSpec &dev, double flops, double bytes,
                KernelClass c, int kernels) const {
    return opTime(dev, flops, bytes, c, kernels, s.precision);
  }
  /// `recomputed`: false prices a layer that partial full recompute
  /// (recompute_layers) leaves alone as under recompute=none.
  /// A layer profile's host time for one forward of kind k on placement
  /// p: the measured forward less the modelled one at the profile's
  /// micro-batch (0 for any kind but the model's repeated one).
  double profiledHostS(const LayerKind &k, const StagePlacement &p) const;
  LayerTime layerTime(const LayerKind &k, const StagePlacement &p,
                      LayerBreakdown *breakdown = nullptr,
                      bool recomputed = true) const;
  // priceOp's and layerTime's parts (LayerPricing.cpp).
  void priceAttention(const OpCost &op, const StagePlacement &p, Precision prec,
                      double f, double b, double bytes, double backMoved,
                      double &fwd, double &bwd, OpPrice &o) const;
  void priceTpCollectives(const OpCost &op, const GroupShape &tpGroup,
                          OpPrice &o) const;
  void addContextParallel(const OpPrice &o, LayerTime &t) const;
  void addWeightTraffic(const LayerKind &k, const StagePlacement &p,
                        LayerTime &t) const;
  void layerMemory(const LayerKind &k, Recompute strategyRecompute, int tpDeg,
                   LayerTime &t) const;
  std::vector<std::vector<int>>
  chunkLayers(std::vector<size_t> &sequence) const;
  // The layout's parts (StepLayout.cpp).
  void priceKinds(StepLayout &l, StepResult &r, bool keepTrace) const;
  void sumChunk(StepLayout &l, int ch) const;
  void offloadChunk(StepLayout &l, int ch) const;
  void tieWeights(StepLayout &l) const;
  void stageKindFigures(const StepLayout &l, StepResult &r) const;
  // Gradient sync (GradientSync.cpp) and memory (StepMemory.cpp) of stage i.
  void syncStage(int i, const StepLayout &l, double lastBackwardS,
                 GradientSync &sync, StepResult &r) const;
  double exposedReduction(int i, const StepLayout &l, double lastBackwardS,
                          double perDevice, double experts, double subnet,
                          double tpGrad, StepResult &r) const;
  void optimizerStep(int i, double dense, double experts,
                     GradientSync &sync) const;
  double communicatorsBytes(const StagePlacement &p) const;
  void memoryOf(int i, const StepLayout &l, const ScheduleOrder &order,
                const GradientSync &sync, StepResult &r) const;
  /// MGRIT's timeline in place of a schedule's (StepSchedule.cpp).
  void mgritTimeline(const StepLayout &l, const PipelineLinks &links,
                     Timeline &tl, StepResult &r, bool keepTrace) const;
};

/// A layer's forward + backward (with recompute) seconds per micro-batch.
double secondsOf(const LayerTime &t);

/// A device's link to its host: PCIe 5 beside NVLink 4/5 or PCIe 5
/// between the devices, else PCIe 4.
const LinkSpec *hostLinkOf(const StagePlacement &place);

/// A step under PatrickStar's chunk-based memory management (`chunks=M`,
/// ChunkedMemory.cpp): the data-parallel step's compute and activations,
/// its model data placed and moved by chunk.
llvm::Expected<StepResult> chunkedStep(const Workload &w, const Cluster &c,
                                       const Strategy &s, const Assumptions &a,
                                       bool keepTrace, Detail detail);

/// The workload phantom parallelism trains (`phantom=k`, Phantom.cpp):
/// each tensor-parallel weighted layer a local block with k ghost neurons
/// per rank, its FLOPs, weights and collectives so.
llvm::Expected<Workload> phantomOf(const Workload &w, const Strategy &s);

/// The placement of a stage of a homogeneous step: its groups, and the
/// link to the next stage as stage 0 crosses it.
StagePlacement homogeneousPlacement(const Cluster &c, const Strategy &s);
/// Every stage's placement (simulateStep's and the lowering's), each
/// boundary on the link it really crosses: stage i's ranks send to the
/// ranks pp-stride further on, which share the node only when both stages
/// fit in one.
std::vector<StagePlacement> homogeneousStages(const Cluster &c,
                                              const Strategy &s);

/// The pipeline of replica group `g` of a placed heterogeneous strategy:
/// the Strategy its simulation runs (the most micro-batches of any of its
/// replicas) and each stage's placement (Hetero.cpp).
void groupPipeline(const Cluster &c, const HeteroStrategy &s, size_t g,
                   const std::vector<Pool> &pools, Strategy &st,
                   std::vector<StagePlacement> &at);

/// Whether the strategy's replica groups split the model alike (the same
/// stages, each with the same tp and layers; their pools may differ) inside
/// one site: their replicas then reduce each stage's gradients in one
/// data-parallel collective, with no reduction across groups after it.
/// Across sites the reduction stays two-level (inside each group, then
/// over the WAN).
bool alignedGroups(const Cluster &c, const HeteroStrategy &s);

} // namespace detail
} // namespace orrery

#endif // ORRERY_COSTMODEL_LIB_SIMULATION_H
