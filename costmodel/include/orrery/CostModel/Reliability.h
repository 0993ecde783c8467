//===- Reliability.h - failures, checkpoints and the goodput of a run -*- C++
//-*-===//
//
// A synchronous training job stops whole when any of its devices, hosts,
// links or processes fails: the failure is detected, the job restarts from
// its last durable checkpoint and the work since then is done again. The
// cluster spec's `reliability` object states the failure rates per device,
// node and category, detection and restart times, the checkpoint storage's
// bandwidth and the spare pool (docs/reliability.md; the defaults are the
// Llama 3 405B run's published figures, docs/reliability-sources.md). From
// them and a priced step: the checkpoint's bytes and stall, the interval
// Daly's higher-order formula makes optimal, the expected effective
// training time ratio (ETTR) and the time to train a token budget.
// FailureSimulation.h draws the same run's failures one by one.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_COSTMODEL_RELIABILITY_H
#define ORRERY_COSTMODEL_RELIABILITY_H

#include "llvm/Support/Error.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace orrery {

/// Failure categories: how their rate scales with the job.
enum class FailureKind { Gpu, Host, Network, Software };
constexpr int kFailureKinds = 4;
const char *failureKindName(FailureKind k);

/// The reliability of a cluster as built (the cluster spec's `reliability`).
struct ReliabilitySpec {
  /// Unexpected interruptions per hour: the GPU's own (faulty GPU, HBM,
  /// SRAM, GSP, silent data corruption, thermal) per device; the host's
  /// (unplanned host maintenance, SSD, power supply, chassis, IO board,
  /// CPU, DRAM) per node; the network's (switches, cables, NICs) per
  /// device, one NIC a GPU as on the rail-optimised fabrics; software
  /// (bugs, NCCL watchdog timeouts, dependencies) per node, each process
  /// able to fail. Defaults: Llama 3's 419 interruptions in 54 days on
  /// 16,384 H100 (Table 5), by category.
  double gpuFailuresPerDeviceHour = 268.0 / (16384.0 * 54 * 24);
  double hostFailuresPerNodeHour = 46.0 / (2048.0 * 54 * 24);
  double networkFailuresPerDeviceHour = 42.0 / (16384.0 * 54 * 24);
  double softwareFailuresPerNodeHour = 63.0 / (2048.0 * 54 * 24);
  /// Planned interruptions (automated maintenance: the job checkpoints,
  /// stops and restarts) per node and day: Llama 3's 47 in 54 days.
  double plannedInterruptionsPerNodeDay = 47.0 / (2048.0 * 54);
  /// From a failure to the restart's start: MegaScale's detection and
  /// diagnosis "within 10 minutes" at over 10,000 GPUs (PyTorch's NCCL
  /// watchdog also times a hang out at 10 minutes).
  double detectionS = 600;
  /// From the restart's start to the first step, checkpoint load excluded
  /// (rescheduling, process start, communicators, model build): MegaScale's
  /// initialization under 30 s at over 10,000 GPUs. Research clusters
  /// without such tooling take 5-20 minutes (Kokolis et al. 2024).
  double restartS = 30;
  /// The checkpoint storage: its aggregate write and read bandwidth, and
  /// what one node's storage network carries.
  double storageWriteBytesPerS = 2e12, storageReadBytesPerS = 2e12;
  double nodeStorageBytesPerS = 50e9;
  /// What one device hands its checkpoint shard over at, to host memory
  /// and the writer (the stack's copy and serialization, below PCIe's
  /// rate): ByteCheckpoint's 0.59 s stall for a 405B model's shards on
  /// 8,960 GPUs (NSDI '25, Table 8), 633 MB each.
  double checkpointCopyBytesPerS = 405e9 * 14 / 8960 / 0.59;
  /// Nodes kept beside the job to replace failed ones, and how long a
  /// failed node is out (0: the pool always has a healthy one, nothing
  /// waits). Only the Monte-Carlo run (FailureSimulation.h) prices waiting.
  int spareNodes = 0;
  double nodeRepairS = 0;
  /// Where the figures come from (printed with them).
  std::string source = "Llama 3 405B on 16,384 H100 (Dubey et al. 2024, "
                       "section 3.3.4 and Table 5)";

  /// The job's unexpected interruptions per hour, and by kind.
  double failuresPerHour(int devices, int nodes) const;
  double failuresPerHour(FailureKind k, int devices, int nodes) const;
};

/// Reads a cluster spec's `reliability` object over the defaults; errors
/// name the field (`path` prefixes them).
namespace detail {
llvm::Error readReliability(const nlohmann::json &j, const std::string &path,
                            ReliabilitySpec &out);
}

/// How the job checkpoints.
struct CheckpointPolicy {
  /// The state is copied to host memory while training stops and written
  /// behind the next steps (torch DCP's async_save, Megatron's
  /// --async-save); else written while training stops (both stacks'
  /// default).
  bool async = false;
  /// Steps between checkpoints; 0: the optimum (Daly's).
  int64_t everySteps = 0;
};

/// What a priced plan brings to its goodput.
struct GoodputInputs {
  int devices = 0, nodes = 0, devicesPerNode = 1;
  double stepS = 0, tokensPerStep = 0;
  /// The checkpoint: every trainable weight and its optimizer state once
  /// (replicas written once, as torch DCP and Megatron's distributed
  /// checkpoint de-duplicate them), frozen weights not at all.
  double checkpointBytes = 0;
  /// Read back at a restart: the checkpoint and the frozen weights.
  double restartReadBytes = 0;
  /// A device's copy to host memory (the async checkpoint's staging).
  double deviceToHostBytesPerS = 0;
  /// Host memory per node, for the async checkpoint's pinned copy (0:
  /// unknown, not checked).
  double hostMemoryBytesPerNode = 0;
  double priceUsdPerDeviceHour = 0;
};

struct GoodputEstimate {
  double failuresPerHour = 0;
  double failuresPerHourByKind[kFailureKinds] = {};
  double plannedPerHour = 0;
  /// One checkpoint: training stopped for it, and the write's duration.
  double checkpointStallS = 0, checkpointWriteS = 0;
  /// Steps between checkpoints, and that in seconds of training.
  int64_t intervalSteps = 0;
  double intervalS = 0;
  /// Each failure: detection + restart + checkpoint load; what is lost
  /// on average besides (the work since the last durable checkpoint).
  double restartS = 0, loadS = 0;
  /// Expected fraction of wall time training advances (ETTR), and where
  /// the rest goes (fractions of wall time).
  double ettr = 0;
  double lostWorkFraction = 0, downtimeFraction = 0, checkpointFraction = 0,
         plannedFraction = 0;
  /// Training throughput counting failures.
  double effectiveTokensPerS = 0;
};

/// The expected goodput of `in` on a cluster of `spec`. Errors: a
/// checkpoint that cannot be written as often as asked, an async
/// checkpoint the hosts cannot hold, a failure rate so high no interval
/// makes progress.
llvm::Expected<GoodputEstimate> estimateGoodput(const ReliabilitySpec &spec,
                                                const GoodputInputs &in,
                                                const CheckpointPolicy &policy);

/// Daly's higher-order optimum of the compute between checkpoints for a
/// checkpoint costing `checkpointS` and a mean time between failures
/// `mtbfS` (Daly 2006, FGCS 22, eq. 37).
double dalyIntervalS(double checkpointS, double mtbfS);

/// Time and cost to train `tokens` at the estimate's effective throughput.
struct TimeToTrain {
  double seconds = 0, deviceHours = 0, costUsd = 0;
};
TimeToTrain timeToTrain(const GoodputEstimate &g, const GoodputInputs &in,
                        double tokens);

} // namespace orrery

#endif // ORRERY_COSTMODEL_RELIABILITY_H
