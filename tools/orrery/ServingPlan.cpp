//===- ServingPlan.cpp - a serving plan checked and exported -------------===//
//
// docs/serving.md, "Checking and exporting a serving plan": `orrery check`
// serves a plan's request again and compares the chosen configuration;
// `orrery export --to vllm|sglang|trtllm` writes it as launch flags.
//
//===----------------------------------------------------------------------===//
#include "Serve.h"

#include "orrery/CostModel/PrintableLine.h"
#include "orrery/CostModel/ServingStep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <type_traits>

namespace orrery {
namespace cli {
namespace {

llvm::Error planError(const std::string &what, const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(what + ": " + m));
}

/// A field of a serving plan, of its documented type.
template <typename T>
llvm::Expected<T> field(const nlohmann::json &o, const char *key,
                        const std::string &what, const std::string &path) {
  if (!o.is_object() || !o.contains(key))
    return planError(what, path + key + ": missing");
  const nlohmann::json &v = o[key];
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string())
      return planError(what, path + key + ": expected a string");
    return v.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean())
      return planError(what, path + key + ": expected true or false");
    return v.get<bool>();
  } else {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > (int64_t(1) << 30))
      return planError(what, path + key + ": expected a non-negative integer");
    return T(v.get<int64_t>());
  }
}

} // namespace

bool isServingPlan(const nlohmann::json &doc) {
  return doc.is_object() && doc.contains("serving_plan_version");
}

/// vLLM's --speculative-config for a method and its draft tokens (an
/// EAGLE head's checkpoint is the user's to name).
static std::string vllmSpeculativeConfig(const std::string &method, int k) {
  std::string c = "{\"method\":\"" + method + "\"";
  if (method == "eagle" || method == "eagle3")
    c += ",\"model\":\"<" + method + "-draft>\"";
  c += ",\"num_speculative_tokens\":" + std::to_string(k);
  if (method == "ngram")
    c += ",\"prompt_lookup_min\":5,\"prompt_lookup_max\":5";
  return "--speculative-config '" + c + "}'";
}

llvm::Expected<ServeRequest> servingRequestOf(const nlohmann::json &plan,
                                              const std::string &what,
                                              std::string &model) {
  if (!plan["serving_plan_version"].is_number_integer() ||
      plan["serving_plan_version"].get<int64_t>() != 1)
    return planError(what, "serving_plan_version: expected 1");
  auto m = field<std::string>(plan, "model", what, "");
  if (!m)
    return m.takeError();
  auto c = field<std::string>(plan, "cluster", what, "");
  if (!c)
    return c.takeError();
  model = *m;
  const nlohmann::json &r = plan.value("request", nlohmann::json());
  ServeRequest q;
  q.cluster.spec = *c;
  for (auto [key, out] :
       {std::pair<const char *, std::string *>{"workload", &q.workload},
        {"trace", &q.traceFile}, {"engine", &q.engine},
        {"precision", &q.precision}, {"kv_cache", &q.kvCache},
        {"slo", &q.slo}, {"strategy", &q.strategy}}) {
    auto v = field<std::string>(r, key, what, "request.");
    if (!v)
      return v.takeError();
    *out = *v;
  }
  auto objective = field<std::string>(plan, "objective", what, "");
  if (!objective)
    return objective.takeError();
  q.objective = *objective;
  auto maxRequests = field<int64_t>(r, "max_requests", what, "request.");
  if (!maxRequests)
    return maxRequests.takeError();
  auto maxTokens = field<int64_t>(r, "max_batched_tokens", what, "request.");
  if (!maxTokens)
    return maxTokens.takeError();
  q.maxRequests = *maxRequests;
  q.maxBatchedTokens = *maxTokens;
  // Plans from before KV offload have none.
  if (r.is_object() && r.contains("kv_offload_gib")) {
    const nlohmann::json &g = r["kv_offload_gib"];
    if (!g.is_number() || g.get<double>() < 0 || g.get<double>() > 1e6)
      return planError(what, "request.kv_offload_gib: expected GiB, 0 or "
                             "more");
    q.kvOffloadGib = g.get<double>();
  }
  // Plans from before the field priced TensorRT-LLM at 0.95: served
  // again at the default they differ, as any plan of an older version.
  if (r.is_object() && r.contains("memory_fraction")) {
    const nlohmann::json &f = r["memory_fraction"];
    if (!f.is_number() || !(f.get<double>() > 0) || f.get<double>() > 1)
      return planError(what, "request.memory_fraction: expected a share in "
                             "(0, 1]");
    q.memoryFraction = f.get<double>();
  }
  // Plans from before the field ran the engine's default backend.
  if (r.is_object() && r.contains("attention_backend")) {
    auto b = field<std::string>(r, "attention_backend", what, "request.");
    if (!b)
      return b.takeError();
    if (!b->empty() && !vllmMlaBackend(*b))
      return planError(what, "request.attention_backend: '" + *b +
                                 "': expected one of " +
                                 vllmMlaBackendNames());
    q.attentionBackend = *b;
  }
  // Plans from before speculative decoding have none: off.
  if (r.is_object() && r.contains("speculative")) {
    auto sp = field<std::string>(r, "speculative", what, "request.");
    if (!sp)
      return sp.takeError();
    q.speculative = *sp;
  }
  // Plans from before prefix caching have none: the engines' default.
  if (r.is_object() && r.contains("prefix_caching")) {
    auto pc = field<std::string>(r, "prefix_caching", what, "request.");
    if (!pc)
      return pc.takeError();
    if (*pc != "on" && *pc != "off")
      return planError(what, "request.prefix_caching: expected on or off");
    q.prefixCaching = *pc;
  }
  return q;
}

static int checkServingPlanImpl(mlir::ModuleOp module, const ModelArgs &args,
                                const nlohmann::json &plan,
                                const std::string &what,
                                const ServeRequest &request, std::ostream &os) {
  std::ostringstream again;
  std::string why;
  {
    ErrorCapture capture;
    if (serveModule(module, args, request, true, "", again))
      why = capture.message().empty() ? "failed" : capture.message();
  }
  if (!why.empty())
    return fail(what + ": serving its request again: " + why);
  auto redone = nlohmann::json::parse(again.str(), nullptr, false);
  const nlohmann::json &was = plan.value("chosen", nlohmann::json());
  const nlohmann::json &now = redone.value("chosen", nlohmann::json());
  if (!was.is_object())
    return fail(what + ": chosen: missing");
  for (auto it = now.begin(); it != now.end(); ++it) {
    if (!was.contains(it.key()))
      return fail(what + ": chosen." + it.key() + ": missing");
    if (it.key() == "metrics")
      continue;
    if (was[it.key()] != it.value())
      return fail(what + ": chosen." + it.key() + " is " +
                  was[it.key()].dump() + ", serving the plan's request again "
                  "gives " + it.value().dump() +
                  ": the plan is for another model, cluster or version");
  }
  // Every figure of the simulation, the latency percentiles included: the
  // simulator is deterministic, so serving again gives the same numbers.
  std::function<std::string(const nlohmann::json &, const nlohmann::json &,
                            const std::string &)>
      differs = [&](const nlohmann::json &w, const nlohmann::json &n,
                    const std::string &path) -> std::string {
    if (n.is_object()) {
      if (!w.is_object())
        return path + ": expected an object";
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!w.contains(it.key()))
          return path + "." + it.key() + ": missing";
        std::string d = differs(w[it.key()], it.value(), path + "." + it.key());
        if (!d.empty())
          return d;
      }
      return "";
    }
    if (n.is_number()) {
      if (!w.is_number())
        return path + ": expected a number";
      double a = w.get<double>(), b = n.get<double>();
      if (std::abs(a - b) > 1e-9 * std::max(1.0, std::abs(b)))
        return path + " is " + w.dump() +
               ", serving the plan's request again gives " + n.dump();
      return "";
    }
    return w == n
               ? ""
               : path + " is " + w.dump() + ", serving again gives " + n.dump();
  };
  const nlohmann::json &nm = now.value("metrics", nlohmann::json());
  std::string d =
      differs(was.value("metrics", nlohmann::json()), nm, "chosen.metrics");
  if (!d.empty())
    return fail(what + ": " + d);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.0f output tok/s on %d devices",
                nm["output_throughput_tok_per_s"].get<double>(),
                now.value("devices", 0));
  os << "valid; serving plan " << request.strategy << ": " << buf << "\n";
  return 0;
}

int checkServingPlan(mlir::ModuleOp module, const ModelArgs &args,
                     const nlohmann::json &plan, const std::string &what,
                     const ServeRequest &request, std::ostream &os) {
  try {
    return checkServingPlanImpl(module, args, plan, what, request, os);
  } catch (const nlohmann::json::exception &e) {
    return fail(what + ": malformed serving plan: " + e.what());
  }
}

namespace {

/// One pool of a serving plan (the whole plan, or its prefill or decode
/// side) as the exporters need it.
struct PoolArgs {
  int tp, pp, replicas, ep = 1;
  bool adp = false; ///< attention data parallelism over the tp ranks
  int64_t maxRequests, maxTokens;
  std::string device;
  std::string spec; ///< speculative decoding's method; empty: none
  int draftTokens = 0;
};

/// What every pool of one export shares: the target and the request's
/// engine-wide settings.
struct ExportSettings {
  std::string to;
  bool moe = false; ///< one engine instance per replica (see below)
  bool fp8 = false, fp8Cache = false, prefixCaching = true;
  double offloadGib = 0;
  double memoryFraction = 0.9; ///< ServeRequest::memoryFraction
  /// vLLM's name of the plan's attention backend ("": the default).
  std::string attentionBackend;
};

/// A figure in four significant digits (GiB, a share of memory).
std::string shortNumber(double g) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", g);
  return b;
}

/// A plan's speculative_decoding object, checked for the target.
llvm::Error speculationOf(const nlohmann::json &sd, const std::string &at,
                          const std::string &to, const std::string &what,
                          PoolArgs &a) {
  auto m = field<std::string>(sd, "method", what, at);
  if (!m)
    return m.takeError();
  auto k = field<int>(sd, "num_speculative_tokens", what, at);
  if (!k)
    return k.takeError();
  if (*m != "eagle" && *m != "eagle3" && *m != "mtp" && *m != "ngram")
    return planError(what, at + "method: " + *m +
                               ": expected eagle, eagle3, mtp or ngram");
  if (*k < 1 || *k > 32)
    return planError(what, at + "num_speculative_tokens: expected 1 to 32");
  if (to == "trtllm" && *m == "eagle")
    return planError(what, "--to trtllm: an EAGLE (v1/v2) draft: "
                           "TensorRT-LLM's PyTorch backend runs EAGLE-3 "
                           "drafts only");
  a.spec = *m;
  a.draftTokens = *k;
  return llvm::Error::success();
}

/// A pool's fields at `path` ("chosen.", "chosen.prefill.", ...).
llvm::Expected<PoolArgs> exportPoolArgs(const nlohmann::json &p,
                                        const std::string &path,
                                        const std::string &to,
                                        const std::string &what) {
  PoolArgs a;
  for (auto [key, out] : {std::pair<const char *, int *>{"tp", &a.tp},
                          {"pp", &a.pp},
                          {"replicas", &a.replicas}}) {
    auto v = field<int>(p, key, what, path);
    if (!v)
      return v.takeError();
    *out = *v;
  }
  for (auto [key, out] :
       {std::pair<const char *, int64_t *>{"max_requests", &a.maxRequests},
        {"max_batched_tokens", &a.maxTokens}}) {
    auto v = field<int64_t>(p, key, what, path);
    if (!v)
      return v.takeError();
    *out = *v;
  }
  auto dev = field<std::string>(p, "device", what, path);
  if (!dev)
    return dev.takeError();
  a.device = *dev;
  if (p.contains("ep")) { // plans before expert parallelism have none
    auto ep = field<int>(p, "ep", what, path);
    if (!ep)
      return ep.takeError();
    a.ep = *ep;
  }
  if (p.contains("attention_dp")) {
    auto adp = field<bool>(p, "attention_dp", what, path);
    if (!adp)
      return adp.takeError();
    a.adp = *adp;
  }
  if (p.contains("speculative_decoding"))
    if (llvm::Error e = speculationOf(p["speculative_decoding"],
                                      path + "speculative_decoding.", to,
                                      what, a))
      return std::move(e);
  if (a.adp && (a.tp < 2 || a.ep != a.tp))
    return planError(what, path + "attention_dp: needs ep = tp > 1");
  if (a.tp < 1 || a.pp < 1 || a.replicas < 1)
    return planError(what, path + "tp, pp, replicas: must be at least 1");
  if (a.ep != 1 && a.ep != a.tp)
    return planError(what, path + "ep: " + std::to_string(a.ep) +
                               " is neither 1 nor the tp, " +
                               std::to_string(a.tp));
  return a;
}

/// vLLM's flags for one pool; `role` is set on a prefill/decode side.
std::string vllmFlags(const PoolArgs &a, const char *role,
                      const ExportSettings &s) {
  std::string f;
  auto add = [&](const std::string &x) { f += "  " + x + "\n"; };
  // Attention data parallelism: vLLM's data-parallel ranks with their
  // experts joined into one expert-parallel group.
  add("--tensor-parallel-size " + std::to_string(a.adp ? 1 : a.tp));
  add("--pipeline-parallel-size " + std::to_string(a.pp));
  if (a.adp)
    add("--data-parallel-size " + std::to_string(a.tp));
  if (a.ep > 1)
    add("--enable-expert-parallel");
  if (a.replicas > 1 && !s.moe && !a.adp)
    add("--data-parallel-size " + std::to_string(a.replicas));
  add("--max-num-seqs " + std::to_string(a.maxRequests));
  add("--max-num-batched-tokens " + std::to_string(a.maxTokens));
  add("--gpu-memory-utilization " + shortNumber(s.memoryFraction));
  add("--enable-chunked-prefill");
  add(s.prefixCaching ? "--enable-prefix-caching"
                      : "--no-enable-prefix-caching");
  if (s.offloadGib > 0) {
    add("--kv-offloading-size " + shortNumber(s.offloadGib));
    add("--kv-offloading-backend native");
  }
  if (s.fp8)
    add("--quantization fp8");
  if (!s.attentionBackend.empty())
    add("--attention-backend " + s.attentionBackend);
  if (s.fp8Cache)
    add("--kv-cache-dtype fp8");
  if (!a.spec.empty())
    add(vllmSpeculativeConfig(a.spec, a.draftTokens));
  if (role)
    add("--kv-transfer-config '{\"kv_connector\":\"NixlConnector\","
        "\"kv_role\":\"kv_both\"}'");
  return f;
}

/// SGLang's flags for one pool; `role` is set on a prefill/decode side.
std::string sglangFlags(const PoolArgs &a, const char *role,
                        const ExportSettings &s) {
  std::string f;
  auto add = [&](const std::string &x) { f += "  " + x + "\n"; };
  add("--tp-size " + std::to_string(a.tp));
  add("--pp-size " + std::to_string(a.pp));
  if (a.ep > 1)
    add("--ep-size " + std::to_string(a.ep));
  if (a.adp) {
    add("--enable-dp-attention");
    add("--dp-size " + std::to_string(a.tp));
  } else if (a.replicas > 1) {
    add("--dp-size " + std::to_string(a.replicas));
  }
  add("--max-running-requests " + std::to_string(a.maxRequests));
  add("--chunked-prefill-size " + std::to_string(a.maxTokens));
  add("--mem-fraction-static " + shortNumber(s.memoryFraction));
  if (!s.prefixCaching)
    add("--disable-radix-cache");
  if (s.offloadGib > 0) {
    // HiCache's host pool is sized per rank.
    add("--enable-hierarchical-cache");
    add("--hicache-size " + shortNumber(s.offloadGib / (a.tp * a.pp)));
  }
  if (!a.spec.empty()) {
    add("--speculative-algorithm " +
        std::string(a.spec == "eagle"    ? "EAGLE"
                    : a.spec == "eagle3" ? "EAGLE3"
                    : a.spec == "mtp"    ? "NEXTN"
                                         : "NGRAM"));
    if (a.spec == "eagle" || a.spec == "eagle3")
      add("--speculative-draft-model-path <" + a.spec + "-draft>");
    if (a.spec != "ngram") {
      add("--speculative-num-steps " + std::to_string(a.draftTokens));
      add("--speculative-eagle-topk 1");
    }
    add("--speculative-num-draft-tokens " + std::to_string(a.draftTokens + 1));
  }
  if (s.fp8)
    add("--quantization fp8");
  if (s.fp8Cache)
    add("--kv-cache-dtype fp8_e4m3");
  if (role) {
    add(std::string("--disaggregation-mode ") + role);
    add("--disaggregation-transfer-backend nixl");
  }
  return f;
}

/// trtllm-serve's flags; the rest is in its LLM API options file.
std::string trtllmFlags(const PoolArgs &a, const ExportSettings &s) {
  std::string f;
  auto add = [&](const std::string &x) { f += "  " + x + "\n"; };
  add("--tp_size " + std::to_string(a.tp));
  add("--pp_size " + std::to_string(a.pp));
  if (a.ep > 1)
    add("--ep_size " + std::to_string(a.ep));
  add("--max_batch_size " + std::to_string(a.maxRequests));
  add("--max_num_tokens " + std::to_string(a.maxTokens));
  add("--kv_cache_free_gpu_memory_fraction " +
      shortNumber(s.memoryFraction));
  add("--extra_llm_api_options orrery-llm-api.yaml");
  return f;
}

std::string engineFlags(const PoolArgs &a, const char *role,
                        const ExportSettings &s) {
  if (s.to == "vllm")
    return vllmFlags(a, role, s);
  if (s.to == "sglang")
    return sglangFlags(a, role, s);
  return trtllmFlags(a, s);
}

/// TensorRT-LLM takes attention DP, KV-cache block reuse (its prefix
/// caching), the host cache and speculative decoding in its LLM API
/// options file; the other targets need none.
std::string llmApiFile(const PoolArgs &a, const ExportSettings &s) {
  if (s.to != "trtllm")
    return "";
  std::string spec;
  if (a.spec == "eagle3")
    spec = "speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: " +
           std::to_string(a.draftTokens) +
           "\n  speculative_model: <eagle3-draft>\n";
  else if (a.spec == "mtp")
    spec = "speculative_config:\n  decoding_type: MTP\n  "
           "num_nextn_predict_layers: " +
           std::to_string(a.draftTokens) + "\n";
  else if (a.spec == "ngram")
    spec = "speculative_config:\n  decoding_type: NGram\n  max_draft_len: " +
           std::to_string(a.draftTokens) + "\n  max_matching_ngram_size: 3\n";
  std::string host;
  if (s.offloadGib > 0)
    host = "  host_cache_size: " +
           std::to_string(int64_t(s.offloadGib * double(1ull << 30))) + "\n";
  return std::string("cat > orrery-llm-api.yaml <<'EOF'\n") +
         (a.adp ? "enable_attention_dp: true\n" : "") +
         "kv_cache_config:\n  enable_block_reuse: " +
         (s.prefixCaching ? "true" : "false") + "\n" + host + spec + "EOF\n";
}

/// The comment lines every export starts with: model, workload, and what
/// the checkpoint must be.
std::string exportHeader(const std::string &model, const ServeRequest &r,
                         const std::string &to) {
  std::string out = "# " + to + " launch flags from an Orrery serving plan\n";
  out += "# model: " + model + "\n";
  out += "# workload: " + r.workload +
         (r.slo.empty() ? "" : ", targets " + r.slo) + "\n";
  if (to == "sglang")
    out += "# note: the plan priced vLLM v1's scheduler; SGLang's takes the "
           "same request cap and chunk size\n";
  if (r.precision == "fp8" && to == "trtllm")
    out += "# note: fp8 weights: a ModelOpt FP8 checkpoint\n";
  if (r.precision == "int8" || r.precision == "int4")
    out += "# note: " + r.precision +
           " weight-only: serve a checkpoint quantized so (AWQ or GPTQ); the "
           "engine reads the method from it\n";
  if (r.precision == "nvfp4" || r.precision == "mxfp4" ||
      r.precision == "mxfp8")
    out += "# note: " + r.precision +
           " weights and activations: serve a checkpoint quantized so "
           "(ModelOpt NVFP4, or an MX checkpoint); the engine reads the "
           "method from its quantization config\n";
  return out;
}

/// The target against the engine whose scheduler priced the plan, and the
/// settings only some targets can write.
llvm::Error exportSettingsOf(const nlohmann::json &plan,
                             const ServeRequest &r, bool split,
                             const std::string &what, ExportSettings &s) {
  const std::string &to = s.to;
  if ((to == "vllm" || to == "sglang") && r.engine != "vllm")
    return planError(what, "--to " + to + ": the plan was simulated with " +
                               r.engine + "'s scheduler; serve it again with "
                               "--engine vllm");
  if (to == "trtllm" && r.engine != "trtllm")
    return planError(what, "--to trtllm: the plan was simulated with " +
                               r.engine + "'s scheduler; serve it again with "
                               "--engine trtllm");
  if (split && to == "trtllm")
    return planError(what, "--to trtllm: a prefill/decode split needs "
                           "trtllm-serve's disaggregated configuration file, "
                           "which this exporter does not write");
  // vLLM's --data-parallel-size does not make independent replicas of a
  // mixture of experts: every replica's expert layers join one group of
  // replicas x tp ranks (tensor-parallel, or expert-parallel with
  // --enable-expert-parallel) that steps in lockstep. The plan priced
  // independent replicas, each its experts over its own tp ranks: that is
  // one vLLM instance per replica.
  if (to == "vllm") {
    if (!plan.contains("model_experts"))
      s.moe = true; // a plan from before the field: unknown, so the safe way
    else if (!plan["model_experts"].is_number_integer())
      return planError(what, "model_experts: expected an integer");
    else
      s.moe = plan["model_experts"].get<int64_t>() > 1;
  }
  s.fp8 = r.precision == "fp8";
  s.fp8Cache = r.kvCache == "fp8";
  s.prefixCaching = r.prefixCaching == "on";
  s.offloadGib = r.kvOffloadGib;
  s.memoryFraction = r.memoryFraction;
  if (const VllmMlaBackend *b = vllmMlaBackend(r.attentionBackend)) {
    if (to != "vllm")
      return planError(what, "--to " + to + ": the plan runs vLLM's " +
                                 b->vllmName +
                                 " attention backend; export it --to vllm");
    s.attentionBackend = b->vllmName;
  }
  if (s.offloadGib > 0 && split && to == "vllm")
    return planError(what, "--to vllm: KV offload beside a prefill/decode "
                           "split needs vLLM's MultiConnector, which this "
                           "exporter does not write");
  return llvm::Error::success();
}

const char *launchCommand(const std::string &to) {
  return to == "vllm"     ? "vllm serve <checkpoint>"
         : to == "sglang" ? "python -m sglang.launch_server "
                            "--model-path <checkpoint>"
                          : "trtllm-serve <checkpoint>";
}

/// One engine's launch for a plan on one pool of replicas.
std::string colocatedLaunch(const PoolArgs &a, const ExportSettings &s) {
  const std::string &to = s.to;
  std::string out =
      "# chosen: " + a.device + " tp=" + std::to_string(a.tp) +
      (a.ep > 1 ? " ep=" + std::to_string(a.ep) : "") + (a.adp ? " adp" : "") +
      " pp=" + std::to_string(a.pp) + " x" + std::to_string(a.replicas) +
      (a.spec.empty() ? std::string()
                      : " speculative " + a.spec + " k=" +
                            std::to_string(a.draftTokens)) +
      "\n";
  if (a.adp && a.replicas > 1 && to != "trtllm")
    out += "# run " + std::to_string(a.replicas) +
           " instances behind a load balancer: the data-parallel ranks "
           "here are one replica's attention ranks\n";
  out += llmApiFile(a, s);
  if (to == "trtllm" && a.replicas > 1)
    out += "# run " + std::to_string(a.replicas) +
           " instances behind a load balancer (trtllm-serve has no "
           "data-parallel flag for a dense model)\n";
  if (to == "vllm" && s.moe && a.replicas > 1)
    out += "# run " + std::to_string(a.replicas) +
           " instances behind a load balancer, each on its own " +
           std::to_string(a.tp * a.pp) +
           " GPUs: --data-parallel-size would join the replicas' experts "
           "into one group of " +
           std::to_string(a.replicas * a.tp) +
           " ranks stepping together, not the independent replicas priced\n";
  out += std::string("# use: ") + launchCommand(to) + " \"${ORRERY_ARGS[@]}\"\n";
  out += "ORRERY_ARGS=(\n" + engineFlags(a, nullptr, s) + ")\n";
  return out;
}

/// Two launches, a prefill and a decode pool, with the KV cache moving
/// between them.
std::string disaggregatedLaunch(const PoolArgs &pre, const PoolArgs &dec,
                                const ExportSettings &s) {
  const char *use = launchCommand(s.to);
  std::string out =
      "# prefill on the " + pre.device + " nodes, decode on the " +
      dec.device + " nodes; the KV cache moves between them (NIXL) and a "
      "router sends each request to a prefill instance, then a decode one\n";
  if (s.to == "vllm" && s.moe && (pre.replicas > 1 || dec.replicas > 1))
    out += "# run " + std::to_string(pre.replicas) + " prefill and " +
           std::to_string(dec.replicas) +
           " decode instances: --data-parallel-size would join a mixture of "
           "experts' replicas into one expert group\n";
  out += std::string("# use: ") + use +
         " \"${ORRERY_PREFILL_ARGS[@]}\"  (on the " + pre.device + ")\n";
  out += std::string("#      ") + use + " \"${ORRERY_DECODE_ARGS[@]}\"  (on the " +
         dec.device + ")\n";
  out += llmApiFile(pre.adp ? pre : dec, s);
  out += "ORRERY_PREFILL_ARGS=(\n" + engineFlags(pre, "prefill", s) + ")\n";
  out += "ORRERY_DECODE_ARGS=(\n" + engineFlags(dec, "decode", s) + ")\n";
  return out;
}

llvm::Expected<std::string>
exportServingPlanImpl(const nlohmann::json &plan, const std::string &to,
                      const std::string &what) {
  std::string model;
  auto request = servingRequestOf(plan, what, model);
  if (!request)
    return request.takeError();
  const nlohmann::json &chosen = plan.value("chosen", nlohmann::json());
  if (!chosen.is_object())
    return planError(what, "chosen: missing");
  bool split = chosen.value("disaggregated", false);
  ExportSettings s;
  s.to = to;
  if (llvm::Error e = exportSettingsOf(plan, *request, split, what, s))
    return std::move(e);
  std::string out = exportHeader(model, *request, to);
  if (!split) {
    auto a = exportPoolArgs(chosen, "chosen.", to, what);
    if (!a)
      return a.takeError();
    return out + colocatedLaunch(*a, s);
  }
  auto pre = exportPoolArgs(chosen.value("prefill", nlohmann::json()),
                            "chosen.prefill.", to, what);
  if (!pre)
    return pre.takeError();
  auto dec = exportPoolArgs(chosen.value("decode", nlohmann::json()),
                            "chosen.decode.", to, what);
  if (!dec)
    return dec.takeError();
  return out + disaggregatedLaunch(*pre, *dec, s);
}

} // namespace

// nlohmann::json reports a field of the wrong type by exception (a
// `disaggregated` that is not true or false): one line, never a terminate.
llvm::Expected<std::string> exportServingPlan(const nlohmann::json &plan,
                                              const std::string &to,
                                              const std::string &what) {
  try {
    return exportServingPlanImpl(plan, to, what);
  } catch (const nlohmann::json::exception &e) {
    return planError(what, std::string("malformed serving plan: ") + e.what());
  }
}

} // namespace cli
} // namespace orrery
