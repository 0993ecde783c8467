//===- Profile.cpp - `orrery profile` on the CPU backend -----------------===//
//
// Measures what the cost model needs, with the backend's own kernels:
//  - GEMMs over a grid of shapes (and a plan's own): the best rate is the
//    device's fp32 peak; the efficiency curve e·t/(t + t½) is the least-
//    squares line of time against time-at-peak (time = t/e + t½/e);
//  - the memory-bound kernel over sizes: the bandwidth of the largest (past
//    the caches), and the per-call cost of a tiny one (the launch);
//  - fused attention over key counts, forward and backward: e·k/(k + k½),
//    fitted as 1/eff = 1/e + (k½/e)/k;
//  - between the ranks: every collective kind over message sizes, as the
//    backend runs them: the measured curves the cost model reads (a link's
//    measured_collectives), and the ring's 2(n-1)/n·S/bw + 2(n-1)·latency
//    fitted to the all-reduce points for other group sizes.
// The result is a cluster spec (docs/runtime.md): the CPU device with its
// measured_kernel_profile, linked by the measured loopback link, with
// every point measured beside it.
//
//===----------------------------------------------------------------------===//
#include "orrery/Runtime/Runtime.h"
#include "CpuKernels.h"
#include "GlooCollectives.h"
#include "ProfileFit.h"
#include "TcpStore.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace orrery {

namespace {

using Clock = std::chrono::steady_clock;

/// Median seconds of `fn` over repetitions filling about `budget` seconds.
template <typename Fn> double timeIt(Fn &&fn, double budget) {
  fn(); // warm
  std::vector<double> t;
  auto start = Clock::now();
  do {
    auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  } while (std::chrono::duration<double>(Clock::now() - start).count() <
               budget &&
           t.size() < 1000);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

} // namespace

llvm::Expected<nlohmann::ordered_json>
profileCpu(const LaunchEnv &env, const ProfileOptions &options) {
  if (auto e = runtime::loadBlas())
    return std::move(e);
  using nlohmann::ordered_json;
  ordered_json points = ordered_json::object();
  ordered_json profile;
  double peak = 0, bandwidth = 0;
  runtime::Scratch scratch;
  if (env.rank == 0) {
    // GEMMs.
    using Shape = ProfileOptions::GemmShape;
    std::vector<Shape> shapes = options.gemmShapes;
    for (int64_t m : {32, 128, 512, 2048})
      for (int64_t n : {64, 256, 1024})
        for (int64_t k : {64, 256, 1024})
          shapes.push_back({m, n, k});
    std::vector<double> flops, secs;
    ordered_json gemms = ordered_json::array();
    for (const Shape &s : shapes) {
      double t = timeIt(
          [&] { runtime::gemm(scratch, s.m, s.n, s.k, 1); },
          options.secondsPerPoint);
      double f = 2.0 * s.m * s.n * s.k;
      flops.push_back(f);
      secs.push_back(t);
      peak = std::max(peak, f / t);
      gemms.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"seconds", t}});
    }
    std::vector<double> atPeak;
    for (double f : flops)
      atPeak.push_back(f / peak);
    auto [e, half] = runtime::fitEfficiency(atPeak, secs);
    points["gemm"] = gemms;

    // The memory-bound kernel, and the cost of a tiny call.
    ordered_json mem = ordered_json::array();
    for (double bytes : {1.0 * (1 << 20), 4.0 * (1 << 20), 16.0 * (1 << 20),
                         64.0 * (1 << 20)}) {
      double t = timeIt([&] { runtime::stream(scratch, bytes); },
                        options.secondsPerPoint);
      bandwidth = bytes / t; // the largest: past the caches
      mem.push_back({{"bytes", bytes}, {"seconds", t}});
    }
    double launch =
        timeIt([&] { runtime::stream(scratch, 12.0); }, options.secondsPerPoint);
    points["memory_bound"] = mem;

    // Fused attention, d = 64, one head, over key counts.
    ordered_json attn = ordered_json::array();
    double fwdE = 0, fwdHalf = 0, bwdE = 0, bwdHalf = 0;
    for (bool backward : {false, true}) {
      std::vector<double> invK, invEff;
      for (int64_t keys : {128, 256, 512, 1024, 2048}) {
        Instruction in;
        in.kind = InstrKind::Attention;
        in.batch = 1;
        in.heads = 1;
        in.qLen = in.kvLen = keys;
        in.headDim = in.valueDim = 64;
        in.backward = backward;
        double t = timeIt([&] { runtime::attention(scratch, in); },
                          options.secondsPerPoint);
        double f = 2.0 * keys * keys * 128 * (backward ? 2.5 : 1.0);
        double eff = f / (peak * t);
        invK.push_back(1.0 / keys);
        invEff.push_back(1.0 / eff);
        attn.push_back({{"keys", keys},
                        {"backward", backward},
                        {"seconds", t}});
      }
      auto [ia, ib] = runtime::fitLine(invK, invEff);
      double ee = std::min(1.0, ia > 0 ? 1.0 / ia : 1.0);
      double hk = std::max(1e-9, ib * ee);
      (backward ? bwdE : fwdE) = ee;
      (backward ? bwdHalf : fwdHalf) = hk;
    }
    points["attention"] = attn;

    profile = {{"gemm_efficiency", e},
               {"gemm_half_efficiency_s", half},
               {"gemm_memory_efficiency", 1.0},
               {"pointwise_memory_efficiency", 1.0},
               {"reduction_memory_efficiency", 1.0},
               {"random_memory_efficiency", 1.0},
               {"kernel_launch_s", launch},
               {"attention_forward_efficiency", fwdE},
               {"attention_forward_half_keys", fwdHalf},
               {"attention_backward_efficiency", bwdE},
               {"attention_backward_half_keys", bwdHalf},
               {"source", "measured by orrery profile (CPU backend: OpenBLAS "
                          "sgemm, the runtime's attention and streaming "
                          "kernels, one thread)"}};
  }

  // Between the ranks: all-reduce over sizes.
  double linkBandwidth = 0, linkLatency = 0;
  if (env.worldSize > 1) {
    try {
      runtime::Rendezvous rv(env.rank, env.masterAddr, env.masterPort,
                             options.timeout);
      auto world = rv.connect("profile", env.rank, env.worldSize);
      ordered_json coll = ordered_json::array();
      std::vector<double> sizes, secs;
      uint32_t tag = 0;
      // Every kind the cost model prices, run as the backend runs it; the
      // same repetitions on every rank.
      const std::pair<const char *, CollectiveKind> kinds[] = {
          {"all-reduce", CollectiveKind::AllReduce},
          {"all-gather", CollectiveKind::AllGather},
          {"reduce-scatter", CollectiveKind::ReduceScatter},
          {"all-to-all", CollectiveKind::AllToAll},
          {"send-recv", CollectiveKind::SendRecv}};
      for (const auto &entry : kinds)
        for (double bytes : {4e3, 64e3, 1e6, 4e6, 16e6}) {
          // Named copies: a C++17 lambda cannot capture structured bindings.
          const char *name = entry.first;
          CollectiveKind kind = entry.second;
          auto once = [&] {
            runtime::runCollective(world, kind, bytes, env.worldSize,
                                   env.rank, tag++, scratch, options.timeout);
          };
          once();
          std::vector<double> t;
          for (int i = 0; i < 10; ++i) {
            auto t0 = Clock::now();
            once();
            t.push_back(
                std::chrono::duration<double>(Clock::now() - t0).count());
          }
          std::sort(t.begin(), t.end());
          double median = t[t.size() / 2];
          if (kind == CollectiveKind::AllReduce) {
            sizes.push_back(bytes);
            secs.push_back(median);
          }
          coll.push_back({{"collective", name},
                          {"ranks", env.worldSize},
                          {"bytes", bytes},
                          {"seconds", median}});
        }
      int n = env.worldSize;
      auto [a, b] = runtime::fitLine(sizes, secs);
      linkBandwidth = b > 0 ? 2.0 * (n - 1) / n / b : 0;
      linkLatency = std::max(1e-6, a / (2.0 * (n - 1)));
      points["collectives"] = coll;
      gloo::BarrierOptions barrier(world);
      gloo::barrier(barrier);
      rv.store->goodbye();
    } catch (const std::exception &e) {
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "rank " + std::to_string(env.rank) +
                                         ": profiling the collectives: " +
                                         e.what());
    }
  }
  if (env.rank != 0)
    return ordered_json();

  ordered_json device = {
      {"name", "CPU"},
      {"vendor", "generic"},
      {"peak_flop_per_s", {{"fp32", peak}}},
      {"memory_bytes", options.memoryBytes},
      {"memory_bandwidth_bytes_per_s", bandwidth},
      {"power_w", 15},
      {"workspace_bytes", 268435456},
      {"intra_node_link", "Loopback-TCP"},
      {"measured_kernel_profile", profile},
      {"source", "this machine, measured by orrery profile: the best "
                 "sgemm rate and streaming bandwidth of one thread"}};
  ordered_json node = {{"count", 1},
                       {"devices_per_node", std::max(1, env.worldSize)},
                       {"device", device}};
  if (linkBandwidth > 0)
    node["intra_node_link"] = {{"link", "Loopback-TCP"},
                               {"bandwidth_bytes_per_s", linkBandwidth},
                               {"latency_s", linkLatency},
                               {"measured_collectives", points["collectives"]}};
  ordered_json spec;
  spec["name"] = std::to_string(std::max(1, env.worldSize)) +
                 " CPU ranks (measured)";
  spec["_measured"] = points;
  spec["sites"] = ordered_json::array(
      {{{"name", "local"}, {"nodes", ordered_json::array({node})}}});
  return spec;
}

} // namespace orrery
