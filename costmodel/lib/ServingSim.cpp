//===- ServingSim.cpp - requests through a serving engine, step by step ---===//
//
// docs/serving.md, "The simulator".
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/ServingSim.h"
#include "orrery/CostModel/KvBlockPool.h"
#include "orrery/CostModel/PrintableLine.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <set>
#include <sstream>

namespace orrery {

/// Errors echo what the user wrote: one printable line whatever it held.
static llvm::Error simError(const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(m));
}

static bool parseInt(llvm::StringRef v, int64_t &out) {
  return !v.getAsInteger(10, out);
}
static bool parseDouble(llvm::StringRef v, double &out) {
  return !v.getAsDouble(out) && std::isfinite(out);
}

llvm::Expected<ServingWorkload>
ServingWorkload::parse(const std::string &text) {
  ServingWorkload w;
  w.name = text;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, ',', -1, false);
  if (parts.empty())
    return simError(
        "workload: empty (chat, reasoning, summarize, or "
        "isl=..,osl=..,requests=..,rate=..|concurrency=..|offline)");
  // Each setting once: a preset or isl/osl, one arrival (rate,
  // concurrency or offline); a second is a conflict, not an override.
  std::string arrivalSet, lengthsSet;
  std::set<std::string> seen;
  for (llvm::StringRef part : parts) {
    part = part.trim();
    auto [key, value] = part.split('=');
    std::string k = key.trim().lower();
    value = value.trim();
    auto bad = [&](const char *why) {
      return simError("workload: " + part.str() + ": " + why);
    };
    bool arrival = k == "rate" || k == "concurrency" || k == "offline";
    bool preset = k == "chat" || k == "reasoning" || k == "summarize";
    if (!seen.insert(k).second)
      return simError("workload: " + k + " given twice");
    if (arrival && !arrivalSet.empty())
      return simError("workload: " + part.str() + " conflicts with " +
                      arrivalSet +
                      " (one arrival: rate, concurrency or offline)");
    if ((preset || k == "isl" || k == "osl") && !lengthsSet.empty() &&
        (preset || lengthsSet.find('=') == std::string::npos))
      return simError("workload: " + part.str() + " conflicts with " +
                      lengthsSet + " (a preset, or isl and osl)");
    if (arrival)
      arrivalSet = part.str();
    if (preset || k == "isl" || k == "osl")
      lengthsSet = part.str();
    if (k == "chat" || k == "reasoning" || k == "summarize") {
      if (!value.empty())
        return bad("a preset takes no value");
      w.inputTokens = k == "summarize" ? 8192 : 1024;
      w.outputTokens = k == "chat" ? 256 : k == "reasoning" ? 16384 : 512;
    } else if (k == "offline") {
      if (!value.empty())
        return bad("takes no value");
      w.arrival = Arrival::Offline;
    } else if (k == "isl_sigma" || k == "osl_sigma") {
      double v = 0;
      if (!parseDouble(value, v) || v < 0 || v > 3)
        return bad("expected the log-length's standard deviation, 0 to 3");
      (k == "isl_sigma" ? w.inputSigma : w.outputSigma) = v;
    } else if (k == "prefix" || k == "prefix_groups") {
      int64_t v = 0;
      if (!parseInt(value, v) || v < 1 || v > (int64_t(1) << 30))
        return bad("expected a positive integer");
      (k == "prefix" ? w.prefixTokens : w.prefixGroups) = v;
    } else if (k == "isl" || k == "osl" || k == "requests" ||
               k == "concurrency" || k == "seed") {
      int64_t v = 0;
      if (!parseInt(value, v) || v < (k == "seed" ? 0 : 1))
        return bad(k == "seed" ? "expected a non-negative integer"
                               : "expected a positive integer");
      if (k == "isl")
        w.inputTokens = v;
      else if (k == "osl")
        w.outputTokens = v;
      else if (k == "requests")
        w.requests = v;
      else if (k == "seed")
        w.seed = uint64_t(v);
      else {
        if (v > (1 << 24))
          return bad("more than 16M outstanding requests");
        w.concurrency = int(v);
        w.arrival = Arrival::Concurrency;
      }
    } else if (k == "rate") {
      double v = 0;
      if (!parseDouble(value, v) || v <= 0)
        return bad("expected a positive number of requests per second");
      w.ratePerS = v;
      w.arrival = Arrival::Poisson;
    } else {
      return simError("workload: unknown key '" + key.str() +
                      "' (chat, reasoning, summarize, isl, osl, requests, "
                      "rate, concurrency, offline, seed, prefix, "
                      "prefix_groups, isl_sigma, osl_sigma)");
    }
  }
  if (w.requests > 10'000'000)
    return simError("workload: requests=" + std::to_string(w.requests) +
                    ": more than 10 million");
  if (w.inputTokens > (int64_t(1) << 30) || w.outputTokens > (int64_t(1) << 30))
    return simError("workload: isl and osl must be below 2^30 tokens");
  if (w.prefixTokens >= w.inputTokens)
    return simError("workload: prefix=" + std::to_string(w.prefixTokens) +
                    ": the shared prefix must be shorter than the prompt (isl=" +
                    std::to_string(w.inputTokens) + ")");
  if (seen.count("prefix_groups") && w.prefixTokens == 0)
    return simError("workload: prefix_groups without prefix= (the shared "
                    "prefix's length)");
  return w;
}

static uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<ServingRequest> ServingWorkload::requestsToServe() const {
  if (arrival == Arrival::Trace)
    return trace;
  std::vector<ServingRequest> out(static_cast<size_t>(requests));
  // splitmix64: the same arrivals on every platform; the shared prefixes
  // from a stream of their own (the same arrivals with and without them).
  uint64_t state = seed, prefixState = seed ^ 0x5bd1e9955bd1e995ull,
           lengthState = seed ^ 0x2545f4914f6cdd1dull;
  auto next = [&]() { return splitmix64(state); };
  auto nextPrefix = [&]() { return splitmix64(prefixState); };
  // A log-normal length of mean `mean`: exp(sigma Z - sigma^2 / 2) times
  // it, Z standard normal (Box-Muller), rounded, at least `least`.
  auto length = [&](int64_t mean, double sigma, int64_t least) {
    if (sigma <= 0)
      return mean;
    double u1 = (double(splitmix64(lengthState) >> 11) + 0.5) * 0x1.0p-53;
    double u2 = double(splitmix64(lengthState) >> 11) * 0x1.0p-53;
    double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
    double l = std::round(double(mean) * std::exp(sigma * z - sigma * sigma / 2));
    return int64_t(std::clamp(l, double(least), double(int64_t(1) << 30)));
  };
  double t = 0;
  for (ServingRequest &r : out) {
    r.inputTokens = length(inputTokens, inputSigma, prefixTokens + 1);
    r.outputTokens = length(outputTokens, outputSigma, 1);
    if (prefixTokens > 0) {
      r.prefixId = 1 + nextPrefix() % uint64_t(std::max<int64_t>(1, prefixGroups));
      r.prefixTokens = prefixTokens;
    }
    if (arrival == Arrival::Poisson) {
      double u = (double(next() >> 11) + 0.5) * 0x1.0p-53;
      t += -std::log(u) / ratePerS;
      r.arrivalS = t;
    }
  }
  return out;
}

bool ServingWorkload::sharesContent() const {
  if (prefixTokens > 0)
    return true;
  for (const ServingRequest &r : trace)
    if (r.prefixId != 0 || r.previousTurn >= 0 || r.hashIds)
      return true;
  return false;
}

int64_t ServingWorkload::longestRequestTokens() const {
  if (arrival != Arrival::Trace && inputSigma <= 0 && outputSigma <= 0)
    return inputTokens + outputTokens;
  int64_t m = 0;
  for (const ServingRequest &r : requestsToServe())
    m = std::max(m, r.inputTokens + r.outputTokens);
  return m;
}

/// The mean of a request field over the trace (the fixed value else).
static double meanOf(const ServingWorkload &w, int64_t ServingRequest::*f,
                     int64_t fixed) {
  if (w.arrival != ServingWorkload::Arrival::Trace)
    return double(fixed);
  double s = 0;
  for (const ServingRequest &r : w.trace)
    s += double(r.*f);
  return w.trace.empty() ? 0 : s / double(w.trace.size());
}

double ServingWorkload::meanInput() const {
  return meanOf(*this, &ServingRequest::inputTokens, inputTokens);
}

double ServingWorkload::meanOutput() const {
  return meanOf(*this, &ServingRequest::outputTokens, outputTokens);
}

SchedulerLimits engineDefaults(ServingEngine engine, const DeviceSpec &device,
                               int tp, int pp, double weightBytesPerDevice,
                               double kvBytesPerTokenPerDevice,
                               double meanInput, double meanOutput) {
  SchedulerLimits l;
  if (engine == ServingEngine::Vllm) {
    bool big =
        device.memoryBytes >= 70.0 * double(1ull << 30) &&
        llvm::StringRef(device.name).lower().find("a100") == std::string::npos;
    l.maxRequests = big ? 1024 : 256;
    l.maxBatchedTokens = big ? 8192 : 2048;
    l.blockTokens = 16;
    return l;
  }
  // trtllm-bench's estimate: all devices' memory less the engine (the
  // weights), 0.95 of it for the cache, over the mean request.
  int n = tp * pp;
  double available = (device.memoryBytes - weightBytesPerDevice) * n * 0.95;
  double perRequest =
      kvBytesPerTokenPerDevice * n * std::max(1.0, meanInput + meanOutput);
  double requests = perRequest > 0 ? std::max(0.0, available) / perRequest : 0;
  double rawBs = std::min(requests, 4096.0) / pp;
  double rawTokens =
      std::min(rawBs * (1 + meanInput / std::max(1.0, meanOutput)), 32768.0);
  auto roundUp = [](double v, double step) {
    return step * std::ceil(v / step);
  };
  double bs = rawBs < 256    ? std::max(64.0, roundUp(rawBs, 32))
              : rawBs < 1024 ? roundUp(rawBs, 128)
                             : roundUp(rawBs, 256);
  double tokens = rawTokens < 4096   ? std::max(2048.0, roundUp(rawTokens, 256))
                  : rawTokens < 8192 ? roundUp(rawTokens, 512)
                                     : roundUp(rawTokens, 1024);
  l.maxRequests = int64_t(bs);
  l.maxBatchedTokens = int64_t(tokens);
  l.blockTokens = 64;
  return l;
}

namespace {

struct Live {
  ServingRequest req;
  int64_t target = 0;    ///< tokens to prefill (prompt, and output so far
                         ///< after a preemption)
  int64_t computed = 0;  ///< tokens whose K and V are in the cache
  int64_t generated = 0; ///< output tokens sampled
  int64_t blocks = 0; ///< private blocks (cached ones in cachedKeys)
  /// The cached blocks it holds (KvBlockPool), in token order, and the
  /// full blocks it has offered the cache (hits and its own).
  std::vector<uint64_t> cachedKeys;
  int64_t offered = 0;
  bool scheduledBefore = false;
  /// Speculative decoding: the fraction of a token the steps so far
  /// yielded beyond the whole ones taken.
  double credit = 0;
  /// KV offload: when the blocks it found on the host are loaded.
  double readyS = 0;
  int64_t held() const { return blocks + int64_t(cachedKeys.size()); }
  double firstTokenS = -1, arrivalS = 0;
  double lastTokenS = -1; ///< when its latest output token came
  bool inFlight = false, running = false, done = false;
  int64_t scheduled = 0; ///< tokens in the step in flight
};

/// The gaps between consecutive output tokens, as a histogram of
/// log-spaced bins (0.5 % wide, 0.1 µs to 10^4 s): a run of coalesced
/// decode steps adds its gaps as a spread, not one by one, and 10,000
/// requests' million tokens take no more room than ten.
class TokenGaps {
public:
  TokenGaps() : bins_(size_t(std::ceil(std::log(kMax / kMin) / kLog)) + 1) {}
  /// `count` gaps spread evenly over [lo, hi] (one value when lo == hi).
  void add(double lo, double hi, double count) {
    if (count <= 0)
      return;
    lo = std::max(lo, 0.0);
    hi = std::max(hi, lo);
    sum_ += count * (lo + hi) / 2;
    total_ += count;
    size_t a = bin(lo), b = bin(hi);
    if (a == b) {
      bins_[a] += count;
      return;
    }
    // Each bin the span crosses gets its share of the span's width.
    double width = hi - lo;
    for (size_t i = a; i <= b; ++i) {
      double from = std::max(lo, edge(i)), to = std::min(hi, edge(i + 1));
      if (to > from)
        bins_[i] += count * (to - from) / width;
    }
  }
  void merge(const TokenGaps &o) {
    for (size_t i = 0; i < bins_.size(); ++i)
      bins_[i] += o.bins_[i];
    sum_ += o.sum_;
    total_ += o.total_;
  }
  LatencyStats stats() const {
    LatencyStats s;
    if (total_ <= 0)
      return s;
    s.meanS = sum_ / total_;
    // A percentile is read inside its bin, linearly.
    auto pct = [&](double p) {
      double want = p * total_, seen = 0;
      for (size_t i = 0; i < bins_.size(); ++i) {
        if (bins_[i] <= 0)
          continue;
        if (seen + bins_[i] >= want) {
          double f = std::clamp((want - seen) / bins_[i], 0.0, 1.0);
          return edge(i) + f * (edge(i + 1) - edge(i));
        }
        seen += bins_[i];
      }
      return edge(bins_.size());
    };
    s.p50S = pct(0.50);
    s.p90S = pct(0.90);
    s.p99S = pct(0.99);
    return s;
  }

private:
  /// kLog = ln 1.005, a bin's width (std::log is not constexpr in C++17).
  static constexpr double kMin = 1e-7, kMax = 1e4, kLog = 0.00498754151103897;
  size_t bin(double v) const {
    if (v <= kMin)
      return 0;
    size_t i = size_t(std::log(v / kMin) / kLog) + 1;
    return std::min(i, bins_.size() - 1);
  }
  /// The lower edge of bin i (bin 0 holds everything up to kMin).
  double edge(size_t i) const {
    return i == 0 ? 0.0 : kMin * std::exp(kLog * double(i - 1));
  }
  std::vector<double> bins_;
  double sum_ = 0, total_ = 0;
};

struct Finished {
  int64_t id;
  double ttft, tpot, e2e, end;
  bool hasTpot;
};

class Replica {
public:
  Replica(const StepPricer &p, const SchedulerLimits &l, int index, int lanes,
          std::vector<StepRecord> *trace, TokenGaps &gaps)
      : pricer(p), limits(l), index(index), lanes(lanes), trace(trace),
        gaps(gaps), pool(l.kvCacheTokens / l.blockTokens,
                         l.prefixCaching && p.window() <= 0) {
    const Speculation &s = p.speculation();
    drafts = s.on() ? s.k : 0;
    perStep = s.tokensPerStep();
    // vLLM keeps room for the next step's drafts beyond the verified ones
    // (num_lookahead_tokens, for a drafter on the device); TensorRT-LLM
    // reserves max_draft_len with the request.
    lookahead = s.draftsOnDevice() || trtllm() ? drafts : 0;
    pool.setHostTier(l.prefixCaching ? l.hostCacheBlocks : 0);
  }

  /// Serves `reqs` (arrival order); `concurrency` > 0 issues them as that
  /// many slots free instead.
  void run(std::vector<ServingRequest> reqs, int concurrency,
           std::vector<Finished> &out, ServingResult &r);

private:
  bool trtllm() const { return pricer.engine() == ServingEngine::TensorRtLlm; }
  int64_t blocksFor(int64_t tokens) const {
    double held = pricer.tokensHeld(double(tokens), limits.blockTokens);
    return int64_t(std::ceil(held / double(limits.blockTokens)));
  }
  void preempt(size_t id);
  void letGo(Live &v);
  int64_t cacheHits(const Live &v, int64_t *idle) const;
  int64_t admissionBlocks(const Live &v, int64_t hits, int64_t n) const;
  void offerBlocks(Live &v, bool all = false);
  bool loadFromHost(size_t id, int64_t hits, int64_t idle);
  void admitLoaded();
  double commonPrefix(const std::vector<size_t> &members) const;
  bool admissible(const Live &v) const;
  bool schedule(StepBatch &b, std::vector<size_t> &members);
  void admit(const std::vector<ServingRequest> &reqs);
  void finishRequest(size_t id, double endS);
  void finishFlight();
  StepBatch later(const StepBatch &b, const std::vector<size_t> &members,
                  int64_t steps) const;
  int64_t coalescedSteps(const StepBatch &b, const std::vector<size_t> &members,
                         const StepTime &t, double start);
  void launch(StepBatch b, std::vector<size_t> members, const StepTime &t);

  /// Whole tokens `steps` decode steps yield `v` (speculative decoding:
  /// tokensPerStep() on average a step, fractions carried), up to its
  /// output; one a step without it.
  int64_t yield(Live &v, int64_t steps) const;
  /// Cache slots a generating request needs for the step after `steps`
  /// more: its tokens, the new one, the drafts it verifies and the
  /// lookahead.
  int64_t decodeSlots(const Live &v, int64_t steps) const {
    double ahead = std::max(0.0, double(steps) * perStep - v.credit);
    return v.computed + int64_t(std::ceil(ahead - 1e-9)) + 1 + drafts +
           lookahead;
  }

  const StepPricer &pricer;
  SchedulerLimits limits;
  int drafts = 0, lookahead = 0; ///< speculative decoding's k and room
  double perStep = 1;
  int index, lanes;
  std::vector<StepRecord> *trace;
  TokenGaps &gaps;
  KvBlockPool pool;
  std::vector<Live> live;
  std::vector<size_t> running; ///< admission order
  std::deque<size_t> waiting;
  /// Requests whose prompt's blocks are coming from the host tier.
  std::vector<size_t> loading;
  int64_t preemptions = 0;

  // One run's state (run()).
  struct InFlight {
    double end;
    std::vector<size_t> members;
    /// When it started, and its first and last steps' times (a coalesced
    /// run of `steps` decode steps; one step: both the same).
    double start = 0, firstS = 0, lastS = 0;
    int64_t steps = 1;
  };
  std::deque<InFlight> flights;
  // One step at a time on this lane (a pipeline's other lanes are
  // Replicas of their own).
  static constexpr int kLanes = 1;
  int concurrency = 0;
  std::vector<Finished> *out = nullptr;
  ServingResult *res = nullptr;
  size_t nextArrival = 0, doneCount = 0;
  double now = 0, nextStart = 0, kvTimeSum = 0;
};

/// A request gives back its blocks: the private ones free, the cached
/// ones to the cache's eviction queue.
void Replica::letGo(Live &v) {
  pool.give(v.blocks);
  v.blocks = 0;
  pool.release(v.cachedKeys);
  v.cachedKeys.clear();
  v.offered = 0;
}

/// Blocks at the start of a request about to be scheduled from nothing
/// that the prefix cache holds (vLLM computes at least the prompt's last
/// token); `idle`: how many of them no request holds.
int64_t Replica::cacheHits(const Live &v, int64_t *idle) const {
  *idle = 0;
  if (!pool.caching() || v.computed > 0 || v.req.cachedTokens > 0)
    return 0;
  return pool.lookup(
      [&](int64_t i) { return requestBlockKey(v.req, i); },
      (v.target - 1) / limits.blockTokens, idle);
}

/// New blocks a waiting request takes to compute `n` tokens after its
/// `hits` cached blocks: TensorRT-LLM reserves the whole request at once,
/// vLLM the tokens it computes.
int64_t Replica::admissionBlocks(const Live &v, int64_t hits,
                                 int64_t n) const {
  int64_t start = v.computed + hits * limits.blockTokens;
  int64_t ahead = start >= v.target ? lookahead : 0;
  return (trtllm() ? blocksFor(v.req.inputTokens + v.req.outputTokens +
                               lookahead)
                   : blocksFor(start + n + ahead)) -
         hits - v.held();
}

/// The full blocks a step computed are offered to the prefix cache: each
/// one whose content is not cached yet becomes cached (still held by the
/// request). A request sharing nothing offers them only when preempted
/// (`all`): only it can find them again.
void Replica::offerBlocks(Live &v, bool all) {
  if (!pool.caching() || (!v.req.blockKeys && !all))
    return;
  int64_t full = v.computed / limits.blockTokens;
  if (!all) // only blocks another request could find
    full = std::min(full, int64_t(v.req.blockKeys->size()));
  for (; v.offered < full; ++v.offered) {
    uint64_t key = requestBlockKey(v.req, v.offered);
    if (v.blocks > 0 && pool.publish(key)) {
      --v.blocks;
      v.cachedKeys.push_back(key);
    }
  }
}

int64_t Replica::yield(Live &v, int64_t steps) const {
  int64_t left = v.req.outputTokens - v.generated;
  if (drafts == 0)
    return std::min(steps, left);
  v.credit += double(steps) * perStep;
  int64_t whole = int64_t(std::floor(v.credit + 1e-9));
  v.credit = std::max(0.0, v.credit - double(whole));
  return std::min(whole, left);
}

/// KV offload: the blocks of the waiting request `id` found on the host
/// after its `hits` on the device are loaded before it runs (the request
/// waits for them aside, as vLLM's connector's requests do, while others
/// run): device blocks for them now, the copy at the host link's speed.
/// False when the device has no room for them.
bool Replica::loadFromHost(size_t id, int64_t hits, int64_t idle) {
  Live &v = live[id];
  auto key = [&](int64_t i) { return requestBlockKey(v.req, i); };
  int64_t onHost =
      pool.hostLookup(key, hits, (v.target - 1) / limits.blockTokens);
  if (onHost == 0)
    return true;
  if (onHost > pool.available() - idle)
    return false;
  waiting.pop_front();
  for (int64_t i = 0; i < hits; ++i) {
    v.cachedKeys.push_back(key(i));
    pool.hold(v.cachedKeys.back());
  }
  pool.take(onHost);
  for (int64_t i = hits; i < hits + onHost; ++i)
    if (pool.publish(key(i)))
      v.cachedKeys.push_back(key(i));
    else
      ++v.blocks; // the same content cached meanwhile: a private copy
  pool.countHostLoads(onHost);
  v.offered = hits + onHost;
  v.computed = (hits + onHost) * limits.blockTokens;
  if (!v.scheduledBefore)
    res->cachedPromptTokens += v.computed;
  v.scheduledBefore = true;
  v.readyS = now + double(onHost) * limits.hostLoadSecondsPerBlock;
  loading.push_back(id);
  return true;
}

/// Requests whose blocks have arrived from the host go back to the head of
/// the queue, the earliest first.
void Replica::admitLoaded() {
  std::vector<size_t> ready;
  for (size_t i = 0; i < loading.size();)
    if (live[loading[i]].readyS <= now) {
      ready.push_back(loading[i]);
      loading.erase(loading.begin() + long(i));
    } else {
      ++i;
    }
  std::sort(ready.begin(), ready.end(), [&](size_t a, size_t b) {
    return live[a].readyS > live[b].readyS;
  });
  for (size_t id : ready)
    waiting.push_front(id);
}

/// Whether the scheduler could start `v`'s whole remaining prompt now.
bool Replica::admissible(const Live &v) const {
  int64_t idle = 0, hits = cacheHits(v, &idle);
  int64_t start = v.computed + hits * limits.blockTokens;
  int64_t n = std::max<int64_t>(1, v.target - start);
  return admissionBlocks(v, hits, n) <= pool.available() - idle;
}

/// The tokens at the start of the cache that every running request holds
/// and every request of the step has computed past (vLLM's common prefix
/// blocks, for cascade attention).
double Replica::commonPrefix(const std::vector<size_t> &members) const {
  if (!pool.caching() || running.empty())
    return 0;
  const Live &first = live[running.front()];
  int64_t blocks = 0;
  for (; blocks < int64_t(first.cachedKeys.size()); ++blocks) {
    uint64_t key = first.cachedKeys[size_t(blocks)];
    if (key != requestBlockKey(first.req, blocks) ||
        pool.holders(key) != int64_t(running.size()))
      break;
  }
  int64_t tokens = blocks * limits.blockTokens;
  for (size_t id : members)
    tokens = std::min(tokens, live[id].computed);
  return double(tokens / limits.blockTokens * limits.blockTokens);
}

void Replica::preempt(size_t id) {
  Live &v = live[id];
  offerBlocks(v, true);
  letGo(v);
  v.computed = 0;
  v.target = v.req.inputTokens + v.generated;
  v.running = false;
  running.erase(std::find(running.begin(), running.end(), id));
  waiting.push_front(id);
  ++preemptions;
}

bool Replica::schedule(StepBatch &b, std::vector<size_t> &members) {
  int64_t budget = limits.maxBatchedTokens;
  double window = double(pricer.window());
  bool preempted = false;
  auto add = [&](Live &v, int64_t n) {
    v.scheduled = n;
    v.inFlight = true;
    bool prefill = v.computed < v.target;
    if (prefill) {
      b.prefillTokens += n;
      ++b.prefillRequests;
      b.addPrefill(double(v.computed), double(n), window);
      if (v.computed + n >= v.target)
        ++b.sampled;
    } else {
      ++b.decodeRequests;
      b.draftTokens += drafts;
      b.addDecode(double(v.computed + 1), window);
      ++b.sampled;
      v.scheduled = 1; // one step
    }
    budget -= n;
  };
  // The running requests first, oldest first: a decode token each, or the
  // next chunk of a prompt.
  for (size_t i = 0; i < running.size() && budget > 0; ++i) {
    size_t id = running[i];
    Live &v = live[id];
    if (v.inFlight)
      continue;
    bool decoding = v.computed >= v.target;
    int64_t n = decoding ? 1 + drafts : std::min(v.target - v.computed, budget);
    if (decoding && n > budget)
      break; // a request's token and its drafts go together
    int64_t need = trtllm() ? 0
                   : decoding ? blocksFor(decodeSlots(v, 0)) - v.held()
                              : blocksFor(v.computed + n) - v.held();
    bool self = false;
    while (need > pool.available()) {
      // vLLM: the newest running request gives its blocks back (and is
      // recomputed later), down to this one.
      size_t victim = size_t(-1);
      for (size_t j = running.size(); j-- > 0;)
        if (!live[running[j]].inFlight) {
          victim = running[j];
          break;
        }
      if (victim == size_t(-1))
        break;
      self = victim == id;
      preempt(victim);
      preempted = true;
      if (self)
        break;
    }
    if (self || need > pool.available()) {
      if (!self)
        break;
      --i; // `running` lost this entry
      continue;
    }
    pool.take(need);
    v.blocks += need;
    members.push_back(id);
    add(v, n);
  }
  // Then new requests, first come first served, while the budget, the
  // request cap and the cache allow (vLLM admits none in a step that
  // preempted).
  while (!preempted && budget > 0 && !waiting.empty() &&
         int64_t(running.size()) < limits.maxRequests) {
    size_t id = waiting.front();
    Live &v = live[id];
    // A prompt after what the prefix cache holds of it (or its next
    // chunk), or the first decode of a request whose prompt was prefilled
    // elsewhere.
    int64_t idle = 0, hits = cacheHits(v, &idle);
    if (pool.hostCapacity() > 0 && v.computed == 0 &&
        v.req.cachedTokens == 0) {
      int64_t moved = int64_t(waiting.size());
      if (!loadFromHost(id, hits, idle))
        break;
      if (int64_t(waiting.size()) < moved)
        continue; // it waits for its blocks from the host
    }
    int64_t start = v.computed + hits * limits.blockTokens;
    int64_t n =
        start < v.target ? std::min(v.target - start, budget) : 1 + drafts;
    if (n > budget)
      break;
    int64_t need = admissionBlocks(v, hits, n);
    if (need > pool.available() - idle)
      break;
    waiting.pop_front();
    for (int64_t i = 0; i < hits; ++i) {
      v.cachedKeys.push_back(requestBlockKey(v.req, i));
      pool.hold(v.cachedKeys.back());
    }
    v.offered = hits;
    v.computed = start;
    if (!v.scheduledBefore)
      res->cachedPromptTokens += start - v.req.cachedTokens;
    v.scheduledBefore = true;
    pool.take(need);
    v.blocks += need;
    v.running = true;
    running.push_back(id);
    members.push_back(id);
    add(v, n);
  }
  b.commonPrefixKeys = commonPrefix(members);
  return !members.empty();
}

void Replica::admit(const std::vector<ServingRequest> &reqs) {
  live.resize(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    live[i].req = reqs[i];
    live[i].target = reqs[i].inputTokens;
    live[i].arrivalS = reqs[i].arrivalS;
    if (reqs[i].cachedTokens > 0) {
      // Prefilled elsewhere: the prompt's cache came with it, and its
      // first token.
      live[i].computed = std::min(reqs[i].cachedTokens, reqs[i].inputTokens);
      live[i].generated = 1;
      live[i].firstTokenS = reqs[i].firstTokenS;
      live[i].lastTokenS = reqs[i].firstTokenS;
    }
  }
  if (concurrency > 0) {
    for (; nextArrival < live.size() && nextArrival < size_t(concurrency);
         ++nextArrival) {
      live[nextArrival].arrivalS = 0;
      waiting.push_back(nextArrival);
    }
  }
}

/// A request's last token: its blocks freed, its latencies recorded, and
/// (a closed loop) the next request issued in its slot.
void Replica::finishRequest(size_t id, double endS) {
  Live &v = live[id];
  v.done = true;
  letGo(v);
  running.erase(std::find(running.begin(), running.end(), id));
  ++doneCount;
  Finished fin;
  double issued = v.req.issuedS >= 0 ? v.req.issuedS : v.arrivalS;
  fin.id = v.req.id;
  // The server's own time for the request (requestHostS) comes on top of
  // what the engine's steps take.
  double host = requestHostS(pricer.engine());
  fin.ttft = v.firstTokenS - issued + host;
  fin.e2e = endS - issued + host;
  fin.end = endS;
  fin.hasTpot = v.req.outputTokens > 1;
  fin.tpot =
      fin.hasTpot ? (endS - v.firstTokenS) / double(v.req.outputTokens - 1) : 0;
  out->push_back(fin);
  if (concurrency > 0 && nextArrival < live.size()) {
    live[nextArrival].arrivalS = endS;
    waiting.push_back(nextArrival++);
  }
}

/// The oldest step in flight ends: its requests advance and its token
/// gaps are recorded.
void Replica::finishFlight() {
  InFlight f = std::move(flights.front());
  flights.pop_front();
  now = std::max(now, f.end);
  int64_t decoding = 0; // members that decoded: the run's later gaps
  int64_t onTime = 0;   // ... whose previous token ended the last step
  for (size_t id : f.members) {
    Live &v = live[id];
    v.inFlight = false;
    bool prefill = v.computed < v.target;
    int64_t gained = prefill ? v.scheduled : yield(v, v.scheduled);
    v.computed += gained;
    offerBlocks(v);
    if (prefill) {
      if (v.computed < v.target)
        continue; // a chunk of the prompt: nothing sampled
      ++v.generated;
      // The token after a recomputed prompt (a preemption) follows the
      // one before it after the whole stall.
      if (v.lastTokenS >= 0)
        gaps.add(f.end - v.lastTokenS, f.end - v.lastTokenS, 1);
    } else {
      v.generated += gained; // one a step, or what the drafts gave
      // The run's first token follows this request's last one (for
      // most, the step before ended as this one started: that gap is the
      // step's time, added once for them all below); the others come a
      // step apart, growing from the first step's time to the last's.
      double first = f.start + f.firstS;
      if (v.lastTokenS == f.start)
        ++onTime;
      else if (v.lastTokenS >= 0)
        gaps.add(first - v.lastTokenS, first - v.lastTokenS, 1);
      ++decoding;
    }
    v.lastTokenS = f.end;
    if (v.firstTokenS < 0)
      v.firstTokenS = f.end;
    if (v.generated >= v.req.outputTokens)
      finishRequest(id, f.end);
  }
  gaps.add(f.firstS, f.firstS, double(onTime));
  if (f.steps > 1 && decoding > 0) {
    double d = (f.lastS - f.firstS) / double(f.steps - 1);
    gaps.add(f.firstS + d, f.lastS, double((f.steps - 1) * decoding));
  }
}

/// The run's step `steps` after `b`: every request one key more a step (a
/// sliding window's keys stop growing at the window).
StepBatch Replica::later(const StepBatch &b, const std::vector<size_t> &members,
                         int64_t steps) const {
  StepBatch x = b;
  x.decodeKeys += double(steps) * perStep * double(b.decodeRequests);
  if (pricer.window() > 0) {
    x.decodeKeysWindowed = 0;
    for (size_t id : members)
      x.decodeKeysWindowed +=
          std::min(double(live[id].computed + 1) + double(steps) * perStep,
                   double(pricer.window()));
  }
  return x;
}

/// A run of decode-only steps over the same requests differs only in the
/// keys each reads, one more a step, which the step's time follows
/// linearly: price its first and last step and take k steps at once, up to
/// the first request that finishes, the next arrival, or (vLLM) the blocks
/// left.
int64_t Replica::coalescedSteps(const StepBatch &b,
                                const std::vector<size_t> &members,
                                const StepTime &t, double start) {
  bool stable =
      kLanes == 1 && b.prefillTokens == 0 && loading.empty() &&
      members.size() == running.size() &&
      (waiting.empty() || int64_t(running.size()) >= limits.maxRequests ||
       !admissible(live[waiting.front()]));
  if (!stable || !limits.coalesceDecodeSteps)
    return 1;
  int64_t k = std::numeric_limits<int64_t>::max();
  for (size_t id : members) {
    const Live &v = live[id];
    double left = double(v.req.outputTokens - v.generated) - v.credit;
    k = std::min(k, std::max<int64_t>(
                        1, int64_t(std::ceil(left / perStep - 1e-9))));
  }
  if (concurrency <= 0 && nextArrival < live.size() && k > 1) {
    // Step i of the run takes t0 + i·d: the run stops at the first
    // step that starts after the next arrival.
    StepBatch far = later(b, members, k - 1);
    double t0 = t.latencyS;
    double d = std::max(0.0, (pricer.price(far).latencyS - t0) / double(k - 1));
    double until = live[nextArrival].arrivalS - start;
    double a = t0 - d / 2;
    double x = d > 0 ? (-a + std::sqrt(a * a + 2 * d * until)) / d : until / t0;
    // (An arrival far off, 1e68 s in a trace, leaves the run whole:
    // compared as doubles, before any conversion.)
    if (x + 1 < double(k))
      k = std::max<int64_t>(1, int64_t(x) + 1);
  }
  auto extraBlocks = [&](int64_t steps) {
    int64_t extra = 0;
    if (!trtllm())
      for (size_t id : members)
        extra += blocksFor(decodeSlots(live[id], steps - 1)) - live[id].held();
    return extra;
  };
  while (k > 1 && extraBlocks(k) > pool.available())
    k /= 2;
  k = std::max<int64_t>(1, k);
  return k;
}

/// Starts the step of `members` (`b`, priced `t`) as early as the lane
/// allows, coalesced with the decode steps after it where it can be.
void Replica::launch(StepBatch b, std::vector<size_t> members,
                     const StepTime &t) {
  double start = std::max(now, nextStart);
  int64_t k = coalescedSteps(b, members, t, start);
  double latency = t.latencyS, interval = t.latencyS;
  double lastStepS = t.latencyS;
  if (k > 1) {
    StepBatch last = later(b, members, k - 1);
    StepTime tl = pricer.price(last);
    lastStepS = tl.latencyS;
    latency = interval = double(k) * (t.latencyS + tl.latencyS) / 2;
    for (size_t id : members) {
      Live &v = live[id];
      int64_t need = trtllm() ? 0 : blocksFor(decodeSlots(v, k - 1)) - v.held();
      pool.take(need);
      v.blocks += need;
      v.scheduled = k;
    }
  }
  double used =
      pool.total() > 0 ? double(pool.used()) / double(pool.total()) : 0;
  kvTimeSum += used * interval;
  res->kvUtilizationPeak = std::max(res->kvUtilizationPeak, used);
  res->steps += k;
  res->meanRequestsPerStep += double(k) * double(members.size());
  if (trace)
    trace->push_back(
        {index, start, latency, b.prefillTokens, b.decodeRequests, used, k});
  nextStart = start + interval;
  now = start;
  flights.push_back(
      {start + latency, std::move(members), start, t.latencyS, lastStepS, k});
}

void Replica::run(std::vector<ServingRequest> reqs, int slots,
                  std::vector<Finished> &finished, ServingResult &result) {
  concurrency = slots;
  out = &finished;
  res = &result;
  admit(reqs);
  while (doneCount < live.size()) {
    if (concurrency <= 0)
      while (nextArrival < live.size() && live[nextArrival].arrivalS <= now)
        waiting.push_back(nextArrival++);
    admitLoaded();
    if (int(flights.size()) >= kLanes) {
      finishFlight();
      continue;
    }
    StepBatch b;
    std::vector<size_t> members;
    if (!schedule(b, members)) {
      // Nothing to start: the step in flight ends, or the next arrival or
      // load from the host comes.
      double wake = std::numeric_limits<double>::infinity();
      for (size_t id : loading)
        wake = std::min(wake, live[id].readyS);
      if (concurrency <= 0 && nextArrival < live.size())
        wake = std::min(wake, live[nextArrival].arrivalS);
      if (!flights.empty())
        finishFlight();
      else if (std::isfinite(wake))
        now = std::max(now, wake);
      else
        break; // nothing can run: the caller checked one request fits
      continue;
    }
    StepTime t = pricer.price(b);
    launch(std::move(b), std::move(members), t);
  }
  res->preemptions += preemptions;
  res->prefixEvictions += pool.evictions();
  res->hostLoadedBlocks += pool.hostLoads();
  res->kvUtilizationMean += kvTimeSum; // normalized by the caller
  res->durationS = std::max(res->durationS, now);
}

LatencyStats stats(std::vector<double> v) {
  LatencyStats s;
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v)
    sum += x;
  s.meanS = sum / double(v.size());
  auto pct = [&](double p) {
    // Nearest rank.
    size_t rank = size_t(std::ceil(p * double(v.size())));
    return v[std::min(v.size() - 1, rank > 0 ? rank - 1 : 0)];
  };
  s.p50S = pct(0.50);
  s.p90S = pct(0.90);
  s.p99S = pct(0.99);
  return s;
}

} // namespace

namespace {

/// One pool of replicas serving `all` (ids set): its requests dealt round
/// robin to its replicas' pipeline lanes. Appends what finished.
struct PoolRun {
  std::vector<Finished> finished;
  TokenGaps gaps;         ///< between consecutive output tokens
  ServingResult counters; ///< steps, preemptions, KV figures (unnormalized)
  double kvWeighted = 0;
  int lanes = 1;
};

llvm::Error checkFits(const StepPricer &pricer, const SchedulerLimits &limits,
                      int64_t longest, const std::string &name,
                      const char *pool) {
  int pp = pricer.replica().pp;
  int64_t laneTokens = limits.kvCacheTokens / pp;
  int64_t capacity = laneTokens / limits.blockTokens * limits.blockTokens;
  if (pricer.tokensHeld(double(longest), limits.blockTokens) <=
      double(capacity))
    return llvm::Error::success();
  return simError(
      "workload " + name + ": a request of " + std::to_string(longest) +
      " tokens (prompt and output) does not fit the KV cache of "
      "one " +
      pool + "replica" +
      (pp > 1 ? " (of one of its " + std::to_string(pp) + " pipeline lanes)"
              : std::string()) +
      ", " + std::to_string(capacity) +
      " tokens (split the model over more devices, or use an "
      "fp8 cache)");
}

PoolRun runPool(const StepPricer &pricer, const SchedulerLimits &limits,
                const std::vector<ServingRequest> &all, int replicas,
                int concurrency, std::vector<StepRecord> *trace) {
  // Pipeline parallelism keeps pp steps in flight: as vLLM's virtual
  // engines (and TensorRT-LLM's micro-batches) do, each of pp lanes
  // schedules its own requests on its share of the cache, a step taking
  // every stage in turn; the lanes' steps interleave on the stages.
  int pp = pricer.replica().pp;
  SchedulerLimits lane = limits;
  lane.kvCacheTokens = limits.kvCacheTokens / pp;
  PoolRun run;
  run.finished.reserve(all.size());
  run.lanes = replicas * pp;
  for (int rep = 0; rep < run.lanes; ++rep) {
    std::vector<ServingRequest> mine;
    for (size_t i = size_t(rep); i < all.size(); i += size_t(run.lanes))
      mine.push_back(all[i]);
    if (mine.empty())
      continue;
    int conc = 0;
    if (concurrency > 0)
      conc = std::max(1, concurrency / run.lanes +
                             (rep < concurrency % run.lanes ? 1 : 0));
    Replica r(pricer, lane, rep / pp, pp, trace, run.gaps);
    ServingResult part;
    r.run(std::move(mine), conc, run.finished, part);
    ServingResult &c = run.counters;
    c.steps += part.steps;
    c.preemptions += part.preemptions;
    c.cachedPromptTokens += part.cachedPromptTokens;
    c.prefixEvictions += part.prefixEvictions;
    c.hostLoadedBlocks += part.hostLoadedBlocks;
    c.meanRequestsPerStep += part.meanRequestsPerStep;
    c.kvUtilizationPeak = std::max(c.kvUtilizationPeak, part.kvUtilizationPeak);
    run.kvWeighted += part.kvUtilizationMean;
  }
  return run;
}

/// Throughput and latency percentiles of the finished requests.
ServingResult summarize(const std::vector<ServingRequest> &all,
                        const std::vector<Finished> &finished,
                        const std::vector<const PoolRun *> &pools) {
  ServingResult res;
  double first = std::numeric_limits<double>::infinity(), end = 0;
  for (const ServingRequest &r : all) {
    first = std::min(first, r.arrivalS);
    res.inputTokens += r.inputTokens;
    res.outputTokens += r.outputTokens;
  }
  std::vector<double> ttft, tpot, e2e;
  for (const Finished &f : finished) {
    end = std::max(end, f.end);
    ttft.push_back(f.ttft);
    e2e.push_back(f.e2e);
    if (f.hasTpot)
      tpot.push_back(f.tpot);
  }
  res.requests = int64_t(finished.size());
  res.durationS = std::max(1e-12, end - std::min(first, end));
  res.requestsPerS = double(res.requests) / res.durationS;
  res.outputTokensPerS = double(res.outputTokens) / res.durationS;
  res.totalTokensPerS =
      double(res.inputTokens + res.outputTokens) / res.durationS;
  res.ttft = stats(ttft);
  res.tpot = stats(tpot);
  res.e2e = stats(e2e);
  TokenGaps gaps;
  for (const PoolRun *p : pools)
    gaps.merge(p->gaps);
  res.itl = gaps.stats();
  int lanes = 0;
  double kv = 0;
  for (const PoolRun *p : pools) {
    res.steps += p->counters.steps;
    res.preemptions += p->counters.preemptions;
    res.cachedPromptTokens += p->counters.cachedPromptTokens;
    res.prefixEvictions += p->counters.prefixEvictions;
    res.hostLoadedBlocks += p->counters.hostLoadedBlocks;
    res.meanRequestsPerStep += p->counters.meanRequestsPerStep;
    res.kvUtilizationPeak =
        std::max(res.kvUtilizationPeak, p->counters.kvUtilizationPeak);
    kv += p->kvWeighted;
    lanes += p->lanes;
  }
  res.kvUtilizationMean = kv / (res.durationS * std::max(1, lanes));
  if (res.steps > 0)
    res.meanRequestsPerStep /= double(res.steps);
  return res;
}

llvm::Expected<std::vector<ServingRequest>>
requestsOf(const ServingWorkload &workload) {
  std::vector<ServingRequest> all = workload.requestsToServe();
  if (all.empty())
    return simError("workload: no requests");
  for (size_t i = 0; i < all.size(); ++i)
    all[i].id = int64_t(i);
  return all;
}

llvm::Error checkLimits(const SchedulerLimits &limits, int replicas) {
  if (replicas < 1)
    return simError("serving: replicas must be at least 1");
  if (limits.blockTokens < 1 || limits.maxRequests < 1 ||
      limits.maxBatchedTokens < 1)
    return simError("serving: the scheduler's limits must be positive");
  return llvm::Error::success();
}

} // namespace

llvm::Expected<ServingResult> simulateServing(const StepPricer &pricer,
                                              const SchedulerLimits &limits,
                                              const ServingWorkload &workload,
                                              int replicas,
                                              std::vector<StepRecord> *trace) {
  if (auto e = checkLimits(limits, replicas))
    return std::move(e);
  auto all = requestsOf(workload);
  if (!all)
    return all.takeError();
  assignBlockKeys(*all, limits.blockTokens);
  // The longest request must fit the cache alone (vLLM refuses a
  // max_model_len the cache cannot hold; TensorRT-LLM never admits it).
  if (auto e = checkFits(pricer, limits, workload.longestRequestTokens(),
                         workload.name, ""))
    return std::move(e);
  if (workload.arrival == ServingWorkload::Arrival::Concurrency &&
      workload.concurrency < 1)
    return simError("workload: concurrency must be at least 1");
  int concurrency = workload.arrival == ServingWorkload::Arrival::Concurrency
                        ? workload.concurrency
                        : 0;
  PoolRun run = runPool(pricer, limits, *all, replicas, concurrency, trace);
  return summarize(*all, run.finished, {&run});
}

llvm::Expected<ServingResult> simulateDisaggregated(
    const StepPricer &prefill, const SchedulerLimits &prefillLimits,
    int prefillReplicas, const StepPricer &decode,
    const SchedulerLimits &decodeLimits, int decodeReplicas,
    const KvTransfer &transfer, const ServingWorkload &workload,
    std::vector<StepRecord> *trace) {
  if (auto e = checkLimits(prefillLimits, prefillReplicas))
    return std::move(e);
  if (auto e = checkLimits(decodeLimits, decodeReplicas))
    return std::move(e);
  if (workload.arrival == ServingWorkload::Arrival::Concurrency)
    return simError("workload: prefill/decode disaggregation takes requests "
                    "at a rate, all at once or from a trace (not a "
                    "concurrency)");
  auto all = requestsOf(workload);
  if (!all)
    return all.takeError();
  assignBlockKeys(*all, prefillLimits.blockTokens);
  int64_t longestPrompt = 0;
  for (const ServingRequest &r : *all)
    longestPrompt = std::max(longestPrompt, r.inputTokens + 1);
  if (auto e = checkFits(prefill, prefillLimits, longestPrompt, workload.name,
                         "prefill "))
    return std::move(e);
  if (auto e = checkFits(decode, decodeLimits, workload.longestRequestTokens(),
                         workload.name, "decode "))
    return std::move(e);
  // The prefill pool computes each prompt and samples the first token;
  // the cache then travels to the decode pool, which generates the rest.
  std::vector<ServingRequest> prompts = *all;
  for (ServingRequest &r : prompts)
    r.outputTokens = 1;
  PoolRun first =
      runPool(prefill, prefillLimits, prompts, prefillReplicas, 0, trace);
  std::vector<Finished> finished;
  std::vector<ServingRequest> decodes;
  for (const Finished &f : first.finished) {
    const ServingRequest &r = (*all)[size_t(f.id)];
    if (r.outputTokens <= 1) {
      finished.push_back(f);
      continue;
    }
    ServingRequest d = r;
    d.issuedS = r.arrivalS;
    d.firstTokenS = f.end;
    d.cachedTokens = r.inputTokens;
    d.arrivalS = f.end + transfer.seconds(double(r.inputTokens));
    decodes.push_back(d);
  }
  // The decode pool takes them in the order their caches arrive.
  std::stable_sort(decodes.begin(), decodes.end(),
                   [](const ServingRequest &a, const ServingRequest &b) {
                     return a.arrivalS < b.arrivalS;
                   });
  if (trace)
    for (StepRecord &s : *trace)
      s.replica = -1 - s.replica; // prefill replicas apart from decode's
  PoolRun second =
      runPool(decode, decodeLimits, decodes, decodeReplicas, 0, trace);
  finished.insert(finished.end(), second.finished.begin(),
                  second.finished.end());
  return summarize(*all, finished, {&first, &second});
}

} // namespace orrery
