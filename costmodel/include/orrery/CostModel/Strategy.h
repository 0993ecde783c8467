//===- Strategy.h - how a model is split across a cluster ----------------===//
//
// A plain C++ description of a parallel training strategy, written on the
// command line as "tp=8,pp=8,dp=16,mbs=1,gbs=1536,vpp=2,recompute=full".
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_STRATEGY_H
#define ORRERY_COSTMODEL_STRATEGY_H

#include "orrery/CostModel/Hardware.h"

#include "llvm/Support/Error.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace orrery {

struct Workload;
class Cluster;

/// ZeroBubbleH1: Qi et al.'s ZB-H1 (ICLR 2024): 1F1B with each backward
/// split into the input gradient (B) and the weight gradient (W), the W
/// passes deferred into the pipeline's idle time, at 1F1B's memory.
/// ZeroBubble2p: their ZB-2p (§3.2, §5), the schedule their Table 4 finds
/// fastest: 2(pp-i)-1 forwards before stage i's first B (at most 2pp
/// micro-batches in flight, twice 1F1B's activations), then B and F in
/// turn, each W run where the priced timeline leaves the stage idle (the
/// authors plan it from profiled times, as this does from priced ones) or
/// where a pending W would take the stage past 2pp micro-batches held.
/// ZeroBubbleV: their ZB-V (§6): two chunks per stage placed as a V (chunk
/// 0 down the stages, chunk 1 back up, the loss on stage 0), every
/// backward split into B and W, at 1F1B's memory (PyTorch's
/// ScheduleZBVZeroBubble order). DualPipeV: DeepSeek's DualPipe cut in
/// half (deepseek-ai/DualPipe dualpipev.py, PyTorch's ScheduleDualPipeV):
/// the same V, a forward of one chunk overlapped with the full backward of
/// the other in the steady state, W split off only where the bubble needs.
/// DualPipe: DeepSeek's bidirectional DualPipe (DeepSeek-V3 report §3.2.1,
/// deepseek-ai/DualPipe dualpipe.py): micro-batches enter from both ends of
/// the pipeline, half each way; rank r holds stage r of the one direction
/// and stage pp-1-r of the other (two copies of every stage's weights,
/// whose gradients the two holders reduce together), and ranks r and
/// pp-1-r run the same order, DualPipeV's on pp/2 ranks.
enum class Schedule {
  GPipe,
  OneFOneB,
  Interleaved,
  ZeroBubbleH1,
  ZeroBubble2p,
  ZeroBubbleV,
  DualPipeV,
  DualPipe,
  /// Layer-parallel training by multigrid reduction in time (MGRIT:
  /// Günther et al., SIAM J. Math. Data Sci. 2020; torchbraid): the
  /// stages' layers are the time steps of an ODE, forward and backward
  /// each solved by a few two-level MGRIT iterations instead of one pass.
  LayerParallelMgrit
};
/// Selective: Megatron-LM's (the attention core recomputed). Op:
/// torchtitan's per-op selective checkpointing (selective_ac_option "op"):
/// a block keeps its input and the outputs of scaled-dot-product attention
/// and of every other matmul (the first, third, ...), and its backward
/// recomputes the rest of its forward.
enum class Recompute { None, Selective, Full, Op };
/// What selective recompute checkpoints (`recompute_modules=A+B`, bits of
/// Strategy::recomputeModules): Megatron-Core's --recompute-modules.
/// core_attn: the attention core (the default). mla_up_proj: multi-head
/// latent attention's up-projections, rotary parts and the Q, K, V they
/// make (only the latents kept). moe_act: the experts' activation (fc2's
/// input dropped, fc1's output kept). mlp: a dense layer's whole MLP (its
/// input kept). moe: a mixture-of-experts layer's whole MLP: router,
/// dispatch, experts, combine, shared experts (its input kept; the
/// all-to-alls run again). shared_experts: the shared experts' MLP.
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1,
  kRecomputeMlaUpProj = 2,
  kRecomputeMoeAct = 4,
  kRecomputeMlp = 8,
  kRecomputeMoe = 16,
  kRecomputeSharedExperts = 32,
};
/// The modules' names in Megatron's spelling, in bit order.
extern const char *const kRecomputeModuleNames[6];
/// How context parallelism exchanges keys and values: Megatron-Core and
/// Transformer Engine's ring (KV blocks passed around the cp ranks while
/// the attention blocks compute), or DeepSpeed-Ulysses' all-to-all (heads
/// scattered, the sequence gathered, around the attention).
enum class CpComm { Ring, AllToAll };
/// How a mixture of experts moves its tokens to the expert-parallel ranks
/// (`moe_dispatcher`): Megatron-Core's alltoall dispatcher (each token's
/// top-k copies sent by NCCL's all-to-all, one per routed expert), or
/// DeepEP's normal kernels (Megatron-Core's flex dispatcher; NVIDIA's
/// HybridEP the same way): a token crosses the network once to each other
/// node it is routed to and is forwarded there over NVLink, and reaches
/// each rank once however many of its experts that rank holds.
enum class MoeDispatcher { AllToAll, DeepEP };
/// How Transformer Engine scales fp8 (`fp8_recipe`, Megatron-Core's
/// `--fp8-recipe`; precision=fp8 only, mxfp8 being its own recipe):
/// delayed scaling (a scale from the amax history; one pass casts a
/// tensor and records its amax; Megatron's default), current per-tensor
/// scaling (`tensorwise`: an amax pass over the tensor, then the cast), or
/// blockwise scaling (DeepSeek-V3's 1x128 activations and 128x128
/// weights, each block its own scale; one pass, and a GEMM that Hopper
/// runs emulated in software). docs/costmodel.md, "Precision".
enum class Fp8Recipe { Delayed, Tensorwise, Blockwise };

/// The largest `moe_imbalance` and `moe_capacity` accepted (a spread or a
/// padding beyond it is a mistake, not a routing).
constexpr double kMaxExpertLoad = 64;

struct Strategy {
  int tp = 1; ///< tensor parallel (Megatron column/row)
  int pp = 1; ///< pipeline stages
  int dp = 0; ///< data parallel; 0 = the devices left over
  int cp = 1; ///< context parallel
  CpComm cpComm = CpComm::Ring;
  int ep = 1; ///< expert parallel (inside dp)
  MoeDispatcher dispatcher = MoeDispatcher::AllToAll;
  /// Expert tensor parallelism (Megatron-Core's MoE parallel folding):
  /// 0 = tp, the experts split as the dense layers are; 1 = each expert
  /// whole on a device, the ep group drawn from the tp x dp ranks.
  int etp = 0;
  int expertTp() const { return etp > 0 ? etp : tp; }
  /// Whether the experts fold tensor parallelism into expert parallelism
  /// (etp 1 under tp > 1).
  bool expertsFolded() const { return expertTp() != tp; }
  /// Mixture of experts: the busiest expert-parallel rank's routed tokens
  /// over the mean (`moe_imbalance`: what the router's auxiliary loss
  /// leaves; every rank of the ep group waits for that one), and the
  /// experts' capacity factor (`moe_capacity`; 0: dropless, the graph's
  /// tokens): each expert takes capacity x its mean share, the tokens above
  /// dropped and the buffer padded below (Megatron-Core's
  /// --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity).
  double moeImbalance = 1, moeCapacity = 0;
  /// The tokens the busiest device's experts run and its all-to-alls move,
  /// over the balanced mean: the capacity when one is set, else the
  /// imbalance under ep > 1 (a device holding every expert runs all the
  /// tokens whatever their spread).
  double expertLoad() const {
    return moeCapacity > 0 ? moeCapacity : ep > 1 ? moeImbalance : 1.0;
  }
  bool sequenceParallel = false;
  /// Let the tensor-parallel group split the batch of the ops whose layout
  /// for micro-batches that split over the group does so (a CNN's conv
  /// stages); otherwise tp means Megatron's feature splits alone.
  bool tpBatchSplit = false;
  int virtualStages = 1; ///< interleaved 1F1B chunks per device
  Schedule schedule = Schedule::OneFOneB;
  /// The V-shaped placement of ZB-V and DualPipeV: chunk c < pp on stage
  /// c, chunk c >= pp on stage 2pp - 1 - c.
  bool vShape() const {
    return pp > 1 && (schedule == Schedule::ZeroBubbleV ||
                      schedule == Schedule::DualPipeV);
  }
  /// The stage pipeline chunk `chunk` runs on.
  int stageOfChunk(int chunk) const {
    return vShape() && chunk >= pp ? 2 * pp - 1 - chunk : chunk % pp;
  }
  /// The k-th chunk (in model order) of stage `stage`.
  int chunkOnStage(int stage, int k) const {
    return vShape() ? (k == 0 ? stage : 2 * pp - 1 - stage) : k * pp + stage;
  }
  /// Whether the schedule splits backwards into input and weight
  /// gradients (B and W tasks).
  bool splitsWeightGradients() const {
    return pp > 1 && (schedule == Schedule::ZeroBubbleH1 ||
                      schedule == Schedule::ZeroBubble2p ||
                      schedule == Schedule::ZeroBubbleV ||
                      schedule == Schedule::DualPipeV ||
                      schedule == Schedule::DualPipe);
  }
  /// The strategy a DualPipe step is simulated as (one place:
  /// dualPipeFolded in Strategy.cpp): DualPipeV over pp/2 stages, each
  /// stage r standing for ranks r and pp-1-r, with twice the replicas of
  /// half the micro-batches each (every chunk then has 2 x dp holders).
  Strategy dualPipeFolded() const;
  int64_t microBatch = 1;
  int64_t globalBatch = 0; ///< 0 = micro batch x dp (one micro-batch)
  int zeroStage = 0;
  Recompute recompute = Recompute::None;
  /// Full recompute of only the first K repeated layers of each pipeline
  /// chunk (Megatron-LM's --recompute-method block --recompute-num-layers
  /// K); 0: every one.
  int recomputeLayers = 0;
  /// The layer kinds recompute applies to (`recompute_kinds=A+B`, the
  /// model's kind names as `orrery stats` lists them); empty: every
  /// repeated kind.
  std::vector<std::string> recomputeKinds;
  /// With recompute=selective, the modules it checkpoints (RecomputeModule
  /// bits); 0 means the default, the attention core.
  unsigned recomputeModules = 0;
  /// The modules selective recompute checkpoints, none without it.
  unsigned selectiveModules() const {
    if (recompute != Recompute::Selective)
      return 0;
    return recomputeModules ? recomputeModules : unsigned(kRecomputeCoreAttn);
  }
  /// Subnetwork data parallelism (`sdp=F`, Singh et al., arXiv 2507.09029,
  /// block-level SDP with forward masking): each data-parallel worker holds
  /// and runs F of the model's repeated blocks (the others pass through
  /// their skip connections), every block on F x dp workers, whose
  /// gradients are averaged over those workers alone; 0: off.
  double subnetworkFraction = 0;
  /// SDP's backward masking (`sdp_mask=backward`): every worker runs the
  /// whole forward and passes input gradients through every block, but
  /// computes weight gradients (and keeps gradients and optimizer state)
  /// for its subnetwork's blocks only. false: forward masking.
  bool subnetworkBackwardMask = false;
  /// schedule=mgrit: the coarsening factor (fine steps per coarse step)
  /// and the MGRIT iterations of the forward and of the backward solve.
  int mgCoarsening = 4, mgIterations = 2;
  /// Whether recompute applies to layers of kind `name`.
  bool recomputesKind(const std::string &name) const {
    return recomputeKinds.empty() ||
           std::find(recomputeKinds.begin(), recomputeKinds.end(), name) !=
               recomputeKinds.end();
  }
  bool offloadOptimizer = false;
  bool offloadActivations = false;
  /// PatrickStar's chunk-based memory management (`chunks=M`: chunks of M
  /// million elements; Fang et al., "Parallel Training of Pre-trained
  /// Models via Chunk-based Dynamic Memory Management", TPDS 2022): the
  /// model data in fixed-size chunks sharded over dp, placed on the device
  /// where the activations leave room and on the host otherwise
  /// (ChunkedMemory.cpp); 0: off.
  int64_t chunkParams = 0;
  /// Phantom parallelism (`phantom=k`; Seal et al., arXiv 2508.00960) in
  /// place of tensor parallelism for feed-forward layers: k ghost neurons
  /// per rank carry each layer's cross-rank connections (Phantom.cpp); 0:
  /// off.
  int phantomGhosts = 0;
  Precision precision = Precision::BF16;
  Fp8Recipe fp8Recipe = Fp8Recipe::Delayed;
  /// Layers per pipeline stage (model layers, embedding and head counted as
  /// layers); empty = as even as the layer costs allow.
  std::vector<int> stageLayers;
  /// The device mapping: parallel axes from fastest-varying rank to
  /// slowest (Megatron-LM's --order). The default keeps tensor parallelism
  /// inside a node and puts pipeline stages across nodes.
  std::vector<std::string> order = {"tp", "cp", "dp", "pp"};
  /// Communication overlapped with compute, as the frameworks offer it
  /// (`overlap=grad+param+tp+p2p`, docs/strategy.md): the data-parallel
  /// gradient reduction with the last micro-batch's backward (Megatron's
  /// --overlap-grad-reduce, DDP's buckets); the distributed optimizer's
  /// parameter all-gather with the next step's forward
  /// (--overlap-param-gather); tensor-parallel collectives with the GEMMs
  /// they feed (Megatron-Core's --tp-comm-overlap); pipeline sends with the
  /// next chunk's compute (--overlap-p2p-communication, interleaved only);
  /// the expert all-to-alls of one micro-batch with another's compute
  /// (Megatron-Core's --overlap-moe-expert-parallel-comm, `ep`).
  bool overlapGradReduce = true, overlapParamGather = true,
       overlapTpComm = false, overlapP2p = false, overlapEp = false;
  /// "grad+param" style, "none" when nothing overlaps.
  std::string overlapName() const;

  /// Distance in ranks between neighbours of one axis under `order`.
  int stride(const std::string &axis) const;
  int degree(const std::string &axis) const;

  int64_t microBatches() const { return globalBatch / (microBatch * dp); }
  /// "tp=8,pp=8,dp=16,..." with every field.
  std::string str() const;
};

/// Names as the command line and plans write them, and back (nullopt for
/// an unknown name).
const char *scheduleName(Schedule s);
const char *recomputeName(Recompute r);
const char *cpCommName(CpComm c);
/// "alltoall" or "deepep".
const char *moeDispatcherName(MoeDispatcher d);
/// "delayed", "tensorwise" or "blockwise" (Megatron-Core's names).
const char *fp8RecipeName(Fp8Recipe r);
std::optional<Fp8Recipe> fp8RecipeFromName(const std::string &name);
std::optional<Schedule> scheduleFromName(const std::string &name);
std::optional<Recompute> recomputeFromName(const std::string &name);
/// Sets `bits` to the RecomputeModule bits of Megatron's module names;
/// returns why not (one line) or "".
std::string recomputeModuleBits(const std::vector<std::string> &names,
                                unsigned &bits);
std::optional<Precision> precisionFromName(const std::string &name);

/// The most micro-batch executions (micro-batches of a replica times
/// pipeline chunks) one step may have: the simulator runs each as an
/// event, and a larger count is a typo, not a training run.
constexpr int64_t kMaxStepTasks = 20'000'000;
/// The most the planners simulate per candidate: a search prices thousands
/// of candidates, each micro-batch an event, so candidates with more are
/// skipped and a global batch that leaves every candidate more is refused
/// (a global batch of 10^9 samples plans in no time: it is an error).
constexpr int64_t kMaxPlanStepTasks = 65'536;

/// The most devices a cluster has (4,194,304: forty times today's largest
/// training clusters). Every degree of a strategy is at most this, on every
/// reader, so no degree wraps when it is narrowed to an int.
constexpr int64_t kMaxDevices = int64_t(1) << 22;
/// The most samples a micro-batch or a global batch holds (2^40): with a
/// degree at most kMaxDevices, mbs x dp fits in 63 bits.
constexpr int64_t kMaxBatchSamples = int64_t(1) << 40;
/// The largest value strategy field `key` takes (its name on the command
/// line or in a plan): kMaxDevices for the degrees and the counts of layers,
/// chunks and iterations, kMaxBatchSamples for the batches. One table for
/// --strategy and the plan readers; the products of bounded fields are
/// checked again where they are formed (completeAndValidate).
int64_t strategyFieldLimit(const std::string &key);
/// a x b x ..., or -1 once the product passes `limit` (every factor is at
/// least 1, so it never comes back under it): a product of read integers
/// formed without overflow.
int64_t boundedProduct(std::initializer_list<int64_t> factors, int64_t limit);

/// Parses "key=value,..."; unknown keys and bad values are errors naming them.
llvm::Expected<Strategy> parseStrategy(const std::string &text);

/// Fills dp and globalBatch defaults and checks the strategy against the
/// model and the cluster: degrees that multiply to the device count, tp and
/// cp dividing the attention heads, the micro-batch dividing the batch, ...
llvm::Error completeAndValidate(Strategy &s, const Workload &w,
                                const Cluster &c);

} // namespace orrery

#endif // ORRERY_COSTMODEL_STRATEGY_H
