//===- Program.h - one training step as a program per rank ---------------===//
//
// The lowering (Lowering.h) writes a plan's step as one instruction stream
// per rank: GEMMs, fused attention, memory-bound kernels, collectives,
// point-to-point sends and receives, waits, allocations and the optimizer
// step, each on a stream with its dependencies, in the order the plan's
// schedule gives. The simulator prices the same op lowering and the same
// schedule; the runtime (runtime/) executes the programs; checkPrograms
// proves a set of them deadlock-free before anything runs
// (docs/runtime.md).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_PROGRAM_H
#define ORRERY_COSTMODEL_PROGRAM_H

#include "orrery/CostModel/Collective.h"
#include "orrery/CostModel/Hardware.h"

#include "llvm/Support/Error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace orrery {

enum class InstrKind {
  Gemm,       ///< batch x [m, k] x [k, n]
  Attention,  ///< a fused attention kernel (forward or backward)
  Kernel,     ///< a memory-bound kernel of a class (bytes, FLOPs)
  Collective, ///< all-reduce, all-gather, reduce-scatter, all-to-all
  Send,       ///< to a peer rank, matched by tag
  Recv,       ///< from a peer rank, matched by tag
  Wait,       ///< joins the streams named by its dependencies
  Alloc,      ///< a buffer of activations kept for the backward
  Free,
  Optimizer, ///< the optimizer step over the rank's shard
  /// Activations to host memory (`backward`: back from it), beside the
  /// compute that makes or reads them (activation offload).
  Copy,
};
constexpr int kInstrKinds = 11;
/// A copy's buffer when it moves what the rank holds all step (weights,
/// gradients: Program::staticBytes), not a buffer the step allocates.
constexpr int kHeldBuffer = -(1 << 30);

/// Streams a rank runs side by side; each runs its instructions in order.
enum class StreamKind {
  Compute,
  Comm,         ///< tensor, context and expert parallel collectives
  DataParallel, ///< gradient reduction and parameter gathers
  PipeSend,
  PipeRecv,
  HostCopy, ///< activations to and from host memory
};
constexpr int kStreamKinds = 6;

const char *instrKindName(InstrKind k);
const char *streamKindName(StreamKind s);
const char *collectiveKindName(CollectiveKind k);

struct Instruction {
  InstrKind kind = InstrKind::Kernel;
  StreamKind stream = StreamKind::Compute;
  /// What it runs ("matmul", "fused_attention", "gradient all-reduce") and
  /// the span it belongs to, named as the simulator's trace names them
  /// ("F3", "B0.1" for micro-batch 0 of chunk 1, "step").
  std::string name, span;
  /// Gemm: batch products of [m, k] x [k, n]; Attention: batch x heads
  /// queries of qLen over kvLen keys (kvHeads key-value heads), head and
  /// value dims, causal, backward. Send/Recv: `backward` marks a
  /// gradient (a pipeline message's direction: its queue, queueOf).
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t heads = 0, kvHeads = 0, qLen = 0, kvLen = 0, headDim = 0,
          valueDim = 0;
  bool causal = false, backward = false;
  int64_t window = 0; ///< Attention: a sliding window of keys (0: none)
  Precision precision = Precision::BF16;
  KernelClass kernelClass = KernelClass::Pointwise;
  /// FLOPs done; bytes moved (a kernel's memory traffic, a message's
  /// bytes per rank, a buffer's size).
  double flops = 0, bytes = 0;
  CollectiveKind collective = CollectiveKind::AllReduce;
  int group = -1;   ///< Collective: index into ProgramSet::groups
  int peer = -1;    ///< Send/Recv: the other rank
  int64_t tag = -1; ///< Send/Recv: equal on both sides
  int buffer = -1;  ///< Alloc/Free: the buffer's id on this rank
  /// Sends and receives issued together (one NCCL group, one Gloo batch):
  /// the index of the group's first instruction; they are consecutive on
  /// one stream. -1: alone.
  int p2pGroup = -1;
  /// Instructions of this rank on other streams that must finish first
  /// (the stream's own order is implied).
  std::vector<int> deps;
  /// Its price by the cost model.
  double predictedS = 0;
};

/// What an instruction waits in line behind: the instructions before it
/// on the same queue. A queue is a stream, except that pipeline sends and
/// receives have one queue per peer and direction (activations, gradients):
/// one link's messages of one direction go in micro-batch order on both of
/// its ranks, so a schedule that meets both neighbours in a different order
/// than they meet it (a V's stages) cannot block on the order of the other
/// link, as PyTorch's one NCCL communicator per pair of ranks does not.
struct Queue {
  StreamKind stream = StreamKind::Compute;
  int peer = -1;
  bool backward = false;
  bool operator<(const Queue &o) const {
    return std::tie(stream, peer, backward) <
           std::tie(o.stream, o.peer, o.backward);
  }
  bool operator==(const Queue &o) const {
    return stream == o.stream && peer == o.peer && backward == o.backward;
  }
};
Queue queueOf(const Instruction &in);
/// "pp-send to 3 (gradients)": a queue as people read it.
std::string queueName(const Queue &q);

/// One rank's step.
struct Program {
  int rank = 0;
  std::string device; ///< the catalog's device type
  int stage = 0;      ///< pipeline stage (of its replica group)
  int replicaGroup = 0;
  /// Coordinates: tp, cp, dp (replica), pp.
  int tpRank = 0, tp = 1, cpRank = 0, cp = 1, dpRank = 0, dp = 1;
  /// Weights, gradients, optimizer state and workspace: held all step.
  double staticBytes = 0;
  /// The plan's memory figure for this rank (the allowance is the set's).
  double predictedPeakBytes = 0;
  /// False for a rank a partial lowering left out (no code, no figures).
  bool lowered = true;
  std::vector<Instruction> code;
};

/// A program's queues: the compute stream, then the others in the order
/// their first instructions come; and
/// (indexOf) each instruction's queue among them.
std::vector<Queue> queuesOf(const Program &p,
                            std::vector<int> *indexOf = nullptr);

struct ProgramSet {
  int worldSize = 0;
  /// Communicator groups: ranks in the order collectives number them.
  std::vector<std::vector<int>> groups;
  std::vector<std::string> groupNames; ///< "tp", "dp", "cp", "ep", ...
  std::vector<Program> ranks;
  /// Memory a rank may hold above its predicted peak (fragmentation the
  /// cost model adds on top counts as inside the prediction).
  double memoryAllowanceBytes = 0;
  /// The plan's predicted step.
  double predictedStepS = 0;
  std::string schedule;
  /// Whether any rank of the plan sends point to point: between pipeline
  /// stages, and around a context-parallel ring (Comm stream). Every rank
  /// knows it from the strategy, so all agree on the world-wide contexts
  /// they make for them even when each lowered only its own program.
  bool pipeSends = false, ringSends = false;

  /// True when every rank's program is here (the offline whole-set check);
  /// false after a partial lowering (a rank and the peers it matches).
  bool whole() const;
};

/// A communicator's name from its members alone (sorted world ranks), the
/// same on every member whichever programs it lowered: "n4-1f3a...".
std::string groupKey(const std::vector<int> &members);

/// The ranks a rank's program must agree with: the peers of its sends and
/// receives, and in each of its groups the next member (going round, the
/// members of a group each comparing with the next prove the whole group
/// enters the same collectives when every rank checks itself).
std::vector<int> peersToMatch(const ProgramSet &set, int rank);

/// A rank's program as text, one instruction per line (docs/runtime.md).
std::string programText(const ProgramSet &set, int rank);

/// The static check (docs/runtime.md): every dependency earlier on the
/// rank; every send met by its receive (peer, tag and bytes); every
/// collective entered by all members of its group, in the same order, with
/// the same kind and bytes; the set runs to its end when each queue
/// (queueOf) executes in order, a send or receive waits for its partner and a
/// collective for its whole group (no deadlock, no cycle); no rank's
/// memory above its predicted peak plus the allowance. The error names the
/// rank and the instruction.
llvm::Error checkPrograms(const ProgramSet &set);

/// The check one rank makes at start-up from its own program and those of
/// peersToMatch (each lowered in `set`): its dependencies, its sends and
/// receives met by its peers' (tag, bytes, direction), its collectives the
/// same kinds and bytes in the same order as the next member's, its memory.
/// With every rank checking itself this covers the matching of the whole
/// set; freedom from deadlock needs every program and stays with
/// checkPrograms (`orrery lower`, offline).
llvm::Error checkRank(const ProgramSet &set, int rank);

/// The set as JSON (schema "orrery-programs", docs/runtime.md): what
/// `orrery lower --json` writes and `orrery-run` executes on a machine
/// without the compiler. A partial set lists its lowered ranks only.
nlohmann::ordered_json programSetJson(const ProgramSet &set);
/// And back; an error names the offending field.
llvm::Expected<ProgramSet> programSetFromJson(const nlohmann::json &j);

} // namespace orrery

#endif // ORRERY_COSTMODEL_PROGRAM_H
