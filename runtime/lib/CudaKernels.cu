//===- CudaKernels.cu - the CUDA backend's memory-bound kernels ----------===//
//
// A streaming kernel (y = a·x + y over bf16 halves: reads two thirds of the
// bytes, writes one third) for the memory-bound kernel classes and the
// optimizer, and a row softmax for the attention blocks.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <cuda_bf16.h>

namespace orrery {
namespace runtime {

__global__ void streamKernel(__nv_bfloat16 *y, const __nv_bfloat16 *x,
                             size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  size_t step = size_t(gridDim.x) * blockDim.x;
  for (; i < n; i += step)
    y[i] = __float2bfloat16(0.999f * __bfloat162float(x[i]) +
                            0.5f * __bfloat162float(y[i]));
}

__global__ void softmaxRows(__nv_bfloat16 *s, int rows, int cols) {
  int r = blockIdx.x;
  if (r >= rows)
    return;
  __nv_bfloat16 *row = s + size_t(r) * cols;
  __shared__ float red[32];
  float mx = -1e30f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    mx = fmaxf(mx, __bfloat162float(row[j]));
  for (int o = 16; o; o >>= 1)
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
  if ((threadIdx.x & 31) == 0)
    red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = red[0];
  for (int w = 1; w < int(blockDim.x + 31) / 32; ++w)
    mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    sum += __expf(__bfloat162float(row[j]) - mx);
  for (int o = 16; o; o >>= 1)
    sum += __shfl_xor_sync(0xffffffff, sum, o);
  if ((threadIdx.x & 31) == 0)
    red[threadIdx.x >> 5] = sum;
  __syncthreads();
  sum = 0;
  for (int w = 0; w < int(blockDim.x + 31) / 32; ++w)
    sum += red[w];
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    row[j] = __float2bfloat16(__expf(__bfloat162float(row[j]) - mx) / sum);
}

void launchStream(void *y, const void *x, size_t bytes, cudaStream_t st) {
  size_t n = bytes / 6; // two bf16 read, one written per element
  if (n == 0)
    n = 1;
  int threads = 256;
  int blocks = int(std::min<size_t>((n + threads - 1) / threads, 65535));
  streamKernel<<<blocks, threads, 0, st>>>(
      static_cast<__nv_bfloat16 *>(y), static_cast<const __nv_bfloat16 *>(x),
      n);
}

void launchSoftmax(void *scores, int rows, int cols, cudaStream_t st) {
  softmaxRows<<<rows, 256, 0, st>>>(static_cast<__nv_bfloat16 *>(scores),
                                    rows, cols);
}

} // namespace runtime
} // namespace orrery
