//===- Simulator.h - one training step, event by event -------------------===//
//
// Prices a Workload under a Strategy on a Cluster: compute per op (a
// roofline with an efficiency curve), tensor-parallel collectives on the
// critical path, pipeline transfers, the pipeline schedule simulated task by
// task, data-parallel gradient reduction overlapped with the last backward,
// the optimizer step; memory per device with its breakdown.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_SIMULATOR_H
#define ORRERY_COSTMODEL_SIMULATOR_H

#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/LayerProfile.h"
#include "orrery/CostModel/Strategy.h"
#include "orrery/CostModel/Workload.h"

#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace orrery {

/// The model's stated assumptions (docs/costmodel.md); a measured profile
/// replaces them.
struct Assumptions {
  /// Kernel speeds on a device without a measured profile (KernelModel's
  /// defaults): big GEMMs reach 80 % of peak, one whose duration at peak is
  /// 15 µs half of that (launch, tail and wave quantization), memory-bound
  /// kernels their class's share of HBM bandwidth as measured on an H200,
  /// 3 µs per kernel.
  KernelModel kernels;
  /// Use a device's measured kernel profile where the catalog has one.
  bool useMeasuredKernels = true;
  /// Megatron-LM accumulates each weight gradient into its fp32 main
  /// gradient inside the weight-gradient GEMM (gradient_accumulation_fusion).
  /// Otherwise (PyTorch hooks, DeepSpeed's bf16 optimizer) a kernel per
  /// weight tensor reads the main gradient and the 16-bit gradient and
  /// writes the sum, every micro-batch.
  bool fusedGradientAccumulation = true;
  /// The kernels the framework runs (`--kernels`); the workload must have
  /// been built for the same (Workload::kernels).
  KernelFusion fusion = KernelFusion::Fused;
  /// How the training loss's softmax cross-entropy holds memory beyond the
  /// fp32 probabilities its backward keeps: false, 2 bytes a logit (the
  /// 16-bit logits while Megatron-LM's vocab-parallel cross-entropy casts
  /// them and works in place, or a compiled loss); true, 6 (PyTorch's
  /// cross_entropy on logits.float() uncompiled, as torchtitan ran it in
  /// 2024: the 16-bit logits, their fp32 copy and the log-softmax alive at
  /// once, and as much again in its backward).
  bool lossFp32Copy = false;
  /// Plain PyTorch (KernelFusion::Eager) dispatches every op from the
  /// host: Python, the autograd and ATen dispatchers and the launch take
  /// 5–25 µs per op, so a kernel shorter than that waits for the host. 10 µs
  /// per kernel, forward and backward.
  double hostDispatchS = 10e-6;
  /// The stack's measured forward time of the model's repeated layer
  /// (`--layer-profile`, LayerProfile.h): what the device model does not
  /// explain there is host time each such layer adds, forward and
  /// backward, on the devices and tp degrees it measures.
  std::shared_ptr<const LayerProfile> layerProfile;
  /// What a pipeline stage sends the next one, per micro-batch. Megatron-LM
  /// (and DeepSpeed's pipeline engine with its pipe_partitioned and
  /// grad_partitioned defaults) splits the boundary tensor over the
  /// tensor-parallel ranks both ways and all-gathers it at the receiver.
  /// With `pipelineWholeGradients` every tensor-parallel rank sends the
  /// whole gradient back (DeepSpeed's grad_partitioned false, hard-coded
  /// in DeepSpeed 0.3: `--pipeline-gradients whole`). With
  /// `pipelineAttentionMask` the [1, 1, s, s] causal mask travels beside
  /// every activation in fp16, from every tensor-parallel rank (the GPT
  /// pipeline models of DeepSpeed's Megatron examples and of
  /// Megatron-DeepSpeed pass (hidden, mask) between stages:
  /// `--pipeline-mask`).
  bool pipelineWholeGradients = false, pipelineAttentionMask = false;
  const KernelModel &kernelsFor(const DeviceSpec &d) const {
    return useMeasuredKernels && d.measuredKernels ? *d.measuredKernels
                                                   : kernels;
  }
  /// Bytes per parameter for mixed-precision Adam: 2 weights + 4 fp32
  /// gradients + 12 optimizer (fp32 master, momentum, variance).
  double weightBytesPerParam = 2, gradBytesPerParam = 4,
         optimizerBytesPerParam = 12;
  /// Bytes per gradient element on the wire when gradients are reduced
  /// (data-parallel, ZeRO and cross-group reductions; the tied weights'
  /// reduction between stages moves the kept bytes); 0: the kept
  /// gradients' own (gradBytesPerParam). DeepSpeed's `fp32_allreduce` /
  /// `communication_data_type: fp32` reduces 16-bit gradients in fp32.
  double gradReduceBytesPerParam = 0;
  /// Parameters per gradient bucket of an overlapped reduction
  /// (Megatron-Core's DDP: max(40M, 1M x dp); a tensor is never split, so
  /// a larger one is a bucket of its own). The last bucket to fill (the
  /// stage's first layer) has no backward left to hide behind, nor the
  /// first one to gather a forward before it.
  double gradBucketParams = 40e6, gradBucketParamsPerRank = 1e6;
  double gradReduceBytes() const {
    return gradReduceBytesPerParam > 0 ? gradReduceBytesPerParam
                                       : gradBytesPerParam;
  }
  /// ZeRO-3's prefetch: parameters gathered ahead of their use. 0: the
  /// next layer whole, as FSDP prefetches its next unit (and the DeepSpeed
  /// export sets stage3_prefetch_bucket_size to); DeepSpeed's default
  /// stage3_prefetch_bucket_size is 5e7, so a larger layer's gather is
  /// mostly on demand, exposed (`--zero3-prefetch-params`).
  double zero3PrefetchParams = 0;
  /// Workspace (CUDA context, cuBLAS and NCCL buffers) and fragmentation.
  double workspaceBytes = 1.5 * (1ull << 30);
  /// A device's own workspace where the catalog states one.
  double workspaceFor(const DeviceSpec &d) const {
    return d.workspaceBytes > 0 ? d.workspaceBytes : workspaceBytes;
  }
  double fragmentation = 0.05;
  /// Device memory no plan may use, as a fraction of it (`--memory-headroom`):
  /// the caching allocator's fragmentation beyond the activations' 5 % and
  /// what the stack allocates that no term prices (GMLake measures 15 % of
  /// used memory lost to fragmentation on average over eight LLM setups on
  /// A100-80GB, up to 33 %, docs/memory-sources.md §5). A step above the
  /// rest does not fit.
  double memoryHeadroom = 0.05;
  /// Which weights train (`--freeze`, `--lora`): the workload must have
  /// been built with the same (Workload::fineTuning).
  FineTuning fineTuning;
  /// A straggler: the devices of this pipeline stage compute
  /// `stragglerSlowdown` times slower (one slow device holds its
  /// tensor-parallel peers at every collective and its stage's replicas at
  /// the gradient reduction, so its stage runs at its pace); -1: none.
  /// Not a plan field: what `plan` reports beside a plan (Stragglers.h).
  int stragglerStage = -1;
  double stragglerSlowdown = 1;
};

/// Seconds of `kernels` kernels of class `c` doing `flops` (on tensor
/// cores for a GEMM, else fp32 vector units) and moving `bytes` on `dev`:
/// the roofline of docs/costmodel.md. `weightBytes` (of `bytes`) is a
/// GEMM's weight matrix: its stream and the tensor-core work on it run one
/// after the other when the stream dominates (docs/costmodel.md, "A
/// GEMM's weight stream").
double kernelSeconds(const DeviceSpec &dev, const KernelModel &k,
                     Precision precision, double flops, double bytes,
                     KernelClass c, int kernels, double weightBytes = 0);

/// Seconds of a fused attention kernel doing `flops` and moving `bytes`,
/// each query row visiting `keysPerQuery` keys (KernelModel's attention
/// efficiency curve).
double attentionSeconds(const DeviceSpec &dev, const KernelModel &k,
                        Precision precision, double flops, double bytes,
                        double keysPerQuery, bool backward);

struct MemoryBreakdown {
  double weightsBytes = 0, gradientsBytes = 0, optimizerBytes = 0;
  double activationsBytes = 0, workspaceBytes = 0;
  double total() const {
    return weightsBytes + gradientsBytes + optimizerBytes + activationsBytes +
           workspaceBytes;
  }
};

/// One span on the timeline.
struct TraceEvent {
  int track = 0; ///< pipeline stage (a device group of one stage)
  std::string name, category;
  double startS = 0, durationS = 0;
};

/// Seconds one device spends per step on each activity of PowerByActivity
/// (they sum to the step).
struct ActivitySeconds {
  double gemmS = 0, memoryBoundS = 0, communicationS = 0, idleS = 0;
  /// Joules at `power`, per device.
  double joules(const PowerByActivity &power) const {
    return gemmS * power.gemmW + memoryBoundS * power.memoryBoundW +
           communicationS * power.communicationW + idleS * power.idleW;
  }
};

/// A step's energy by activity, over every device of the cluster.
struct EnergyByActivity {
  double gemmJ = 0, memoryBoundJ = 0, communicationJ = 0, idleJ = 0;
  /// A device type of the step without a known power: the joules above
  /// then leave its devices out, and no energy is reported.
  std::string unknownFor;
  bool known() const { return unknownFor.empty(); }
  void add(const ActivitySeconds &t, const PowerByActivity &power,
           double devices) {
    if (!power.known() && unknownFor.empty() && devices > 0)
      unknownFor = power.unknownFor;
    gemmJ += devices * t.gemmS * power.gemmW;
    memoryBoundJ += devices * t.memoryBoundS * power.memoryBoundW;
    communicationJ += devices * t.communicationS * power.communicationW;
    idleJ += devices * t.idleS * power.idleW;
  }
  double total() const {
    return gemmJ + memoryBoundJ + communicationJ + idleJ;
  }
};

struct StageReport {
  int firstLayer = 0, numLayers = 0;
  int tp = 1;      ///< tensor-parallel degree of the stage
  int devices = 0; ///< devices of the stage over all replicas (tp x cp x dp)
  std::string label; ///< the trace's name for it ("stage N" when empty)
  double forwardS = 0, backwardS = 0; ///< per micro-batch, all its chunks
  /// Of backwardS, the weight gradients (a zero-bubble schedule's W).
  double weightGradS = 0;
  MemoryBreakdown memory;
  double capacityBytes = 0;
  std::string device;
  /// What one device of the stage does over the step, and the power it
  /// draws doing it.
  ActivitySeconds activity;
  PowerByActivity power;
};

/// The kernels of one layer kind as priced on the first pipeline stage's
/// devices: per kernel name, how many run in one instance and their seconds
/// per micro-batch (forward, and backward with recompute), and the
/// activations one instance keeps per micro-batch and device.
struct KernelTime {
  std::string name;
  int count = 0;
  double forwardS = 0, backwardS = 0;
};
struct LayerBreakdown {
  std::string kind;
  int64_t count = 0;
  double forwardS = 0, backwardS = 0, keptBytes = 0;
  std::vector<KernelTime> kernels;
};

struct StepResult {
  Strategy strategy;
  double stepS = 0;
  double tokensPerS = 0, samplesPerS = 0;
  double modelFlopsPerStep = 0;    ///< forward + backward, no recompute
  double hardwareFlopsPerStep = 0; ///< with recompute
  double modelTflopsPerDevice = 0, mfu = 0, hfu = 0;
  double bubbleFraction = 0;
  /// Time breakdown of the slowest device (sums to stepS).
  double computeS = 0, exposedTpCommS = 0, exposedCpCommS = 0,
         exposedPpCommS = 0, exposedDpCommS = 0, bubbleS = 0, optimizerS = 0;
  /// Context parallelism's transfers on the slowest stage, exposed or not
  /// (exposedCpCommS is the part compute does not hide).
  double cpTransferS = 0;
  /// Mixture of experts: the dispatch and combine all-to-alls on the
  /// slowest stage (exposed: nothing overlaps them).
  double exposedEpCommS = 0;
  /// Model data moved between host and device memory on the critical path
  /// (PatrickStar's chunks, `chunks=`); part of the step.
  double hostTransferS = 0;
  std::vector<StageReport> stages;
  /// Layers per pipeline chunk (pp x vpp chunks in model order; chunk c
  /// runs on stage c % pp).
  std::vector<int> chunkLayers;
  /// Per layer kind: forward + backward (with recompute) seconds of one
  /// micro-batch on one device, for balancing pipeline stages.
  std::vector<double> kindSecondsPerMicroBatch;
  /// The same per pipeline stage (stages may differ in device and tp), with
  /// the parameters one layer of each kind puts on a device of the stage
  /// (tp-split ones divided) and the activation bytes it keeps per
  /// micro-batch.
  std::vector<std::vector<double>> stageKindSeconds, stageKindParams,
      stageKindKeptBytes;
  /// Bytes chunk i sends to chunk i+1 and chunk i+1 back to it, per
  /// micro-batch and replica (all their tp ranks together: the activation
  /// and its gradient, and what the pipeline sends besides, Assumptions).
  std::vector<double> boundaryBytesPerMicroBatch;
  /// Device types whose kernels were priced with their measured profile
  /// (empty: the stated assumptions everywhere).
  std::vector<std::string> measuredKernelDevices;
  /// The framework assumptions the step was priced with (a plan records
  /// them: AssumptionFields.h, and the layer profile).
  Assumptions assumptions;
  /// "sharp" or "switchml" where the gradient all-reduce was priced
  /// through the switches' aggregation (the launch must enable it), else "".
  std::string inNetworkAggregation;
  /// Devices without tensor cores for the strategy's precision, whose
  /// GEMMs were priced at their fp32 rate (bf16 on a V100).
  std::vector<std::string> precisionFallbackDevices;
  double peakMemoryBytes = 0; ///< largest over devices
  /// Host memory per node the offloaded optimizer state takes (largest over
  /// nodes; 0 without offload).
  double hostMemoryBytesPerNode = 0;
  /// The largest memory need minus capacity over stages (<= 0 when it fits).
  double memoryShortfallBytes = 0;
  bool fits = true;
  /// Above simulateStep's bound: the schedule was not run and the time
  /// breakdown is incomplete (memory is exact). stepS is a lower bound of
  /// this step (its stages' tasks after the first micro-batch's way down
  /// to them, and back for GPipe and 1F1B), stepS - bubbleS one of any
  /// split of its layers and of its zero-bubble schedules (the stages'
  /// mean busy time; not DualPipe's overlapped pairs).
  bool pruned = false;
  /// Pruned before its layout (Simulation::leastBusyS): only stepS is
  /// priced, the stages' mean busy time of every layer's forward and
  /// backward without recompute, a bound of this step under any split,
  /// schedule (not DualPipe's pairs), recompute, memory saver or
  /// activation offload; memory is not priced (`fits` says nothing).
  bool boundOnly = false;
  std::string doesNotFit; ///< the reason when !fits
  /// Energy: every device of the plan at its power by activity; cost:
  /// the devices' price per hour over the step.
  double energyJ = 0, costUsd = 0;
  EnergyByActivity energy;
  std::vector<TraceEvent> trace;
  /// Per layer kind, with the trace (keepTrace).
  std::vector<LayerBreakdown> layers;
};

/// Where one pipeline stage runs: the device type and node group, the
/// stage's tensor-parallel degree, and the shapes of its tensor and data
/// parallel groups and of the transfer to the next stage.
struct StagePlacement {
  const DeviceSpec *device = nullptr;
  const NodeGroup *group = nullptr;
  int tp = 1;
  /// dpGroup: the ranks that reduce gradients (dp x cp: context-parallel
  /// ranks hold the same weights); cpGroup: the context-parallel ring.
  GroupShape tpGroup, dpGroup, toNext, cpGroup;
  /// Expert parallelism: the ranks that split the experts, and those that
  /// reduce the experts' gradients (dp x cp / ep).
  GroupShape epGroup, expertDpGroup;
  /// Subnetwork data parallelism: the F x dp workers holding a block.
  GroupShape subnetworkGroup;
};

/// The shape of a group of `ranks` ranks `stride` apart on nodes of `group`.
GroupShape groupShapeIn(const NodeGroup &group, int stride, int ranks);
/// Where a strategy's groups sit on a homogeneous cluster: the shapes the
/// simulator prices them with (every stage's, its first node group's).
StagePlacement placementOf(const Cluster &c, const Strategy &s);
/// One stage of `tp` ranks on nodes of `group`, alone (no data-parallel
/// peers, nothing to send): the other groups are the caller's to set.
StagePlacement stageOn(const NodeGroup &group, int tp);

/// How much of a step to work out: all of it, or (for searches that price
/// thousands and re-price the plans they keep) everything but the split of
/// the idle time into bubble and pipeline transfers, which takes a second
/// run of the schedule (the idle time is then all bubble).
enum class Detail { Full, StepTime };

/// Simulates one step. Fails with a one-line message when the strategy does
/// not apply to this model or cluster.
/// `boundS` (Detail::StepTime, a search's bar): when a lower bound of this
/// step is above it, the schedule is not run and the result is `pruned`.
llvm::Expected<StepResult>
simulateStep(const Workload &w, const Cluster &c, Strategy s,
             const Assumptions &a = {}, bool keepTrace = false,
             Detail detail = Detail::Full,
             double boundS = std::numeric_limits<double>::infinity());

/// Simulates one pipeline, replicated s.dp times, whose stages run where
/// `stages` says (s.tp is ignored: each stage has its own). The building
/// block of heterogeneous plans (Hetero.h).
llvm::Expected<StepResult>
simulatePipeline(const Workload &w, const Strategy &s,
                 const std::vector<StagePlacement> &stages,
                 const Assumptions &a = {}, bool keepTrace = false);

/// Chrome-trace / Perfetto JSON: one track (tid) per pipeline stage.
/// `description` names the strategy (r.strategy's own when empty).
std::string chromeTraceJson(const StepResult &r,
                            const std::string &description = "");

} // namespace orrery

#endif // ORRERY_COSTMODEL_SIMULATOR_H
