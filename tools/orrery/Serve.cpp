//===- Serve.cpp - `orrery serve` ----------------------------------------===//
//
// docs/serving.md, "orrery serve". Each candidate configuration is a device
// type (a node group), tp, pp and the replicas that fill the group; each is
// simulated through the engine's scheduler on the workload. With latency
// targets and requests that all come at once (a throughput benchmark), a
// candidate's figure is its goodput: the highest Poisson arrival rate whose
// p99 TTFT and TPOT meet the targets, found by bisection.
//
//===----------------------------------------------------------------------===//
#include "Serve.h"
#include "PlanCommand.h"

#include "orrery/CostModel/PrintableLine.h"
#include "orrery/CostModel/Serving.h"
#include "orrery/CostModel/ServingSim.h"
#include "orrery/Workload/BuildWorkload.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace orrery {
namespace cli {
namespace {

struct Slo {
  double ttftS = 0, tpotS = 0; ///< p99 targets; 0: none
  bool any() const { return ttftS > 0 || tpotS > 0; }
};

llvm::Error serveError(const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(m));
}

llvm::Expected<Slo> parseSlo(const std::string &text) {
  Slo s;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, ',', -1, false);
  for (llvm::StringRef part : parts) {
    auto [k, v] = part.trim().split('=');
    double value = 0;
    if (v.trim().getAsDouble(value) || !(value > 0) || !std::isfinite(value))
      return serveError("--slo " + part.trim().str() +
                        ": expected a positive number of milliseconds");
    if (k.trim() == "ttft_ms")
      s.ttftS = value / 1e3;
    else if (k.trim() == "tpot_ms")
      s.tpotS = value / 1e3;
    else
      return serveError("--slo: unknown target '" + k.trim().str() +
                        "' (ttft_ms, tpot_ms: p99 targets in milliseconds)");
  }
  return s;
}

struct Fixed {
  int tp = 0, pp = 0, replicas = 0, ep = 0; ///< 0: searched
  std::string device;
  /// A prefill/decode split: each pool's device type and tp.
  std::string prefillDevice, decodeDevice;
  int prefillTp = 0, decodeTp = 0;
  bool split() const { return !prefillDevice.empty(); }
};

llvm::Expected<Fixed> parseServeStrategy(const std::string &text) {
  Fixed f;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, ',', -1, false);
  for (llvm::StringRef part : parts) {
    auto [k, v] = part.trim().split('=');
    std::string key = k.trim().str();
    if (key == "device") {
      f.device = v.trim().str();
      continue;
    }
    if (key == "prefill" || key == "decode") {
      auto [dev, tpText] = v.trim().rsplit(':');
      int tp = 0;
      if (dev.empty() || tpText.getAsInteger(10, tp) || tp < 1 || tp > 65536)
        return serveError("--strategy " + part.trim().str() +
                          ": expected " + key + "=DEVICE:TP");
      (key == "prefill" ? f.prefillDevice : f.decodeDevice) = dev.str();
      (key == "prefill" ? f.prefillTp : f.decodeTp) = tp;
      continue;
    }
    int value = 0;
    if (v.trim().getAsInteger(10, value) || value < 1 || value > 65536)
      return serveError("--strategy " + part.trim().str() +
                        ": expected a positive integer");
    if (key == "tp")
      f.tp = value;
    else if (key == "pp")
      f.pp = value;
    else if (key == "replicas")
      f.replicas = value;
    else if (key == "ep")
      f.ep = value;
    else
      return serveError("--strategy: unknown field '" + key +
                        "' (tp, pp, ep, replicas, device, or prefill and "
                        "decode)");
  }
  if (f.prefillDevice.empty() != f.decodeDevice.empty())
    return serveError("--strategy: a prefill/decode split needs both "
                      "prefill=DEVICE:TP and decode=DEVICE:TP");
  if (f.split() && (f.tp || f.pp || f.replicas || f.ep || !f.device.empty()))
    return serveError("--strategy: prefill= and decode= take the place of "
                      "tp, pp, ep, replicas and device");
  if (f.ep > 1 && f.tp && f.ep != f.tp)
    return serveError("--strategy ep=" + std::to_string(f.ep) +
                      ": expert parallelism spans the tensor-parallel ranks "
                      "(ep=1 or ep=tp=" +
                      std::to_string(f.tp) + ")");
  return f;
}

/// One pool of identical replicas.
struct Pool {
  const NodeGroup *group = nullptr;
  int tp = 1, pp = 1, replicas = 1, ep = 1;
  ServingMemory memory;
  SchedulerLimits limits;
  /// The cache a request of the workload's mean length holds (less than
  /// its tokens under a sliding window).
  double meanRequestTokensHeld = 0;
  int devices() const { return tp * pp * replicas; }
  std::string name() const {
    return group->device->name + " tp=" + std::to_string(tp) +
           (ep > 1 ? " ep=" + std::to_string(ep) : "") +
           " pp=" + std::to_string(pp) + " x" + std::to_string(replicas);
  }
};

struct Candidate {
  Pool p;                    ///< the replicas (the prefill pool when split)
  std::optional<Pool> decode; ///< prefill/decode disaggregation
  ServingResult result;
  double goodputRequestsPerS = -1; ///< with targets and offline arrivals
  bool meets = true;
  double miss = 0; ///< the worst target's overshoot, relative
  std::string missText;
  std::string error;
  std::string name() const {
    return decode ? "prefill " + p.name() + " + decode " + decode->name()
                  : p.name();
  }
  int devices() const { return p.devices() + (decode ? decode->devices() : 0); }
  /// The --strategy that prices this configuration alone.
  std::string strategyText() const {
    if (decode)
      return "prefill=" + p.group->device->name + ":" + std::to_string(p.tp) +
             ",decode=" + decode->group->device->name + ":" +
             std::to_string(decode->tp);
    return "tp=" + std::to_string(p.tp) +
           (p.ep > 1 ? ",ep=" + std::to_string(p.ep) : "") +
           ",pp=" + std::to_string(p.pp) +
           ",replicas=" + std::to_string(p.replicas) +
           ",device=" + p.group->device->name;
  }
  double dollarsPerHour() const {
    return p.devices() * p.group->priceUsdPerDeviceHour +
           (decode ? decode->devices() * decode->group->priceUsdPerDeviceHour
                   : 0);
  }
  double figure(const std::string &objective) const {
    if (objective == "latency")
      return -result.e2e.p99S;
    double perS = goodputRequestsPerS >= 0 ? goodputRequestsPerS
                                           : result.requestsPerS;
    if (objective == "cost")
      return perS / std::max(1e-9, dollarsPerHour());
    return perS;
  }
};

std::string ms(double s) {
  char buf[32];
  double m = s * 1e3;
  std::snprintf(buf, sizeof buf, m < 1 ? "%.3g ms" : m < 100 ? "%.1f ms" : "%.0f ms",
                m);
  return buf;
}

void judge(Candidate &c, const Slo &slo) {
  c.meets = true;
  c.miss = 0;
  c.missText.clear();
  auto check = [&](const char *what, double got, double target) {
    if (target <= 0 || got <= target)
      return;
    c.meets = false;
    double over = got / target - 1;
    if (over > c.miss) {
      c.miss = over;
      c.missText = std::string(what) + " p99 " + ms(got) + " > " + ms(target);
    }
  };
  check("TTFT", c.result.ttft.p99S, slo.ttftS);
  check("TPOT", c.result.tpot.p99S, slo.tpotS);
}

struct Context {
  const Workload &w;
  const ServingPrecision &precision;
  ServingEngine engine;
  const ServeRequest &request;
  const ServingWorkload &workload;
  Slo slo;
};

/// A pool's memory, its scheduler's limits and its step pricer.
llvm::Expected<StepPricer> preparePool(const Context &cx, Pool &pool) {
  auto replica = servingReplicaOn(*pool.group, pool.tp, pool.pp, pool.ep);
  if (!replica)
    return replica.takeError();
  const DeviceSpec &dev = *pool.group->device;
  ServingMemoryOptions mo;
  mo.tp = pool.tp;
  mo.pp = pool.pp;
  mo.weightBytesPerParam = cx.precision.weightBytesPerParam();
  mo.onceOnlyBytesPerParam = 2; // quantized checkpoints keep them 16-bit
  mo.kvBytesPerElement = cx.precision.kvBytesPerElement;
  if (cx.engine == ServingEngine::TensorRtLlm)
    mo.freeMemoryFraction = 0.95; // trtllm-bench's default
  // The limits depend on the weights' size (TensorRT-LLM's estimate), the
  // activations' room on the token limit.
  auto first = servingMemory(cx.w, dev, mo);
  if (!first)
    return first.takeError();
  // trtllm-bench estimates the engine as every parameter at the weights'
  // bytes, counted in GB of 10^9 and set against memory in GiB.
  double estimate =
      cx.engine == ServingEngine::TensorRtLlm
          ? double(cx.w.parameters() + cx.w.frozenParameters()) *
                cx.precision.weightBytesPerParam() *
                (double(1ull << 30) / 1e9) / double(pool.tp * pool.pp)
          : first->weightBytes;
  pool.limits = engineDefaults(cx.engine, dev, pool.tp, pool.pp, estimate,
                               first->kvBytesPerToken,
                               cx.workload.meanInput(),
                               cx.workload.meanOutput());
  if (cx.request.maxRequests > 0)
    pool.limits.maxRequests = cx.request.maxRequests;
  if (cx.request.maxBatchedTokens > 0)
    pool.limits.maxBatchedTokens = cx.request.maxBatchedTokens;
  mo.maxBatchedTokens = pool.limits.maxBatchedTokens;
  auto mem = servingMemory(cx.w, dev, mo);
  if (!mem)
    return mem.takeError();
  pool.memory = *mem;
  pool.limits.kvCacheTokens = mem->maxTokens;
  auto pricer = StepPricer::create(cx.w, *replica, cx.precision, cx.engine);
  if (pricer)
    pool.meanRequestTokensHeld =
        pricer->tokensHeld(cx.workload.meanInput() + cx.workload.meanOutput(),
                           pool.limits.blockTokens);
  return pricer;
}

/// The prompt's cache from a prefill replica to a decode replica: over
/// the nodes' network cards, each device its share of them.
llvm::Expected<KvTransfer> transferBetween(const Context &cx, const Pool &a,
                                           const Pool &b) {
  auto share = [](const NodeGroup &g) {
    return g.nic ? g.nic->bandwidthBytesPerS * g.nicsPerNode /
                       std::max(1, g.devicesPerNode)
                 : 0.0;
  };
  for (const Pool *p : {&a, &b})
    if (!p->group->nic)
      return serveError("disaggregation: the " + p->group->device->name +
                        " nodes state no network card to move the KV cache "
                        "over");
  KvTransfer t;
  t.bytesPerToken = kvCacheBytesPerToken(cx.w, cx.precision.kvBytesPerElement);
  t.bandwidthBytesPerS = std::min(share(*a.group), share(*b.group));
  t.latencyS = std::max(a.group->nic->latencyS, b.group->nic->latencyS);
  t.devices = std::min(a.tp * a.pp, b.tp * b.pp);
  return t;
}

/// A candidate's pools made ready to simulate.
struct Prepared {
  std::optional<StepPricer> pricer, decodePricer;
  KvTransfer transfer;
};

llvm::Expected<Prepared> prepare(const Context &cx, Candidate &c) {
  Prepared p;
  auto pricer = preparePool(cx, c.p);
  if (!pricer)
    return pricer.takeError();
  p.pricer.emplace(std::move(*pricer));
  if (c.decode) {
    auto d = preparePool(cx, *c.decode);
    if (!d)
      return d.takeError();
    p.decodePricer.emplace(std::move(*d));
    auto t = transferBetween(cx, c.p, *c.decode);
    if (!t)
      return t.takeError();
    p.transfer = *t;
  }
  return p;
}

llvm::Expected<ServingResult> simulateOn(const Prepared &p, const Candidate &c,
                                         const ServingWorkload &wl,
                                         std::vector<StepRecord> *trace) {
  return c.decode ? simulateDisaggregated(*p.pricer, c.p.limits, c.p.replicas,
                                          *p.decodePricer, c.decode->limits,
                                          c.decode->replicas, p.transfer, wl,
                                          trace)
                  : simulateServing(*p.pricer, c.p.limits, wl, c.p.replicas,
                                    trace);
}

/// Memory, limits and a simulation of the workload for one candidate.
bool evaluate(const Context &cx, Candidate &c) {
  auto fail = [&](llvm::Error e) {
    c.error = llvm::toString(std::move(e));
    return false;
  };
  auto prepared = prepare(cx, c);
  if (!prepared)
    return fail(prepared.takeError());
  auto simulate = [&](const ServingWorkload &wl) {
    return simulateOn(*prepared, c, wl, nullptr);
  };
  auto res = simulate(cx.workload);
  if (!res)
    return fail(res.takeError());
  c.result = *res;
  judge(c, cx.slo);
  if (cx.slo.any() &&
      cx.workload.arrival == ServingWorkload::Arrival::Offline) {
    // Goodput: the highest Poisson rate whose p99s meet the targets.
    double hi = res->requestsPerS, lo = 0;
    ServingWorkload probe = cx.workload;
    probe.arrival = ServingWorkload::Arrival::Poisson;
    probe.requests = std::min<int64_t>(probe.requests, 2000);
    Candidate best = c;
    bool found = false;
    for (int i = 0; i < 8; ++i) {
      double rate = (lo + hi) / 2;
      if (!(rate > 0))
        break;
      probe.ratePerS = rate;
      auto r = simulate(probe);
      if (!r) {
        llvm::consumeError(r.takeError());
        break;
      }
      Candidate trial = c;
      trial.result = *r;
      judge(trial, cx.slo);
      if (trial.meets) {
        lo = rate;
        best = trial;
        best.goodputRequestsPerS = rate;
        found = true;
      } else {
        hi = rate;
        if (!found)
          best = trial; // the closest miss so far, for the error
      }
    }
    if (found) {
      c = best;
    } else {
      best.goodputRequestsPerS = 0;
      c = best;
      c.meets = false;
    }
  }
  return true;
}

nlohmann::ordered_json latencyJson(const LatencyStats &s) {
  return {{"mean_ms", s.meanS * 1e3},
          {"p50_ms", s.p50S * 1e3},
          {"p90_ms", s.p90S * 1e3},
          {"p99_ms", s.p99S * 1e3}};
}

nlohmann::ordered_json poolJson(const Pool &p) {
  nlohmann::ordered_json j;
  j["device"] = p.group->device->name;
  j["tp"] = p.tp;
  j["ep"] = p.ep;
  j["pp"] = p.pp;
  j["replicas"] = p.replicas;
  j["devices"] = p.devices();
  j["max_requests"] = p.limits.maxRequests;
  j["max_batched_tokens"] = p.limits.maxBatchedTokens;
  j["kv_cache_block_tokens"] = p.limits.blockTokens;
  j["kv_cache_tokens_per_replica"] = p.limits.kvCacheTokens;
  j["weight_bytes_per_device"] = p.memory.weightBytes;
  j["kv_cache_bytes_per_device"] = p.memory.kvCacheBytes;
  return j;
}

nlohmann::ordered_json candidateJson(const Candidate &c) {
  nlohmann::ordered_json j;
  if (c.decode) {
    j["disaggregated"] = true;
    j["devices"] = c.devices();
    j["prefill"] = poolJson(c.p);
    j["decode"] = poolJson(*c.decode);
  } else {
    j = poolJson(c.p);
  }
  const ServingResult &r = c.result;
  nlohmann::ordered_json m;
  m["requests"] = r.requests;
  m["duration_s"] = r.durationS;
  m["request_throughput_req_per_s"] = r.requestsPerS;
  m["output_throughput_tok_per_s"] = r.outputTokensPerS;
  m["output_throughput_tok_per_s_per_device"] =
      r.outputTokensPerS / double(c.devices());
  m["total_token_throughput_tok_per_s"] = r.totalTokensPerS;
  if (c.goodputRequestsPerS >= 0)
    m["goodput_req_per_s"] = c.goodputRequestsPerS;
  m["ttft"] = latencyJson(r.ttft);
  m["tpot"] = latencyJson(r.tpot);
  m["itl"] = latencyJson(r.itl);
  m["e2e"] = latencyJson(r.e2e);
  m["kv_cache_utilization_mean"] = r.kvUtilizationMean;
  m["kv_cache_utilization_peak"] = r.kvUtilizationPeak;
  m["preemptions"] = r.preemptions;
  m["steps"] = r.steps;
  m["mean_requests_per_step"] = r.meanRequestsPerStep;
  j["metrics"] = m;
  j["meets_slo"] = c.meets;
  if (!c.meets && !c.missText.empty())
    j["misses"] = c.missText;
  return j;
}

std::string describeWorkload(const ServingWorkload &w) {
  char buf[200];
  using A = ServingWorkload::Arrival;
  char rate[48];
  std::snprintf(rate, sizeof rate, "Poisson at %.4g req/s", w.ratePerS);
  std::string arrival =
      w.arrival == A::Offline       ? "all at once"
      : w.arrival == A::Poisson     ? std::string(rate)
      : w.arrival == A::Concurrency ? std::to_string(w.concurrency) + " outstanding"
                                    : "from the trace";
  std::snprintf(buf, sizeof buf, "%lld requests, %.0f in / %.0f out tokens, ",
                (long long)w.requests, w.meanInput(), w.meanOutput());
  return buf + arrival;
}

} // namespace

int serveModule(mlir::ModuleOp module, const ModelArgs &args,
                const ServeRequest &request, bool json,
                const std::string &planOut, std::ostream &os) {
  auto built = buildWorkload(module, {}, KernelFusion::Fused);
  if (!built)
    return fail(args.path + ": " + llvm::toString(built.takeError()));
  const Workload &w = *built;
  auto cluster = loadClusterSource(request.cluster);
  if (!cluster)
    return fail(llvm::toString(cluster.takeError()));
  ServingEngine engine;
  if (!parseServingEngine(request.engine, engine))
    return fail("--engine " + request.engine + ": expected vllm or trtllm");
  auto precision = ServingPrecision::parse(request.precision, request.kvCache);
  if (!precision)
    return fail(llvm::toString(precision.takeError()));
  llvm::Expected<ServingWorkload> workload =
      request.traceFile.empty()
          ? ServingWorkload::parse(request.workload)
          : [&]() -> llvm::Expected<ServingWorkload> {
        std::string text;
        if (!readFileBytes(request.traceFile, text))
          return serveError("--trace " + request.traceFile +
                            ": cannot read the file");
        return ServingWorkload::parseTrace(text, request.traceFile);
      }();
  if (!workload)
    return fail(llvm::toString(workload.takeError()));
  auto slo = parseSlo(request.slo);
  if (!slo)
    return fail(llvm::toString(slo.takeError()));
  if (request.objective != "throughput" && request.objective != "cost" &&
      request.objective != "latency")
    return fail("--objective " + request.objective +
                ": expected throughput, cost or latency");
  auto fixed = parseServeStrategy(request.strategy);
  if (!fixed)
    return fail(llvm::toString(fixed.takeError()));

  Context cx{w, *precision, engine, request, *workload, *slo};
  bool moe = w.experts() > 1;
  // TensorRT-LLM builds CUDA engines: NVIDIA devices only (vLLM also runs
  // on AMD, TPU, Gaudi and Neuron devices).
  auto engineRuns = [&](const NodeGroup &g) {
    return engine != ServingEngine::TensorRtLlm || g.device->vendor == "NVIDIA";
  };
  std::string notRun;
  for (const Site &site : cluster->sites)
    for (const NodeGroup &g : site.nodeGroups)
      if (!engineRuns(g) && notRun.empty())
        notRun = g.device->name;
  // The candidates: each node group's device type, tp inside a node, pp
  // over the rest, as many replicas as fill the group.
  std::vector<Candidate> cands;
  for (const Site &site : cluster->sites)
    for (const NodeGroup &g : site.nodeGroups) {
      if (!engineRuns(g) || fixed->split() ||
          (!fixed->device.empty() &&
           llvm::StringRef(g.device->name).lower() !=
               llvm::StringRef(fixed->device).lower()))
        continue;
      if (request.objective == "cost" && g.priceUsdPerDeviceHour <= 0)
        return fail("--objective cost: the cluster states no price for its " +
                    g.device->name + " (price_usd_per_device_hour)");
      int devices = g.count * g.devicesPerNode;
      auto degrees = [](int fixedDegree, int most) {
        std::vector<int> v;
        if (fixedDegree)
          v.push_back(fixedDegree);
        else
          for (int d = 1; d <= most; d *= 2)
            v.push_back(d);
        return v;
      };
      for (int tp : degrees(fixed->tp, g.devicesPerNode))
        for (int pp : degrees(fixed->pp, std::max(1, devices / tp)))
          for (int ep :
               tp > 1 ? std::vector<int>{1, tp} : std::vector<int>{1}) {
            // A mixture of experts: its experts sliced with the tp ranks, or
            // split whole over them.
            if (fixed->ep ? ep != fixed->ep : ep > 1 && !moe)
              continue;
            Candidate c;
            c.p.group = &g;
            c.p.tp = tp;
            c.p.ep = ep;
            c.p.pp = pp;
            c.p.replicas = fixed->replicas ? fixed->replicas
                                           : std::max(1, devices / (tp * pp));
            if (int64_t(c.p.replicas) * tp * pp > devices &&
                !(fixed->tp && fixed->pp))
              continue;
            if (int64_t(c.p.replicas) * tp * pp > devices)
              return fail("--strategy: " + std::to_string(c.p.replicas) +
                          " replica(s) of tp=" + std::to_string(tp) +
                          " pp=" + std::to_string(pp) + " need " +
                          std::to_string(int64_t(c.p.replicas) * tp * pp) +
                          " " + g.device->name + ", the cluster has " +
                          std::to_string(devices));
            cands.push_back(c);
          }
    }
  // A cluster of two or more device types may also split the phases:
  // prefill on one type, decode on another, each pool filling its nodes.
  std::vector<const NodeGroup *> groups;
  for (const Site &site : cluster->sites)
    for (const NodeGroup &g : site.nodeGroups)
      groups.push_back(&g);
  auto named = [](const NodeGroup *g, const std::string &device) {
    return llvm::StringRef(g->device->name).lower() ==
           llvm::StringRef(device).lower();
  };
  if (request.strategy.empty() || fixed->split())
    for (const NodeGroup *pg : groups)
      for (const NodeGroup *dg : groups) {
        if (pg == dg || pg->device == dg->device || !engineRuns(*pg) ||
            !engineRuns(*dg))
          continue;
        if (fixed->split() && (!named(pg, fixed->prefillDevice) ||
                               !named(dg, fixed->decodeDevice)))
          continue;
        int pDevices = pg->count * pg->devicesPerNode,
            dDevices = dg->count * dg->devicesPerNode;
        for (int ptp = 1; ptp <= pg->devicesPerNode; ptp *= 2)
          for (int dtp = 1; dtp <= dg->devicesPerNode; dtp *= 2) {
            if (fixed->split() &&
                (ptp != fixed->prefillTp || dtp != fixed->decodeTp))
              continue;
            Candidate c;
            c.p.group = pg;
            c.p.tp = ptp;
            c.p.replicas = std::max(1, pDevices / ptp);
            Pool d;
            d.group = dg;
            d.tp = dtp;
            d.replicas = std::max(1, dDevices / dtp);
            c.decode = d;
            cands.push_back(c);
          }
      }
  if (cands.empty() && !notRun.empty())
    return fail("--engine trtllm: TensorRT-LLM runs on NVIDIA GPUs only, "
                "not on " +
                notRun);
  if (!fixed->device.empty() && cands.empty())
    return fail("--strategy device=" + fixed->device +
                ": the cluster has no such device type");
  if (fixed->split() && cands.empty())
    return fail("--strategy: the cluster has no " + fixed->prefillDevice +
                " and " + fixed->decodeDevice +
                " node groups with those tp (powers of two inside a node)");
  if (cands.empty())
    return fail("--strategy " + request.strategy +
                ": no configuration of the cluster's devices matches it");
  std::vector<Candidate> ok;
  std::string firstError;
  for (Candidate &c : cands) {
    if (evaluate(cx, c))
      ok.push_back(c);
    else if (firstError.empty())
      firstError = c.name() + ": " + c.error;
  }
  if (ok.empty())
    return fail(cands.size() == 1 ? cands.front().error
                                  : "no configuration can serve the model: " +
                                        firstError);
  auto better = [&](const Candidate &a, const Candidate &b) {
    if (a.meets != b.meets)
      return a.meets;
    if (!a.meets)
      return a.miss < b.miss;
    double fa = a.figure(request.objective), fb = b.figure(request.objective);
    if (fa != fb)
      return fa > fb;
    return a.devices() < b.devices();
  };
  std::stable_sort(ok.begin(), ok.end(), better);
  const Candidate &chosen = ok.front();
  if (slo->any() && !chosen.meets)
    return fail("no configuration meets the SLO; the closest, " +
                chosen.name() + ", misses it by " +
                std::to_string(int(std::lround(chosen.miss * 100))) + "% (" +
                chosen.missText + ")");
  // Why: the runner-up, and what binds the chosen one.
  auto figureText = [&](const Candidate &c) {
    char b[64];
    if (request.objective == "latency")
      std::snprintf(b, sizeof b, "E2E p99 %s", ms(c.result.e2e.p99S).c_str());
    else if (c.goodputRequestsPerS >= 0)
      std::snprintf(b, sizeof b, "goodput %.3g req/s", c.goodputRequestsPerS);
    else if (request.objective == "cost")
      std::snprintf(b, sizeof b, "%.3g req per dollar",
                    c.figure("cost") * 3600);
    else
      std::snprintf(b, sizeof b, "%.0f output tok/s",
                    c.result.outputTokensPerS);
    return std::string(b);
  };
  std::string why = figureText(chosen);
  if (slo->any()) {
    // The target nearest to binding at the chosen operating point.
    double ttftUse = slo->ttftS > 0 ? chosen.result.ttft.p99S / slo->ttftS : 0;
    double tpotUse = slo->tpotS > 0 ? chosen.result.tpot.p99S / slo->tpotS : 0;
    why += ttftUse >= tpotUse
               ? ", TTFT p99 " + ms(chosen.result.ttft.p99S) + " of " +
                     ms(slo->ttftS)
               : ", TPOT p99 " + ms(chosen.result.tpot.p99S) + " of " +
                     ms(slo->tpotS);
  }
  if (ok.size() > 1) {
    const Candidate &second = ok[1];
    why += "; runner-up " + second.name() + ": " +
           (second.meets ? figureText(second)
                         : "misses the target (" + second.missText + ")");
  }
  const Candidate *fastest = &ok.front();
  for (const Candidate &c : ok)
    if (c.result.outputTokensPerS > fastest->result.outputTokensPerS)
      fastest = &c;
  if (slo->any() && fastest != &chosen && !fastest->meets)
    why += "; " + fastest->name() +
           " would serve more but misses the target (" + fastest->missText +
           ")";

  nlohmann::ordered_json plan;
  plan["serving_plan_version"] = 1;
  plan["model"] = args.path;
  plan["cluster"] = request.cluster.spec;
  plan["engine"] = servingEngineName(engine);
  plan["precision"] = precision->name();
  plan["kv_cache_bytes_per_element"] = precision->kvBytesPerElement;
  nlohmann::ordered_json wj;
  wj["name"] = workload->name;
  wj["requests"] = workload->requests;
  wj["mean_input_tokens"] = workload->meanInput();
  wj["mean_output_tokens"] = workload->meanOutput();
  using A = ServingWorkload::Arrival;
  wj["arrival"] = workload->arrival == A::Offline       ? "offline"
                  : workload->arrival == A::Poisson     ? "poisson"
                  : workload->arrival == A::Concurrency ? "concurrency"
                                                        : "trace";
  if (workload->arrival == A::Poisson)
    wj["rate_req_per_s"] = workload->ratePerS;
  if (workload->arrival == A::Concurrency)
    wj["concurrency"] = workload->concurrency;
  plan["workload"] = wj;
  nlohmann::ordered_json sj = nlohmann::ordered_json::object();
  if (slo->ttftS > 0)
    sj["ttft_p99_ms"] = slo->ttftS * 1e3;
  if (slo->tpotS > 0)
    sj["tpot_p99_ms"] = slo->tpotS * 1e3;
  plan["slo"] = sj;
  plan["objective"] = request.objective;
  // What `orrery check` needs to serve it again.
  plan["request"] = {{"workload", request.workload},
                     {"trace", request.traceFile},
                     {"engine", request.engine},
                     {"precision", request.precision},
                     {"kv_cache", request.kvCache},
                     {"slo", request.slo},
                     {"max_requests", request.maxRequests},
                     {"max_batched_tokens", request.maxBatchedTokens},
                     {"strategy", chosen.strategyText()}};
  plan["chosen"] = candidateJson(chosen);
  plan["why"] = why;
  nlohmann::ordered_json others = nlohmann::ordered_json::array();
  for (size_t i = 1; i < ok.size(); ++i)
    others.push_back(candidateJson(ok[i]));
  plan["candidates"] = others;
  std::string text = plan.dump(2) + "\n";
  if (!planOut.empty()) {
    std::ofstream out(planOut);
    out << text;
    if (!out)
      return fail("-o " + planOut + ": cannot write the file");
  }
  if (!request.traceOut.empty()) {
    // The chosen configuration's steps, one track per replica.
    std::vector<StepRecord> steps;
    ServingWorkload traced = *workload;
    if (chosen.goodputRequestsPerS > 0) {
      traced.arrival = A::Poisson;
      traced.ratePerS = chosen.goodputRequestsPerS;
      traced.requests = std::min<int64_t>(traced.requests, 2000);
    }
    Candidate again = chosen;
    auto prepared = prepare(cx, again);
    bool ran = false;
    if (prepared) {
      auto r = simulateOn(*prepared, again, traced, &steps);
      ran = bool(r);
      if (!r)
        llvm::consumeError(r.takeError());
    } else {
      llvm::consumeError(prepared.takeError());
    }
    if (!ran)
      return fail("--trace-out: the chosen configuration did not simulate");
    nlohmann::ordered_json events = nlohmann::ordered_json::array();
    // A split plan's prefill replicas come back numbered -1, -2, ...: a
    // process of their own.
    for (const StepRecord &s : steps)
      events.push_back({{"name", s.prefillTokens && s.decodeRequests
                                     ? "prefill+decode"
                                 : s.prefillTokens ? "prefill"
                                                   : "decode"},
                        {"ph", "X"},
                        {"pid", s.replica < 0 ? 1 : 0},
                        {"tid", s.replica < 0 ? -1 - s.replica : s.replica},
                        {"ts", s.startS * 1e6},
                        {"dur", s.durationS * 1e6},
                        {"args",
                         {{"prefill_tokens", s.prefillTokens},
                          {"decode_requests", s.decodeRequests},
                          {"kv_cache_utilization", s.kvUtilization}}}});
    std::ofstream out(request.traceOut);
    out << nlohmann::ordered_json{{"traceEvents", events},
                                  {"displayTimeUnit", "ms"}}
               .dump()
        << "\n";
    if (!out)
      return fail("--trace-out " + request.traceOut + ": cannot write the file");
  }
  if (json) {
    os << text;
    return 0;
  }
  const ServingResult &r = chosen.result;
  char buf[400];
  os << "serving   " << args.path << " on " << request.cluster.spec << " ("
     << servingEngineName(engine) << ", " << precision->name()
     << " weights, "
     << (precision->kvBytesPerElement == 1 ? "fp8" : "16-bit")
     << " KV cache)\n";
  os << "workload  " << workload->name << ": " << describeWorkload(*workload)
     << "\n";
  os << "chosen    " << chosen.name() << "\n";
  os << "why       " << why << "\n";
  if (chosen.goodputRequestsPerS >= 0) {
    std::snprintf(buf, sizeof buf,
                  "at        %.3g req/s arriving (Poisson, the most that meets "
                  "the targets):\n",
                  chosen.goodputRequestsPerS);
    os << buf;
  }
  std::snprintf(buf, sizeof buf,
                "          %.2f req/s, %.0f output tok/s (%.0f per device)\n",
                r.requestsPerS, r.outputTokensPerS,
                r.outputTokensPerS / double(chosen.devices()));
  os << buf;
  auto line = [&](const char *name, const LatencyStats &s) {
    os << "          " << name << " mean " << ms(s.meanS) << ", p50 "
       << ms(s.p50S) << ", p90 " << ms(s.p90S) << ", p99 " << ms(s.p99S)
       << "\n";
  };
  line("TTFT", r.ttft);
  line("TPOT", r.tpot);
  line("ITL ", r.itl);
  line("E2E ", r.e2e);
  auto kvLine = [&](const Pool &p, const char *which) {
    std::snprintf(buf, sizeof buf,
                  "          KV cache%s %lld tokens a replica (%lld requests "
                  "of %.0f)\n",
                  which, (long long)p.limits.kvCacheTokens,
                  (long long)(p.limits.kvCacheTokens /
                              std::max(1.0, p.meanRequestTokensHeld)),
                  workload->meanInput() + workload->meanOutput());
    os << buf;
  };
  if (chosen.decode) {
    kvLine(chosen.p, " (prefill)");
    kvLine(*chosen.decode, " (decode)");
  } else {
    kvLine(chosen.p, "");
  }
  std::snprintf(buf, sizeof buf,
                "          KV cache used %.0f%% on average, %.0f%% at peak; "
                "%lld preemptions\n",
                r.kvUtilizationMean * 100, r.kvUtilizationPeak * 100,
                (long long)r.preemptions);
  os << buf;
  os << "\nconfigurations (best first)\n";
  for (const Candidate &c : ok) {
    std::string figure =
        c.goodputRequestsPerS >= 0
            ? [&] {
                char b[48];
                std::snprintf(b, sizeof b, "goodput %7.3g req/s",
                              c.goodputRequestsPerS);
                return std::string(b);
              }()
            : [&] {
                char b[48];
                std::snprintf(b, sizeof b, "%9.0f tok/s",
                              c.result.outputTokensPerS);
                return std::string(b);
              }();
    std::snprintf(buf, sizeof buf, "  %-28s %s  TTFT p99 %9s  TPOT p99 %9s  %s\n",
                  c.name().c_str(), figure.c_str(),
                  ms(c.result.ttft.p99S).c_str(),
                  ms(c.result.tpot.p99S).c_str(),
                  c.meets ? (slo->any() ? "meets" : "") : c.missText.c_str());
    os << buf;
  }
  return 0;
}

} // namespace cli
} // namespace orrery
