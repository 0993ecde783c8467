//===- CpuKernels.cpp - the CPU backend's kernels
//--------------------------===//
#include "CpuKernels.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <dlfcn.h>
#include <mutex>
#include <string>

namespace orrery {
namespace runtime {

namespace {
using Sgemm = decltype(&cblas_sgemm);
Sgemm sgemmFn = nullptr;
} // namespace

llvm::Error loadBlas() {
  static std::once_flag once;
  static std::string problem;
  std::call_once(once, [] {
    // The library found at build time, then the loader's search path.
    for (const char *name : {ORRERY_OPENBLAS_PATH, "libopenblas.so.0"}) {
      void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      void *fn = lib ? dlsym(lib, "cblas_sgemm") : nullptr;
      if (fn) {
        sgemmFn = reinterpret_cast<Sgemm>(fn);
        return;
      }
      const char *why = dlerror();
      if (problem.empty())
        problem = why ? why : name;
    }
  });
  if (sgemmFn)
    return llvm::Error::success();
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      "the CPU backend needs OpenBLAS (cblas_sgemm): " + problem +
          " (scripts/setup.sh installs libopenblas-dev)");
}

static void sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb,
                  int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc) {
  sgemmFn(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(Scratch &s, int64_t m, int64_t n, int64_t k, int64_t batch) {
  float *A = s.get(s.a, size_t(m * k)), *B = s.get(s.b, size_t(k * n)),
        *C = s.get(s.c, size_t(m * n));
  for (int64_t i = 0; i < batch; ++i)
    sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k),
          1.0f, A, int(k), B, int(n), 0.0f, C, int(n));
}

/// Streams `bytes`: reads two thirds, writes one third (y = a·x + y).
void stream(Scratch &s, double bytes) {
  size_t n = size_t(std::max(1.0, bytes / 12));
  float *x = s.get(s.a, n), *y = s.get(s.b, n);
  for (size_t i = 0; i < n; ++i)
    y[i] = 0.999f * x[i] + y[i] * 0.5f;
}

/// Attention as blocks of 128 queries: scores = Q·Kᵀ over the keys the
/// block sees, a row softmax, out = P·V; backward recomputes the scores
/// and runs dV, dP, dQ and dK.
void attention(Scratch &s, const Instruction &in) {
  const int64_t tile = 128;
  int64_t q = std::max<int64_t>(1, in.qLen),
          kv = std::max<int64_t>(1, in.kvLen),
          d = std::max<int64_t>(1, in.headDim),
          dv = std::max<int64_t>(1, in.valueDim);
  float *Q = s.get(s.a, size_t(tile * std::max(d, dv))),
        *K = s.get(s.b, size_t(kv * std::max(d, dv))),
        *S = s.get(s.c, size_t(tile * kv)),
        *O = s.get(s.d, size_t(tile * std::max(d, dv)));
  for (int64_t bh = 0; bh < std::max<int64_t>(1, in.batch * in.heads); ++bh)
    for (int64_t q0 = 0; q0 < q; q0 += tile) {
      int64_t rows = std::min(tile, q - q0);
      // Causal: keys up to the block's last query (query i sees the first
      // i + 1 keys when the lengths match).
      int64_t keys = in.causal ? std::min(kv, q0 + rows + (kv - q)) : kv;
      // A sliding window: from the first row's first key of the band.
      int64_t first = in.window > 0
                          ? std::max<int64_t>(0, q0 + (kv - q) - in.window + 1)
                          : 0;
      keys = std::max<int64_t>(1, keys - std::min(first, keys - 1));
      sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys),
            int(d), 1.0f, Q, int(d), K, int(d), 0.0f, S, int(keys));
      for (int64_t r = 0; r < rows; ++r) {
        float *row = S + r * keys, mx = row[0], sum = 0;
        for (int64_t j = 1; j < keys; ++j)
          mx = std::max(mx, row[j]);
        for (int64_t j = 0; j < keys; ++j)
          sum += row[j] = std::exp(row[j] - mx);
        for (int64_t j = 0; j < keys; ++j)
          row[j] /= sum;
      }
      sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(dv),
            int(keys), 1.0f, S, int(keys), K, int(dv), 0.0f, O, int(dv));
      if (in.backward) {
        // dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q.
        sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(keys), int(dv),
              int(rows), 1.0f, S, int(keys), O, int(dv), 0.0f, K, int(dv));
        sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys),
              int(dv), 1.0f, O, int(dv), K, int(dv), 0.0f, S, int(keys));
        sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d),
              int(keys), 1.0f, S, int(keys), K, int(d), 0.0f, Q, int(d));
        sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(keys), int(d),
              int(rows), 1.0f, S, int(keys), Q, int(d), 0.0f, K, int(d));
      }
    }
}

} // namespace runtime
} // namespace orrery
