//===- ServingSim.cpp - requests through a serving engine, step by step ---===//
//
// docs/serving.md, "The simulator".
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/ServingSim.h"
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
                      "rate, concurrency, offline, seed)");
    }
  }
  if (w.requests > 10'000'000)
    return simError("workload: requests=" + std::to_string(w.requests) +
                    ": more than 10 million");
  if (w.inputTokens > (int64_t(1) << 30) || w.outputTokens > (int64_t(1) << 30))
    return simError("workload: isl and osl must be below 2^30 tokens");
  return w;
}

llvm::Expected<ServingWorkload>
ServingWorkload::parseTrace(const std::string &text, const std::string &what) {
  ServingWorkload w;
  w.arrival = Arrival::Trace;
  w.name = what;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(text).split(lines, '\n', -1, true);
  int lineNo = 0;
  bool header = false;
  double last = -std::numeric_limits<double>::infinity();
  for (llvm::StringRef line : lines) {
    ++lineNo;
    line = line.trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    llvm::SmallVector<llvm::StringRef> cells;
    line.split(cells, ',', -1, true);
    auto at = [&](const std::string &m) {
      return simError(what + ":" + std::to_string(lineNo) + ": " + m);
    };
    if (!header) {
      if (cells.size() != 3 || cells[0].trim() != "arrival_s" ||
          cells[1].trim() != "input_tokens" ||
          cells[2].trim() != "output_tokens")
        return at("expected the header arrival_s,input_tokens,output_tokens");
      header = true;
      continue;
    }
    if (cells.size() != 3)
      return at("expected 3 fields, found " + std::to_string(cells.size()));
    ServingRequest r;
    if (!parseDouble(cells[0].trim(), r.arrivalS) || r.arrivalS < 0)
      return at("arrival_s '" + cells[0].trim().str() +
                "': expected a time in seconds, 0 or more");
    if (!parseInt(cells[1].trim(), r.inputTokens) || r.inputTokens < 1 ||
        r.inputTokens > (int64_t(1) << 30))
      return at("input_tokens '" + cells[1].trim().str() +
                "': expected a positive number of tokens");
    if (!parseInt(cells[2].trim(), r.outputTokens) || r.outputTokens < 1 ||
        r.outputTokens > (int64_t(1) << 30))
      return at("output_tokens '" + cells[2].trim().str() +
                "': expected a positive number of tokens");
    if (r.arrivalS < last)
      return at("arrival_s goes back in time (the trace must be in arrival "
                "order)");
    last = r.arrivalS;
    w.trace.push_back(r);
  }
  if (!header)
    return simError(what + ": empty trace (expected the header "
                           "arrival_s,input_tokens,output_tokens)");
  if (w.trace.empty())
    return simError(what + ": the trace has no requests");
  if (w.trace.size() > 10'000'000)
    return simError(what + ": more than 10 million requests");
  w.requests = int64_t(w.trace.size());
  return w;
}

std::vector<ServingRequest> ServingWorkload::requestsToServe() const {
  if (arrival == Arrival::Trace)
    return trace;
  std::vector<ServingRequest> out(static_cast<size_t>(requests));
  // splitmix64: the same arrivals on every platform.
  uint64_t state = seed;
  auto next = [&]() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  double t = 0;
  for (ServingRequest &r : out) {
    r.inputTokens = inputTokens;
    r.outputTokens = outputTokens;
    if (arrival == Arrival::Poisson) {
      double u = (double(next() >> 11) + 0.5) * 0x1.0p-53;
      t += -std::log(u) / ratePerS;
      r.arrivalS = t;
    }
  }
  return out;
}

int64_t ServingWorkload::longestRequestTokens() const {
  if (arrival != Arrival::Trace)
    return inputTokens + outputTokens;
  int64_t m = 0;
  for (const ServingRequest &r : trace)
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
  int64_t blocks = 0;
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
        gaps(gaps) {
    totalBlocks = l.kvCacheTokens / l.blockTokens;
    freeBlocks = totalBlocks;
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
  bool schedule(StepBatch &b, std::vector<size_t> &members);
  void admit(const std::vector<ServingRequest> &reqs);
  void finishRequest(size_t id, double endS);
  void finishFlight();
  StepBatch later(const StepBatch &b, const std::vector<size_t> &members,
                  int64_t steps) const;
  int64_t coalescedSteps(const StepBatch &b, const std::vector<size_t> &members,
                         const StepTime &t, double start);
  void launch(StepBatch b, std::vector<size_t> members, const StepTime &t);

  const StepPricer &pricer;
  SchedulerLimits limits;
  int index, lanes;
  std::vector<StepRecord> *trace;
  TokenGaps &gaps;
  int64_t totalBlocks = 0, freeBlocks = 0;
  std::vector<Live> live;
  std::vector<size_t> running; ///< admission order
  std::deque<size_t> waiting;
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

void Replica::preempt(size_t id) {
  Live &v = live[id];
  freeBlocks += v.blocks;
  v.blocks = 0;
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
      b.addDecode(double(v.computed + 1), window);
      ++b.sampled;
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
    int64_t n =
        v.computed < v.target ? std::min(v.target - v.computed, budget) : 1;
    int64_t need = trtllm() ? 0 : blocksFor(v.computed + n) - v.blocks;
    bool self = false;
    while (need > freeBlocks) {
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
    if (self || need > freeBlocks) {
      if (!self)
        break;
      --i; // `running` lost this entry
      continue;
    }
    freeBlocks -= need;
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
    // A prompt (or its next chunk), or the first decode of a request whose
    // prompt was prefilled elsewhere.
    int64_t n =
        v.computed < v.target ? std::min(v.target - v.computed, budget) : 1;
    // TensorRT-LLM reserves the whole request; vLLM the tokens it computes.
    int64_t need = trtllm() ? blocksFor(v.req.inputTokens + v.req.outputTokens)
                            : blocksFor(v.computed + n);
    if (need > freeBlocks)
      break;
    waiting.pop_front();
    freeBlocks -= need;
    v.blocks += need;
    v.running = true;
    running.push_back(id);
    members.push_back(id);
    add(v, n);
  }
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
  freeBlocks += v.blocks;
  v.blocks = 0;
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
    v.computed += v.scheduled;
    if (prefill) {
      if (v.computed < v.target)
        continue; // a chunk of the prompt: nothing sampled
      ++v.generated;
      // The token after a recomputed prompt (a preemption) follows the
      // one before it after the whole stall.
      if (v.lastTokenS >= 0)
        gaps.add(f.end - v.lastTokenS, f.end - v.lastTokenS, 1);
    } else {
      v.generated += v.scheduled; // one a step
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
  x.decodeKeys += double(steps) * double(b.decodeRequests);
  if (pricer.window() > 0) {
    x.decodeKeysWindowed = 0;
    for (size_t id : members)
      x.decodeKeysWindowed += std::min(double(live[id].computed + 1 + steps),
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
      kLanes == 1 && b.prefillTokens == 0 && members.size() == running.size() &&
      (waiting.empty() || int64_t(running.size()) >= limits.maxRequests ||
       (trtllm() ? blocksFor(live[waiting.front()].req.inputTokens +
                             live[waiting.front()].req.outputTokens)
                 : blocksFor(live[waiting.front()].target)) > freeBlocks);
  if (!stable || !limits.coalesceDecodeSteps)
    return 1;
  int64_t k = std::numeric_limits<int64_t>::max();
  for (size_t id : members)
    k = std::min(k, live[id].req.outputTokens - live[id].generated);
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
        extra += blocksFor(live[id].computed + steps) - live[id].blocks;
    return extra;
  };
  while (k > 1 && extraBlocks(k) > freeBlocks)
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
      int64_t need = trtllm() ? 0 : blocksFor(v.computed + k) - v.blocks;
      freeBlocks -= need;
      v.blocks += need;
      v.scheduled = k;
    }
  }
  double used = totalBlocks > 0
                    ? double(totalBlocks - freeBlocks) / double(totalBlocks)
                    : 0;
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
    if (int(flights.size()) >= kLanes) {
      finishFlight();
      continue;
    }
    StepBatch b;
    std::vector<size_t> members;
    if (!schedule(b, members)) {
      if (!flights.empty())
        finishFlight();
      else if (concurrency <= 0 && nextArrival < live.size())
        now = std::max(now, live[nextArrival].arrivalS);
      else
        break; // nothing can run: the caller checked one request fits
      continue;
    }
    StepTime t = pricer.price(b);
    launch(std::move(b), std::move(members), t);
  }
  res->preemptions += preemptions;
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
