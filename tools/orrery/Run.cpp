//===- Run.cpp - `orrery run`: execute a plan and measure it -------------===//
//
//   orrery run plan.json [--local N] [--steps K] [--warmup W] [--json]
//              [--trace FILE] [--timeout S]
//
// Under torchrun, mpirun or srun each process runs its rank; `--local N`
// starts N such processes on this machine (torchrun's variables, a free
// port on 127.0.0.1). Rank 0 prints the measured step beside the plan's
// prediction.
//
//===----------------------------------------------------------------------===//
#include "Run.h"
#include "Common.h"
#include "orrery/Runtime/Runtime.h"

#include <algorithm>
#include <arpa/inet.h>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char **environ;

namespace orrery {
namespace cli {

void RunCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "run", "Execute a plan's per-rank programs on this machine's backend "
             "and measure the step against the plan's prediction "
             "(docs/runtime.md)");
  cmd->add_option("plan", plan, "plan JSON written by `orrery plan`")
      ->required();
  cmd->add_option("--local", local,
                  "start this many ranks on this machine (else the launcher "
                  "started this process: torchrun, mpirun or srun)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--steps", steps, "steps to measure")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", warmup, "steps run before measuring")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--timeout", timeoutS,
                  "seconds a rank waits for a peer before it stops with an "
                  "error (a lost rank stops the others at once)")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--backend", backend,
                  "cpu (OpenBLAS, Gloo), cuda (cuBLASLt, NCCL), or auto: "
                  "cuda for a plan on GPUs, cpu for one on CPU ranks")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_flag("--json", json, "print the measurement as JSON");
  cmd->add_option("--trace", trace,
                  "write the last measured step as a Chrome trace");
  cmd->add_option("--model", model, "the model, if not the plan's own");
  cmd->add_option("--cluster", cluster, "the cluster, if not the plan's own");
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

int RunCommand::spawnLocal(int argc, char **argv) const {
  // The plan's rank count first: a wrong --local is an error before any
  // process starts.
  LoadedPlan loaded;
  if (int rc = loadPlan(plan, model, cluster, loaded))
    return rc;
  auto set = lowerPlan(loaded);
  if (!set)
    return fail(plan + ": " + llvm::toString(set.takeError()));
  if (set->worldSize != local)
    return fail("--local " + std::to_string(local) + ": the plan has " +
                std::to_string(set->worldSize) + " ranks");
  return spawnRanks(argc, argv, local, timeoutS);
}

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
      for (const char *drop : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=",
                               "MASTER_ADDR=", "MASTER_PORT=",
                               "OMPI_COMM_WORLD_RANK=", "SLURM_PROCID="})
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
      return fail("--local: cannot start rank " + std::to_string(r));
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

int RunCommand::run(int argc, char **argv) const {
  if (local > 0)
    return spawnLocal(argc, argv);
  auto env = launchFromEnvironment();
  if (!env)
    return fail("run: " + llvm::toString(env.takeError()));
  LoadedPlan loaded;
  if (int rc = loadPlan(plan, model, cluster, loaded))
    return rc;
  auto set = lowerPlan(loaded);
  if (!set)
    return fail(plan + ": " + llvm::toString(set.takeError()));
  RunOptions options;
  options.steps = steps;
  options.warmupSteps = warmup;
  options.timeout = std::chrono::milliseconds(int64_t(timeoutS) * 1000);
  options.fatal = [](const std::string &message) {
    fail(message);
    std::cerr.flush();
    std::_Exit(1);
  };
  bool cuda = backend == "cuda" ||
              (backend == "auto" && env->rank < set->worldSize &&
               set->ranks[env->rank].device != "CPU");
  auto result = cuda ? runOnCuda(*set, *env, options)
                     : runOnCpu(*set, *env, options);
  if (!result)
    return fail(plan + ": " + llvm::toString(result.takeError()));
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
  auto predictedOf = [&](int rank, char phase) {
    double s = 0;
    for (const Instruction &in : set->ranks[rank].code)
      if (in.stream == StreamKind::Compute && !in.span.empty() &&
          in.span[0] == phase)
        s += in.predictedS;
    return s;
  };
  if (!trace.empty()) {
    nlohmann::ordered_json events = nlohmann::ordered_json::array();
    for (const RankMeasurement &r : result->ranks) {
      events.push_back({{"name", "process_name"},
                        {"ph", "M"},
                        {"pid", r.rank},
                        {"args",
                         {{"name", "rank " + std::to_string(r.rank) +
                                       " (stage " + std::to_string(r.stage) +
                                       ", " + r.device + ")"}}}});
      // The simulator's spans (F0, B3.1, ...) on track 0, the
      // instructions on one track per stream.
      std::map<std::string, std::pair<double, double>> tasks;
      for (const MeasuredSpan &s : r.spans) {
        std::string task = s.name.substr(0, s.name.find(' '));
        auto [it, fresh] = tasks.emplace(
            task, std::make_pair(s.startS, s.startS + s.durationS));
        if (!fresh) {
          it->second.first = std::min(it->second.first, s.startS);
          it->second.second =
              std::max(it->second.second, s.startS + s.durationS);
        }
        events.push_back({{"name", s.name},
                          {"cat", streamKindName(StreamKind(s.stream))},
                          {"ph", "X"},
                          {"pid", r.rank},
                          {"tid", 1 + s.stream},
                          {"ts", s.startS * 1e6},
                          {"dur", s.durationS * 1e6}});
      }
      for (const auto &[task, span] : tasks)
        events.push_back({{"name", task},
                          {"cat", task[0] == 'F'   ? "forward"
                                  : task[0] == 'B' ? "backward"
                                                   : "step"},
                          {"ph", "X"},
                          {"pid", r.rank},
                          {"tid", 0},
                          {"ts", span.first * 1e6},
                          {"dur", (span.second - span.first) * 1e6}});
    }
    nlohmann::ordered_json doc;
    doc["traceEvents"] = events;
    doc["displayTimeUnit"] = "ms";
    std::ofstream out(trace);
    out << doc.dump();
    if (!out)
      return fail("--trace " + trace + ": cannot write the file");
  }
  if (json) {
    nlohmann::ordered_json j;
    j["plan"] = plan;
    j["backend"] = cuda ? "cuda" : "cpu";
    j["launcher"] = env->launcher;
    j["ranks"] = set->worldSize;
    j["warmup_steps"] = warmup;
    j["steps"] = steps.size();
    j["measured"] = {
        {"step_time_s",
         {{"mean", mean},
          {"median", median(steps)},
          {"min", *std::min_element(steps.begin(), steps.end())},
          {"max", *std::max_element(steps.begin(), steps.end())}}},
        {"slowest_rank", slowest}};
    j["predicted"] = {{"step_time_s", predicted}};
    j["error"] = {{"step_time",
                   median(steps) > 0 ? (predicted - median(steps)) /
                                           median(steps)
                                     : 0.0}};
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const RankMeasurement &r : result->ranks) {
      nlohmann::ordered_json kinds;
      for (int k = 0; k < int(r.kindS.size()); ++k)
        if (r.kindS[k] > 0)
          kinds[instrKindName(InstrKind(k))] = r.kindS[k];
      ranks.push_back(
          {{"rank", r.rank},
           {"stage", r.stage},
           {"replica_group", r.replicaGroup},
           {"device", r.device},
           {"step_time_s", r.stepS},
           {"forward_s", r.forwardS},
           {"predicted_forward_s", predictedOf(r.rank, 'F')},
           {"backward_s", r.backwardS},
           {"predicted_backward_s", predictedOf(r.rank, 'B')},
           {"instruction_s", kinds},
           {"peak_memory_bytes", r.peakMemoryBytes},
           {"predicted_peak_memory_bytes", r.predictedPeakBytes}});
    }
    j["per_rank"] = ranks;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%s on %d ranks (%s backend, launched by %s): %zu steps after "
              "%d warm-up\n",
              plan.c_str(), set->worldSize, cuda ? "cuda" : "cpu",
              env->launcher.c_str(),
              steps.size(), warmup);
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
    std::printf("%4d %5d %-9s %8.2f %7.2f (%6.2f) %7.2f (%6.2f) %5.1f %5.1f "
                "%7.1f %5.1f %6.1f %8.0f (%5.0f)\n",
                r.rank, r.stage, r.device.c_str(), median(r.stepS) * 1e3,
                r.forwardS * 1e3, predictedOf(r.rank, 'F') * 1e3,
                r.backwardS * 1e3, predictedOf(r.rank, 'B') * 1e3,
                k(InstrKind::Gemm), k(InstrKind::Attention),
                k(InstrKind::Kernel) + k(InstrKind::Optimizer),
                k(InstrKind::Collective),
                k(InstrKind::Send) + k(InstrKind::Recv),
                r.peakMemoryBytes / (1 << 20),
                r.predictedPeakBytes / (1 << 20));
  }
  return 0;
}

} // namespace cli
} // namespace orrery

namespace orrery {
namespace cli {

void ProfileCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "profile", "Measure this machine for the cost model (GEMMs, memory-"
                 "bound kernels, attention, and the collectives between "
                 "ranks) and write it as a cluster spec (docs/runtime.md)");
  cmd->add_option("-o,--output", output,
                  "write the cluster spec here (default: stdout)");
  cmd->add_option("--local", local,
                  "profile this many ranks on this machine (the links "
                  "between them too)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--plan", plan,
                  "also measure the GEMM shapes of rank 0 of this plan");
  cmd->add_option("--seconds-per-point", secondsPerPoint,
                  "about how long each measured point runs")
      ->check(CLI::Range(0.001, 60.0));
}

int ProfileCommand::run(int argc, char **argv) const {
  if (local > 1)
    return spawnRanks(argc, argv, local, 60);
  LaunchEnv env;
  if (local != 1 && std::getenv("RANK") == nullptr &&
      std::getenv("OMPI_COMM_WORLD_RANK") == nullptr &&
      std::getenv("SLURM_PROCID") == nullptr) {
    env = LaunchEnv(); // one rank, this process
  } else if (local != 1) {
    auto e = launchFromEnvironment();
    if (!e)
      return fail("profile: " + llvm::toString(e.takeError()));
    env = *e;
  }
  ProfileOptions options;
  options.secondsPerPoint = secondsPerPoint;
  if (!plan.empty()) {
    LoadedPlan loaded;
    if (int rc = loadPlan(plan, "", "", loaded))
      return rc;
    auto set = lowerPlan(loaded);
    if (!set)
      return fail(plan + ": " + llvm::toString(set.takeError()));
    for (const Instruction &in : set->ranks[0].code)
      if (in.kind == InstrKind::Gemm &&
          std::none_of(options.gemmShapes.begin(), options.gemmShapes.end(),
                       [&](const ProfileOptions::GemmShape &g) {
                         return g.m == in.m && g.n == in.n && g.k == in.k;
                       }))
        options.gemmShapes.push_back({in.m, in.n, in.k});
  }
  auto spec = profileCpu(env, options);
  if (!spec)
    return fail("profile: " + llvm::toString(spec.takeError()));
  if (env.rank != 0)
    return 0;
  std::string text = spec->dump(2) + "\n";
  if (output.empty()) {
    std::cout << text;
    return 0;
  }
  std::ofstream out(output);
  out << text;
  if (!out)
    return fail("-o " + output + ": cannot write the file");
  const auto &dev = (*spec)["sites"][0]["nodes"][0]["device"];
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
