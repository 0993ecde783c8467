//===- Runtime.h - executing a rank's program and measuring it -----------===//
//
// The executor runs one rank's program of a checked ProgramSet
// (orrery/CostModel/Program.h): one thread per stream, each running its
// instructions in order and waiting for their dependencies; collectives
// and sends on Gloo contexts (one per group and stream, one for the
// point-to-point traffic), bootstrapped from the launcher's rendezvous.
// Backends: CPU (OpenBLAS GEMMs, Gloo over TCP). Depends on the cost model
// and plan types only, never on MLIR (docs/runtime.md).
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_RUNTIME_RUNTIME_H
#define ORRERY_RUNTIME_RUNTIME_H

#include "orrery/CostModel/Program.h"
#include "orrery/Runtime/Launch.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace orrery {

struct RunOptions {
  int warmupSteps = 1, steps = 3;
  /// How long a rank waits for a peer (a collective, a receive, the
  /// rendezvous) before it gives up.
  std::chrono::milliseconds timeout{60000};
  /// Called with a one-line message when a rank is lost or an operation
  /// fails; it must not return (the other streams may be blocked in it).
  std::function<void(const std::string &)> fatal;
};

/// One span of the last measured step, as the simulator's trace names it.
struct MeasuredSpan {
  std::string name; ///< the instruction's span and what it ran
  int stream = 0;   ///< StreamKind
  double startS = 0, durationS = 0;
};

struct RankMeasurement {
  int rank = 0;
  std::string device;
  int stage = 0, replicaGroup = 0;
  std::vector<double> stepS; ///< each measured step on this rank
  /// Mean seconds per step busy in each instruction kind (InstrKind).
  std::vector<double> kindS;
  /// Mean seconds per step in each span class: forward, backward, the rest.
  double forwardS = 0, backwardS = 0, stepTailS = 0;
  double peakMemoryBytes = 0; ///< the process's resident high-water mark
  double predictedPeakBytes = 0;
  /// The program's predicted forward and backward compute (spans F, B).
  double predictedForwardS = 0, predictedBackwardS = 0;
  std::vector<MeasuredSpan> spans;
};

/// A measurement of this program's rank, its figures from the program (so
/// rank 0 reports every rank without holding their programs).
RankMeasurement measurementOf(const Program &prog, int rank);

/// Every rank's measurement, in rank order (on every rank).
struct RunResult {
  std::vector<RankMeasurement> ranks;
  double predictedStepS = 0;
  /// Per measured step, the slowest rank's time.
  std::vector<double> stepS() const;
};

/// Whether this build has the CPU backend (OpenBLAS and Gloo were found).
bool haveCpuBackend();

/// Runs `env.rank`'s program of `set` (checked by checkPrograms first) on
/// the CPU backend: warm-up steps, then measured ones.
llvm::Expected<RunResult> runOnCpu(const ProgramSet &set, const LaunchEnv &env,
                                   const RunOptions &options);

/// Whether this build has the CUDA backend (the CUDA toolkit, cuBLASLt and
/// NCCL were found).
bool haveCudaBackend();

/// Runs `env.rank`'s program on the GPU of its local rank: cuBLASLt GEMMs,
/// NCCL collectives and sends (docs/runtime.md).
llvm::Expected<RunResult> runOnCuda(const ProgramSet &set, const LaunchEnv &env,
                                    const RunOptions &options);

struct ProfileOptions {
  std::chrono::milliseconds timeout{60000};
  /// About how long each measured point runs.
  double secondsPerPoint = 0.02;
  /// Memory each rank may use (the profile's device memory).
  double memoryBytes = 8.0 * (1ull << 30);
  /// A plan's own GEMM shapes, measured beside the grid.
  struct GemmShape {
    int64_t m, n, k;
  };
  std::vector<GemmShape> gemmShapes;
};

/// `orrery profile` on the CPU backend: rank 0 measures its kernels, all
/// ranks the collectives between them. On rank 0, a cluster spec of
/// `env.worldSize` ranks of the measured CPU device and link, with the
/// measured points (docs/runtime.md); on the others, null.
llvm::Expected<nlohmann::ordered_json>
profileCpu(const LaunchEnv &env, const ProfileOptions &options);

/// `orrery profile --backend cuda`: this machine's GPU (of the local rank)
/// against its catalog device: a cluster spec of one of it with its
/// measured kernel profile.
llvm::Expected<nlohmann::ordered_json>
profileCuda(const LaunchEnv &env, const ProfileOptions &options);

} // namespace orrery

#endif // ORRERY_RUNTIME_RUNTIME_H
