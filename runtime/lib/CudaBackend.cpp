//===- CudaBackend.cpp - a rank's program on one GPU: cuBLASLt and NCCL --===//
//
// One host thread issues the program in its order onto one CUDA stream per
// queue (a stream kind; a pipeline link's direction); a dependency on another
// stream is an event the stream waits for. GEMMs are cuBLASLt matmuls (the
// algorithm chosen once per shape by the heuristic and cached), fused attention
// is batched cuBLASLt GEMMs and a row softmax (cuDNN's fused attention is the
// next step), memory-bound kernels and the optimizer a streaming kernel of
// their bytes. Collectives run on NCCL communicators split from the world
// (ncclCommSplit), one per group and stream; pipeline sends and receives
// have one CUDA stream per queue (a peer and direction, queuesOf) and one
// two-rank communicator per link and direction, so that no communicator is
// used by two CUDA streams of one rank; a send/receive group is one NCCL
// group.
// The world's unique id travels through the rendezvous (TcpStore).
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"
#include "CudaLibraries.h"
#include "ProfileFit.h"
#include "TcpStore.h"
#include "orrery/CostModel/Hardware.h"
#include "orrery/Runtime/Runtime.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

bool haveCudaBackend() { return true; }

namespace runtime {
namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t e, const char *what) {
  if (e != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " +
                             std::to_string(int(e)));
}
void check(ncclResult_t e, const char *what) {
  if (e != ncclSuccess)
    throw std::runtime_error(std::string(what) + ": " +
                             cuda().ncclGetErrorString(e));
}

/// The catalog's chip name ("A100-80G" -> "A100") appears in CUDA's.
bool sameDevice(const std::string &catalog, const std::string &cuda) {
  std::string chip = catalog.substr(0, catalog.find('-'));
  return cuda.find(chip) != std::string::npos;
}

cudaDataType_t dataType(Precision p) {
  switch (p) {
  case Precision::FP16:
    return CUDA_R_16F;
  case Precision::FP32:
  case Precision::TF32:
    return CUDA_R_32F;
  default:
    return CUDA_R_16BF;
  }
}
size_t elementBytes(Precision p) {
  return p == Precision::FP32 || p == Precision::TF32 ? 4 : 2;
}

/// cuBLASLt and the device buffers: one per rank (and per profile).
class Blas {
public:
  ~Blas();
  void init();
  struct Gemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    void *A = nullptr, *B = nullptr, *C = nullptr;
  };
  /// The GEMM of this shape, its algorithm chosen once (the heuristic's
  /// first) and cached.
  Gemm &gemmFor(int64_t m, int64_t n, int64_t k, int64_t batch, Precision p,
                bool transA, bool transB);
  void matmul(int64_t m, int64_t n, int64_t k, int64_t batch, Precision p,
              bool transA, bool transB, cudaStream_t st);
  /// A device buffer of at least `bytes`, one per size and slot.
  void *buffer(size_t bytes, int slot);

private:
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 32u << 20;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int, int, int>, Gemm>
      gemms;
  std::map<size_t, void *> scratch;
};

Blas::~Blas() {
  for (auto &[key, g] : gemms) {
    cuda().cublasLtMatmulDescDestroy(g.desc);
    cuda().cublasLtMatrixLayoutDestroy(g.a);
    cuda().cublasLtMatrixLayoutDestroy(g.b);
    cuda().cublasLtMatrixLayoutDestroy(g.c);
  }
  if (lt)
    cuda().cublasLtDestroy(lt);
}

void Blas::init() {
  check(cuda().cublasLtCreate(&lt), "cublasLtCreate");
  check(cudaMalloc(&workspace, workspaceBytes), "cudaMalloc workspace");
}

void *Blas::buffer(size_t bytes, int slot) {
  size_t key = (std::max<size_t>(bytes, 256) << 3) | size_t(slot & 7);
  auto it = scratch.find(key);
  if (it != scratch.end())
    return it->second;
  void *p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 256)), "cudaMalloc");
  check(cudaMemset(p, 0, std::max<size_t>(bytes, 256)), "cudaMemset");
  scratch[key] = p;
  return p;
}

class CudaRank {
public:
  CudaRank(const ProgramSet &set, const LaunchEnv &env,
           const RunOptions &options)
      : set(set), prog(set.ranks[env.rank]), env(env), options(options) {}
  ~CudaRank();
  llvm::Expected<RunResult> run();

private:
  const ProgramSet &set;
  const Program &prog;
  const LaunchEnv &env;
  const RunOptions &options;
  std::unique_ptr<Rendezvous> rv;
  /// Per queue (queuesOf; the compute stream first), and each
  /// instruction's queue.
  std::vector<cudaStream_t> streams;
  std::vector<int> queueIndex;
  Blas blas;
  ncclComm_t world = nullptr;
  /// ("g", group, stream), ("pipe"/"pipe-gradients", sender, receiver)
  /// and ("ring", 0, 0).
  std::map<std::tuple<std::string, int, int>, ncclComm_t> comms;
  /// Activations, by buffer id, and their sizes.
  std::map<int, void *> live;
  std::map<int, size_t> liveBytes;
  void *held = nullptr;
  /// Host memory that offloaded activations go to and come back from
  /// (pinned, as offloading frameworks allocate it): the largest copy.
  void *pinned = nullptr;
  /// The host optimizer's memory and its passes (cudaLaunchHostFunc's
  /// arguments, by instruction).
  struct HostWork {
    char *data = nullptr;
    size_t bytes = 0;
  };
  std::vector<char> hostScratch;
  std::vector<HostWork> hostWork;
  static void streamHostBytes(void *arg) {
    auto *w = static_cast<HostWork *>(arg);
    for (size_t k = 0; k < w->bytes; k += 64)
      w->data[k] = char(w->data[k] + 1);
  }
  std::vector<cudaEvent_t> begin, end;
  cudaEvent_t stepStart = nullptr;

  void *buffer(size_t bytes, int slot) { return blas.buffer(bytes, slot); }
  void matmul(int64_t m, int64_t n, int64_t k, int64_t batch, Precision p,
              bool transA, bool transB, cudaStream_t st) {
    blas.matmul(m, n, k, batch, p, transA, transB, st);
  }
  void setUp();
  void issue(int i);
  void collective(int i, cudaStream_t st);
  void pointToPoint(int i, cudaStream_t st);
  void copy(const Instruction &in, cudaStream_t st);
};

CudaRank::~CudaRank() {
  if (pinned)
    cudaFreeHost(pinned);
  for (auto &[key, comm] : comms)
    cuda().ncclCommDestroy(comm);
  if (world)
    cuda().ncclCommDestroy(world);
}

Blas::Gemm &Blas::gemmFor(int64_t m, int64_t n, int64_t k, int64_t batch,
                          Precision p, bool transA, bool transB) {
  auto key = std::make_tuple(m, n, k, batch, int(p), int(transA), int(transB));
  auto it = gemms.find(key);
  if (it != gemms.end())
    return it->second;
  Gemm g;
  cudaDataType_t t = dataType(p);
  cublasComputeType_t compute =
      p == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cuda().cublasLtMatmulDescCreate(&g.desc, compute, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  // Row-major C[m,n] = A[m,k]·B[k,n] is column-major Cᵀ = Bᵀ·Aᵀ.
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                    opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cuda().cublasLtMatmulDescSetAttribute(
            g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof opB),
        "TRANSA");
  check(cuda().cublasLtMatmulDescSetAttribute(
            g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof opA),
        "TRANSB");
  check(cuda().cublasLtMatrixLayoutCreate(&g.a, t, transB ? k : n,
                                          transB ? n : k, transB ? k : n),
        "layout B");
  check(cuda().cublasLtMatrixLayoutCreate(&g.b, t, transA ? m : k,
                                          transA ? k : m, transA ? m : k),
        "layout A");
  check(cuda().cublasLtMatrixLayoutCreate(&g.c, t, n, m, n), "layout C");
  if (batch > 1)
    for (auto [layout, stride] : {std::pair{g.a, n * k}, std::pair{g.b, m * k},
                                  std::pair{g.c, m * n}}) {
      int32_t count = int32_t(batch);
      int64_t s = stride;
      check(
          cuda().cublasLtMatrixLayoutSetAttribute(
              layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
          "batch count");
      check(cuda().cublasLtMatrixLayoutSetAttribute(
                layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s,
                sizeof s),
            "batch stride");
    }
  cublasLtMatmulPreference_t pref = nullptr;
  check(cuda().cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cuda().cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
            sizeof workspaceBytes),
        "workspace preference");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(cuda().cublasLtMatmulAlgoGetHeuristic(lt, g.desc, g.a, g.b, g.c, g.c,
                                              pref, 1, &result, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  cuda().cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for a " +
                             std::to_string(m) + "x" + std::to_string(n) + "x" +
                             std::to_string(k) + " GEMM");
  g.algo = result.algo;
  size_t e = elementBytes(p);
  g.A = buffer(size_t(batch * m * k) * e, 0);
  g.B = buffer(size_t(batch * k * n) * e, 1);
  g.C = buffer(size_t(batch * m * n) * e, 2);
  return gemms.emplace(key, g).first->second;
}

void Blas::matmul(int64_t m, int64_t n, int64_t k, int64_t batch, Precision p,
                  bool transA, bool transB, cudaStream_t st) {
  Gemm &g = gemmFor(m, n, k, batch, p, transA, transB);
  float alpha = 1, beta = 0;
  check(cuda().cublasLtMatmul(lt, g.desc, &alpha, g.B, g.a, g.A, g.b, &beta,
                              g.C, g.c, g.C, g.c, &g.algo, workspace,
                              workspaceBytes, st),
        "cublasLtMatmul");
}

void CudaRank::setUp() {
  int devices = 0;
  cudaError_t count = cudaGetDeviceCount(&devices);
  if (count != cudaSuccess || devices == 0)
    throw std::runtime_error(
        "no CUDA GPU on this machine for a plan on " + prog.device + " (" +
        (count != cudaSuccess ? cudaGetErrorString(count) : "no device") +
        "); a plan for --cluster NxCPU runs on the CPU backend");
  int dev = env.localRank % devices;
  check(cudaSetDevice(dev), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  if (!sameDevice(prog.device, prop.name))
    throw std::runtime_error("the plan places it on " + prog.device +
                             ", and this GPU is an " + prop.name);
  // Queue 0 is the compute stream (queuesOf).
  streams.resize(queuesOf(prog, &queueIndex).size());
  for (cudaStream_t &s : streams)
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
          "cudaStreamCreate");
  blas.init();

  rv = std::make_unique<Rendezvous>(env.rank, env.masterAddr, env.masterPort,
                                    options.timeout);
  ncclUniqueId id;
  if (env.rank == 0) {
    check(cuda().ncclGetUniqueId(&id), "ncclGetUniqueId");
    rv->store->set("nccl/world",
                   std::vector<char>(id.internal, id.internal + sizeof id));
  } else {
    std::vector<char> v = rv->store->get("nccl/world");
    std::copy(v.begin(), v.end(), id.internal);
  }
  check(cuda().ncclCommInitRank(&world, set.worldSize, id, env.rank),
        "ncclCommInitRank");
  // Each communicator this rank is in, made by its members alone: the
  // lowest member publishes an id under the communicator's name (groupKey:
  // the same on every member whatever programs it lowered) and every
  // member joins it (ncclCommInitRank), in name order on every rank, so no
  // rank needs another's program and two ranks never wait on each other
  // in opposite orders.
  struct CommSpec {
    std::tuple<std::string, int, int> key;
    std::vector<int> members; // world ranks, ascending
  };
  std::map<std::string, CommSpec> specs;
  for (const Instruction &in : prog.code) {
    if (in.kind == InstrKind::Collective) {
      const std::vector<int> &m = set.groups[in.group];
      specs["g/" + groupKey(m) + "/" + std::to_string(int(in.stream))] = {
          {"g", in.group, int(in.stream)}, m};
    } else if ((in.kind == InstrKind::Send || in.kind == InstrKind::Recv) &&
               in.stream != StreamKind::Comm) {
      bool send = in.kind == InstrKind::Send;
      int from = send ? env.rank : in.peer, to = send ? in.peer : env.rank;
      std::string kind = in.backward ? "pipe-gradients" : "pipe";
      specs[kind + "/" + std::to_string(from) + "/" + std::to_string(to)] = {
          {kind, from, to}, {std::min(from, to), std::max(from, to)}};
    }
  }
  // The context-parallel ring sends to world ranks: a world-wide
  // communicator, joined by every rank when the plan has ring sends.
  if (set.ringSends) {
    std::vector<int> all(size_t(set.worldSize));
    for (int r = 0; r < set.worldSize; ++r)
      all[r] = r;
    specs["ring"] = {{"ring", 0, 0}, all};
  }
  for (const auto &[name, spec] : specs) {
    const std::vector<int> &m = spec.members;
    int me = int(std::find(m.begin(), m.end(), env.rank) - m.begin());
    ncclUniqueId cid;
    if (me == 0) {
      check(cuda().ncclGetUniqueId(&cid), "ncclGetUniqueId");
      rv->store->set(
          "nccl/" + name,
          std::vector<char>(cid.internal, cid.internal + sizeof cid));
    } else {
      std::vector<char> v = rv->store->get("nccl/" + name);
      std::copy(v.begin(), v.end(), cid.internal);
    }
    ncclComm_t comm = nullptr;
    check(cuda().ncclCommInitRank(&comm, int(m.size()), cid, me),
          "ncclCommInitRank");
    comms[spec.key] = comm;
  }
  held = nullptr;
  if (prog.staticBytes > 0)
    check(cudaMalloc(&held, size_t(prog.staticBytes)), "cudaMalloc weights");
  size_t copied = 0;
  for (const Instruction &in : prog.code)
    if (in.kind == InstrKind::Copy)
      copied = std::max(copied, size_t(std::max(0.0, in.bytes)));
  if (copied > 0)
    check(cudaMallocHost(&pinned, copied), "cudaMallocHost offload");
  size_t hostBytes = 0;
  for (const Instruction &in : prog.code)
    if (in.kind == InstrKind::Optimizer && in.stream == StreamKind::HostCopy)
      hostBytes = std::max(hostBytes, size_t(std::max(0.0, in.bytes)));
  hostScratch.assign(hostBytes, 0);
  hostWork.assign(prog.code.size(), HostWork{});
  begin.resize(prog.code.size());
  end.resize(prog.code.size());
  for (size_t i = 0; i < prog.code.size(); ++i) {
    check(cudaEventCreate(&begin[i]), "cudaEventCreate");
    check(cudaEventCreate(&end[i]), "cudaEventCreate");
  }
  check(cudaEventCreate(&stepStart), "cudaEventCreate");
}

/// A collective over its group's communicator on stream st.
void CudaRank::collective(int i, cudaStream_t st) {
  const Instruction &in = prog.code[i];
  auto found = comms.find({"g", in.group, int(in.stream)});
  if (found == comms.end())
    throw std::runtime_error("no communicator for group g" +
                             std::to_string(in.group));
  ncclComm_t comm = found->second;
  int n = int(set.groups[in.group].size());
  size_t bytes = size_t(std::max(2.0, in.bytes));
  size_t elems = bytes / 2;
  void *a = buffer(bytes, 5), *b = buffer(bytes, 6);
  switch (in.collective) {
  case CollectiveKind::AllReduce:
    check(cuda().ncclAllReduce(a, a, elems, ncclBfloat16, ncclSum, comm, st),
          "ncclAllReduce");
    break;
  case CollectiveKind::AllGather:
    check(cuda().ncclAllGather(a, b, std::max<size_t>(1, elems / n),
                               ncclBfloat16, comm, st),
          "ncclAllGather");
    break;
  case CollectiveKind::ReduceScatter:
    check(cuda().ncclReduceScatter(a, b, std::max<size_t>(1, elems / n),
                                   ncclBfloat16, ncclSum, comm, st),
          "ncclReduceScatter");
    break;
  case CollectiveKind::AllToAll: {
    size_t each = std::max<size_t>(1, elems / n);
    check(cuda().ncclGroupStart(), "ncclGroupStart");
    for (int peer = 0; peer < n; ++peer) {
      check(cuda().ncclSend(static_cast<char *>(a) + peer * each * 2, each,
                            ncclBfloat16, peer, comm, st),
            "ncclSend");
      check(cuda().ncclRecv(static_cast<char *>(b) + peer * each * 2, each,
                            ncclBfloat16, peer, comm, st),
            "ncclRecv");
    }
    check(cuda().ncclGroupEnd(), "ncclGroupEnd");
    break;
  }
  case CollectiveKind::SendRecv: {
    const std::vector<int> &m = set.groups[in.group];
    int me = int(std::find(m.begin(), m.end(), env.rank) - m.begin());
    check(cuda().ncclGroupStart(), "ncclGroupStart");
    check(cuda().ncclSend(a, elems, ncclBfloat16, (me + 1) % n, comm, st),
          "ncclSend");
    check(cuda().ncclRecv(b, elems, ncclBfloat16, (me + n - 1) % n, comm, st),
          "ncclRecv");
    check(cuda().ncclGroupEnd(), "ncclGroupEnd");
    break;
  }
  }
}

/// A send or receive, with the others of its NCCL group (issued with its
/// first).
void CudaRank::pointToPoint(int i, cudaStream_t st) {
  const Instruction &in = prog.code[i];
  if (in.p2pGroup >= 0 && in.p2pGroup != i)
    return;
  int last = i;
  if (in.p2pGroup == i)
    while (last + 1 < int(prog.code.size()) &&
           prog.code[last + 1].p2pGroup == i)
      ++last;
  check(cuda().ncclGroupStart(), "ncclGroupStart");
  for (int j = i; j <= last; ++j) {
    const Instruction &x = prog.code[j];
    bool send = x.kind == InstrKind::Send;
    bool ring = x.stream == StreamKind::Comm;
    // On a link's communicator the peer is rank 0 or 1 (the lower world
    // rank first).
    int peer = ring ? x.peer : x.peer > env.rank ? 1 : 0;
    ncclComm_t comm =
        ring ? comms.at({"ring", 0, 0})
             : comms.at({x.backward ? "pipe-gradients" : "pipe",
                         send ? env.rank : x.peer, send ? x.peer : env.rank});
    size_t bytes = size_t(std::max(1.0, x.bytes));
    void *p = buffer(bytes, send ? 5 : 6);
    if (send)
      check(cuda().ncclSend(p, bytes, ncclUint8, peer, comm, st), "ncclSend");
    else
      check(cuda().ncclRecv(p, bytes, ncclUint8, peer, comm, st), "ncclRecv");
  }
  check(cuda().ncclGroupEnd(), "ncclGroupEnd");
}

/// A copy to or from host memory: the held buffer whole, or a staging
/// buffer a piece at a time.
void CudaRank::copy(const Instruction &in, cudaStream_t st) {
  if (in.buffer == kHeldBuffer) { // the weights and gradients held
    size_t bytes = size_t(std::max(0.0, in.bytes));
    check(
        in.backward
            ? cudaMemcpyAsync(held, pinned, bytes, cudaMemcpyHostToDevice, st)
            : cudaMemcpyAsync(pinned, held, bytes, cudaMemcpyDeviceToHost, st),
        "cudaMemcpyAsync");
    return;
  }
  auto it = live.find(in.buffer);
  if (it == live.end())
    throw std::runtime_error("copy through buffer #" +
                             std::to_string(in.buffer) + ", not allocated");
  size_t bytes = size_t(std::max(0.0, in.bytes)),
         piece = liveBytes.at(in.buffer);
  char *host = static_cast<char *>(pinned),
       *dev = static_cast<char *>(it->second);
  for (size_t off = 0; off < bytes; off += piece) {
    size_t n = std::min(piece, bytes - off);
    check(in.backward
              ? cudaMemcpyAsync(dev, host + off, n, cudaMemcpyHostToDevice, st)
              : cudaMemcpyAsync(host + off, dev, n, cudaMemcpyDeviceToHost, st),
          "cudaMemcpyAsync");
  }
}

void CudaRank::issue(int i) {
  const Instruction &in = prog.code[i];
  cudaStream_t st = streams[queueIndex[i]];
  for (int d : in.deps)
    check(cudaStreamWaitEvent(st, end[d], 0), "cudaStreamWaitEvent");
  check(cudaEventRecord(begin[i], st), "cudaEventRecord");
  switch (in.kind) {
  case InstrKind::Gemm:
    if (isFp8(in.precision) || isFp4(in.precision))
      throw std::runtime_error(std::string(precisionName(in.precision)) +
                               " GEMMs are not run by this backend yet");
    matmul(in.m, in.n, in.k, in.batch, in.precision, false, false, st);
    break;
  case InstrKind::Attention: {
    // batch·heads products: S = Q·Kᵀ, softmax, O = P·V; backward
    // recomputes S and runs dV, dP, dQ, dK.
    int64_t bh = std::max<int64_t>(1, in.batch * in.heads);
    int64_t q = in.qLen, kv = in.kvLen, d = in.headDim, dv = in.valueDim;
    matmul(q, kv, d, bh, Precision::BF16, false, true, st);
    Blas::Gemm &s = blas.gemmFor(q, kv, d, bh, Precision::BF16, false, true);
    launchSoftmax(s.C, int(bh * q), int(kv), st);
    matmul(q, dv, kv, bh, Precision::BF16, false, false, st);
    if (in.backward) {
      matmul(kv, dv, q, bh, Precision::BF16, true, false, st);
      matmul(q, kv, dv, bh, Precision::BF16, false, true, st);
      matmul(q, d, kv, bh, Precision::BF16, false, false, st);
      matmul(kv, d, q, bh, Precision::BF16, true, false, st);
    }
    break;
  }
  case InstrKind::Kernel:
  case InstrKind::Optimizer: {
    size_t bytes = size_t(std::max(6.0, in.bytes));
    if (in.stream == StreamKind::HostCopy) {
      // ZeRO-Offload's Adam on the host's cores, in the stream's order:
      // a pass over the shard's host bytes.
      hostWork[i] = {hostScratch.data(), std::min(bytes, hostScratch.size())};
      check(cudaLaunchHostFunc(st, &streamHostBytes, &hostWork[i]),
            "cudaLaunchHostFunc");
      break;
    }
    launchStream(buffer(bytes / 3 + 2, 3), buffer(bytes / 3 + 2, 4), bytes, st);
    break;
  }
  case InstrKind::Collective:
    collective(i, st);
    break;
  case InstrKind::Send:
  case InstrKind::Recv:
    pointToPoint(i, st);
    break;
  case InstrKind::Alloc: {
    void *p = nullptr;
    check(cudaMallocAsync(&p, std::max<size_t>(1, size_t(in.bytes)), st),
          "cudaMallocAsync");
    live[in.buffer] = p;
    liveBytes[in.buffer] = std::max<size_t>(1, size_t(in.bytes));
    break;
  }
  case InstrKind::Copy:
    copy(in, st);
    break;
  case InstrKind::Free: {
    auto it = live.find(in.buffer);
    if (it != live.end()) {
      check(cudaFreeAsync(it->second, st), "cudaFreeAsync");
      live.erase(it);
      liveBytes.erase(in.buffer);
    }
    break;
  }
  case InstrKind::Wait:
    break;
  }
  check(cudaEventRecord(end[i], st), "cudaEventRecord");
}

llvm::Expected<RunResult> CudaRank::run() {
  try {
    setUp();
  } catch (const std::exception &e) {
    return err("rank " + std::to_string(env.rank) + ": " + e.what());
  }
  RankMeasurement me = measurementOf(prog, env.rank);
  size_t peakUsed = 0, freeBytes = 0, totalBytes = 0;
  int total = options.warmupSteps + options.steps;
  try {
    void *token = buffer(4, 7);
    for (int step = 1; step <= total; ++step) {
      // Every rank starts the step together: a one-element all-reduce.
      check(cuda().ncclAllReduce(token, token, 1, ncclFloat32, ncclSum, world,
                                 streams[0]),
            "ncclAllReduce (step barrier)");
      check(cudaStreamSynchronize(streams[0]), "cudaStreamSynchronize");
      check(cudaEventRecord(stepStart, streams[0]), "cudaEventRecord");
      for (cudaStream_t s : streams)
        check(cudaStreamWaitEvent(s, stepStart, 0), "cudaStreamWaitEvent");
      for (int i = 0; i < int(prog.code.size()); ++i)
        issue(i);
      for (cudaStream_t s : streams)
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      check(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo");
      peakUsed = std::max(peakUsed, totalBytes - freeBytes);
      if (step <= options.warmupSteps)
        continue;
      float ms = 0, last = 0;
      me.spans.clear();
      for (size_t i = 0; i < prog.code.size(); ++i) {
        const Instruction &in = prog.code[i];
        if (in.p2pGroup >= 0 && in.p2pGroup != int(i))
          continue;
        float a = 0, b = 0;
        check(cudaEventElapsedTime(&a, stepStart, begin[i]), "elapsed");
        check(cudaEventElapsedTime(&b, stepStart, end[i]), "elapsed");
        double busy = (b - a) * 1e-3 / options.steps;
        me.kindS[int(in.kind)] += busy;
        if (in.stream == StreamKind::Compute)
          (in.span.empty()     ? me.stepTailS
           : in.span[0] == 'F' ? me.forwardS
           : in.span[0] == 'B' ? me.backwardS
                               : me.stepTailS) += busy;
        last = std::max(last, b);
        if (step == total && in.kind != InstrKind::Wait)
          me.spans.push_back({in.span + " " + in.name, int(in.stream), a * 1e-3,
                              (b - a) * 1e-3});
      }
      ms = last;
      me.stepS.push_back(ms * 1e-3);
    }
  } catch (const std::exception &e) {
    options.fatal("rank " + std::to_string(env.rank) + ": " + e.what());
  }
  me.peakMemoryBytes = double(peakUsed);

  // Every rank's figures through the rendezvous (as the CPU backend).
  RunResult result;
  try {
    result = exchangeMeasurements(*rv->store, set, me);
    void *token = buffer(4, 7);
    check(cuda().ncclAllReduce(token, token, 1, ncclFloat32, ncclSum, world,
                               streams[0]),
          "ncclAllReduce (end)");
    check(cudaStreamSynchronize(streams[0]), "cudaStreamSynchronize");
    rv->store->goodbye();
  } catch (const std::exception &e) {
    return err("rank " + std::to_string(env.rank) +
               ": collecting the measurements: " + e.what());
  }
  return result;
}

} // namespace
} // namespace runtime

llvm::Expected<nlohmann::ordered_json>
profileCuda(const LaunchEnv &env, const ProfileOptions &options) {
  using nlohmann::ordered_json;
  using runtime::check;
  try {
    int devices = 0;
    cudaError_t count = cudaGetDeviceCount(&devices);
    if (count != cudaSuccess || devices == 0)
      return err(
          std::string("no CUDA GPU on this machine (") +
          (count != cudaSuccess ? cudaGetErrorString(count) : "no device") +
          ")");
    if (auto e = runtime::loadCudaLibraries())
      return std::move(e);
    int dev = env.localRank % devices;
    check(cudaSetDevice(dev), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    // The catalog's device of this chip and memory size.
    const DeviceSpec *spec = nullptr;
    for (const DeviceSpec &d : HardwareCatalog::builtin().devices())
      if (runtime::sameDevice(d.name, prop.name) &&
          (!spec ||
           std::abs(d.memoryBytes - double(prop.totalGlobalMem)) <
               std::abs(spec->memoryBytes - double(prop.totalGlobalMem))))
        spec = &d;
    if (!spec)
      return err(std::string("the catalog has no device for this GPU (") +
                 prop.name + ")");
    runtime::Blas blas;
    blas.init();
    cudaStream_t st;
    check(cudaStreamCreate(&st), "cudaStreamCreate");
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    auto timeIt = [&](auto &&fn) {
      fn();
      check(cudaStreamSynchronize(st), "sync");
      std::vector<float> t;
      for (int i = 0; i < 10; ++i) {
        check(cudaEventRecord(a, st), "record");
        fn();
        check(cudaEventRecord(b, st), "record");
        check(cudaEventSynchronize(b), "sync");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, a, b), "elapsed");
        t.push_back(ms * 1e-3f);
      }
      std::sort(t.begin(), t.end());
      return double(t[t.size() / 2]);
    };
    double peak = spec->tensorPeak(Precision::BF16);
    ordered_json gemms = ordered_json::array();
    std::vector<ProfileOptions::GemmShape> shapes = options.gemmShapes;
    for (int64_t m : {512, 2048, 8192})
      for (int64_t n : {1024, 4096, 16384})
        for (int64_t k : {1024, 4096})
          shapes.push_back({m, n, k});
    std::vector<double> atPeakS, measuredS;
    for (const auto &g : shapes) {
      double t = timeIt([&] {
        blas.matmul(g.m, g.n, g.k, 1, Precision::BF16, false, false, st);
      });
      atPeakS.push_back(2.0 * g.m * g.n * g.k / peak);
      measuredS.push_back(t);
      gemms.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"seconds", t}});
    }
    auto [e, half] = runtime::fitEfficiency(atPeakS, measuredS);
    ordered_json mem = ordered_json::array();
    double bw = 0;
    for (double bytes : {64e6, 256e6, 1024e6}) {
      size_t sz = size_t(bytes);
      void *y = blas.buffer(sz / 3 + 2, 3), *x = blas.buffer(sz / 3 + 2, 4);
      double t = timeIt([&] { runtime::launchStream(y, x, sz, st); });
      bw = bytes / t;
      mem.push_back({{"bytes", bytes}, {"seconds", t}});
    }
    void *y = blas.buffer(64, 3), *x = blas.buffer(64, 4);
    double launch = timeIt([&] { runtime::launchStream(y, x, 6, st); });
    double memEff = std::min(1.0, bw / spec->memoryBandwidthBytesPerS);
    ordered_json device = {
        {"name", spec->name},
        {"vendor", spec->vendor},
        {"peak_flop_per_s", spec->peakFlopPerS},
        {"memory_bytes", double(prop.totalGlobalMem)},
        {"memory_bandwidth_bytes_per_s", spec->memoryBandwidthBytesPerS},
        {"power_w", spec->powerW},
        {"intra_node_link", spec->intraNodeLink},
        {"measured_kernel_profile",
         {{"gemm_efficiency", e},
          {"gemm_half_efficiency_s", half},
          {"gemm_memory_efficiency", memEff},
          {"pointwise_memory_efficiency", memEff},
          {"reduction_memory_efficiency", memEff},
          {"random_memory_efficiency", memEff},
          {"kernel_launch_s", launch},
          {"source", std::string("measured by orrery profile --backend cuda "
                                 "on one ") +
                         prop.name +
                         " (cuBLASLt bf16 GEMMs, the runtime's "
                         "streaming kernel)"}}},
        {"source", spec->source}};
    ordered_json spec2;
    spec2["name"] = std::string("1 x ") + prop.name + " (measured)";
    spec2["_measured"] = {{"gemm", gemms}, {"memory_bound", mem}};
    spec2["sites"] = ordered_json::array(
        {{{"name", "local"},
          {"nodes", ordered_json::array({{{"count", 1},
                                          {"devices_per_node", 1},
                                          {"device", device}}})}}});
    return spec2;
  } catch (const std::exception &e) {
    return err(std::string("profile: ") + e.what());
  }
}

llvm::Expected<RunResult> runOnCuda(const ProgramSet &set, const LaunchEnv &env,
                                    const RunOptions &options) {
  if (auto e = runtime::checkLaunch(set, env))
    return std::move(e);
  if (auto e = runtime::loadCudaLibraries())
    return std::move(e);
  runtime::CudaRank rank(set, env, options);
  return rank.run();
}

} // namespace orrery
