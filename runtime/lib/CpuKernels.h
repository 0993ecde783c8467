//===- CpuKernels.h - the CPU backend's kernels ----------------------------===//
//
// What the CPU backend runs for a GEMM, a fused attention and a memory-
// bound kernel; `orrery profile` times the same functions.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_RUNTIME_LIB_CPUKERNELS_H
#define ORRERY_RUNTIME_LIB_CPUKERNELS_H

#include "orrery/CostModel/Program.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace orrery {
namespace runtime {

/// Scratch memory of one stream's thread, grown as instructions need.
struct Scratch {
  std::vector<float> a, b, c, d;
  float *get(std::vector<float> &v, size_t n) {
    if (v.size() < n)
      v.assign(n, 0.5f);
    return v.data();
  }
};

/// OpenBLAS, loaded on the CPU backend's first use (runOnCpu, profileCpu),
/// not linked: its thread pool spins for a while after it loads, which
/// every orrery process paid, a plan's search included. An error names the
/// library that could not be loaded.
llvm::Error loadBlas();

/// batch products of [m, k] x [k, n] (OpenBLAS sgemm; loadBlas first).
void gemm(Scratch &s, int64_t m, int64_t n, int64_t k, int64_t batch);
/// Streams `bytes`: reads two thirds, writes one third (y = a·x + y).
void stream(Scratch &s, double bytes);
/// A fused attention instruction (forward or backward) as GEMM blocks.
void attention(Scratch &s, const Instruction &in);

} // namespace runtime
} // namespace orrery

#endif // ORRERY_RUNTIME_LIB_CPUKERNELS_H
