//===- Launch.h - rank, world and rendezvous from the launcher -----------===//
//
// The runtime starts under the launchers teams use and reads who it is from
// their variables: torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT; Open MPI's OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK; SLURM's
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID. The rendezvous address is
// MASTER_ADDR:MASTER_PORT wherever it is set (export it under mpirun and
// srun across nodes), else 127.0.0.1:29500.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_RUNTIME_LAUNCH_H
#define ORRERY_RUNTIME_LAUNCH_H

#include "llvm/Support/Error.h"

#include <functional>
#include <string>

namespace orrery {

struct LaunchEnv {
  int rank = 0, worldSize = 1, localRank = 0;
  /// "torchrun", "mpirun", "srun".
  std::string launcher;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
};

/// The launch as the environment states it (`getenv` by default). An error
/// names the variable that is missing or malformed; none of the launchers'
/// variables at all is an error that says how to launch.
llvm::Expected<LaunchEnv> launchFromEnvironment(
    const std::function<const char *(const char *)> &getenv = nullptr);

} // namespace orrery

#endif // ORRERY_RUNTIME_LAUNCH_H
