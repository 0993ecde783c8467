//===- CudaKernels.h - the CUDA backend's own kernels ----------*- C++ -*-===//
#ifndef ORRERY_RUNTIME_LIB_CUDAKERNELS_H
#define ORRERY_RUNTIME_LIB_CUDAKERNELS_H

#include <cstddef>
#include <cuda_runtime.h>

namespace orrery {
namespace runtime {

/// Streams `bytes` through y = a·x + y (bf16): a memory-bound kernel.
void launchStream(void *y, const void *x, size_t bytes, cudaStream_t st);
/// In-place softmax of `rows` rows of `cols` bf16 scores.
void launchSoftmax(void *scores, int rows, int cols, cudaStream_t st);

} // namespace runtime
} // namespace orrery

#endif // ORRERY_RUNTIME_LIB_CUDAKERNELS_H
