//===- RunPrograms.cpp - executing and reporting a program set ------------===//
//
// Shared by `orrery run` (which lowers a plan first) and `orrery-run` (which
// reads the programs `orrery lower --json` wrote, on a machine without the
// compiler): starting local ranks, running this rank's program on a
// backend, and rank 0's report, JSON and trace. No MLIR here.
//
//===----------------------------------------------------------------------===//
#include "RunPrograms.h"
#include "orrery/CostModel/Errors.h"

#include <algorithm>
#include <arpa/inet.h>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace orrery {
namespace cli {

int failLine(const std::string &message) {
  std::cerr << "orrery: error: " << orrery::printableLine(message) << "\n";
  return 1;
}

namespace {

/// A port nothing listens on now, for --local's rendezvous.
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 29500;
  if (fd >= 0 &&
      ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0)
    ::close(fd);
  return port;
}

/// The simulator's spans of a rank's last step (F0, B3.1, ...): from its
/// first instruction's start to its last one's end.
nlohmann::ordered_json taskSpans(const RankMeasurement &r) {
  std::map<std::string, std::pair<double, double>> tasks;
  for (const MeasuredSpan &s : r.spans) {
    if (s.stream != int(StreamKind::Compute))
      continue;
    std::string task = s.name.substr(0, s.name.find(' '));
    auto [it, fresh] =
        tasks.emplace(task, std::make_pair(s.startS, s.startS + s.durationS));
    if (!fresh) {
      it->second.first = std::min(it->second.first, s.startS);
      it->second.second = std::max(it->second.second, s.startS + s.durationS);
    }
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto &[task, span] : tasks)
    out.push_back({{"name", task},
                   {"category", task[0] == 'F'   ? "forward"
                                : task[0] == 'B' ? "backward"
                                                 : "optimizer"},
                   {"start_s", span.first},
                   {"duration_s", span.second - span.first}});
  return out;
}

double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string pct(double measured, double predicted) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%",
                predicted > 0 ? 100 * (predicted - measured) / measured : 0.0);
  return buf;
}

} // namespace

int spawnRanks(int argc, char **argv, int local, int timeoutS) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--local") {
      ++i;
      continue;
    }
    if (a.rfind("--local=", 0) == 0)
      continue;
    args.push_back(a);
  }
  std::vector<char *> cargv;
  for (std::string &a : args)
    cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int port = freePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < local; ++r) {
    std::vector<std::string> env;
    for (char **e = environ; *e; ++e) {
      std::string kv = *e;
      for (const char *drop :
           {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "MASTER_ADDR=",
            "MASTER_PORT=", "OMPI_COMM_WORLD_RANK=", "SLURM_PROCID="})
        if (kv.rfind(drop, 0) == 0)
          kv.clear();
      if (!kv.empty())
        env.push_back(kv);
    }
    env.push_back("RANK=" + std::to_string(r));
    env.push_back("WORLD_SIZE=" + std::to_string(local));
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
    // One BLAS thread per rank: the ranks share the machine's cores.
    if (!std::getenv("OPENBLAS_NUM_THREADS"))
      env.push_back("OPENBLAS_NUM_THREADS=1");
    std::vector<char *> cenv;
    for (std::string &e : env)
      cenv.push_back(e.data());
    cenv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargv.data(),
                    cenv.data()) != 0) {
      for (pid_t p : pids)
        ::kill(p, SIGKILL);
      return failLine("--local: cannot start rank " + std::to_string(r));
    }
    pids.push_back(pid);
  }
  // Every rank's exit; a rank that fails stops the others within the
  // timeout (they see it lost), after which what is left is killed.
  int rc = 0;
  size_t left = pids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (left) {
    int status = 0;
    pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      --left;
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) {
        int r = int(std::find(pids.begin(), pids.end(), p) - pids.begin());
        if (rc == 0 && WIFSIGNALED(status))
          std::cerr << "orrery: error: rank " << r << " was killed by signal "
                    << WTERMSIG(status) << "\n";
        rc = 1;
        deadline = std::min(deadline, std::chrono::steady_clock::now() +
                                          std::chrono::seconds(timeoutS + 5));
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t q : pids)
        ::kill(q, SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return rc;
}

int writeText(const std::string &text, const std::string &path) {
  if (path.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream out(path);
  out << text;
  if (!out)
    return failLine("-o " + path + ": cannot write the file");
  return 0;
}

int runPrograms(const ProgramSet &programs, const LaunchEnv &launch,
                const RunArgs &args) {
  const ProgramSet *set = &programs;
  const LaunchEnv *env = &launch;
  int warmup = args.warmup, timeoutS = args.timeoutS;
  bool json = args.json;
  const std::string &trace = args.trace, &backend = args.backend,
                    &plan = args.what;
  RunOptions options;
  options.steps = args.steps;
  options.warmupSteps = warmup;
  options.timeout = std::chrono::milliseconds(int64_t(timeoutS) * 1000);
  options.fatal = [](const std::string &message) {
    failLine(message);
    std::cerr.flush();
    std::_Exit(1);
  };
  bool cuda =
      backend == "cuda" || (backend == "auto" && env->rank < set->worldSize &&
                            set->ranks[env->rank].device != "CPU");
  auto result =
      cuda ? runOnCuda(*set, *env, options) : runOnCpu(*set, *env, options);
  if (!result)
    return failLine(plan + ": " + llvm::toString(result.takeError()));
  if (env->rank != 0)
    return 0;

  // Predicted per rank, from its program: forward and backward compute.
  std::vector<double> steps = result->stepS();
  double mean = 0;
  for (double s : steps)
    mean += s / steps.size();
  int slowest = 0;
  double worst = 0;
  for (const RankMeasurement &r : result->ranks) {
    double m = median(r.stepS);
    if (m > worst) {
      worst = m;
      slowest = r.rank;
    }
  }
  double predicted = set->predictedStepS;
  if (!trace.empty()) {
    nlohmann::ordered_json events = nlohmann::ordered_json::array();
    for (const RankMeasurement &r : result->ranks) {
      events.push_back(
          {{"name", "process_name"},
           {"ph", "M"},
           {"pid", r.rank},
           {"args",
            {{"name", "rank " + std::to_string(r.rank) + " (stage " +
                          std::to_string(r.stage) + ", " + r.device + ")"}}}});
      // The simulator's spans (F0, B3.1, ...) on track 0, the
      // instructions on one track per stream.
      for (const MeasuredSpan &s : r.spans)
        events.push_back({{"name", s.name},
                          {"cat", streamKindName(StreamKind(s.stream))},
                          {"ph", "X"},
                          {"pid", r.rank},
                          {"tid", 1 + s.stream},
                          {"ts", s.startS * 1e6},
                          {"dur", s.durationS * 1e6}});
      for (const auto &task : taskSpans(r))
        events.push_back({{"name", task["name"]},
                          {"cat", task["category"]},
                          {"ph", "X"},
                          {"pid", r.rank},
                          {"tid", 0},
                          {"ts", task["start_s"].get<double>() * 1e6},
                          {"dur", task["duration_s"].get<double>() * 1e6}});
    }
    nlohmann::ordered_json doc;
    doc["traceEvents"] = events;
    doc["displayTimeUnit"] = "ms";
    std::ofstream out(trace);
    out << doc.dump();
    if (!out)
      return failLine("--trace " + trace + ": cannot write the file");
  }
  if (json) {
    nlohmann::ordered_json j;
    j["plan"] = plan;
    j["backend"] = cuda ? "cuda" : "cpu";
    j["launcher"] = env->launcher;
    j["ranks"] = set->worldSize;
    j["warmup_steps"] = warmup;
    j["steps"] = steps.size();
    j["measured"] = {{"step_time_s",
                      {{"mean", mean},
                       {"median", median(steps)},
                       {"min", *std::min_element(steps.begin(), steps.end())},
                       {"max", *std::max_element(steps.begin(), steps.end())}}},
                     {"slowest_rank", slowest}};
    j["predicted"] = {{"step_time_s", predicted}};
    j["error"] = {
        {"step_time", median(steps) > 0
                          ? (predicted - median(steps)) / median(steps)
                          : 0.0}};
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const RankMeasurement &r : result->ranks) {
      nlohmann::ordered_json kinds;
      for (int k = 0; k < int(r.kindS.size()); ++k)
        if (r.kindS[k] > 0)
          kinds[instrKindName(InstrKind(k))] = r.kindS[k];
      ranks.push_back({{"rank", r.rank},
                       {"stage", r.stage},
                       {"replica_group", r.replicaGroup},
                       {"device", r.device},
                       {"step_time_s", r.stepS},
                       {"forward_s", r.forwardS},
                       {"predicted_forward_s", r.predictedForwardS},
                       {"backward_s", r.backwardS},
                       {"predicted_backward_s", r.predictedBackwardS},
                       {"instruction_s", kinds},
                       {"peak_memory_bytes", r.peakMemoryBytes},
                       {"predicted_peak_memory_bytes", r.predictedPeakBytes},
                       {"spans", taskSpans(r)}});
    }
    j["per_rank"] = ranks;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%s on %d ranks (%s backend, launched by %s): %zu steps after "
              "%d warm-up\n",
              plan.c_str(), set->worldSize, cuda ? "cuda" : "cpu",
              env->launcher.c_str(), steps.size(), warmup);
  std::printf("step         measured %.2f ms (median; mean %.2f, min %.2f, "
              "max %.2f; slowest rank %d)   predicted %.2f ms   error %s\n",
              median(steps) * 1e3, mean * 1e3,
              *std::min_element(steps.begin(), steps.end()) * 1e3,
              *std::max_element(steps.begin(), steps.end()) * 1e3, slowest,
              predicted * 1e3, pct(median(steps), predicted).c_str());
  std::printf("\nrank stage device     step ms  fwd ms (pred)    bwd ms "
              "(pred)    gemm  attn  kernel  coll  p2p ms   peak MiB (pred)\n");
  for (const RankMeasurement &r : result->ranks) {
    auto k = [&](InstrKind kind) { return r.kindS[int(kind)] * 1e3; };
    std::printf(
        "%4d %5d %-9s %8.2f %7.2f (%6.2f) %7.2f (%6.2f) %5.1f %5.1f "
        "%7.1f %5.1f %6.1f %8.0f (%5.0f)\n",
        r.rank, r.stage, r.device.c_str(), median(r.stepS) * 1e3,
        r.forwardS * 1e3, r.predictedForwardS * 1e3, r.backwardS * 1e3,
        r.predictedBackwardS * 1e3, k(InstrKind::Gemm), k(InstrKind::Attention),
        k(InstrKind::Kernel) + k(InstrKind::Optimizer),
        k(InstrKind::Collective), k(InstrKind::Send) + k(InstrKind::Recv),
        r.peakMemoryBytes / (1 << 20), r.predictedPeakBytes / (1 << 20));
  }
  return 0;
}

int runProfile(const LaunchEnv &env, const ProfileOptions &options,
               const std::string &backend, const std::string &output) {
  auto spec =
      backend == "cuda" ? profileCuda(env, options) : profileCpu(env, options);
  if (!spec)
    return failLine("profile: " + llvm::toString(spec.takeError()));
  if (env.rank != 0)
    return 0;
  if (int rc = writeText(spec->dump(2) + "\n", output))
    return rc;
  if (output.empty())
    return 0;
  const auto &dev = (*spec)["sites"][0]["nodes"][0]["device"];
  const auto &prof = dev["measured_kernel_profile"];
  if (backend == "cuda")
    std::printf("%s: %s: GEMM efficiency %.3f (half at %.2f us), memory %.3f "
                "of its bandwidth, launch %.1f us",
                output.c_str(), dev["name"].get<std::string>().c_str(),
                prof["gemm_efficiency"].get<double>(),
                prof["gemm_half_efficiency_s"].get<double>() * 1e6,
                prof["pointwise_memory_efficiency"].get<double>(),
                prof["kernel_launch_s"].get<double>() * 1e6);
  else
    std::printf("%s: %d CPU rank(s): sgemm %.1f GFLOP/s, streaming %.1f GB/s",
                output.c_str(), std::max(1, env.worldSize),
                dev["peak_flop_per_s"]["fp32"].get<double>() / 1e9,
                dev["memory_bandwidth_bytes_per_s"].get<double>() / 1e9);
  const auto &node = (*spec)["sites"][0]["nodes"][0];
  if (node.contains("intra_node_link"))
    std::printf(", link %.2f GB/s and %.1f us",
                node["intra_node_link"]["bandwidth_bytes_per_s"].get<double>() /
                    1e9,
                node["intra_node_link"]["latency_s"].get<double>() * 1e6);
  std::printf("\n");
  return 0;
}

} // namespace cli
} // namespace orrery
