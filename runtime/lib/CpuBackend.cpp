//===- CpuBackend.cpp - a rank's program on CPUs: OpenBLAS and Gloo ------===//
//
// GEMMs are OpenBLAS sgemm on synthetic fp32 operands of the instruction's
// shape; fused attention runs its blocks as GEMMs and a row softmax (the
// causal blocks above the diagonal skipped, as FlashAttention skips them;
// backward five GEMMs per block); a memory-bound kernel streams its bytes;
// the optimizer streams its shard. Collectives are Gloo's (ring all-reduce,
// all-gather, halving-doubling reduce-scatter, all-to-all) on a context per
// group and stream; sends and receives are Gloo unbound buffers on one
// context, matched by tag. Messages carry the plan's bytes.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "GlooCollectives.h"
#include "TcpStore.h"
#include "orrery/Runtime/Runtime.h"

#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <sys/resource.h>
#include <thread>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

bool haveCpuBackend() { return true; }

std::vector<double> RunResult::stepS() const {
  std::vector<double> out;
  for (const RankMeasurement &r : ranks)
    for (size_t i = 0; i < r.stepS.size(); ++i) {
      if (out.size() <= i)
        out.push_back(0);
      out[i] = std::max(out[i], r.stepS[i]);
    }
  return out;
}

namespace runtime {
namespace {

using Clock = std::chrono::steady_clock;

class CpuRank {
public:
  CpuRank(const ProgramSet &set, const LaunchEnv &env,
          const RunOptions &options)
      : set(set), prog(set.ranks[env.rank]), env(env), options(options) {}

  llvm::Expected<RunResult> run();

private:
  const ProgramSet &set;
  const Program &prog;
  const LaunchEnv &env;
  const RunOptions &options;
  std::unique_ptr<Rendezvous> rv;
  TcpStore *store = nullptr;
  std::shared_ptr<gloo::Context> world, p2p;
  /// (group, stream) -> context, and each context's next tag.
  std::map<std::pair<int, int>, std::shared_ptr<gloo::Context>> contexts;
  std::map<gloo::Context *, uint32_t> tags;
  /// Per send/receive: its buffer and Gloo's view of it.
  std::map<int, std::vector<char>> messages;
  std::map<int, std::unique_ptr<gloo::transport::UnboundBuffer>> unbound;
  std::map<int, std::vector<char>> live; ///< allocated activations
  std::vector<char> held;                ///< weights, gradients, optimizer
  // Completion: instruction i is done in step s when done[i] >= s.
  std::unique_ptr<std::atomic<int>[]> done;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<double> startS, endS;
  std::atomic<bool> watching{false};
  std::thread watchdog;

  std::shared_ptr<gloo::Context> connect(const std::string &prefix, int rank,
                                         int size) {
    return rv->connect(prefix, rank, size);
  }
  std::string where(int i) const {
    const Instruction &in = prog.code[i];
    return "instruction " + std::to_string(i) + " (" + instrKindName(in.kind) +
           " " + in.name + ", " + in.span + ")";
  }
  [[noreturn]] void lost(std::string what) {
    // One report: the other streams and the watchdog wait for the exit.
    static std::mutex once;
    if (!once.try_lock())
      for (;;)
        std::this_thread::sleep_for(std::chrono::seconds(1));
    // Gloo's messages start with their source location.
    if (!what.empty()) {
      size_t at = what.find("[./gloo/");
      if (at == std::string::npos)
        at = what.find("[/");
      size_t close = at == std::string::npos ? at : what.find("] ", at);
      if (close != std::string::npos)
        what.erase(at, close + 2 - at);
    }
    std::vector<char> v;
    std::string lostRank;
    // A peer's death reaches a Gloo pair and the rendezvous at about the
    // same moment: give the rendezvous a second to say which rank it was.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    try {
      while (store && lostRank.empty()) {
        if (store->tryGet(kLostRankKey, v))
          lostRank = std::string(v.begin(), v.end());
        else if (std::chrono::steady_clock::now() > deadline)
          break;
        else
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } catch (...) {
      lostRank = "0";
    }
    std::string msg =
        lostRank.empty() ? "rank " + std::to_string(env.rank) + ": " + what
                         : "rank " + std::to_string(env.rank) + ": lost rank " +
                               lostRank + " (it exited or was killed): " + what;
    options.fatal(msg);
    std::abort(); // fatal does not return
  }
  void execute(int i, Scratch &scratch);
  void collective(const Instruction &in, Scratch &scratch);
  /// One thread per queue (queuesOf): a stream, or a pipeline link and
  /// direction.
  void runStream(int queue, int step, Scratch &scratch);
  std::vector<int> queueIndex;
};

void CpuRank::collective(const Instruction &in, Scratch &scratch) {
  auto &ctx = contexts.at({in.group, int(in.stream)});
  uint32_t tag = tags[ctx.get()]++;
  const std::vector<int> &members = set.groups[in.group];
  int me = int(std::find(members.begin(), members.end(), env.rank) -
               members.begin());
  runCollective(ctx, in.collective, in.bytes, int(members.size()), me, tag,
                scratch, options.timeout);
}

void CpuRank::execute(int i, Scratch &scratch) {
  const Instruction &in = prog.code[i];
  switch (in.kind) {
  case InstrKind::Gemm:
    gemm(scratch, in.m, in.n, in.k, in.batch);
    break;
  case InstrKind::Attention:
    attention(scratch, in);
    break;
  case InstrKind::Kernel:
  case InstrKind::Optimizer:
  case InstrKind::Copy: // host memory to host memory here: a stream of bytes
    stream(scratch, in.bytes);
    break;
  case InstrKind::Collective:
    collective(in, scratch);
    break;
  case InstrKind::Send:
  case InstrKind::Recv: {
    // A group of sends and receives: issue them all, then wait for all.
    int last = i;
    if (in.p2pGroup >= 0)
      while (last + 1 < int(prog.code.size()) &&
             prog.code[last + 1].p2pGroup == in.p2pGroup)
        ++last;
    for (int j = i; j <= last; ++j) {
      const Instruction &x = prog.code[j];
      uint64_t slot = uint64_t(x.tag);
      if (x.kind == InstrKind::Send)
        unbound.at(j)->send(x.peer, slot);
      else
        unbound.at(j)->recv(x.peer, slot);
    }
    for (int j = i; j <= last; ++j) {
      if (prog.code[j].kind == InstrKind::Send)
        unbound.at(j)->waitSend(options.timeout);
      else
        unbound.at(j)->waitRecv(options.timeout);
    }
    break;
  }
  case InstrKind::Alloc: {
    std::vector<char> &b = live[in.buffer];
    b.assign(size_t(in.bytes), 1); // touched: resident
    break;
  }
  case InstrKind::Free:
    live.erase(in.buffer);
    break;
  case InstrKind::Wait:
    break;
  }
}

void CpuRank::runStream(int queue, int step, Scratch &scratch) {
  auto t0 = Clock::now();
  for (int i = 0; i < int(prog.code.size()); ++i) {
    const Instruction &in = prog.code[i];
    if (queueIndex[i] != queue)
      continue;
    // A member of a send/receive group after its first ran with it.
    if (in.p2pGroup >= 0 && in.p2pGroup != i) {
      continue;
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] {
        for (int d : in.deps)
          if (done[d].load() < step)
            return false;
        return true;
      });
    }
    auto s = Clock::now();
    try {
      execute(i, scratch);
    } catch (const std::exception &e) {
      lost(where(i) + ": " + e.what());
    }
    auto e = Clock::now();
    startS[i] = std::chrono::duration<double>(s - t0).count();
    endS[i] = std::chrono::duration<double>(e - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu);
      done[i] = step;
      if (in.p2pGroup == i)
        for (int j = i + 1;
             j < int(prog.code.size()) && prog.code[j].p2pGroup == i; ++j) {
          done[j] = step;
          startS[j] = startS[i];
          endS[j] = endS[i];
        }
    }
    cv.notify_all();
  }
}

llvm::Expected<RunResult> CpuRank::run() {
  if (prog.device != "CPU")
    return err("rank " + std::to_string(env.rank) + ": the plan places it on " +
               prog.device +
               ", and the CPU backend runs CPU devices (plan "
               "for a cluster of CPU, e.g. --cluster 2xCPU)");
  try {
    rv = std::make_unique<Rendezvous>(env.rank, env.masterAddr, env.masterPort,
                                      options.timeout);
    store = rv->store.get();
    world = connect("world", env.rank, set.worldSize);
    // Every rank knows from the plan whether any sends (its own program
    // may not, and the others' programs are not here).
    if (set.pipeSends || set.ringSends)
      p2p = connect("p2p", env.rank, set.worldSize);
    // A context per group this rank is in and stream that uses it, named
    // by the group's members (groupKey: the same on every member whatever
    // it lowered), made in that order by each member.
    std::map<int, std::vector<int>> streamsOf;
    for (const Instruction &in : prog.code)
      if (in.kind == InstrKind::Collective) {
        auto &v = streamsOf[in.group];
        if (std::find(v.begin(), v.end(), int(in.stream)) == v.end())
          v.push_back(int(in.stream));
      }
    std::map<std::string, std::pair<int, int>> byName; // -> group, stream
    for (auto &[g, streams] : streamsOf)
      for (int st : streams)
        byName["g" + groupKey(set.groups[g]) + "/" + std::to_string(st)] = {g,
                                                                            st};
    for (const auto &[name, at] : byName) {
      const std::vector<int> &m = set.groups[at.first];
      int me = int(std::find(m.begin(), m.end(), env.rank) - m.begin());
      contexts[at] = connect(name, me, int(m.size()));
    }
    for (int i = 0; i < int(prog.code.size()); ++i) {
      const Instruction &in = prog.code[i];
      if (in.kind != InstrKind::Send && in.kind != InstrKind::Recv)
        continue;
      std::vector<char> &buf = messages[i];
      buf.assign(size_t(std::max(1.0, in.bytes)), 0);
      unbound[i] = p2p->createUnboundBuffer(buf.data(), buf.size());
    }
  } catch (const std::exception &e) {
    return err("rank " + std::to_string(env.rank) + ": " + e.what());
  }
  // Weights, gradients and optimizer state: held (and touched) all run.
  held.assign(size_t(std::max(0.0, prog.staticBytes)), 1);

  // A rank that disconnects from the rendezvous is lost: stop at once.
  watching = true;
  watchdog = std::thread([this] {
    std::vector<char> v;
    while (watching) {
      bool gone = false;
      try {
        gone = store->tryGet(kLostRankKey, v);
      } catch (...) {
        if (watching)
          lost("the rendezvous on rank 0 is gone");
        return;
      }
      if (gone && watching)
        lost("stopping");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  size_t n = prog.code.size();
  done.reset(new std::atomic<int>[n]);
  for (size_t i = 0; i < n; ++i)
    done[i] = 0;
  startS.assign(n, 0);
  endS.assign(n, 0);
  RankMeasurement me = measurementOf(prog, env.rank);
  int total = options.warmupSteps + options.steps;
  int queues = int(queuesOf(prog, &queueIndex).size());
  std::vector<Scratch> scratch(queues);
  for (int step = 1; step <= total; ++step) {
    try {
      gloo::BarrierOptions barrier(world);
      barrier.setTimeout(options.timeout);
      gloo::barrier(barrier);
    } catch (const std::exception &e) {
      lost(std::string("step barrier: ") + e.what());
    }
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int st = 0; st < queues; ++st)
      threads.emplace_back(
          [this, st, step, &scratch] { runStream(st, step, scratch[st]); });
    for (std::thread &t : threads)
      t.join();
    double stepS = std::chrono::duration<double>(Clock::now() - t0).count();
    if (step <= options.warmupSteps)
      continue;
    me.stepS.push_back(stepS);
    for (size_t i = 0; i < n; ++i) {
      const Instruction &in = prog.code[i];
      double busy = (endS[i] - startS[i]) / options.steps;
      me.kindS[int(in.kind)] += busy;
      if (in.stream == StreamKind::Compute) {
        (in.span.empty()     ? me.stepTailS
         : in.span[0] == 'F' ? me.forwardS
         : in.span[0] == 'B' ? me.backwardS
                             : me.stepTailS) += busy;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const Instruction &in = prog.code[i];
    if (in.kind == InstrKind::Wait || endS[i] <= startS[i])
      continue;
    me.spans.push_back({in.span + " " + in.name, int(in.stream), startS[i],
                        endS[i] - startS[i]});
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  me.peakMemoryBytes = double(usage.ru_maxrss) * 1024;

  // Everyone's measurement through the rendezvous.
  RunResult result;
  try {
    result = exchangeMeasurements(*store, set, me);
    watching = false;
    watchdog.join();
    gloo::BarrierOptions barrier(world);
    barrier.setTimeout(options.timeout);
    gloo::barrier(barrier);
    store->goodbye();
  } catch (const std::exception &e) {
    lost(std::string("collecting the measurements: ") + e.what());
  }
  return result;
}

} // namespace
} // namespace runtime

llvm::Expected<RunResult> runOnCpu(const ProgramSet &set, const LaunchEnv &env,
                                   const RunOptions &options) {
  if (auto e = runtime::checkLaunch(set, env))
    return std::move(e);
  if (auto e = runtime::loadBlas())
    return std::move(e);
  runtime::CpuRank rank(set, env, options);
  return rank.run();
}

} // namespace orrery
