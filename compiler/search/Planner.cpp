//===- Planner.cpp - search the strategy space ---------------------------===//
#include "orrery/Search/Planner.h"
#include "orrery/Export/Exporters.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <optional>
#include <utility>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

double objectiveScore(const StepResult &r, Objective o) {
  switch (o) {
  case Objective::Time:
    return r.stepS;
  case Objective::Cost:
    return r.costUsd;
  case Objective::Energy:
    return r.energyJ;
  }
  return r.stepS;
}

std::vector<int> balanceLayers(const std::vector<double> &seconds, int parts) {
  int n = int(seconds.size());
  if (parts <= 0 || parts > n)
    return {};
  // Binary search on the largest run, greedy packing to test it.
  auto fits = [&](double limit, std::vector<int> *out) {
    std::vector<int> runs;
    double sum = 0;
    int len = 0;
    for (int i = 0; i < n; ++i) {
      int left = n - i; // layers still to place, this one included
      int runsLeft = parts - int(runs.size());
      // Close the run when this layer does not fit, or when the remaining
      // layers are just enough for the remaining runs.
      if (len > 0 && (sum + seconds[i] > limit || left < runsLeft)) {
        runs.push_back(len);
        sum = 0;
        len = 0;
      }
      if (seconds[i] > limit)
        return false;
      sum += seconds[i];
      ++len;
    }
    runs.push_back(len);
    if (int(runs.size()) > parts)
      return false;
    while (int(runs.size()) <
           parts) { // split the longest run to use every part
      auto it = std::max_element(runs.begin(), runs.end());
      if (*it < 2)
        return false;
      int half = *it / 2;
      *it -= half;
      runs.insert(it + 1, half);
    }
    if (out)
      *out = runs;
    return true;
  };
  double lo = *std::max_element(seconds.begin(), seconds.end()), hi = 0;
  for (double s : seconds)
    hi += s;
  for (int iter = 0; iter < 60 && hi - lo > 1e-12 * hi; ++iter) {
    double mid = (lo + hi) / 2;
    (fits(mid, nullptr) ? hi : lo) = mid;
  }
  std::vector<int> runs;
  if (!fits(hi, &runs))
    return {};
  return runs;
}

static std::vector<int> divisors(int64_t n, int64_t max) {
  std::vector<int> d;
  for (int64_t i = 1; i <= std::min(n, max); ++i)
    if (n % i == 0)
      d.push_back(int(i));
  return d;
}

/// A cluster of the first `nodes` nodes of a one-group cluster.
static Cluster firstNodes(const Cluster &c, int nodes) {
  Cluster cut = c;
  cut.sites.resize(1);
  cut.sites[0].nodeGroups.resize(1);
  cut.sites[0].nodeGroups[0].count = nodes;
  cut.siteLinks.clear();
  cut.name = c.name + " (first " + std::to_string(nodes) + " nodes)";
  cut.finalize();
  return cut;
}

/// `s` as `framework` runs it: itself when its exporter takes it, else the
/// variant with the fewest changes that it takes (changes tried alone,
/// then in pairs, ..., in the order listed), or nothing. `refusal` keeps
/// the first refusal seen.
static std::optional<Strategy> asFrameworkRuns(const Workload &w, Strategy s,
                                               const Assumptions &a,
                                               const std::string &framework,
                                               std::string &refusal) {
  using Change = std::function<bool(Strategy &)>; // false: does not apply
  const std::vector<Change> changes = {
      [](Strategy &t) { return std::exchange(t.overlapParamGather, false); },
      [](Strategy &t) { return std::exchange(t.overlapGradReduce, false); },
      [](Strategy &t) {
        if (t.zeroStage != 1 && t.zeroStage != 2)
          return false;
        t.zeroStage = 0;
        return true;
      },
      [](Strategy &t) {
        return t.tp > 1 && std::exchange(t.sequenceParallel, false);
      },
      [&](Strategy &t) { // the layers split as evenly as counts allow
        int chunks = t.pp * t.virtualStages;
        int64_t total = w.totalLayers();
        if (chunks < 2 || total < chunks)
          return false;
        std::vector<int> even;
        for (int c = 0; c < chunks; ++c)
          even.push_back(int(total / chunks + (c < total % chunks)));
        if (t.stageLayers == even)
          return false;
        t.stageLayers = even;
        return true;
      }};
  auto runs = [&](const Strategy &t) {
    auto p = exportPlanFor(w, t, a);
    llvm::Error e = p ? frameworkRuns(*p, framework) : p.takeError();
    if (!e)
      return true;
    std::string msg = llvm::toString(std::move(e));
    if (refusal.empty())
      refusal = msg;
    return false;
  };
  if (runs(s))
    return s;
  int n = int(changes.size());
  for (int size = 1; size <= n; ++size)
    for (unsigned mask = 1; mask < (1u << n); ++mask) {
      if (__builtin_popcount(mask) != size)
        continue;
      Strategy t = s;
      bool applies = true;
      for (int i = 0; i < n && applies; ++i)
        if (mask & (1u << i))
          applies = changes[i](t);
      if (applies && runs(t))
        return t;
    }
  return std::nullopt;
}

llvm::Expected<PlanResult>
searchPlans(const Workload &w, const Cluster &cluster, const PlanOptions &o) {
  auto start = std::chrono::steady_clock::now();
  PlanResult result;
  result.cluster = cluster;
  result.framework = o.framework;
  if (o.objective == Objective::Cost || o.budgetUsdPerHour > 0) {
    bool priced = false;
    for (int d = 0; d < cluster.numDevices(); ++d)
      priced |= cluster.groupOf(d).priceUsdPerDeviceHour > 0;
    if (!priced)
      return err("plan: --objective cost and --budget need "
                 "price_usd_per_device_hour in the "
                 "cluster spec");
  }
  if (o.budgetUsdPerHour > 0) {
    if (cluster.sites.size() != 1 || cluster.sites[0].nodeGroups.size() != 1)
      return err(
          "plan: --budget supports clusters of one node type at one site");
    const NodeGroup &g = cluster.sites[0].nodeGroups[0];
    double perNode = g.priceUsdPerDeviceHour * g.devicesPerNode;
    int nodes = std::min(g.count, int(o.budgetUsdPerHour / perNode));
    if (nodes < 1)
      return err("plan: the budget of " + std::to_string(o.budgetUsdPerHour) +
                 " USD/hour buys no node (" + std::to_string(perNode) +
                 " USD/hour each)");
    result.cluster = firstNodes(cluster, nodes);
  }
  const Cluster &c = result.cluster;
  int64_t devices = c.numDevices();
  int perNode = c.groupOf(0).devicesPerNode;
  int64_t gbs = o.globalBatch > 0 ? o.globalBatch : 1024;
  int heads = w.attentionHeads();
  int64_t layers = w.totalLayers();
  // Even the widest data parallelism with the largest micro-batch searched
  // (64) leaves this many micro-batches per replica.
  if (gbs / (devices * 64) > kMaxPlanStepTasks)
    return err("plan: a global batch of " + std::to_string(gbs) +
               " samples is more micro-batches than the planner simulates "
               "per candidate (" +
               std::to_string(kMaxPlanStepTasks) +
               " micro-batch executions, even at the widest data "
               "parallelism and micro-batch 64); give a smaller "
               "--global-batch, or `orrery simulate` one strategy (up to " +
               std::to_string(kMaxStepTasks) + ")");
  const DeviceSpec &dev = c.deviceSpec(0);
  const Assumptions &a = o.assumptions;

  std::vector<StepResult> best;
  StepResult closest; // the smallest shortfall, when nothing fits
  double floorShortfall = 1e300, floorNeed = 0; // of candidates pruned unpriced
  std::string floorWhere;
  bool haveClosest = false;
  auto consider = [&](const StepResult &r) {
    ++result.candidatesPriced;
    if (!r.fits) {
      if (!haveClosest ||
          r.memoryShortfallBytes < closest.memoryShortfallBytes) {
        closest = r;
        haveClosest = true;
      }
      return;
    }
    auto better = [&](const StepResult &x, const StepResult &y) {
      double sx = objectiveScore(x, o.objective),
             sy = objectiveScore(y, o.objective);
      if (sx != sy)
        return sx < sy;
      return x.strategy.str() < y.strategy.str(); // deterministic ties
    };
    best.push_back(r);
    std::sort(best.begin(), best.end(), better);
    if (int(best.size()) > std::max(1, o.topK))
      best.pop_back();
    if (o.progress && result.candidatesPriced % 2000 == 0)
      o.progress(result.candidatesPriced, &best.front());
  };

  // Layer kinds with a layout that splits the batch inside tp (CNN stages):
  // such candidates are priced both ways, Megatron's feature splits alone
  // and with those batch splits.
  bool batchable = std::any_of(
      w.kinds.begin(), w.kinds.end(),
      [](const LayerKind &k) { return bool(k.batchSplitLayout); });
  std::function<void(Strategy)> priceOne;
  std::string refusal; // the framework's first refusal
  auto price = [&](Strategy s) {
    if (!o.framework.empty()) {
      // No framework target states a per-op batch split inside tp.
      auto runnable = asFrameworkRuns(w, s, a, o.framework, refusal);
      if (!runnable) {
        ++result.candidatesRefused;
        return;
      }
      priceOne(*runnable);
      return;
    }
    priceOne(s);
    if (batchable && s.tp > 1 && s.microBatch % s.tp == 0) {
      s.tpBatchSplit = true;
      priceOne(s);
    }
  };
  auto frameworkRuns = [&](const Strategy &s) {
    if (o.framework.empty())
      return true;
    auto p = exportPlanFor(w, s, a);
    llvm::Error e = p ? orrery::frameworkRuns(*p, o.framework) : p.takeError();
    bool ok = !e;
    llvm::consumeError(std::move(e));
    return ok;
  };
  priceOne = [&](Strategy s) {
    if (s.microBatches() * s.pp * s.virtualStages > kMaxPlanStepTasks)
      return; // too many events to price in a search
    auto r = simulateStep(w, c, s, a, false, Detail::StepTime);
    if (!r) {
      llvm::consumeError(r.takeError());
      return;
    }
    consider(*r);
    // Balance uneven stages by the layers' measured cost.
    if (s.pp > 1 && r->fits) {
      std::vector<double> perLayer;
      for (const LayerRun &run : w.layers)
        for (int64_t i = 0; i < run.count; ++i)
          perLayer.push_back(r->kindSecondsPerMicroBatch[run.kind]);
      std::vector<int> split = balanceLayers(perLayer, s.pp * s.virtualStages);
      Strategy b = s;
      b.stageLayers = split;
      if (!split.empty() && split != s.stageLayers && frameworkRuns(b)) {
        s.stageLayers = split;
        auto balanced = simulateStep(w, c, s, a, false, Detail::StepTime);
        // Only a split that beats the default is a new plan.
        if (balanced && balanced->stepS < r->stepS * (1 - 1e-9))
          consider(*balanced);
        else if (!balanced)
          llvm::consumeError(balanced.takeError());
      }
    }
  };

  // Passes, each only when the ones before found nothing that fits: ZeRO-1
  // (the optimizer sharded for free: the same traffic as an all-reduce);
  // ZeRO-3 (priced optimistically at scale, see docs/costmodel.md, so it is
  // never preferred over a plan that fits without it); ZeRO-3 with the
  // optimizer offloaded to host memory.
  int maxExperts = w.experts();
  for (int pass = 0; pass < 3; ++pass) {
    bool offload = pass == 2;
    int zero = pass == 0 ? 1 : 3;
    for (int tp : divisors(devices, perNode)) {
      if (heads > 0 && heads % tp)
        continue;
      // Context parallelism may leave the node: the ring's sends hide
      // behind long sequences' attention even over the network.
      // Each rank's two chunks of the sequence must fill FlashAttention's
      // 128-token tiles (kAttentionTileTokens): shorter chunks leave the
      // kernel's blocks part empty. At most 16 ranks.
      int64_t maxCp = std::clamp<int64_t>(
          w.tokensPerSample / (2 * kAttentionTileTokens), 1, 16);
      for (int cp : divisors(devices / tp, maxCp)) {
        // Context parallelism splits the sequence into 2·cp chunks (causal
        // load balancing); it costs its exchange, so it is searched at any
        // length and wins where the memory or the attention needs it.
        if (cp > 1 && (w.tokensPerSample == 0 || heads == 0 ||
                       w.tokensPerSample % (2 * cp)))
          continue;
        for (int pp : divisors(devices / (int64_t(tp) * cp), layers)) {
          int64_t dp = devices / (int64_t(tp) * cp * pp);
          if (gbs % dp)
            continue;
          // Memory lower bound: this stage's share of the parameters under
          // this pass's sharding.
          double params = double(w.parameters()) / (double(tp) * pp);
          double optimizer = offload ? 0 : a.optimizerBytesPerParam / dp;
          double floorBytes =
              zero == 3
                  ? params * (a.weightBytesPerParam + a.gradBytesPerParam) /
                            dp +
                        params * optimizer
                  : params * (a.weightBytesPerParam + a.gradBytesPerParam +
                              optimizer);
          if (floorBytes + a.workspaceFor(dev) > dev.memoryBytes) {
            ++result.candidatesPruned;
            double shortBy = floorBytes + a.workspaceFor(dev) - dev.memoryBytes;
            if (shortBy < floorShortfall) {
              floorShortfall = shortBy;
              floorNeed = floorBytes + a.workspaceFor(dev);
              floorWhere =
                  "tp=" + std::to_string(tp) + ",cp=" + std::to_string(cp) +
                  ",pp=" + std::to_string(pp) + ",dp=" + std::to_string(dp) +
                  ",zero=" + std::to_string(zero) +
                  (offload ? ",offload=optimizer" : "");
            }
            continue;
          }
          for (int64_t mbs = 1; mbs <= std::min<int64_t>(gbs / dp, 64);
               mbs *= 2) {
            if ((gbs / dp) % mbs)
              continue;
            int64_t m = gbs / (dp * mbs);
            for (int vpp : {1, 2, 4}) {
              if (vpp > 1 && (pp == 1 || m % pp || layers < pp * vpp * 2))
                continue;
              for (Recompute rec :
                   {Recompute::None, Recompute::Selective, Recompute::Full}) {
                if (zero == 3 && dp == 1)
                  continue;
                Strategy s;
                s.tp = tp;
                s.cp = cp;
                s.pp = pp;
                s.dp = int(dp);
                s.microBatch = mbs;
                s.globalBatch = gbs;
                s.virtualStages = vpp;
                s.schedule =
                    vpp > 1 ? Schedule::Interleaved : Schedule::OneFOneB;
                s.sequenceParallel = tp > 1; // same traffic, less memory
                s.recompute = rec;
                s.zeroStage = zero;
                s.precision = o.precision;
                s.offloadOptimizer = offload;
                price(s);
                // Expert parallelism for mixture-of-experts models: ep of
                // the dp x cp ranks that divides the experts.
                for (int ep = 2; ep <= maxExperts && ep <= dp * cp; ep *= 2)
                  if (maxExperts % ep == 0 && (dp * cp) % ep == 0) {
                    Strategy e = s;
                    e.ep = ep;
                    price(e);
                  }
                // Folded (etp 1, Megatron-Core's MoE parallel folding):
                // whole experts on ep of the tp x dp ranks.
                if (maxExperts > 1 && tp > 1 && cp == 1)
                  for (int ep = 2; ep <= maxExperts && ep <= dp * tp; ep *= 2)
                    if (maxExperts % ep == 0 && (dp * tp) % ep == 0) {
                      Strategy e = s;
                      e.ep = ep;
                      e.etp = 1;
                      price(e);
                    }
                // Ulysses where the heads split over cp (its all-to-all
                // against the ring's overlapped sends), inside a node: over
                // the network every rank's all-to-all crosses the cards,
                // where the ring's sends hide behind compute.
                if (cp > 1 && heads > 0 && (heads / tp) % cp == 0 &&
                    int64_t(tp) * cp <= perNode) {
                  s.cpComm = CpComm::AllToAll;
                  price(s);
                }
              }
            }
          }
        }
      }
    }
    if (!best.empty())
      break;
  }
  result.searchS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (best.empty()) {
    if (!haveClosest && !floorWhere.empty()) {
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "plan: the model fits on the cluster under no strategy; "
                    "the closest (%s) "
                    "needs %.1f GiB per %s for weights, gradients, optimizer "
                    "state and workspace "
                    "alone, %.1f GiB more than it has",
                    floorWhere.c_str(), floorNeed / double(1ull << 30),
                    dev.name.c_str(), floorShortfall / double(1ull << 30));
      return err(buf);
    }
    if (!haveClosest && result.candidatesRefused > 0 &&
        result.candidatesPriced == 0)
      return err("plan: --framework " + o.framework +
                 " runs none of the strategies searched; the first refused: " +
                 refusal);
    if (!haveClosest)
      return err("plan: no strategy applies to this model on " +
                 std::to_string(devices) + " devices (global batch " +
                 std::to_string(gbs) + "; check that some dp divides it)");
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "plan: the model fits on the cluster under no strategy; the "
                  "closest (%s) is "
                  "%.1f GiB short on one %s: %s",
                  closest.strategy.str().c_str(),
                  closest.memoryShortfallBytes / double(1ull << 30),
                  dev.name.c_str(), closest.doesNotFit.c_str());
    return err(buf);
  }
  // The plans kept, priced in full (the breakdown's pipeline transfers).
  for (StepResult &r : best)
    if (auto full = simulateStep(w, c, r.strategy, a))
      r = std::move(*full);
    else
      llvm::consumeError(full.takeError());
  result.top = std::move(best);
  if (o.progress)
    o.progress(result.candidatesPriced, &result.top.front());
  return result;
}

} // namespace orrery
