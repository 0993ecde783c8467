//===- Planner.cpp - search the strategy space ---------------------------===//
#include "orrery/Search/Planner.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/ModelState.h"
#include "orrery/Plan/Capabilities.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <ctime>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <thread>
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
  // Binary search on the largest run, greedy packing to test it. Testing
  // alone needs the count of runs: with parts <= n layers, splitting the
  // longest runs always reaches `parts` (only the split written needs the
  // lengths).
  auto fits = [&](double limit, std::vector<int> *out) {
    std::vector<int> runs;
    int closed = 0;
    double sum = 0;
    int len = 0;
    for (int i = 0; i < n; ++i) {
      int left = n - i; // layers still to place, this one included
      int runsLeft = parts - closed;
      // Close the run when this layer does not fit, or when the remaining
      // layers are just enough for the remaining runs.
      if (len > 0 && (sum + seconds[i] > limit || left < runsLeft)) {
        if (out)
          runs.push_back(len);
        ++closed;
        sum = 0;
        len = 0;
      }
      if (seconds[i] > limit)
        return false;
      sum += seconds[i];
      ++len;
    }
    if (closed + 1 > parts)
      return false;
    if (!out)
      return true;
    runs.push_back(len);
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

std::vector<int> balanceFoldedLayers(const std::vector<double> &seconds,
                                     int parts) {
  std::vector<int> runs = balanceLayers(seconds, parts);
  if (runs.empty() || parts % 2)
    return runs;
  std::vector<double> prefix(seconds.size() + 1, 0.0);
  for (size_t i = 0; i < seconds.size(); ++i)
    prefix[i + 1] = prefix[i] + seconds[i];
  // A device's load: its chunk c and chunk parts-1-c. Ordered by the
  // largest load, then the sum of squares (which evens the others).
  auto score = [&](const std::vector<int> &r) {
    std::vector<double> chunk(r.size());
    size_t at = 0;
    for (size_t c = 0; c < r.size(); ++c) {
      chunk[c] = prefix[at + size_t(r[c])] - prefix[at];
      at += size_t(r[c]);
    }
    double worst = 0, squares = 0;
    for (int c = 0; c < parts / 2; ++c) {
      double load = chunk[size_t(c)] + chunk[size_t(parts - 1 - c)];
      worst = std::max(worst, load);
      squares += load * load;
    }
    return std::make_pair(worst, squares);
  };
  // Local search: move one layer across one boundary while that helps.
  auto best = score(runs);
  for (int round = 0; round < 4 * int(seconds.size()); ++round) {
    bool moved = false;
    for (int b = 1; b < parts && !moved; ++b)
      for (int dir : {-1, 1}) {
        std::vector<int> r = runs;
        r[size_t(b - 1)] += dir;
        r[size_t(b)] -= dir;
        if (r[size_t(b - 1)] < 1 || r[size_t(b)] < 1)
          continue;
        auto s = score(r);
        if (s.first < best.first * (1 - 1e-12) ||
            (s.first <= best.first && s.second < best.second * (1 - 1e-12))) {
          runs = std::move(r);
          best = s;
          moved = true;
          break;
        }
      }
    if (!moved)
      break;
  }
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
/// Whether `framework`'s exporter takes `s` as priced; its refusal goes to
/// `refusal` when that is empty.
static bool runsOn(const Workload &w, const DeviceSpec &dev, const Strategy &s,
                   const Assumptions &a, const std::string &framework,
                   std::string *refusal) {
  auto p = exportPlanFor(w, s, a, &dev);
  llvm::Error e = p ? frameworkRuns(*p, framework) : p.takeError();
  if (!e)
    return true;
  std::string msg = llvm::toString(std::move(e));
  if (refusal && refusal->empty())
    *refusal = msg;
  return false;
}

static std::optional<Strategy> asFrameworkRuns(const Workload &w,
                                               const DeviceSpec &dev,
                                               Strategy s, const Assumptions &a,
                                               const std::string &framework,
                                               std::string &refusal) {
  using Change = std::function<bool(Strategy &)>; // false: does not apply
  const std::vector<Change> changes = {
      [](Strategy &t) { return std::exchange(t.overlapParamGather, false); },
      [](Strategy &t) { return std::exchange(t.overlapGradReduce, false); },
      // Megatron-LM needs pp > 2 to run its interleaved schedule without
      // overlapping pipeline sends.
      [](Strategy &t) {
        return t.pp > 1 && std::exchange(t.overlapP2p, false);
      },
      [](Strategy &t) {
        return t.pp > 1 && t.virtualStages > 1 &&
               !std::exchange(t.overlapP2p, true);
      },
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
    return runsOn(w, dev, t, a, framework, &refusal);
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

namespace {
/// A memory saver: the ZeRO stage and whether the optimizer is offloaded.
struct Saver {
  int zero;
  bool offload;
  /// PatrickStar's chunks (zero and offload then 0): its model data by
  /// chunk on the device where there is room, else on the host.
  bool chunks = false;
};
/// PatrickStar's usual chunk: 64 M elements (its INSIDE.md, and
/// --default_chunk_size in its examples).
constexpr int64_t kPatrickStarChunkParams = 64000000;
constexpr double kNotPriced = 1e300;
/// A priced candidate: its memory shortfall in bytes (<= 0: it fits;
/// kNotPriced: not priced), and the least step a memory saver could give
/// it (its step without the data-parallel reduction and the optimizer
/// step, the only parts a saver can shorten: ZeRO-3 and offload only add
/// to the forward and backward).
struct Priced {
  double shortBy = kNotPriced, floorS = 0;
  /// Its step and the idle time in it (the bubble, at the search's detail):
  /// a zero-bubble schedule of the same candidate takes at least the
  /// difference.
  double stepS = 0, idleS = 0;
};
/// A candidate its cheapest saver did not fit, with the savers left.
struct Deferred {
  Strategy s;
  std::vector<Saver> savers;
  std::vector<double> floors;
  Priced first;
};
/// Keeps in `slot` the candidate nearest to fitting: the smaller
/// shortfall, ties by the strategy's text (the same whatever the order).
static void keepCloser(StepResult &slot, bool &have, const StepResult &r) {
  if (!have || r.memoryShortfallBytes < slot.memoryShortfallBytes ||
      (r.memoryShortfallBytes == slot.memoryShortfallBytes &&
       r.strategy.str() < slot.strategy.str())) {
    slot = r;
    have = true;
  }
}

/// What one worker of the search found.
struct SearchState {
  std::vector<StepResult> best;
  StepResult closest; // the smallest shortfall, when nothing fits
  bool haveClosest = false;
  // The closest of those that the nodes' host memory stopped.
  StepResult hostClosest;
  bool haveHostClosest = false;
  double floorShortfall = 1e300, floorNeed = 0; // of candidates pruned unpriced
  std::string floorWhere;
  std::string refusal; // the framework's first refusal
  int refusalTpIndex = 0, tpIndex = 0;
  /// After a framework check: where the first refusal was met, if this
  /// check (which found `refusal` empty when `had` is false) wrote it.
  void noteRefusal(bool had) {
    if (!had && !refusal.empty())
      refusalTpIndex = tpIndex;
  }
  int64_t priced = 0, pruned = 0, refused = 0;
  int64_t simulated = 0, scheduled = 0; // SearchTimings
  std::vector<Deferred> deferred;
  /// The best fitting candidates that recompute every layer: those whose
  /// partial recompute (recompute_layers) the search tries last.
  std::vector<StepResult> fullyRecomputing;
  bool first = false; // reports progress
  /// The first internal error of the simulator met (a bug, not a strategy
  /// that does not apply): it stops the search.
  std::string internal;
  /// Whether a refusal of `s` stops the search (noted in `internal`).
  bool stopsOn(llvm::Error e, const Strategy &s) {
    std::string msg;
    if (!stopsSearch(std::move(e), msg))
      return false;
    if (internal.empty())
      internal = msg + " (pricing " + s.str() + ")";
    return true;
  }
};
/// Fitting full-recompute candidates refined into partial recompute.
constexpr int kPartialRecomputeCandidates = 16;
} // namespace

namespace {
/// One search (searchPlans): the problem, the savers, and the phases —
/// every tensor-parallel degree's candidates on the workers, their results
/// merged, the deferred savers, partial recompute, the plans kept priced
/// in full.
class PlanSearch {
public:
  PlanSearch(const Workload &w, const Cluster &c, const PlanOptions &o)
      : w(w), c(c), o(o), a(o.assumptions), dev(c.deviceSpec(0)) {}
  llvm::Expected<PlanResult> run(PlanResult &result,
                                 std::chrono::steady_clock::time_point start);

private:
  const Workload &w;
  const Cluster &c;
  const PlanOptions &o;
  const Assumptions &a;
  const DeviceSpec &dev;
  int64_t devices = 0, gbs = 0, layers = 0;
  int perDomain = 0 /* devices one scale-up link joins */, heads = 0,
      maxExperts = 0;
  /// Whether every mixture-of-experts layer states its top-k (what
  /// DeepEP's dispatch is priced by).
  bool routedTopK = false;
  /// Layer kinds with a layout that splits the batch inside tp (CNN
  /// stages): such candidates are priced both ways, Megatron's feature
  /// splits alone and with those batch splits.
  bool batchable = false;
  /// Whether every node states host memory (offload may be searched).
  bool host = true;
  /// Whether the fabric has an oversubscribed tier whose blocks are
  /// smaller than the cluster (docs/cluster.md): then the data-parallel
  /// groups outermost (tp, cp, pp, dp) are priced beside the default
  /// order's pipeline outermost.
  bool oversubscribed = false;
  std::vector<Saver> savers;
  std::atomic<int64_t> pricedSoFar{0};
  /// Selective recompute's module sets searched (RecomputeModule bits):
  /// the attention core always; Megatron-Core's up-projections of latent
  /// attention and experts' activation where the model has them.
  std::vector<unsigned> selectiveModuleSets() const;

  void chooseSavers();
  bool better(const StepResult &x, const StepResult &y) const;
  static bool recomputingLess(const StepResult &x, const StepResult &y);
  void consider(SearchState &st, const StepResult &r);
  bool frameworkRuns(const Strategy &s) const {
    return o.framework.empty() || runsOn(w, dev, s, a, o.framework, nullptr);
  }
  Priced priceOne(SearchState &st, Strategy s);
  void balanceStages(SearchState &st, const Strategy &s, const StepResult &r,
                     double bar);
  Priced price(SearchState &st, Strategy s,
               const std::optional<Strategy> *known = nullptr);
  void priceZeroBubble(SearchState &st, Strategy t, const Priced &p);
  void searchTp(SearchState &st, int tp);
  void searchShape(SearchState &st, int tp, int cp, int pp);
  bool fittingSavers(SearchState &st, int tp, int cp, int pp, int64_t dp,
                     std::vector<Saver> &fitting, std::vector<double> &floors);
  Priced priceSaving(SearchState &st, Strategy t,
                     const std::vector<Saver> &fitting,
                     const std::vector<double> &floors);
  void priceCandidate(SearchState &st, const Strategy &s,
                      const std::vector<Saver> &fitting,
                      const std::vector<double> &floors, int64_t dp);
  SearchState searchOnWorkers();
  static void merge(SearchState &merged, SearchState &st, int &refusalAt);
  void priceDeferred(SearchState &merged);
  void refinePartialRecompute(SearchState &merged);
  llvm::Error noPlan(const SearchState &merged, const PlanResult &result) const;
};
} // namespace

void PlanSearch::chooseSavers() {
  // Memory savers, cheapest first: ZeRO-1 (the optimizer sharded for
  // free: the same traffic as an all-reduce); ZeRO-2 (the gradients too,
  // reduce-scattered every micro-batch; without pipeline stages, as
  // DeepSpeed runs it); the optimizer on the host
  // (where the nodes state host memory); ZeRO-3 (FSDP: every layer's
  // weights gathered, priced optimistically at scale, docs/costmodel.md);
  // ZeRO-3 with the optimizer on the host. Each candidate takes the first
  // that fits it: a later one is priced only when the earlier ones do not
  // fit that candidate (the memory model's floor prunes those that cannot).
  for (const Site &site : c.sites)
    for (const NodeGroup &g : site.nodeGroups) {
      host &= g.hostMemoryBytes > 0 && g.hostMemoryBandwidthBytesPerS > 0;
      for (const FabricTier &t : g.tiers) // blocks the plan may leave
        oversubscribed |= t.oversubscription > 1 && t.nodes < g.count;
    }
  savers = {{1, false}, {2, false}};
  if (host)
    savers.push_back({1, true});
  savers.push_back({3, false});
  if (host) {
    savers.push_back({3, true});
    // PatrickStar (data parallel, one micro-batch per replica, no
    // fine-tuning): its floor is one gathered chunk group.
    if (!w.fineTuning.active())
      savers.push_back({0, false, true});
  }
}

bool PlanSearch::better(const StepResult &x, const StepResult &y) const {
  double sx = objectiveScore(x, o.objective),
         sy = objectiveScore(y, o.objective);
  if (sx != sy)
    return sx < sy;
  return x.strategy.str() < y.strategy.str(); // deterministic ties
}

/// Candidates that recompute every layer, those whose partial recompute
/// might be fastest first: by the step less its recompute's share of the
/// work (what recomputing no layer would leave), not by the step
/// recomputing all of them; ties by the strategy's text.
bool PlanSearch::recomputingLess(const StepResult &x, const StepResult &y) {
  auto unrecomputed = [](const StepResult &r) {
    return r.hardwareFlopsPerStep > 0
               ? r.stepS * r.modelFlopsPerStep / r.hardwareFlopsPerStep
               : r.stepS;
  };
  double ux = unrecomputed(x), uy = unrecomputed(y);
  if (ux != uy)
    return ux < uy;
  return x.strategy.str() < y.strategy.str();
}

void PlanSearch::consider(SearchState &st, const StepResult &r) {
  ++st.priced;
  int64_t total = ++pricedSoFar;
  if (!r.fits) {
    if (r.doesNotFit.rfind("host memory", 0) == 0)
      keepCloser(st.hostClosest, st.haveHostClosest, r);
    keepCloser(st.closest, st.haveClosest, r);
    return;
  }
  // The `size` first of `list` and r by `less`.
  auto keep = [&](std::vector<StepResult> &list, int size, auto less) {
    if (int(list.size()) >= size && !less(r, list.back()))
      return; // no copy of a result the list would drop
    list.insert(std::upper_bound(list.begin(), list.end(), r, less), r);
    if (int(list.size()) > size)
      list.pop_back();
  };
  keep(st.best, std::max(1, o.topK),
       [this](const StepResult &x, const StepResult &y) {
         return better(x, y);
       });
  if (r.strategy.recompute == Recompute::Full &&
      r.strategy.recomputeLayers == 0)
    keep(st.fullyRecomputing, kPartialRecomputeCandidates, recomputingLess);
  if (o.progress && st.first && st.priced % 1000 == 0)
    o.progress(total, &st.best.front()); // the first worker's best
}

/// Prices a candidate and says how far it is from fitting: its memory
/// shortfall in bytes (<= 0: it fits; kNotPriced: not priced), and the
/// least step any memory saver could give it: its step without the
/// data-parallel reduction and the optimizer step (the only parts a saver
/// can shorten; ZeRO-3 and offload only add to the forward and backward).
Priced PlanSearch::priceOne(SearchState &st, Strategy s) {
  if (s.microBatches() * s.pp * s.virtualStages > kMaxPlanStepTasks ||
      !st.internal.empty())
    return Priced{}; // too many events to price in a search, or stopped
  // The bar a candidate must pass to enter the plans kept (by time):
  // above it, the schedule is not run. One that recomputes every layer is
  // bounded without its recompute (StepSchedule.cpp): its partial
  // recompute (tried last) may be faster, but not than that.
  double bar = std::numeric_limits<double>::infinity();
  if (o.objective == Objective::Time &&
      int(st.best.size()) >= std::max(1, o.topK))
    bar = st.best.back().stepS;
  auto r = simulateStep(w, c, s, a, false, Detail::StepTime, bar);
  if (!r) {
    st.stopsOn(r.takeError(), s);
    return Priced{};
  }
  ++st.simulated;
  st.scheduled += !r->pruned;
  if (r->boundOnly) { // neither it nor a saver, split or schedule of it
    ++st.pruned;      // can enter the plans kept: no memory to report
    return Priced{0, r->stepS, r->stepS, 0};
  }
  // Pruned: this candidate takes at least r->stepS, any split of its
  // layers or zero-bubble schedule of it r->stepS - r->bubbleS.
  if (r->pruned && r->fits)
    ++st.pruned;
  else
    consider(st, *r); // a pruned one that does not fit: the closest
  double anySplitS = r->pruned ? r->stepS - r->bubbleS : 0;
  Priced priced{r->fits ? 0.0 : std::max(1.0, r->memoryShortfallBytes),
                r->pruned ? anySplitS
                          : r->stepS - r->exposedDpCommS - r->optimizerS,
                r->stepS, r->bubbleS};
  if (s.pp > 1 && r->fits && !(r->pruned && anySplitS > bar))
    balanceStages(st, s, *r, bar);
  return priced;
}

/// Uneven stages balanced by the layers' measured cost: even chunks; under
/// a V (and DualPipe's mirrored ranks), where a device runs chunks c and
/// chunks-1-c, also the split that evens those pairs: the schedule's
/// critical path decides which is faster.
void PlanSearch::balanceStages(SearchState &st, const Strategy &s,
                               const StepResult &r, double bar) {
  std::vector<double> perLayer;
  for (const LayerRun &run : w.layers)
    for (int64_t i = 0; i < run.count; ++i)
      perLayer.push_back(r.kindSecondsPerMicroBatch[run.kind]);
  int chunks = s.pp * s.virtualStages;
  std::vector<std::vector<int>> splits = {balanceLayers(perLayer, chunks)};
  if (s.vShape() || s.schedule == Schedule::DualPipe)
    splits.push_back(balanceFoldedLayers(perLayer, chunks));
  std::optional<StepResult> fastest;
  std::vector<int> tried;
  for (const std::vector<int> &split : splits) {
    Strategy b = s;
    b.stageLayers = split;
    if (split.empty() || split == s.stageLayers || split == tried ||
        !frameworkRuns(b))
      continue;
    tried = split;
    auto balanced = simulateStep(w, c, b, a, false, Detail::StepTime, bar);
    if (!balanced) {
      st.stopsOn(balanced.takeError(), b);
      continue;
    }
    ++st.simulated;
    st.scheduled += !balanced->pruned;
    if (balanced->pruned)
      continue;
    if (!fastest || balanced->stepS < fastest->stepS)
      fastest = std::move(*balanced);
  }
  // Only a split that beats the default is a new plan (a pruned
  // default's step is above the bar, that of any plan kept).
  if (fastest && (r.pruned || fastest->stepS < r.stepS * (1 - 1e-9)))
    consider(st, *fastest);
}

/// `known`: the framework's variant of `s` found already (priceSaving's).
Priced PlanSearch::price(SearchState &st, Strategy s,
                         const std::optional<Strategy> *known) {
  if (!o.framework.empty()) {
    // No framework target states a per-op batch split inside tp.
    if (known && *known)
      return priceOne(st, **known);
    bool had = !st.refusal.empty();
    auto runnable = asFrameworkRuns(w, dev, s, a, o.framework, st.refusal);
    st.noteRefusal(had);
    if (!runnable) {
      ++st.refused;
      return Priced{};
    }
    return priceOne(st, *runnable);
  }
  Priced p = priceOne(st, s);
  if (batchable && s.tp > 1 && s.microBatch % s.tp == 0) {
    s.tpBatchSplit = true;
    Priced split = priceOne(st, s);
    p.shortBy = std::min(p.shortBy, split.shortBy);
    p.floorS = std::min(p.floorS, split.floorS);
  }
  return p;
}

/// The zero-bubble schedules of a 1F1B candidate that fits: ZB-H1 (the
/// same work and memory, the weight gradients deferred into the bubble),
/// ZB-2p (twice the activations in flight), ZB-V and DualPipeV; priced unless
/// (by time) even a step without any bubble would not enter the plans kept.
void PlanSearch::priceZeroBubble(SearchState &st, Strategy t, const Priced &p) {
  if (t.pp < 2 || t.virtualStages != 1 || t.schedule != Schedule::OneFOneB ||
      p.shortBy > 0)
    return;
  if (o.objective == Objective::Time &&
      int(st.best.size()) >= std::max(1, o.topK) &&
      p.stepS - p.idleS > st.best.back().stepS)
    return;
  t.schedule = Schedule::ZeroBubbleH1;
  price(st, t);
  // ZB-2p: twice the activations in flight for the bubble ZB-H1 leaves.
  t.schedule = Schedule::ZeroBubble2p;
  price(st, t);
  t.schedule = Schedule::ZeroBubbleH1;
  // The V schedules (two chunks per stage: the same layers per device,
  // a deeper V of activations on the later stages): ZB-V, and DualPipeV
  // where the micro-batches allow (its overlapped pairs hide the
  // expert-parallel all-to-alls).
  if (w.totalLayers() < 2 * t.pp)
    return;
  t.virtualStages = 2;
  t.stageLayers.clear();
  t.schedule = Schedule::ZeroBubbleV;
  price(st, t);
  if (t.microBatches() >= 2 * t.pp) {
    t.schedule = Schedule::DualPipeV;
    price(st, t);
  }
  // Bidirectional DualPipe: the same order on pp/2 mirrored pairs of
  // ranks, two copies of each stage's weights.
  if (t.pp % 2 == 0 && t.microBatches() % 2 == 0 &&
      t.microBatches() >= 2 * t.pp && t.zeroStage <= 1 &&
      t.subnetworkFraction == 0) {
    t.schedule = Schedule::DualPipe;
    t.virtualStages = 1;
    price(st, t);
  }
}

/// Every candidate of one tensor-parallel degree under its cheapest saver;
/// those it does not fit wait (`deferred`) for the later savers.
void PlanSearch::searchTp(SearchState &st, int tp) {
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
    if (cp > 1 &&
        (w.tokensPerSample == 0 || heads == 0 || w.tokensPerSample % (2 * cp)))
      continue;
    for (int pp : divisors(devices / (int64_t(tp) * cp), layers))
      searchShape(st, tp, cp, pp);
  }
}

/// The savers whose memory floor fits one device of a tp x cp x pp x dp
/// candidate (and their floors); none: the candidate is pruned, the
/// nearest floor noted for the error.
bool PlanSearch::fittingSavers(SearchState &st, int tp, int cp, int pp,
                               int64_t dp, std::vector<Saver> &fitting,
                               std::vector<double> &floors) {
  // Memory lower bound per saver: this stage's share of the
  // parameters (frozen ones at their weights' bytes) sharded so.
  double params = double(w.parameters()) / (double(tp) * pp);
  double frozen = double(w.frozenParameters()) / (double(tp) * pp);
  double leastFloor = 1e300;
  Saver least = savers.front();
  for (const Saver &v : savers) {
    if ((v.zero == 3 && dp == 1) || (v.zero == 2 && (dp == 1 || pp > 1)))
      continue;
    // PatrickStar: data parallel, one micro-batch per replica.
    if (v.chunks && (tp > 1 || pp > 1 || cp > 1 || gbs / dp > 64))
      continue;
    if (v.chunks) {
      double floorBytes =
          double(dp) * double(kPatrickStarChunkParams) * a.weightBytesPerParam +
          a.workspaceFor(dev);
      if (floorBytes <= dev.memoryBytes) {
        fitting.push_back(v);
        floors.push_back(floorBytes);
      }
      continue;
    }
    // The experts counted as dense: sharded over more ranks than hold
    // them, a floor.
    double floorBytes =
        modelState({params, 0, frozen, v.zero, double(dp), 1, v.offload}, a)
            .total();
    floorBytes += a.workspaceFor(dev);
    if (floorBytes <= dev.memoryBytes) {
      fitting.push_back(v);
      floors.push_back(floorBytes);
    }
    if (floorBytes < leastFloor) {
      leastFloor = floorBytes;
      least = v;
    }
  }
  if (!fitting.empty())
    return true;
  ++st.pruned;
  double shortBy = leastFloor - dev.memoryBytes;
  std::string where = "tp=" + std::to_string(tp) + ",cp=" + std::to_string(cp) +
                      ",pp=" + std::to_string(pp) +
                      ",dp=" + std::to_string(dp) +
                      ",zero=" + std::to_string(least.zero) +
                      (least.offload ? ",offload=optimizer" : "");
  if (shortBy < st.floorShortfall ||
      (shortBy == st.floorShortfall && where < st.floorWhere)) {
    st.floorShortfall = shortBy;
    st.floorNeed = leastFloor;
    st.floorWhere = where;
  }
  return false;
}

/// The first saver that fits and that the framework runs, as it is or in a
/// variant of the same ZeRO stage (Megatron-LM has no ZeRO-2: its next
/// saver, not a variant without the sharding); the later ones deferred
/// while it does not fit.
Priced PlanSearch::priceSaving(SearchState &st, Strategy t,
                               const std::vector<Saver> &fitting,
                               const std::vector<double> &floors) {
  auto useSaver = [&](size_t i) {
    t.zeroStage = fitting[i].zero;
    t.offloadOptimizer = fitting[i].offload;
    t.chunkParams = fitting[i].chunks ? kPatrickStarChunkParams : 0;
  };
  size_t from = 0;
  std::optional<Strategy> runnable;
  for (size_t i = 0; !o.framework.empty() && i < fitting.size(); ++i) {
    useSaver(i);
    if (t.chunkParams > 0)
      break;
    std::string other;
    bool had = !st.refusal.empty();
    auto variant =
        asFrameworkRuns(w, dev, t, a, o.framework, i == 0 ? st.refusal : other);
    if (i == 0)
      st.noteRefusal(had);
    if (!variant && i == 0) { // refused whatever the saver
      ++st.refused;
      return Priced{};
    }
    if (variant && variant->zeroStage == t.zeroStage) {
      from = i;
      runnable = std::move(variant);
      break;
    }
  }
  useSaver(from); // none keeps its stage: the first, refused
  if (t.chunkParams > 0 &&
      (t.microBatches() > 1 || t.offloadActivations || t.ep > 1))
    return Priced{};
  Priced first = price(st, t, &runnable);
  priceZeroBubble(st, t, first);
  if (first.shortBy > 0 && first.shortBy != kNotPriced &&
      fitting.size() > from + 1)
    st.deferred.push_back(
        {t, std::vector<Saver>(fitting.begin() + from, fitting.end()),
         std::vector<double>(floors.begin() + from, floors.end()), first});
  return first;
}

/// Every micro-batch, interleaving and recompute of one tp x cp x pp x dp
/// shape.
void PlanSearch::searchShape(SearchState &st, int tp, int cp, int pp) {
  int64_t dp = devices / (int64_t(tp) * cp * pp);
  if (gbs % dp)
    return;
  std::vector<Saver> fitting;
  std::vector<double> floors; // of the fitting savers
  if (!fittingSavers(st, tp, cp, pp, dp, fitting, floors))
    return;
  for (int64_t mbs = 1; mbs <= std::min<int64_t>(gbs / dp, 64); mbs *= 2) {
    if ((gbs / dp) % mbs)
      continue;
    int64_t m = gbs / (dp * mbs);
    for (int vpp : {1, 2, 4}) {
      if (vpp > 1 && (pp == 1 || m % pp || layers < pp * vpp * 2))
        continue;
      // torchtitan recomputes per op, not the attention core: the saver
      // it runs in place of selective.
      Recompute selective =
          o.framework == "torchtitan" ? Recompute::Op : Recompute::Selective;
      std::vector<std::pair<Recompute, unsigned>> recomputes = {
          {Recompute::None, 0}, {selective, 0}, {Recompute::Full, 0}};
      if (selective == Recompute::Selective)
        for (unsigned m : selectiveModuleSets())
          recomputes.push_back({Recompute::Selective, m});
      for (auto [rec, modules] : recomputes) {
        Strategy s;
        s.recomputeModules = modules;
        s.tp = tp;
        s.cp = cp;
        s.pp = pp;
        s.dp = int(dp);
        s.microBatch = mbs;
        s.globalBatch = gbs;
        s.virtualStages = vpp;
        s.schedule = vpp > 1 ? Schedule::Interleaved : Schedule::OneFOneB;
        s.sequenceParallel = tp > 1; // same traffic, less memory
        s.recompute = rec;
        s.precision = o.precision;
        s.fp8Recipe = o.fp8Recipe;
        s.moeImbalance = o.moeImbalance;
        s.moeCapacity = o.moeCapacity;
        priceCandidate(st, s, fitting, floors, dp);
      }
    }
  }
}

std::vector<unsigned> PlanSearch::selectiveModuleSets() const {
  if (!o.framework.empty() && o.framework != "any" &&
      o.framework != "megatron")
    return {};
  bool latent = false, experts = false;
  for (const LayerKind &k : w.kinds)
    for (const OpCost &op : k.ops)
      if (k.count > 1) {
        latent |= (op.recomputeModules & kRecomputeMlaUpProj) != 0;
        experts |= (op.recomputeModules & kRecomputeMoeAct) != 0;
      }
  std::vector<unsigned> sets;
  if (latent)
    sets.push_back(kRecomputeMlaUpProj);
  if (experts)
    sets.push_back(kRecomputeMoeAct);
  if (latent && experts)
    sets.push_back(kRecomputeMlaUpProj | kRecomputeMoeAct);
  return sets;
}

/// A candidate, and its variants: activation offload where it does not
/// fit, expert parallelism (plain and folded), Ulysses.
void PlanSearch::priceCandidate(SearchState &st, const Strategy &s,
                                const std::vector<Saver> &fitting,
                                const std::vector<double> &floors, int64_t dp) {
  int tp = s.tp, cp = s.cp;
  Priced first = priceSaving(st, s, fitting, floors);
  // Placement on an oversubscribed fabric: the replicas' stages next to
  // each other and the data-parallel groups outermost (Megatron-LM's
  // --use-tp-pp-dp-mapping), beside the default's pipeline outermost.
  if (oversubscribed && s.pp > 1 && dp > 1) {
    Strategy t = s;
    t.order = {"tp", "cp", "pp", "dp"};
    priceSaving(st, t, fitting, floors);
  }
  // Activations to host memory where the kept activations do
  // not fit (Transformer Engine's CPU offload; under full
  // recompute DeepSpeed's cpu_checkpointing): only where it
  // saves memory, as the PCIe transfers are rarely hidden.
  if (host && s.recompute != Recompute::Selective && first.shortBy > 0 &&
      first.shortBy != kNotPriced) {
    Strategy t = s;
    t.offloadActivations = true;
    priceSaving(st, t, fitting, floors);
  }
  // Expert parallelism for mixture-of-experts models: ep of
  // the dp x cp ranks that divides the experts.
  // Each also with DeepEP's dispatch (Megatron-Core's flex dispatcher),
  // where its group is the ep ranks alone (the experts whole or tp 1).
  auto withDispatchers = [&](Strategy e) {
    priceSaving(st, e, fitting, floors);
    if (routedTopK && (e.tp == 1 || e.expertsFolded())) {
      e.dispatcher = MoeDispatcher::DeepEP;
      priceSaving(st, e, fitting, floors);
    }
  };
  for (int ep = 2; ep <= maxExperts && ep <= dp * cp; ep *= 2)
    if (maxExperts % ep == 0 && (dp * cp) % ep == 0) {
      Strategy e = s;
      e.ep = ep;
      withDispatchers(e);
    }
  // Folded (etp 1, Megatron-Core's MoE parallel folding):
  // whole experts on ep of the tp x dp ranks.
  if (maxExperts > 1 && tp > 1 && cp == 1)
    for (int ep = 2; ep <= maxExperts && ep <= dp * tp; ep *= 2)
      if (maxExperts % ep == 0 && (dp * tp) % ep == 0) {
        Strategy e = s;
        e.ep = ep;
        e.etp = 1;
        withDispatchers(e);
      }
  // Ulysses where the heads split over cp (its all-to-all
  // against the ring's overlapped sends), inside a node: over
  // the network every rank's all-to-all crosses the cards,
  // where the ring's sends hide behind compute.
  if (cp > 1 && heads > 0 && (heads / tp) % cp == 0 &&
      int64_t(tp) * cp <= perDomain) {
    Strategy u = s;
    u.cpComm = CpComm::AllToAll;
    priceSaving(st, u, fitting, floors);
  }
}

/// The tensor-parallel degrees split over the host's cores (each worker
/// its own candidates and results, merged in a fixed order: the same
/// plans, counts and bytes however many workers ran).
SearchState PlanSearch::searchOnWorkers() {
  std::vector<int> tps;
  for (int tp : divisors(devices, perDomain))
    if (!(heads > 0 && heads % tp))
      tps.push_back(tp);
  unsigned workers = std::max(
      1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                             unsigned(std::max<size_t>(1, tps.size()))));
  workers = std::min(workers, 8u);
  std::vector<SearchState> states(workers);
  states[0].first = true;
  auto work = [&](unsigned t) {
    for (size_t i = t; i < tps.size(); i += workers) {
      states[t].tpIndex = int(i);
      searchTp(states[t], tps[i]);
    }
  };
  if (workers == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < workers; ++t)
      pool.emplace_back(work, t);
    for (std::thread &th : pool)
      th.join();
  }
  SearchState merged;
  merged.first = true;
  int refusalAt = INT32_MAX;
  for (SearchState &st : states)
    merge(merged, st, refusalAt);
  std::sort(merged.best.begin(), merged.best.end(),
            [this](const StepResult &x, const StepResult &y) {
              return better(x, y);
            });
  if (int(merged.best.size()) > std::max(1, o.topK))
    merged.best.resize(std::max(1, o.topK));
  return merged;
}

void PlanSearch::merge(SearchState &merged, SearchState &st, int &refusalAt) {
  if (!st.internal.empty() && merged.internal.empty())
    merged.internal = st.internal;
  merged.priced += st.priced;
  merged.pruned += st.pruned;
  merged.simulated += st.simulated;
  merged.scheduled += st.scheduled;
  merged.refused += st.refused;
  for (StepResult &r : st.best)
    merged.best.push_back(std::move(r));
  for (StepResult &r : st.fullyRecomputing)
    merged.fullyRecomputing.push_back(std::move(r));
  if (st.haveClosest)
    keepCloser(merged.closest, merged.haveClosest, st.closest);
  if (st.haveHostClosest)
    keepCloser(merged.hostClosest, merged.haveHostClosest, st.hostClosest);
  if (st.floorShortfall < merged.floorShortfall ||
      (st.floorShortfall == merged.floorShortfall &&
       st.floorWhere < merged.floorWhere)) {
    merged.floorShortfall = st.floorShortfall;
    merged.floorNeed = st.floorNeed;
    merged.floorWhere = st.floorWhere;
  }
  if (!st.refusal.empty() && st.refusalTpIndex < refusalAt) {
    refusalAt = st.refusalTpIndex;
    merged.refusal = st.refusal;
  }
  for (Deferred &d : st.deferred)
    merged.deferred.push_back(std::move(d));
}

/// The deferred candidates, those that might be fastest first: a later
/// saver is tried only if what it saves over the one priced before (their
/// floors' difference: weights, gradients, optimizer state; the
/// activations are the same) covers that one's shortfall, and (by time)
/// only while its least step could still enter the plans kept.
void PlanSearch::priceDeferred(SearchState &merged) {
  std::vector<Deferred> &deferred = merged.deferred;
  std::vector<std::string> keys;
  std::vector<size_t> order(deferred.size());
  for (size_t i = 0; i < deferred.size(); ++i) {
    order[i] = i;
    keys.push_back(deferred[i].s.str());
  }
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (deferred[x].first.floorS != deferred[y].first.floorS)
      return deferred[x].first.floorS < deferred[y].first.floorS;
    return keys[x] < keys[y];
  });
  for (size_t k : order) {
    Deferred &d = deferred[k];
    Priced last = d.first;
    double at = d.floors[0];
    for (size_t i = 1; i < d.savers.size(); ++i) {
      if (last.shortBy == kNotPriced || at - d.floors[i] < last.shortBy)
        continue;
      // Not one that recomputes every layer: its partial recompute
      // (tried last) may be faster, as priceOne's bar spares it too.
      bool recomputesAll =
          d.s.recompute == Recompute::Full && d.s.recomputeLayers == 0;
      if (o.objective == Objective::Time && !recomputesAll &&
          int(merged.best.size()) >= std::max(1, o.topK) &&
          last.floorS > objectiveScore(merged.best.back(), o.objective))
        break;
      Strategy t = d.s;
      t.zeroStage = d.savers[i].zero;
      t.offloadOptimizer = d.savers[i].offload;
      t.chunkParams = d.savers[i].chunks ? kPatrickStarChunkParams : 0;
      if (t.chunkParams > 0 && (t.microBatches() > 1 || t.offloadActivations))
        continue; // PatrickStar accumulates no gradients, offloads itself
      last = price(merged, t);
      at = d.floors[i];
      priceZeroBubble(merged, t, last);
      if (last.shortBy <= 0)
        break;
    }
  }
}

/// Partial recompute of the best candidates that fit only recomputing
/// every layer: per layer kind, and (Megatron's block method) the fewest
/// layers per chunk that still fit, found by bisection (each layer
/// recomputed saves about the same memory and costs the same time). Those
/// recomputing none fit and were priced already.
void PlanSearch::refinePartialRecompute(SearchState &merged) {
  std::vector<StepResult> &full = merged.fullyRecomputing;
  std::sort(full.begin(), full.end(), recomputingLess);
  full.erase(std::unique(full.begin(), full.end(),
                         [](const StepResult &x, const StepResult &y) {
                           return x.strategy.str() == y.strategy.str();
                         }),
             full.end());
  if (int(full.size()) > kPartialRecomputeCandidates)
    full.resize(kPartialRecomputeCandidates);
  std::set<std::string> refined; // each variant priced once
  auto priceVariant = [&](const Strategy &t) {
    if (!refined.insert(t.str()).second)
      return Priced{};
    return price(merged, t);
  };
  int64_t body = 0; // the repeated layers of the largest run
  for (const LayerRun &run : w.layers)
    body = std::max(body, run.count);
  // Models with several repeated kinds (an encoder and a decoder): full
  // recompute of one kind alone, the other keeping its activations.
  std::vector<std::string> repeatedKinds;
  for (const LayerKind &k : w.kinds)
    if (k.count > 1 && !k.noBackward)
      repeatedKinds.push_back(k.name);
  for (const StepResult &r : full) {
    const Strategy &s = r.strategy;
    if (repeatedKinds.size() > 1)
      for (const std::string &kind : repeatedKinds) {
        Strategy t = s;
        t.recomputeKinds = {kind};
        if (frameworkRuns(t))
          priceVariant(t);
      }
    // The saver it fits with, and each that shards more (ZeRO-2 without
    // pipeline stages, ZeRO-3): the memory such a saver frees lets fewer
    // layers recompute, which may pay for its collectives.
    std::vector<int> zeros = {s.zeroStage};
    if (!s.offloadOptimizer && s.chunkParams == 0 && s.dp > 1)
      for (int z = s.zeroStage + 1; z <= 3; ++z)
        if (z == 3 || (z == 2 && s.pp == 1))
          zeros.push_back(z);
    int64_t chunks = int64_t(s.pp) * s.virtualStages;
    for (int zero : zeros) {
      int lo = 1, hi = int((body + chunks - 1) / chunks) - 1;
      while (lo <= hi) {
        int mid = (lo + hi) / 2;
        Strategy t = s;
        t.zeroStage = zero;
        t.recomputeLayers = mid;
        if (!frameworkRuns(t))
          break;
        if (priceVariant(t).shortBy <= 0)
          hi = mid - 1;
        else
          lo = mid + 1;
      }
    }
  }
}

/// Why no plan was kept, in one line: the memory floor, the framework's
/// refusal, nothing applying, or the closest candidate's shortfall.
llvm::Error PlanSearch::noPlan(const SearchState &merged,
                               const PlanResult &result) const {
  const StepResult &closest = merged.closest;
  bool haveClosest = merged.haveClosest;
  const std::string &floorWhere = merged.floorWhere, &refusal = merged.refusal;
  double floorNeed = merged.floorNeed, floorShortfall = merged.floorShortfall;
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
    return err(
        "plan: --framework " + o.framework +
        " runs none of the strategies searched; the first refused: " + refusal);
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
  // Where the optimizer on the host would have fitted the devices, the
  // host memory is what stops it.
  if (merged.haveHostClosest)
    return err("plan: the model fits on the cluster under no strategy; "
               "with the model data on the host (" +
               merged.hostClosest.strategy.str() + ") the devices fit, but " +
               merged.hostClosest.doesNotFit);
  return err(buf);
}

llvm::Expected<PlanResult>
PlanSearch::run(PlanResult &result,
                std::chrono::steady_clock::time_point start) {
  devices = c.numDevices();
  perDomain = c.groupOf(0).scaleUpDevices();
  gbs = o.globalBatch > 0 ? o.globalBatch : 1024;
  heads = w.attentionHeads();
  layers = w.totalLayers();
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
  batchable =
      std::any_of(w.kinds.begin(), w.kinds.end(),
                  [](const LayerKind &k) { return bool(k.batchSplitLayout); });
  chooseSavers();
  maxExperts = w.experts();
  routedTopK = maxExperts > 1;
  for (const LayerKind &k : w.kinds)
    routedTopK &= k.experts < 2 || k.expertTopK > 0;
  std::vector<std::pair<std::string, double>> &phases =
      result.timings.phaseCpuS;
  double cpu = processCpuSeconds();
  auto phase = [&](const char *name) {
    double now = processCpuSeconds();
    phases.emplace_back(name, now - cpu);
    cpu = now;
  };
  SearchState merged = searchOnWorkers();
  phase("search: candidates on the workers");
  if (!merged.internal.empty())
    return err("plan: " + merged.internal);
  priceDeferred(merged);
  phase("search: deferred memory savers");
  refinePartialRecompute(merged);
  phase("search: partial recompute");
  if (!merged.internal.empty())
    return err("plan: " + merged.internal);
  result.candidatesPriced = merged.priced;
  result.candidatesPruned = merged.pruned;
  result.candidatesRefused = merged.refused;
  result.timings.simulated = merged.simulated;
  result.timings.scheduled = merged.scheduled;
  result.searchS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (merged.best.empty())
    return noPlan(merged, result);
  // The plans kept, priced in full (the breakdown's pipeline transfers). A
  // plan that priced at the search's detail prices in full: an error here
  // is the simulator's own.
  for (StepResult &r : merged.best) {
    auto full = simulateStep(w, c, r.strategy, a);
    if (!full)
      return err("plan: " + llvm::toString(full.takeError()) + " (pricing " +
                 r.strategy.str() + ")");
    r = std::move(*full);
  }
  result.top = std::move(merged.best);
  phase("search: the plans kept, priced in full");
  if (o.progress)
    o.progress(result.candidatesPriced, &result.top.front());
  return std::move(result);
}

double processCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
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
  // The search reads the cluster the result keeps (the budget's nodes).
  return PlanSearch(w, result.cluster, o).run(result, start);
}

} // namespace orrery
