//===- HeteroPlanner.cpp - plans for mixed device types and sites --------===//
#include "orrery/Search/HeteroPlanner.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/ModelState.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <queue>
#include <tuple>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

bool needsHeteroSearch(const Cluster &c) {
  return !c.homogeneous() || c.sites.size() > 1;
}

namespace {

/// Up to this many pools every subset and order is searched; beyond it the
/// search keeps to small subsets and to the pools' speed order, so that it
/// stays polynomial (the property that one more faster device never slows
/// the best plan is exact up to here).
constexpr int kExhaustivePools = 4;

/// Per layer kind on one (pool, tp, micro-batch, recompute): seconds of a
/// micro-batch, parameters and kept activation bytes per device.
struct KindTable {
  std::vector<double> seconds, params, kept;
};

/// A stage of a candidate pipeline before its layers are known.
struct StageSlot {
  int pool = 0, tp = 1;
};

/// A candidate with the lower bound of its score.
struct Candidate {
  double bound = 0;
  HeteroStrategy s;
  double slowestS = 0; ///< slowest stage per micro-batch (one-group plans)
};

/// A pool's single-pool pipeline for perPoolGroups: its seconds per
/// sample, and one replica's finish time as a line in its micro-batches.
struct PoolOption {
  ReplicaGroup group; ///< microBatches empty
  double perSampleS = 0, fixedS = 0, perMicroBatchS = 0;
};
using PoolOptions = std::map<int, std::vector<PoolOption>>;

class Search {
public:
  Search(const Workload &w, const Cluster &c, const PlanOptions &o,
         const HeteroSearchScope &scope)
      : w(w), c(c), o(o), scope(scope), pools(clusterPools(c)) {
    for (const LayerRun &run : w.layers)
      for (int64_t i = 0; i < run.count; ++i)
        sequence.push_back(run.kind);
    gbs = o.globalBatch > 0 ? o.globalBatch : 1024;
    pinned = pinnedSamples(c, gbs);
    heads = w.attentionHeads();
  }

  llvm::Expected<HeteroPlanResult> run();

private:
  const Workload &w;
  const Cluster &c;
  const PlanOptions &o;
  const HeteroSearchScope &scope;
  std::vector<Pool> pools;
  std::vector<size_t> sequence;
  int64_t gbs = 0;
  int heads = 0;
  Assumptions a = o.assumptions;
  std::map<std::tuple<int, int, int64_t, int>, KindTable> tables;
  std::vector<Candidate> candidates;
  int64_t pruned = 0;
  /// The simulator's first internal error (a bug, not a strategy that does
  /// not apply): it ends the search as an error.
  std::string internal;
  /// Samples each site must read itself (Site::dataShare).
  std::vector<int64_t> pinned; // set with gbs
  /// Whether the replicas starting at each site take its pinned samples.
  bool pinsHold(const HeteroStrategy &s) const {
    if (std::all_of(pinned.begin(), pinned.end(),
                    [](int64_t n) { return n == 0; }))
      return true;
    return dataShareProblem(c, s, pools).empty(); // s.globalBatch is gbs
  }
  /// Candidates dropped for leaving a site's pinned data unread.
  int64_t unpinned = 0;
  void add(Candidate cand) { candidates.push_back(std::move(cand)); }
  /// This pass's ZeRO stage: 1 (the optimizer sharded over a group's
  /// replicas, free), then 3 only when nothing fits with it.
  int zero = 1;
  /// Candidates skipped for more micro-batches than a step simulates.
  int64_t tooLong = 0;

  bool allowed(int pool) const {
    return scope.pools.empty() || scope.pools[pool];
  }
  std::vector<int> usablePools() const {
    std::vector<int> usable;
    for (int p = 0; p < int(pools.size()); ++p)
      if (allowed(p))
        usable.push_back(p);
    return usable;
  }
  /// The largest tp <= want that divides the pool's scale-up domain and
  /// the heads.
  int tpFor(int pool, int want) const {
    for (int t = want; t >= 1; --t)
      if (pools[pool].nodes->scaleUpDevices() % t == 0 &&
          (heads == 0 || heads % t == 0))
        return t;
    return 1;
  }
  const KindTable &table(int pool, int tp, int64_t mbs, Recompute rec);
  bool balance(const std::vector<StageSlot> &stages, int replicas, int64_t m,
               int64_t mbs, Recompute rec, std::vector<int> &layers,
               double &slowestS);
  double scoreBound(double timeBound, const HeteroStrategy &s) const;
  double pipelineBound(const ReplicaGroup &g, int64_t m);
  double objectiveScoreOf(const HeteroResult &r) const {
    return o.objective == Objective::Cost     ? r.costUsd
           : o.objective == Objective::Energy ? r.energyJ
                                              : r.stepS;
  }
  void pipelines(const std::vector<int> &order);
  void perPoolGroups();
  /// The best results so far, and the closest to fitting.
  struct Kept {
    std::vector<HeteroResult> best;
    std::optional<HeteroResult> closest; ///< the smallest shortfall
  };
  void enumerateCandidates(const std::vector<int> &usable);
  void priceCandidates(Kept &kept, HeteroPlanResult &result);
  llvm::Error noPlan(const Kept &kept, const std::vector<int> &usable) const;
  PoolOptions bestPoolOptions(const std::vector<int> &usable);
  std::vector<std::vector<int>> poolSubsets(const std::vector<int> &usable,
                                            PoolOptions &options) const;
  void shareByEarliestFinish(
      const std::vector<const std::vector<PoolOption> *> &lists,
      const std::vector<size_t> &pick);
  void uniformPerPoolGroups();
};

const KindTable &Search::table(int pool, int tp, int64_t mbs, Recompute rec) {
  auto key = std::make_tuple(pool, tp, mbs, int(rec));
  auto it = tables.find(key);
  if (it != tables.end())
    return it->second;
  // One stage holding every layer, one micro-batch: only the per-kind
  // figures are read.
  const NodeGroup &ng = *pools[pool].nodes;
  Strategy s;
  s.dp = 1;
  s.microBatch = mbs;
  s.globalBatch = mbs;
  s.recompute = rec;
  s.precision = o.precision;
  s.fp8Recipe = o.fp8Recipe;
  s.sequenceParallel = true;
  s.stageLayers = {int(sequence.size())};
  StagePlacement at = stageOn(ng, tp);
  KindTable t;
  if (auto r = simulatePipeline(w, s, {at}, a)) {
    t.seconds = r->stageKindSeconds[0];
    t.params = r->stageKindParams[0];
    t.kept = r->stageKindKeptBytes[0];
  } else {
    stopsSearch(r.takeError(), internal);
  }
  return tables.emplace(key, std::move(t)).first->second;
}

/// Splits the layers over `stages` in order, minimizing the slowest stage's
/// seconds per micro-batch while every stage's bytes fit its device
/// (binary search on the limit, each stage taking as many layers as fit).
/// Under a uniform scope the split is even instead. False when no split
/// fits in memory.
bool Search::balance(const std::vector<StageSlot> &stages, int replicas,
                     int64_t m, int64_t mbs, Recompute rec,
                     std::vector<int> &layers, double &slowestS) {
  int n = int(sequence.size()), S = int(stages.size());
  if (S > n)
    return false;
  // Model state per parameter: ZeRO-3, or ZeRO-1 over the replicas.
  double perParam =
      modelState({1, 0, 0, zero >= 3 ? 3 : 1, double(replicas)}, a).total();
  std::vector<const KindTable *> tab;
  std::vector<double> cap(S);
  std::vector<double> inFlight(S);
  for (int i = 0; i < S; ++i) {
    tab.push_back(&table(stages[i].pool, stages[i].tp, mbs, rec));
    if (tab.back()->seconds.empty())
      return false;
    const DeviceSpec &dev = *pools[stages[i].pool].nodes->device;
    cap[i] = dev.memoryBytes - a.workspaceFor(dev);
    inFlight[i] = double(std::min<int64_t>(m, S - i));
  }
  auto cost = [&](int i, int l, double &t, double &b) {
    size_t k = sequence[l];
    t = tab[i]->seconds[k];
    b = tab[i]->params[k] * perParam +
        tab[i]->kept[k] * inFlight[i] * (1 + a.fragmentation);
  };
  auto fits = [&](double limit, std::vector<int> *out) {
    int pos = 0;
    for (int i = 0; i < S; ++i) {
      int most = n - pos - (S - i - 1);
      double t = 0, b = 0;
      int take = 0;
      while (take < most) {
        double lt, lb;
        cost(i, pos + take, lt, lb);
        if (t + lt > limit || b + lb > cap[i])
          break;
        t += lt;
        b += lb;
        ++take;
      }
      if (take == 0 || (i == S - 1 && pos + take < n))
        return false;
      if (out)
        out->push_back(take);
      pos += take;
    }
    return pos == n;
  };
  layers.clear();
  if (scope.uniform) {
    for (int i = 0; i < S; ++i)
      layers.push_back(n / S + (i < n % S ? 1 : 0));
    int pos = 0;
    slowestS = 0;
    for (int i = 0; i < S; ++i) {
      double t = 0, b = 0;
      for (int j = 0; j < layers[i]; ++j) {
        double lt, lb;
        cost(i, pos++, lt, lb);
        t += lt;
        b += lb;
      }
      if (b > cap[i])
        return false;
      slowestS = std::max(slowestS, t);
    }
    return true;
  }
  double hi = 0, lo = 0;
  for (int l = 0; l < n; ++l) {
    double worst = 0;
    for (int i = 0; i < S; ++i) {
      double lt, lb;
      cost(i, l, lt, lb);
      worst = std::max(worst, lt);
    }
    hi += worst;
  }
  hi *= 1.000001;
  if (!fits(hi, nullptr))
    return false;
  for (int iter = 0; iter < 50 && hi - lo > 1e-9 * hi; ++iter) {
    double mid = (lo + hi) / 2;
    (fits(mid, nullptr) ? hi : lo) = mid;
  }
  fits(hi, &layers);
  // The split's own slowest stage (the limit is a hair above it).
  slowestS = 0;
  for (int i = 0, pos = 0; i < S; ++i) {
    double t = 0;
    for (int j = 0; j < layers[i]; ++j) {
      double lt, lb;
      cost(i, pos++, lt, lb);
      t += lt;
    }
    slowestS = std::max(slowestS, t);
  }
  return true;
}

double Search::scoreBound(double timeBound, const HeteroStrategy &s) const {
  if (o.objective == Objective::Time)
    return timeBound;
  double rate = 0; // per second of step: USD or watts
  for (const ReplicaGroup &rg : s.groups)
    for (const HeteroStage &st : rg.stages) {
      const NodeGroup &ng = *pools[st.pool].nodes;
      rate +=
          double(st.tp) * rg.replicas *
          (o.objective == Objective::Cost ? ng.priceUsdPerDeviceHour / 3600.0
                                          : ng.powerW);
    }
  return timeBound * rate;
}

/// A lower bound of a pipeline's step: some stage i runs all m
/// micro-batches, and cannot start before the stages ahead of it have
/// passed the first one forward, nor finish before they pass the last one
/// back: max over i of m·T_i + sum of T_j for j < i (T: forward and
/// backward seconds of one micro-batch).
double Search::pipelineBound(const ReplicaGroup &g, int64_t m) {
  double bound = 0, ahead = 0;
  size_t layer = 0;
  for (const HeteroStage &st : g.stages) {
    const KindTable &t = table(st.pool, st.tp, g.microBatch, g.recompute);
    double stage = 0;
    for (int j = 0; j < st.layers && layer < sequence.size(); ++j)
      stage += t.seconds.empty() ? 0 : t.seconds[sequence[layer++]];
    bound = std::max(bound, double(m) * stage + ahead);
    ahead += stage;
  }
  return bound;
}

/// Even shares: `total` micro-batches over `replicas` replicas.
static std::vector<int64_t> evenShares(int64_t total, int replicas) {
  std::vector<int64_t> m(replicas, total / replicas);
  for (int r = 0; r < total % replicas; ++r)
    ++m[r];
  return m;
}

/// One pipeline, replicated, whose stages run on the pools of `order` in
/// turn: each pool gives it as many stages as its devices allow.
void Search::pipelines(const std::vector<int> &order) {
  int n = int(sequence.size());
  int maxNode = 1;
  for (int p : order)
    maxNode = std::max(maxNode, pools[p].nodes->scaleUpDevices());
  std::vector<std::vector<int>> seen;
  for (int want = 1; want <= maxNode; want *= 2) {
    std::vector<int> tps;
    for (int p : order)
      tps.push_back(tpFor(p, want));
    if (std::find(seen.begin(), seen.end(), tps) != seen.end())
      continue;
    seen.push_back(tps);
    if (scope.uniform &&
        std::any_of(tps.begin(), tps.end(), [&](int t) { return t != tps[0]; }))
      continue;
    int most = 1 << 30;
    for (size_t j = 0; j < order.size(); ++j)
      most = std::min(most, pools[order[j]].devices / tps[j]);
    std::vector<int> replicaCounts;
    for (int r = 1; r <= most; r *= 2)
      replicaCounts.push_back(r);
    if (most >= 1 && replicaCounts.back() != most)
      replicaCounts.push_back(most);
    for (int R : replicaCounts) {
      std::vector<int> k;
      int total = 0;
      for (size_t j = 0; j < order.size(); ++j) {
        k.push_back(pools[order[j]].devices / (R * tps[j]));
        total += k.back();
      }
      while (total > n) { // more stages than layers: trim the largest
        auto it = std::max_element(k.begin(), k.end());
        if (*it <= 1)
          break;
        --*it;
        --total;
      }
      if (total > n ||
          std::any_of(k.begin(), k.end(), [](int x) { return x < 1; }))
        continue;
      std::vector<StageSlot> slots;
      for (size_t j = 0; j < order.size(); ++j)
        for (int i = 0; i < k[j]; ++i)
          slots.push_back({order[j], tps[j]});
      for (int64_t mbs = 1; mbs <= 8; mbs *= 2) {
        if (gbs % mbs || gbs / mbs < R)
          continue;
        int64_t N = gbs / mbs, m = (N + R - 1) / R;
        if (m * int64_t(slots.size()) > kMaxPlanStepTasks) {
          ++tooLong; // more micro-batches than a search simulates
          continue;
        }
        for (Recompute rec :
             {Recompute::None, Recompute::Selective, Recompute::Full}) {
          std::vector<int> layers;
          double slowest = 0;
          if (!balance(slots, R, m, mbs, rec, layers, slowest)) {
            ++pruned;
            continue;
          }
          HeteroStrategy s;
          s.globalBatch = gbs;
          s.zeroStage = zero;
          s.precision = o.precision;
          ReplicaGroup g;
          g.replicas = R;
          g.microBatch = mbs;
          g.recompute = rec;
          g.microBatches = evenShares(N, R);
          for (size_t i = 0; i < slots.size(); ++i)
            g.stages.push_back({slots[i].pool, slots[i].tp, layers[i], {}});
          s.groups.push_back(std::move(g));
          double bound = pipelineBound(s.groups.front(), m);
          add({scoreBound(bound, s), s, slowest});
          break; // more recompute only adds time
        }
      }
    }
  }
}

/// One replica group per pool, the batch shared by earliest finish: each
/// pool's best single-pool pipelines (by seconds per sample) are timed at
/// two micro-batch counts, giving each replica's finish time as a line in
/// its micro-batches, and the micro-batches go one by one to the replica
/// that would finish first.
void Search::perPoolGroups() {
  std::vector<int> usable = usablePools();
  if (usable.size() < 2)
    return;
  PoolOptions options = bestPoolOptions(usable);
  // Every subset of two or more pools, every pick of options (at most
  // three per pool; each group keeps its own micro-batch size and
  // recompute).
  for (std::vector<int> &subset : poolSubsets(usable, options)) {
    std::sort(subset.begin(), subset.end());
    if (subset.size() < 2)
      continue;
    std::vector<const std::vector<PoolOption> *> lists;
    for (int p : subset) {
      auto it = options.find(p);
      if (it == options.end() || it->second.empty())
        break;
      lists.push_back(&it->second);
    }
    if (lists.size() != subset.size())
      continue;
    std::vector<size_t> pick(subset.size(), 0);
    while (true) {
      shareByEarliestFinish(lists, pick);
      size_t j = 0; // next pick
      while (j < pick.size() && ++pick[j] == lists[j]->size())
        pick[j++] = 0;
      if (j == pick.size())
        break;
    }
  }
}

/// The best options per pool (any micro-batch size), from the single-pool
/// pipelines already enumerated, each timed as a line in its micro-batches.
PoolOptions Search::bestPoolOptions(const std::vector<int> &usable) {
  PoolOptions options;
  for (const Candidate &cand : candidates) {
    const HeteroStrategy &s = cand.s;
    const ReplicaGroup &g = s.groups.front();
    int pool = g.stages.front().pool;
    bool single =
        std::all_of(g.stages.begin(), g.stages.end(),
                    [&](const HeteroStage &st) { return st.pool == pool; });
    if (!single || s.groups.size() != 1)
      continue;
    PoolOption opt;
    opt.group = g;
    opt.group.microBatches.clear();
    opt.perSampleS = cand.slowestS / double(g.replicas * g.microBatch);
    options[pool].push_back(opt);
  }
  for (auto &[pool, list] : options) {
    std::stable_sort(list.begin(), list.end(),
                     [](const PoolOption &x, const PoolOption &y) {
                       return x.perSampleS < y.perSampleS;
                     });
    size_t keep = usable.size() <= size_t(kExhaustivePools) ? 3 : 1;
    if (list.size() > keep)
      list.resize(keep);
    // The finish time of one replica as a line in its micro-batches.
    for (PoolOption &opt : list) {
      int pp = int(opt.group.stages.size());
      double t[2];
      int64_t ms[2] = {pp, 2 * pp};
      for (int j = 0; j < 2; ++j) {
        HeteroStrategy s;
        s.zeroStage = zero;
        s.precision = o.precision;
        ReplicaGroup g = opt.group;
        g.microBatches.assign(g.replicas, ms[j]);
        s.globalBatch = g.samples();
        s.groups.push_back(g);
        auto r = simulateHetero(w, c, s, a);
        t[j] = r ? r->stepS : 1e30;
        if (!r)
          stopsSearch(r.takeError(), internal);
      }
      opt.perMicroBatchS = (t[1] - t[0]) / double(ms[1] - ms[0]);
      opt.fixedS = t[0] - opt.perMicroBatchS * double(ms[0]);
    }
  }
  return options;
}

/// Subsets: all of them up to kExhaustivePools pools; beyond, pairs and
/// the prefixes of the pools ordered by their best seconds per sample.
std::vector<std::vector<int>>
Search::poolSubsets(const std::vector<int> &usable,
                    PoolOptions &options) const {
  int P = int(usable.size());
  std::vector<std::vector<int>> subsets;
  if (P <= kExhaustivePools) {
    for (int mask = 1; mask < (1 << P); ++mask) {
      std::vector<int> subset;
      for (int j = 0; j < P; ++j)
        if (mask & (1 << j))
          subset.push_back(usable[j]);
      subsets.push_back(subset);
    }
  } else {
    for (int a2 = 0; a2 < P; ++a2)
      for (int b2 = a2 + 1; b2 < P; ++b2)
        subsets.push_back({usable[a2], usable[b2]});
    std::vector<int> bySpeed;
    for (int p : usable)
      if (options.count(p) && !options[p].empty())
        bySpeed.push_back(p);
    std::stable_sort(bySpeed.begin(), bySpeed.end(), [&](int x, int y) {
      return options[x].front().perSampleS < options[y].front().perSampleS;
    });
    for (size_t k = 3; k <= bySpeed.size(); ++k)
      subsets.push_back(std::vector<int>(bySpeed.begin(), bySpeed.begin() + k));
  }
  return subsets;
}

/// The batch over the picked options' replicas by earliest finish: each
/// replica starts with one micro-batch; the next goes to the replica that
/// would finish it first, among those whose micro-batch still fits in the
/// samples left. A candidate when the batch is placed whole.
void Search::shareByEarliestFinish(
    const std::vector<const std::vector<PoolOption> *> &lists,
    const std::vector<size_t> &pick) {
  size_t picks = pick.size();
  using Entry = std::tuple<double, int, int>; // finish, group, replica
  std::vector<std::vector<int64_t>> shares;
  int64_t left = gbs;
  // Samples a site with pinned data still needs its own replicas to
  // take (Site::dataShare).
  std::vector<int64_t> need = pinned;
  auto siteOf = [&](size_t j) {
    return pools[(*lists[j])[pick[j]].group.stages.front().pool].site;
  };
  for (size_t j = 0; j < picks; ++j) {
    const PoolOption &opt = (*lists[j])[pick[j]];
    shares.emplace_back(opt.group.replicas, 1);
    left -= opt.group.replicas * opt.group.microBatch;
    need[siteOf(j)] -= opt.group.replicas * opt.group.microBatch;
  }
  if (left > kMaxPlanStepTasks) { // more micro-batches than a search simulates
    ++tooLong;
    left = -1;
  }
  // First the pinned data, each site's to its own replicas, then the
  // rest to any; each time to the replica that would finish first.
  auto fill = [&](bool pinnedPass) {
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> next;
    for (size_t j = 0; j < picks; ++j) {
      if (pinnedPass && need[siteOf(j)] <= 0)
        continue;
      const PoolOption &opt = (*lists[j])[pick[j]];
      for (int r = 0; r < opt.group.replicas; ++r)
        next.push({opt.fixedS + double(shares[j][r] + 1) * opt.perMicroBatchS,
                   int(j), r});
    }
    while (left > 0 && !next.empty()) {
      auto [finish, j, r] = next.top();
      next.pop();
      const PoolOption &opt = (*lists[j])[pick[j]];
      int site = siteOf(j);
      if (opt.group.microBatch > left || (pinnedPass && need[site] <= 0))
        continue;
      int64_t m = ++shares[j][r];
      left -= opt.group.microBatch;
      need[site] -= opt.group.microBatch;
      next.push({opt.fixedS + double(m + 1) * opt.perMicroBatchS, j, r});
    }
  };
  if (left > 0)
    fill(true);
  if (std::any_of(need.begin(), need.end(), [](int64_t n) { return n > 0; }))
    left = -1; // a site's data does not fit its replicas' share
  if (left > 0)
    fill(false);
  if (left == 0) {
    HeteroStrategy s;
    s.globalBatch = gbs;
    s.zeroStage = zero;
    s.precision = o.precision;
    double bound = 0;
    for (size_t j = 0; j < picks; ++j) {
      const PoolOption &opt = (*lists[j])[pick[j]];
      ReplicaGroup g = opt.group;
      g.microBatches = shares[j];
      bound =
          std::max(bound, pipelineBound(g, *std::max_element(shares[j].begin(),
                                                             shares[j].end())));
      s.groups.push_back(std::move(g));
    }
    add({scoreBound(bound, s), s});
  }
}

/// What a planner that assumes identical devices does on a mixed cluster:
/// one configuration (tp, stages, micro-batch) on every pool, even layers,
/// equal micro-batches per replica.
void Search::uniformPerPoolGroups() {
  std::vector<int> usable = usablePools();
  if (usable.size() < 2)
    return;
  int n = int(sequence.size());
  for (int tp = 1; tp <= 64; tp *= 2) {
    if (std::any_of(usable.begin(), usable.end(),
                    [&](int p) { return tpFor(p, tp) != tp; }))
      continue;
    for (int k = 1; k <= n; k *= 2)
      for (int64_t mbs = 1; mbs <= 8; mbs *= 2) {
        if (gbs % mbs)
          continue;
        std::vector<int> replicas;
        int all = 0;
        for (int p : usable) {
          replicas.push_back(pools[p].devices / (tp * k));
          all += replicas.back();
        }
        if (std::any_of(replicas.begin(), replicas.end(),
                        [](int r) { return r < 1; }) ||
            gbs / mbs < all)
          continue;
        int64_t N = gbs / mbs, m = (N + all - 1) / all;
        if (m * k > kMaxPlanStepTasks) {
          ++tooLong; // more micro-batches than a search simulates
          continue;
        }
        for (Recompute rec :
             {Recompute::None, Recompute::Selective, Recompute::Full}) {
          HeteroStrategy s;
          s.globalBatch = gbs;
          s.zeroStage = zero;
          s.precision = o.precision;
          std::vector<int64_t> shares = evenShares(N, all);
          size_t next = 0;
          double bound = 0;
          bool ok = true;
          for (size_t j = 0; j < usable.size() && ok; ++j) {
            std::vector<StageSlot> slots(k, StageSlot{usable[j], tp});
            std::vector<int> layers;
            double slowest = 0;
            ok = balance(slots, replicas[j], m, mbs, rec, layers, slowest);
            ReplicaGroup g;
            g.replicas = replicas[j];
            g.microBatch = mbs;
            g.recompute = rec;
            for (int r = 0; r < g.replicas; ++r)
              g.microBatches.push_back(shares[next++]);
            for (int i = 0; i < k && ok; ++i)
              g.stages.push_back({usable[j], tp, layers[i], {}});
            if (ok)
              bound = std::max(bound, pipelineBound(g, m));
            s.groups.push_back(std::move(g));
          }
          if (!ok) {
            ++pruned;
            continue;
          }
          add({scoreBound(bound, s), s});
          break;
        }
      }
  }
}

llvm::Expected<HeteroPlanResult> Search::run() {
  auto start = std::chrono::steady_clock::now();
  HeteroPlanResult result;
  result.pools = pools;
  if (sequence.empty())
    return err("plan: the model has no layers");
  std::vector<int> usable = usablePools();
  if (usable.empty())
    return err("plan: no pool of the cluster may be used");
  Kept kept;
  // ZeRO-1 first; ZeRO-3 (weights and gradients sharded over a group's
  // replicas too) only when nothing fits without it, as the homogeneous
  // planner does.
  for (zero = 1; zero <= 3 && kept.best.empty(); zero += 2) {
    candidates.clear();
    enumerateCandidates(usable);
    priceCandidates(kept, result);
  }
  if (!internal.empty())
    return err("plan: " + internal);
  result.candidatesPruned = pruned;
  result.searchS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (kept.best.empty())
    return noPlan(kept, usable);
  result.top = std::move(kept.best);
  return result;
}

/// Pipelines over every ordered subset of pools (all pools when the scope
/// is uniform: a uniform planner uses every device), then the groups of
/// one pipeline per pool.
void Search::enumerateCandidates(const std::vector<int> &usable) {
  int P = int(usable.size());
  for (int mask = 1; mask < (1 << P); ++mask) {
    std::vector<int> order;
    for (int j = 0; j < P; ++j)
      if (mask & (1 << j))
        order.push_back(usable[j]);
    if (scope.uniform && int(order.size()) != P)
      continue;
    // Every order of up to kExhaustivePools pools (5! orders and more are
    // not searched); with more pools, orders of up to three.
    if (order.size() > size_t(P <= kExhaustivePools ? kExhaustivePools : 3))
      continue;
    do
      pipelines(order);
    while (std::next_permutation(order.begin(), order.end()));
  }
  if (scope.uniform)
    uniformPerPoolGroups();
  else
    perPoolGroups();
}

/// Best first by bound; stop when the bound cannot beat the K-th best.
void Search::priceCandidates(Kept &kept, HeteroPlanResult &result) {
  int K = std::max(1, o.topK);
  std::vector<HeteroResult> &best = kept.best;
  std::optional<HeteroResult> &closest = kept.closest;
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate &x, const Candidate &y) { return x.bound < y.bound; });
  for (const Candidate &cand : candidates) {
    // The single-pool pipelines stay candidates for perPoolGroups'
    // options even where they cannot hold a site's data alone.
    if (!pinsHold(cand.s)) {
      ++unpinned;
      continue;
    }
    if (int(best.size()) >= K &&
        cand.bound >= objectiveScoreOf(best.back()) * (1 - 1e-12)) {
      ++pruned;
      continue;
    }
    auto r = simulateHetero(w, c, cand.s, a);
    ++result.candidatesPriced;
    if (!r) {
      stopsSearch(r.takeError(), internal);
      continue;
    }
    if (!r->fits) {
      if (!closest || r->memoryShortfallBytes < closest->memoryShortfallBytes) {
        closest = std::move(*r);
      }
      continue;
    }
    best.push_back(std::move(*r));
    std::stable_sort(best.begin(), best.end(),
                     [&](const HeteroResult &x, const HeteroResult &y) {
                       return objectiveScoreOf(x) < objectiveScoreOf(y);
                     });
    if (int(best.size()) > K)
      best.pop_back();
    if (o.progress && result.candidatesPriced % 200 == 0) {
      StepResult shown;
      shown.stepS = best.front().stepS;
      o.progress(result.candidatesPriced, &shown);
    }
  }
}

/// Why nothing fits: pinned data, too many micro-batches, the closest
/// strategy's shortfall, or the model state against the devices.
llvm::Error Search::noPlan(const Kept &kept,
                           const std::vector<int> &usable) const {
  const std::optional<HeteroResult> &closest = kept.closest;
  if (!closest && unpinned > 0) {
    std::string sites;
    std::vector<int64_t> need = pinnedSamples(c, gbs);
    for (size_t i = 0; i < need.size(); ++i)
      if (need[i] > 0)
        sites += (sites.empty() ? "" : ", ") + c.sites[i].name + " " +
                 std::to_string(need[i]) + " samples";
    return err("plan: no strategy reads each site's pinned data there "
               "(data_share: " +
               sites + " of " + std::to_string(gbs) +
               "): the site's devices cannot take their share");
  }
  if (!closest && tooLong > 0)
    return err("plan: a global batch of " + std::to_string(gbs) +
               " samples is more micro-batches than the planner simulates "
               "per candidate (" +
               std::to_string(kMaxPlanStepTasks) +
               " micro-batch executions); give a smaller --global-batch");
  if (closest) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "plan: the model fits on the cluster under no strategy; "
                  "the closest (%s) is %.1f GiB short: %s",
                  closest->strategy.str(pools).c_str(),
                  closest->memoryShortfallBytes / double(1ull << 30),
                  closest->doesNotFit.c_str());
    return err(buf);
  }
  double need = modelState({double(w.parameters())}, a).total();
  double have = 0;
  for (int p : usable) {
    const DeviceSpec &dev = *pools[p].nodes->device;
    double cap = dev.memoryBytes - a.workspaceFor(dev);
    have += pools[p].devices * cap;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "plan: the model fits on the cluster under no strategy: no "
                "split of its %lld layers over the devices fits (weights, "
                "gradients and Adam state need %.1f GiB, the devices have "
                "%.1f GiB after workspace; mixed-cluster plans in this "
                "version do not offload to host memory)",
                (long long)sequence.size(), need / double(1ull << 30),
                have / double(1ull << 30));
  return err(buf);
}

} // namespace

llvm::Expected<HeteroPlanResult>
searchHeteroPlans(const Workload &w, const Cluster &c, const PlanOptions &o,
                  const HeteroSearchScope &scope) {
  return Search(w, c, o, scope).run();
}

} // namespace orrery
