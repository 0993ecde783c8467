//===- Launch.cpp - rank, world and rendezvous from the launcher ---------===//
#include "orrery/Runtime/Launch.h"

#include <cerrno>
#include <cstdlib>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Expected<LaunchEnv> launchFromEnvironment(
    const std::function<const char *(const char *)> &getenvFn) {
  auto get = [&](const char *name) -> const char * {
    return getenvFn ? getenvFn(name) : std::getenv(name);
  };
  auto number = [&](const char *name, int lo, int hi,
                    int &out) -> llvm::Error {
    const char *v = get(name);
    if (!v)
      return err(std::string(name) + " is not set");
    char *end = nullptr;
    errno = 0;
    long x = std::strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
      return err(std::string(name) + "=" + std::string(v).substr(0, 20) +
                 ": expected an integer from " + std::to_string(lo) + " to " +
                 std::to_string(hi));
    out = int(x);
    return llvm::Error::success();
  };
  struct Scheme {
    const char *launcher, *rank, *size, *local;
  };
  const Scheme schemes[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  LaunchEnv env;
  const Scheme *found = nullptr;
  for (const Scheme &s : schemes)
    if (get(s.rank)) {
      found = &s;
      break;
    }
  if (!found)
    return err("no launcher: set RANK and WORLD_SIZE (torchrun), or start "
               "under mpirun or srun, or give --local N");
  env.launcher = found->launcher;
  constexpr int kMaxRanks = 1 << 20;
  if (auto e = number(found->size, 1, kMaxRanks, env.worldSize))
    return std::move(e);
  if (auto e = number(found->rank, 0, env.worldSize - 1, env.rank))
    return std::move(e);
  if (get(found->local)) {
    if (auto e = number(found->local, 0, kMaxRanks, env.localRank))
      return std::move(e);
  } else {
    env.localRank = env.rank;
  }
  if (const char *addr = get("MASTER_ADDR")) {
    env.masterAddr = addr;
    if (env.masterAddr.empty() || env.masterAddr.size() > 253)
      return err("MASTER_ADDR: expected a host name or address");
  }
  if (get("MASTER_PORT"))
    if (auto e = number("MASTER_PORT", 1, 65535, env.masterPort))
      return std::move(e);
  return env;
}

} // namespace orrery
