//===- CudaLibraries.cpp - cuBLASLt and NCCL, loaded on first use ---------===//
#include "CudaLibraries.h"

#include <dlfcn.h>
#include <mutex>
#include <string>

namespace orrery {
namespace runtime {

namespace {
CudaLibraries table;

/// The first of `names` that loads, or the loader's reason for the first.
void *openFirst(std::initializer_list<const char *> names,
                std::string &problem) {
  for (const char *name : names) {
    if (!name || !*name)
      continue;
    if (void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))
      return lib;
    const char *why = dlerror();
    if (problem.empty())
      problem = why ? why : name;
  }
  return nullptr;
}

template <typename Fn>
bool bind(void *lib, const char *name, Fn &slot, std::string &problem) {
  slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!slot && problem.empty())
    problem = std::string("no ") + name + " in the library loaded";
  return slot != nullptr;
}
} // namespace

llvm::Error loadCudaLibraries() {
  static std::once_flag once;
  static std::string problem;
  std::call_once(once, [] {
    std::string why;
    void *lt = openFirst({ORRERY_CUBLASLT_PATH, "libcublasLt.so"}, why);
    if (!lt) {
      problem = "cuBLASLt: " + why;
      return;
    }
    void *nccl = openFirst({ORRERY_NCCL_PATH, "libnccl.so.2"}, why);
    if (!nccl) {
      problem = "NCCL: " + why;
      return;
    }
#define ORRERY_BIND_LT(name) bind(lt, #name, table.name, why);
#define ORRERY_BIND_NCCL(name) bind(nccl, #name, table.name, why);
    ORRERY_CUBLASLT_FUNCTIONS(ORRERY_BIND_LT)
    ORRERY_NCCL_FUNCTIONS(ORRERY_BIND_NCCL)
#undef ORRERY_BIND_LT
#undef ORRERY_BIND_NCCL
    problem = why;
  });
  if (problem.empty())
    return llvm::Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "the CUDA backend cannot load " + problem);
}

const CudaLibraries &cuda() { return table; }

} // namespace runtime
} // namespace orrery
