//===- NoCpuBackend.cpp - a build without OpenBLAS or Gloo ---------------===//
#include "orrery/Runtime/Runtime.h"

namespace orrery {

bool haveCpuBackend() { return false; }

std::vector<double> RunResult::stepS() const { return {}; }

llvm::Expected<RunResult> runOnCpu(const ProgramSet &, const LaunchEnv &,
                                   const RunOptions &) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "this orrery was built without the CPU backend (OpenBLAS and Gloo: "
      "run scripts/setup.sh and rebuild)");
}

llvm::Expected<nlohmann::ordered_json> profileCpu(const LaunchEnv &,
                                                  const ProfileOptions &) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "this orrery was built without the CPU backend (OpenBLAS and Gloo: "
      "run scripts/setup.sh and rebuild)");
}

} // namespace orrery
