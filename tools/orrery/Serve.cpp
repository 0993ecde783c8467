//===- Serve.cpp - `orrery serve` ----------------------------------------===//
//
// docs/serving.md, "orrery serve": the request read, the search run by the
// library (orrery/CostModel/ServingSearch.h), and its result written as a
// serving plan (JSON), a summary, and the chosen configuration's steps as a
// Chrome trace.
//
//===----------------------------------------------------------------------===//
#include "Serve.h"
#include "PlanCommand.h"

#include "orrery/CostModel/PrintableLine.h"
#include "orrery/CostModel/Serving.h"
#include "orrery/CostModel/ServingSearch.h"
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

llvm::Error serveError(const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(m));
}

nlohmann::ordered_json latencyJson(const LatencyStats &s) {
  return {{"mean_ms", s.meanS * 1e3},
          {"p50_ms", s.p50S * 1e3},
          {"p90_ms", s.p90S * 1e3},
          {"p99_ms", s.p99S * 1e3}};
}

nlohmann::ordered_json poolJson(const ServingPool &p, const Speculation &spec) {
  nlohmann::ordered_json j;
  j["device"] = p.group->device->name;
  j["tp"] = p.tp;
  j["ep"] = p.ep;
  if (p.attentionDp)
    j["attention_dp"] = true;
  j["pp"] = p.pp;
  j["replicas"] = p.replicas;
  j["devices"] = p.devices();
  j["max_requests"] = p.limits.maxRequests;
  j["max_batched_tokens"] = p.limits.maxBatchedTokens;
  j["kv_cache_block_tokens"] = p.limits.blockTokens;
  j["kv_cache_tokens_per_replica"] = p.limits.kvCacheTokens;
  j["prefix_caching"] = p.limits.prefixCaching;
  if (p.limits.hostCacheBlocks > 0)
    j["kv_offload_host_blocks"] = p.limits.hostCacheBlocks;
  if (p.speculative)
    j["speculative_decoding"] = {
        {"method", spec.methodName()},
        {"num_speculative_tokens", spec.k},
        {"acceptance_rates", spec.acceptance},
        {"acceptance_length_mean", spec.tokensPerStep()}};
  j["weight_bytes_per_device"] = p.memory.weightBytes;
  j["kv_cache_bytes_per_device"] = p.memory.kvCacheBytes;
  return j;
}

nlohmann::ordered_json candidateJson(const ServingCandidate &c,
                                     const Speculation &spec) {
  nlohmann::ordered_json j;
  if (c.decode) {
    j["disaggregated"] = true;
    j["devices"] = c.devices();
    j["prefill"] = poolJson(c.p, spec);
    j["decode"] = poolJson(*c.decode, spec);
  } else {
    j = poolJson(c.p, spec);
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
  m["prefix_cache_hit_rate"] = r.prefixHitRate();
  m["prefix_cache_evicted_blocks"] = r.prefixEvictions;
  m["kv_offload_loaded_blocks"] = r.hostLoadedBlocks;
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
  std::string arrival = w.arrival == A::Offline   ? "all at once"
                        : w.arrival == A::Poisson ? std::string(rate)
                        : w.arrival == A::Concurrency
                            ? std::to_string(w.concurrency) + " outstanding"
                            : "from the trace";
  std::snprintf(buf, sizeof buf, "%lld requests, %.0f in / %.0f out tokens, ",
                (long long)w.requests, w.meanInput(), w.meanOutput());
  std::string spread;
  if (w.inputSigma > 0 || w.outputSigma > 0) {
    char s[80];
    std::snprintf(s, sizeof s, "log-normal lengths (sigma %.2g in, %.2g out), ",
                  w.inputSigma, w.outputSigma);
    spread = s;
  }
  return buf + spread + arrival;
}

/// The search request from the command line's: engine, precision, the
/// workload (or its trace file), targets.
llvm::Expected<ServingSearchRequest>
searchRequestOf(const ServeRequest &request) {
  ServingSearchRequest search;
  if (!parseServingEngine(request.engine, search.engine))
    return serveError("--engine " + request.engine +
                      ": expected vllm or trtllm");
  auto precision = ServingPrecision::parse(request.precision, request.kvCache);
  if (!precision)
    return precision.takeError();
  if (request.workloadGiven && !request.traceFile.empty())
    return serveError("--workload " + request.workload + " and --trace " +
                      request.traceFile +
                      ": give one (a trace states its arrivals and lengths)");
  llvm::Expected<ServingWorkload> workload =
      request.traceFile.empty() ? ServingWorkload::parse(request.workload)
                                : [&]() -> llvm::Expected<ServingWorkload> {
    std::string text;
    if (!readFileBytes(request.traceFile, text))
      return serveError("--trace " + request.traceFile +
                        ": cannot read the file");
    return ServingWorkload::parseTrace(text, request.traceFile);
  }();
  if (!workload)
    return workload.takeError();
  auto slo = ServingSlo::parse(request.slo);
  if (!slo)
    return slo.takeError();
  search.precision = *precision;
  search.workload = *workload;
  search.slo = *slo;
  search.strategy = request.strategy;
  search.objective = request.objective;
  search.maxRequests = request.maxRequests;
  search.maxBatchedTokens = request.maxBatchedTokens;
  if (request.prefixCaching != "on" && request.prefixCaching != "off")
    return serveError("--prefix-caching " + request.prefixCaching +
                      ": expected on or off");
  search.prefixCaching = request.prefixCaching == "on";
  auto spec = Speculation::parse(request.speculative);
  if (!spec)
    return spec.takeError();
  search.speculation = *spec;
  search.kvOffloadBytes = request.kvOffloadGib * double(1ull << 30);
  if (!(request.memoryFraction > 0 && request.memoryFraction <= 1))
    return serveError("--memory-fraction " +
                      std::to_string(request.memoryFraction) +
                      ": expected a share of memory in (0, 1]");
  search.memoryFraction = request.memoryFraction;
  if (!request.attentionBackend.empty()) {
    if (!vllmMlaBackend(request.attentionBackend))
      return serveError("--attention-backend " + request.attentionBackend +
                        ": expected one of " + vllmMlaBackendNames());
    if (search.engine != ServingEngine::Vllm)
      return serveError("--attention-backend " + request.attentionBackend +
                        ": a vLLM backend; the engine is " + request.engine);
  }
  search.attentionBackend = request.attentionBackend;
  return search;
}

/// The serving plan: the request, the chosen configuration, why, and the
/// others it beat.
nlohmann::ordered_json servingPlanJson(const ModelArgs &args,
                                       const ServeRequest &request,
                                       const ServingSearchRequest &search,
                                       const ServingSearchResult &found,
                                       int64_t experts) {
  const ServingWorkload *workload = &search.workload;
  const ServingSlo *slo = &search.slo;
  const ServingPrecision *precision = &search.precision;
  ServingEngine engine = search.engine;
  const std::vector<ServingCandidate> &ok = found.ranked;
  const ServingCandidate &chosen = ok.front();
  const std::string &why = found.why;
  nlohmann::ordered_json plan;
  plan["serving_plan_version"] = 1;
  plan["model"] = args.path;
  // Engines lay a mixture of experts out differently across replicas (vLLM's
  // data parallelism joins every replica's experts into one group).
  plan["model_experts"] = experts;
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
                     {"prefix_caching", request.prefixCaching},
                     {"speculative", request.speculative},
                     {"kv_offload_gib", request.kvOffloadGib},
                     {"memory_fraction", request.memoryFraction},
                     {"attention_backend", request.attentionBackend},
                     {"strategy", chosen.strategyText()}};
  plan["chosen"] = candidateJson(chosen, search.speculation);
  plan["why"] = why;
  nlohmann::ordered_json others = nlohmann::ordered_json::array();
  for (size_t i = 1; i < ok.size(); ++i)
    others.push_back(candidateJson(ok[i], search.speculation));
  plan["candidates"] = others;
  return plan;
}

/// The chosen configuration's steps as a Chrome trace, one track per
/// replica.
int writeServingTrace(const Workload &w, const ServeRequest &request,
                      const ServingSearchRequest &search,
                      const ServingCandidate &chosen) {
  using A = ServingWorkload::Arrival;
  const ServingWorkload *workload = &search.workload;
  // The chosen configuration's steps, one track per replica.
  std::vector<StepRecord> steps;
  ServingWorkload traced = *workload;
  if (chosen.goodputRequestsPerS > 0) {
    traced.arrival = A::Poisson;
    traced.ratePerS = chosen.goodputRequestsPerS;
    traced.requests = std::min<int64_t>(traced.requests, 2000);
  }
  auto ran = traceServing(w, search, chosen, traced, steps);
  if (!ran) {
    llvm::consumeError(ran.takeError());
    return fail("--trace-out: the chosen configuration did not simulate");
  }
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  // A split plan's prefill replicas come back numbered -1, -2, ...: a
  // process of their own.
  for (const StepRecord &s : steps)
    events.push_back(
        {{"name", s.prefillTokens && s.decodeRequests ? "prefill+decode"
                  : s.prefillTokens                   ? "prefill"
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

  return 0;
}

/// The summary for a terminal.
void printServing(std::ostream &os, const ModelArgs &args,
                  const ServeRequest &request,
                  const ServingSearchRequest &search,
                  const ServingSearchResult &found) {
  const ServingWorkload *workload = &search.workload;
  const ServingSlo *slo = &search.slo;
  const ServingPrecision *precision = &search.precision;
  ServingEngine engine = search.engine;
  const std::vector<ServingCandidate> &ok = found.ranked;
  const ServingCandidate &chosen = ok.front();
  const std::string &why = found.why;
  const ServingResult &r = chosen.result;
  char buf[400];
  os << "serving   " << args.path << " on " << request.cluster.spec << " ("
     << servingEngineName(engine) << ", " << precision->name() << " weights, "
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
    os << "          " << name << " mean " << servingMs(s.meanS) << ", p50 "
       << servingMs(s.p50S) << ", p90 " << servingMs(s.p90S) << ", p99 "
       << servingMs(s.p99S) << "\n";
  };
  line("TTFT", r.ttft);
  line("TPOT", r.tpot);
  line("ITL ", r.itl);
  line("E2E ", r.e2e);
  auto kvLine = [&](const ServingPool &p, const char *which) {
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
  if (r.cachedPromptTokens > 0) {
    std::snprintf(buf, sizeof buf,
                  "          prefix cache: %.0f%% of prompt tokens found "
                  "cached; %lld blocks evicted, %lld loaded from the host\n",
                  r.prefixHitRate() * 100, (long long)r.prefixEvictions,
                  (long long)r.hostLoadedBlocks);
    os << buf;
  }
  os << "\nconfigurations (best first)\n";
  for (const ServingCandidate &c : ok) {
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
    std::snprintf(
        buf, sizeof buf, "  %-28s %s  TTFT p99 %9s  TPOT p99 %9s  %s\n",
        c.name().c_str(), figure.c_str(), servingMs(c.result.ttft.p99S).c_str(),
        servingMs(c.result.tpot.p99S).c_str(),
        c.meets ? (slo->any() ? "meets" : "") : c.missText.c_str());
    os << buf;
  }
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
  auto search = searchRequestOf(request);
  if (!search)
    return fail(llvm::toString(search.takeError()));
  auto found = searchServing(w, *cluster, *search);
  if (!found)
    return fail(llvm::toString(found.takeError()));
  std::string text =
      servingPlanJson(args, request, *search, *found, w.experts()).dump(2) +
      "\n";
  if (!planOut.empty()) {
    std::ofstream out(planOut);
    out << text;
    if (!out)
      return fail("-o " + planOut + ": cannot write the file");
  }
  if (!request.traceOut.empty())
    if (int rc = writeServingTrace(w, request, *search, found->ranked.front()))
      return rc;
  if (json) {
    os << text;
    return 0;
  }
  printServing(os, args, request, *search, *found);
  return 0;
}

} // namespace cli
} // namespace orrery
