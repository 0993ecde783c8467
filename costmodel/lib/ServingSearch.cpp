//===- ServingSearch.cpp - the serving configuration search -------------===//
//
// ServingSearch.h. The candidates (candidatesOn, splitCandidates), each
// evaluated (memory, the engine's limits, a simulation of the workload, the
// goodput under targets), ranked, and the choice explained.
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/ServingSearch.h"
#include "orrery/CostModel/PrintableLine.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace orrery {

static llvm::Error serveError(const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(m));
}

llvm::Expected<ServingSlo> ServingSlo::parse(const std::string &text) {
  ServingSlo s;
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

llvm::Expected<ServingFixed> ServingFixed::parse(const std::string &text) {
  ServingFixed f;
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
        return serveError("--strategy " + part.trim().str() + ": expected " +
                          key + "=DEVICE:TP");
      (key == "prefill" ? f.prefillDevice : f.decodeDevice) = dev.str();
      (key == "prefill" ? f.prefillTp : f.decodeTp) = tp;
      continue;
    }
    int value = 0;
    if (key == "adp" || key == "spec") {
      if (v.trim() != "0" && v.trim() != "1")
        return serveError("--strategy " + part.trim().str() + ": expected " +
                          key + "=0 or " + key + "=1");
      (key == "adp" ? f.adp : f.spec) = v.trim() == "1";
      continue;
    }
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
                        "' (tp, pp, ep, adp, spec, replicas, device, or "
                        "prefill and decode)");
  }
  if (f.prefillDevice.empty() != f.decodeDevice.empty())
    return serveError("--strategy: a prefill/decode split needs both "
                      "prefill=DEVICE:TP and decode=DEVICE:TP");
  if (f.split() && (f.tp || f.pp || f.replicas || f.ep || f.adp >= 0 ||
                    !f.device.empty()))
    return serveError("--strategy: prefill= and decode= take the place of "
                      "tp, pp, ep, replicas and device");
  if (f.ep > 1 && f.tp && f.ep != f.tp)
    return serveError("--strategy ep=" + std::to_string(f.ep) +
                      ": expert parallelism spans the tensor-parallel ranks "
                      "(ep=1 or ep=tp=" +
                      std::to_string(f.tp) + ")");
  return f;
}

std::string servingMs(double s) {
  char buf[32];
  double m = s * 1e3;
  std::snprintf(buf, sizeof buf,
                m < 1     ? "%.3g ms"
                : m < 100 ? "%.1f ms"
                          : "%.0f ms",
                m);
  return buf;
}

std::string ServingPool::name() const {
  return group->device->name + " tp=" + std::to_string(tp) +
         (ep > 1 ? " ep=" + std::to_string(ep) : "") +
         (attentionDp ? " adp" : "") + " pp=" + std::to_string(pp) + " x" +
         std::to_string(replicas) + (speculative ? " +spec" : "");
}

std::string ServingCandidate::name() const {
  return decode ? "prefill " + p.name() + " + decode " + decode->name()
                : p.name();
}

std::string ServingCandidate::strategyText() const {
  std::string spec = p.speculative || (decode && decode->speculative)
                         ? ",spec=1"
                         : "";
  if (decode)
    return "prefill=" + p.group->device->name + ":" + std::to_string(p.tp) +
           ",decode=" + decode->group->device->name + ":" +
           std::to_string(decode->tp) + spec;
  return "tp=" + std::to_string(p.tp) +
         (p.ep > 1 ? ",ep=" + std::to_string(p.ep) : "") +
         (p.attentionDp ? ",adp=1" : p.ep > 1 ? ",adp=0" : "") +
         ",pp=" + std::to_string(p.pp) +
         ",replicas=" + std::to_string(p.replicas) +
         ",device=" + p.group->device->name + spec;
}

double ServingCandidate::dollarsPerHour() const {
  return p.devices() * p.group->priceUsdPerDeviceHour +
         (decode ? decode->devices() * decode->group->priceUsdPerDeviceHour
                 : 0);
}

double ServingCandidate::figure(const std::string &objective) const {
  if (objective == "latency")
    return -result.e2e.p99S;
  double perS =
      goodputRequestsPerS >= 0 ? goodputRequestsPerS : result.requestsPerS;
  if (objective == "cost")
    return perS / std::max(1e-9, dollarsPerHour());
  return perS;
}

namespace {

void judge(ServingCandidate &c, const ServingSlo &slo) {
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
      c.missText = std::string(what) + " p99 " + servingMs(got) + " > " +
                   servingMs(target);
    }
  };
  check("TTFT", c.result.ttft.p99S, slo.ttftS);
  check("TPOT", c.result.tpot.p99S, slo.tpotS);
}

struct Context {
  const Workload &w;
  const ServingPrecision &precision;
  ServingEngine engine;
  const ServingSearchRequest &request;
  const ServingWorkload &workload;
  ServingSlo slo;
};

/// KV offload: the host tier's blocks (the whole replica's cache a block,
/// every rank's share) and a block's load, each device its share over its
/// own host link in parallel. An error when the replicas of a node ask
/// more host memory than it has.
llvm::Error hostTier(const Context &cx, ServingPool &pool) {
  double bytes = cx.request.kvOffloadBytes;
  if (bytes <= 0)
    return llvm::Error::success();
  if (!cx.request.prefixCaching)
    return serveError("--kv-offload: the host tier keeps blocks for prefix "
                      "caching to find again; it needs --prefix-caching on");
  const NodeGroup &g = *pool.group;
  int perNode = std::max(1, g.devicesPerNode / std::max(1, pool.tp * pool.pp));
  if (g.hostMemoryBytes > 0 && bytes * perNode > g.hostMemoryBytes)
    return serveError(
        "--kv-offload: " + std::to_string(perNode) + " replica(s) a node of " +
        std::to_string(int64_t(bytes / double(1ull << 30))) +
        " GiB each exceed the node's " +
        std::to_string(int64_t(g.hostMemoryBytes / double(1ull << 30))) +
        " GiB of host memory");
  double perDeviceBlock =
      pool.memory.kvBytesPerToken * double(pool.limits.blockTokens);
  double replicaBlock =
      perDeviceBlock * (pool.attentionDp ? 1 : pool.tp) * pool.pp;
  pool.limits.hostCacheBlocks = int64_t(bytes / std::max(1.0, replicaBlock));
  const LinkSpec *link = hostLinkOf(g);
  if (!link || !(link->bandwidthBytesPerS > 0))
    return serveError("--kv-offload: the " + g.device->name +
                      " nodes state no device-to-host link to load blocks "
                      "over");
  pool.limits.hostLoadSecondsPerBlock =
      link->latencyS + perDeviceBlock / link->bandwidthBytesPerS;
  return llvm::Error::success();
}

/// Whether the request's vLLM attention backend serves this model on `dev`:
/// an MLA backend for a model with latent attention, on the devices it
/// is built for.
static llvm::Error attentionBackendFits(const Context &cx,
                                        const DeviceSpec &dev) {
  const std::string &name = cx.request.attentionBackend;
  if (name.empty())
    return llvm::Error::success();
  const VllmMlaBackend *b = vllmMlaBackend(name);
  auto fail = [&](const std::string &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--attention-backend " + name + ": " + why);
  };
  // The command line's reader refuses an unknown name or another engine.
  if (!b || cx.engine != ServingEngine::Vllm)
    return fail("not a vLLM MLA backend of this engine");
  bool latent = false;
  for (const LayerKind &k : cx.w.kinds)
    for (const OpCost &op : k.ops)
      latent = latent || op.attentionLatentDim > 0;
  if (!latent)
    return fail("an MLA backend, and the model has no multi-head latent "
                "attention");
  llvm::SmallVector<llvm::StringRef> links;
  llvm::StringRef(b->link).split(links, '|', -1, false);
  if (!links.empty() && !llvm::is_contained(links, dev.intraNodeLink))
    return fail(std::string("runs on devices with ") + b->link + " (" +
                dev.name + " has " + dev.intraNodeLink + ")");
  return llvm::Error::success();
}

/// A pool's memory, its scheduler's limits and its step pricer.
llvm::Expected<StepPricer> preparePool(const Context &cx, ServingPool &pool) {
  auto replica = servingReplicaOn(*pool.group, pool.tp, pool.pp, pool.ep,
                                  pool.attentionDp);
  if (!replica)
    return replica.takeError();
  const DeviceSpec &dev = *pool.group->device;
  if (auto e = attentionBackendFits(cx, dev))
    return std::move(e);
  ServingMemoryOptions mo;
  mo.tp = pool.tp;
  mo.pp = pool.pp;
  mo.attentionDp = pool.attentionDp;
  mo.weightBytesPerParam = cx.precision.weightBytesPerParam();
  mo.onceOnlyBytesPerParam = 2; // quantized checkpoints keep them 16-bit
  mo.kvBytesPerElement = cx.precision.kvBytesPerElement;
  if (pool.speculative) {
    mo.drafter = cx.request.speculation.method;
    Precision draft = draftPrecision(mo.drafter, cx.precision.linear);
    mo.draftWeightBytesPerParam = draft == cx.precision.linear
                                      ? cx.precision.weightBytesPerParam()
                                      : precisionBytes(draft);
  }
  if (cx.engine == ServingEngine::TensorRtLlm)
    mo.freeMemoryFraction = cx.request.memoryFraction;
  else
    mo.memoryUtilization = cx.request.memoryFraction;
  // The limits depend on the weights' size (TensorRT-LLM's estimate), the
  // activations' room on the token limit.
  auto first = servingMemory(cx.w, dev, mo);
  if (!first)
    return first.takeError();
  // trtllm-bench estimates the engine as every parameter at the weights'
  // bytes, counted in GB of 10^9 and set against memory in GiB.
  double estimate = cx.engine == ServingEngine::TensorRtLlm &&
                            !pool.attentionDp
                        ? double(cx.w.parameters() + cx.w.frozenParameters()) *
                              cx.precision.weightBytesPerParam() *
                              (double(1ull << 30) / 1e9) /
                              double(pool.tp * pool.pp)
                        : first->weightBytes;
  pool.limits = engineDefaults(cx.engine, dev, pool.tp, pool.pp, estimate,
                               first->kvBytesPerToken, cx.workload.meanInput(),
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
  if (pool.attentionDp) {
    // Each rank schedules its own requests into its own cache: the
    // replica holds tp times a rank's.
    pool.limits.kvCacheTokens *= pool.tp;
    pool.limits.maxRequests *= pool.tp;
    pool.limits.maxBatchedTokens *= pool.tp;
  }
  auto pricer = StepPricer::create(cx.w, *replica, cx.precision, cx.engine);
  if (pricer && pricer->window() > 0 && cx.request.prefixCaching &&
      cx.workload.sharesContent())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "prefix caching of a model with sliding-window attention is not "
        "modelled (its windowed layers keep only the window's blocks): "
        "serve it with --prefix-caching off");
  if (pricer && pool.speculative)
    if (auto e = pricer->setSpeculation(cx.w, cx.request.speculation))
      return std::move(e);
  if (const VllmMlaBackend *b = vllmMlaBackend(cx.request.attentionBackend))
    if (pricer)
      pricer->setVerifyAsPrefill(!b->multiQueryDecode);
  if (auto e = hostTier(cx, pool))
    return std::move(e);
  // Sliding-window models run without it (the error above where it would
  // matter).
  pool.limits.prefixCaching =
      cx.request.prefixCaching && pricer && pricer->window() <= 0;
  if (pricer)
    pool.meanRequestTokensHeld =
        pricer->tokensHeld(cx.workload.meanInput() + cx.workload.meanOutput(),
                           pool.limits.blockTokens);
  return pricer;
}

/// The prompt's cache from a prefill replica to a decode replica: over
/// the nodes' network cards, each device its share of them.
llvm::Expected<KvTransfer>
transferBetween(const Context &cx, const ServingPool &a, const ServingPool &b) {
  auto share = [](const NodeGroup &g) {
    return g.nic ? g.nic->bandwidthBytesPerS * g.nicsPerNode /
                       std::max(1, g.devicesPerNode)
                 : 0.0;
  };
  for (const ServingPool *p : {&a, &b})
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

llvm::Expected<Prepared> prepare(const Context &cx, ServingCandidate &c) {
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

llvm::Expected<ServingResult> simulateOn(const Prepared &p,
                                         const ServingCandidate &c,
                                         const ServingWorkload &wl,
                                         std::vector<StepRecord> *trace) {
  return c.decode
             ? simulateDisaggregated(*p.pricer, c.p.limits, c.p.replicas,
                                     *p.decodePricer, c.decode->limits,
                                     c.decode->replicas, p.transfer, wl, trace)
             : simulateServing(*p.pricer, c.p.limits, wl, c.p.replicas, trace);
}

/// Memory, limits and a simulation of the workload for one candidate.
bool evaluate(const Context &cx, ServingCandidate &c) {
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
    ServingCandidate best = c;
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
      ServingCandidate trial = c;
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

/// TensorRT-LLM builds CUDA engines: NVIDIA devices only (vLLM also runs
/// on AMD, TPU, Gaudi and Neuron devices).
bool engineRuns(ServingEngine engine, const NodeGroup &g) {
  return engine != ServingEngine::TensorRtLlm || g.device->vendor == "NVIDIA";
}

/// Each node group's device type, tp inside a node, pp over the rest, as
/// many replicas as fill the group (those `fixed` leaves open).
llvm::Error candidatesOn(const Cluster &cluster, const Workload &w,
                         const ServingSearchRequest &request,
                         const ServingFixed &fixed,
                         std::vector<ServingCandidate> &cands) {
  bool moe = w.experts() > 1;
  for (const Site &site : cluster.sites)
    for (const NodeGroup &g : site.nodeGroups) {
      if (!engineRuns(request.engine, g) || fixed.split() ||
          (!fixed.device.empty() && llvm::StringRef(g.device->name).lower() !=
                                        llvm::StringRef(fixed.device).lower()))
        continue;
      if (request.objective == "cost" && g.priceUsdPerDeviceHour <= 0)
        return serveError("--objective cost: the cluster states no price for "
                          "its " +
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
      for (int tp : degrees(fixed.tp, g.scaleUpDevices()))
        for (int pp : degrees(fixed.pp, std::max(1, devices / tp)))
          for (int ep :
               tp > 1 ? std::vector<int>{1, tp} : std::vector<int>{1}) {
            // A mixture of experts: its experts sliced with the tp ranks, or
            // split whole over them.
            if (fixed.ep ? ep != fixed.ep : ep > 1 && !moe)
              continue;
            for (int adp = 0; adp < 2; ++adp) {
            // Attention data parallelism beside the experts split whole.
            if (adp ? fixed.adp == 0 || (fixed.adp != 1 && !(moe && ep > 1))
                    : fixed.adp == 1)
              continue;
            ServingCandidate c;
            c.p.group = &g;
            c.p.tp = tp;
            c.p.ep = ep;
            c.p.attentionDp = adp == 1;
            c.p.pp = pp;
            c.p.replicas = fixed.replicas ? fixed.replicas
                                          : std::max(1, devices / (tp * pp));
            if (int64_t(c.p.replicas) * tp * pp > devices &&
                !(fixed.tp && fixed.pp))
              continue;
            if (int64_t(c.p.replicas) * tp * pp > devices)
              return serveError(
                  "--strategy: " + std::to_string(c.p.replicas) +
                  " replica(s) of tp=" + std::to_string(tp) +
                  " pp=" + std::to_string(pp) + " need " +
                  std::to_string(int64_t(c.p.replicas) * tp * pp) + " " +
                  g.device->name + ", the cluster has " +
                  std::to_string(devices));
            cands.push_back(c);
            }
          }
    }
  return llvm::Error::success();
}

/// A cluster of two or more device types may also split the phases:
/// prefill on one type, decode on another, each pool filling its nodes.
void splitCandidates(const Cluster &cluster,
                     const ServingSearchRequest &request,
                     const ServingFixed &fixed,
                     std::vector<ServingCandidate> &cands) {
  std::vector<const NodeGroup *> groups;
  for (const Site &site : cluster.sites)
    for (const NodeGroup &g : site.nodeGroups)
      groups.push_back(&g);
  auto named = [](const NodeGroup *g, const std::string &device) {
    return llvm::StringRef(g->device->name).lower() ==
           llvm::StringRef(device).lower();
  };
  if (!request.strategy.empty() && !fixed.split())
    return;
  for (const NodeGroup *pg : groups)
    for (const NodeGroup *dg : groups) {
      if (pg == dg || pg->device == dg->device ||
          !engineRuns(request.engine, *pg) || !engineRuns(request.engine, *dg))
        continue;
      if (fixed.split() &&
          (!named(pg, fixed.prefillDevice) || !named(dg, fixed.decodeDevice)))
        continue;
      int pDevices = pg->count * pg->devicesPerNode,
          dDevices = dg->count * dg->devicesPerNode;
      for (int ptp = 1; ptp <= pg->scaleUpDevices(); ptp *= 2)
        for (int dtp = 1; dtp <= dg->scaleUpDevices(); dtp *= 2) {
          if (fixed.split() &&
              (ptp != fixed.prefillTp || dtp != fixed.decodeTp))
            continue;
          ServingCandidate c;
          c.p.group = pg;
          c.p.tp = ptp;
          c.p.replicas = std::max(1, pDevices / ptp);
          ServingPool d;
          d.group = dg;
          d.tp = dtp;
          d.replicas = std::max(1, dDevices / dtp);
          c.decode = d;
          cands.push_back(c);
        }
    }
}

/// Speculative decoding requested: each configuration with it (on its
/// decode pool when split) and, unless --strategy spec=1, without it too,
/// so the search says whether it pays.
llvm::Error withSpeculation(const ServingSearchRequest &request,
                            const ServingFixed &fixed,
                            std::vector<ServingCandidate> &cands) {
  if (!request.speculation.on()) {
    if (fixed.spec == 1)
      return serveError("--strategy spec=1: no --speculative method to run");
    return llvm::Error::success();
  }
  std::vector<ServingCandidate> out;
  for (const ServingCandidate &c : cands) {
    if (fixed.spec != 1)
      out.push_back(c);
    if (fixed.spec != 0) {
      ServingCandidate s = c;
      (s.decode ? s.decode->speculative : s.p.speculative) = true;
      out.push_back(s);
    }
  }
  cands.swap(out);
  return llvm::Error::success();
}

/// Why no candidate: the engine, the device or split named, or nothing
/// matching.
llvm::Error noCandidate(const Cluster &cluster,
                        const ServingSearchRequest &request,
                        const ServingFixed &fixed) {
  std::string notRun;
  for (const Site &site : cluster.sites)
    for (const NodeGroup &g : site.nodeGroups)
      if (!engineRuns(request.engine, g) && notRun.empty())
        notRun = g.device->name;
  if (!notRun.empty())
    return serveError("--engine trtllm: TensorRT-LLM runs on NVIDIA GPUs "
                      "only, not on " +
                      notRun);
  if (!fixed.device.empty())
    return serveError("--strategy device=" + fixed.device +
                      ": the cluster has no such device type");
  if (fixed.split())
    return serveError("--strategy: the cluster has no " + fixed.prefillDevice +
                      " and " + fixed.decodeDevice +
                      " node groups with those tp (powers of two inside a "
                      "node)");
  return serveError("--strategy " + request.strategy +
                    ": no configuration of the cluster's devices matches it");
}

/// The chosen configuration's figure in words.
std::string figureText(const ServingCandidate &c,
                       const std::string &objective) {
  char b[64];
  if (objective == "latency")
    std::snprintf(b, sizeof b, "E2E p99 %s",
                  servingMs(c.result.e2e.p99S).c_str());
  else if (c.goodputRequestsPerS >= 0)
    std::snprintf(b, sizeof b, "goodput %.3g req/s", c.goodputRequestsPerS);
  else if (objective == "cost")
    std::snprintf(b, sizeof b, "%.3g req per dollar", c.figure("cost") * 3600);
  else
    std::snprintf(b, sizeof b, "%.0f output tok/s", c.result.outputTokensPerS);
  return b;
}

/// Why the first of `ok` (best first): its figure, the target nearest to
/// binding, the runner-up, and a faster one that misses the targets.
std::string explain(const std::vector<ServingCandidate> &ok,
                    const ServingSlo &slo, const std::string &objective) {
  const ServingCandidate &chosen = ok.front();
  std::string why = figureText(chosen, objective);
  if (slo.any()) {
    // The target nearest to binding at the chosen operating point.
    double ttftUse = slo.ttftS > 0 ? chosen.result.ttft.p99S / slo.ttftS : 0;
    double tpotUse = slo.tpotS > 0 ? chosen.result.tpot.p99S / slo.tpotS : 0;
    why += ttftUse >= tpotUse
               ? ", TTFT p99 " + servingMs(chosen.result.ttft.p99S) + " of " +
                     servingMs(slo.ttftS)
               : ", TPOT p99 " + servingMs(chosen.result.tpot.p99S) + " of " +
                     servingMs(slo.tpotS);
  }
  if (ok.size() > 1) {
    const ServingCandidate &second = ok[1];
    why += "; runner-up " + second.name() + ": " +
           (second.meets ? figureText(second, objective)
                         : "misses the target (" + second.missText + ")");
  }
  const ServingCandidate *fastest = &ok.front();
  for (const ServingCandidate &c : ok)
    if (c.result.outputTokensPerS > fastest->result.outputTokensPerS)
      fastest = &c;
  if (slo.any() && fastest != &chosen && !fastest->meets)
    why += "; " + fastest->name() +
           " would serve more but misses the target (" + fastest->missText +
           ")";
  return why;
}

} // namespace

llvm::Expected<ServingSearchResult>
searchServing(const Workload &w, const Cluster &cluster,
              const ServingSearchRequest &request) {
  if (request.objective != "throughput" && request.objective != "cost" &&
      request.objective != "latency")
    return serveError("--objective " + request.objective +
                      ": expected throughput, cost or latency");
  auto fixed = ServingFixed::parse(request.strategy);
  if (!fixed)
    return fixed.takeError();
  Context cx{w,       request.precision, request.engine,
             request, request.workload,  request.slo};
  std::vector<ServingCandidate> cands;
  if (auto e = candidatesOn(cluster, w, request, *fixed, cands))
    return std::move(e);
  splitCandidates(cluster, request, *fixed, cands);
  if (cands.empty())
    return noCandidate(cluster, request, *fixed);
  if (auto e = withSpeculation(request, *fixed, cands))
    return std::move(e);
  ServingSearchResult out;
  std::vector<ServingCandidate> &ok = out.ranked;
  std::string firstError;
  for (ServingCandidate &c : cands) {
    if (evaluate(cx, c))
      ok.push_back(c);
    else if (firstError.empty())
      firstError = c.name() + ": " + c.error;
  }
  if (ok.empty())
    return serveError(cands.size() == 1
                          ? cands.front().error
                          : "no configuration can serve the model: " +
                                firstError);
  auto better = [&](const ServingCandidate &a, const ServingCandidate &b) {
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
  const ServingCandidate &chosen = ok.front();
  if (request.slo.any() && !chosen.meets)
    return serveError("no configuration meets the SLO; the closest, " +
                      chosen.name() + ", misses it by " +
                      std::to_string(int(std::lround(chosen.miss * 100))) +
                      "% (" + chosen.missText + ")");
  out.why = explain(ok, request.slo, request.objective);
  return out;
}

llvm::Expected<ServingResult> traceServing(const Workload &w,
                                           const ServingSearchRequest &request,
                                           const ServingCandidate &c,
                                           const ServingWorkload &workload,
                                           std::vector<StepRecord> &steps) {
  Context cx{w,       request.precision, request.engine,
             request, request.workload,  request.slo};
  ServingCandidate again = c;
  auto prepared = prepare(cx, again);
  if (!prepared)
    return prepared.takeError();
  return simulateOn(*prepared, again, workload, &steps);
}

} // namespace orrery
