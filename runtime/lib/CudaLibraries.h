//===- CudaLibraries.h - cuBLASLt and NCCL, loaded on first use -----------===//
//
// The CUDA backend calls cuBLASLt and NCCL through this table, loaded when a
// run or a profile first needs a GPU, not linked: cuBLASLt's static
// initializers fault in tens of megabytes, which every orrery process (a
// plan's search too) paid at its start. The CUDA runtime stays linked (the
// backend's own kernels register with it). The pointers take the libraries'
// own declarations (decltype), so a call checks as the direct call did.
//
//===----------------------------------------------------------------------===//
#ifndef ORRERY_RUNTIME_LIB_CUDALIBRARIES_H
#define ORRERY_RUNTIME_LIB_CUDALIBRARIES_H

#include "llvm/Support/Error.h"

#include <cublasLt.h>
#include <nccl.h>

namespace orrery {
namespace runtime {

#define ORRERY_CUBLASLT_FUNCTIONS(X)                                           \
  X(cublasLtCreate)                                                            \
  X(cublasLtDestroy)                                                           \
  X(cublasLtMatmul)                                                            \
  X(cublasLtMatmulAlgoGetHeuristic)                                            \
  X(cublasLtMatmulDescCreate)                                                  \
  X(cublasLtMatmulDescDestroy)                                                 \
  X(cublasLtMatmulDescSetAttribute)                                            \
  X(cublasLtMatmulPreferenceCreate)                                            \
  X(cublasLtMatmulPreferenceDestroy)                                           \
  X(cublasLtMatmulPreferenceSetAttribute)                                      \
  X(cublasLtMatrixLayoutCreate)                                                \
  X(cublasLtMatrixLayoutDestroy)                                               \
  X(cublasLtMatrixLayoutSetAttribute)

#define ORRERY_NCCL_FUNCTIONS(X)                                               \
  X(ncclAllGather)                                                             \
  X(ncclAllReduce)                                                             \
  X(ncclCommDestroy)                                                           \
  X(ncclCommInitRank)                                                          \
  X(ncclGetErrorString)                                                        \
  X(ncclGetUniqueId)                                                           \
  X(ncclGroupEnd)                                                              \
  X(ncclGroupStart)                                                            \
  X(ncclRecv)                                                                  \
  X(ncclReduceScatter)                                                         \
  X(ncclSend)

struct CudaLibraries {
#define ORRERY_CUDA_POINTER(name) decltype(&::name) name = nullptr;
  ORRERY_CUBLASLT_FUNCTIONS(ORRERY_CUDA_POINTER)
  ORRERY_NCCL_FUNCTIONS(ORRERY_CUDA_POINTER)
#undef ORRERY_CUDA_POINTER
};

/// Loads both libraries once (the ones found at build time, then the
/// loader's search path); an error names the library or symbol missing.
llvm::Error loadCudaLibraries();
/// The table, after loadCudaLibraries succeeded.
const CudaLibraries &cuda();

} // namespace runtime
} // namespace orrery

#endif // ORRERY_RUNTIME_LIB_CUDALIBRARIES_H
