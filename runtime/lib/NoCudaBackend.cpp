//===- NoCudaBackend.cpp - a build without the CUDA toolkit --------------===//
#include "orrery/Runtime/Runtime.h"

namespace orrery {

bool haveCudaBackend() { return false; }

llvm::Expected<RunResult> runOnCuda(const ProgramSet &, const LaunchEnv &,
                                    const RunOptions &) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "this orrery was built without the CUDA backend (the CUDA toolkit "
      "with cuBLASLt and NCCL was not found at build time)");
}

llvm::Expected<nlohmann::ordered_json> profileCuda(const LaunchEnv &,
                                                   const ProfileOptions &) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "this orrery was built without the CUDA backend");
}

} // namespace orrery
