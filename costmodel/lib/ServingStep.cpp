//===- ServingStep.cpp - the time of one serving engine step --------------===//
//
// docs/serving.md, "One step". The workload was imported at some batch and
// sequence; every op's work divides by its tokens to give the work per
// token, which a step multiplies by the tokens it computes. What does not
// scale with tokens is priced apart: a linear layer reads its weights once
// a step whatever the tokens (a mixture-of-experts layer only the experts
// some token chose), and attention reads each request's cached keys.
//
//===----------------------------------------------------------------------===//
#include "orrery/CostModel/ServingStep.h"
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/CostModel/Serving.h"
#include "orrery/CostModel/Simulator.h"

#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cmath>

namespace orrery {

const char *servingEngineName(ServingEngine e) {
  return e == ServingEngine::Vllm ? "vllm" : "trtllm";
}

bool parseServingEngine(const std::string &name, ServingEngine &out) {
  std::string n = llvm::StringRef(name).lower();
  if (n == "vllm")
    out = ServingEngine::Vllm;
  else if (n == "trtllm" || n == "tensorrt-llm" || n == "trt-llm")
    out = ServingEngine::TensorRtLlm;
  else
    return false;
  return true;
}

// vLLM 0.14-0.34: v1/attention/backends/mla/*.py (query_len_support;
// supports_compute_capability: CUTLASS and FlashInfer MLA SM100, FlashMLA
// SM90 and SM100, Triton any); docs/specdec-sources.md, M2.
static const VllmMlaBackend kVllmMlaBackends[] = {
    {"cutlass_mla", "CUTLASS_MLA", false, "NVLink5"},
    {"flashinfer_mla", "FLASHINFER_MLA", true, "NVLink5"},
    {"flashmla", "FLASHMLA", true, "NVLink4|NVLink5"},
    {"triton_mla", "TRITON_MLA", false, ""},
};

const VllmMlaBackend *vllmMlaBackend(const std::string &name) {
  std::string n = llvm::StringRef(name).lower();
  for (const VllmMlaBackend &b : kVllmMlaBackends)
    if (n == b.name)
      return &b;
  return nullptr;
}

std::string vllmMlaBackendNames() {
  std::string out;
  for (const VllmMlaBackend &b : kVllmMlaBackends)
    out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

static llvm::Error servingError(const std::string &m) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 printableLine(m));
}

llvm::Expected<ServingPrecision>
ServingPrecision::parse(const std::string &weights,
                        const std::string &kvCache) {
  ServingPrecision p;
  std::string w = llvm::StringRef(weights).lower();
  if (w == "bf16")
    p.linear = Precision::BF16;
  else if (w == "fp16")
    p.linear = Precision::FP16;
  else if (w == "fp8")
    p.linear = Precision::FP8;
  else if (w == "mxfp8")
    p.linear = Precision::MXFP8;
  else if (w == "nvfp4")
    p.linear = Precision::NVFP4;
  else if (w == "mxfp4")
    p.linear = Precision::MXFP4;
  else if (w == "int8")
    p.weightOnlyBytes = 1;
  else if (w == "int4")
    p.weightOnlyBytes = 0.5 + 2.0 / 128; // a 16-bit scale per 128
  else
    return servingError("precision '" + weights +
                        "': expected bf16, fp16, fp8, mxfp8, nvfp4, mxfp4, "
                        "int8 or int4");
  std::string kv = llvm::StringRef(kvCache).lower();
  if (kv.empty() || kv == "auto" || kv == "bf16" || kv == "fp16")
    p.kvBytesPerElement = 2;
  else if (kv == "fp8")
    p.kvBytesPerElement = 1;
  else
    return servingError("kv cache precision '" + kvCache +
                        "': expected auto, bf16, fp16 or fp8");
  return p;
}

std::string ServingPrecision::name() const {
  if (weightOnlyBytes > 0)
    return weightOnlyBytes < 1 ? "int4" : "int8";
  return precisionName(linear);
}

llvm::Expected<ServingReplica> servingReplicaOn(const NodeGroup &g, int tp,
                                                int pp, int ep,
                                                bool attentionDp) {
  if (tp < 1 || pp < 1)
    return servingError("serving: tp and pp must be at least 1");
  if (attentionDp && (tp < 2 || ep != tp))
    return servingError("serving: adp=1 (attention data parallelism) "
                        "spreads the requests over the tp ranks and the "
                        "experts whole over them: it needs tp > 1 and "
                        "ep=tp (tp=" +
                        std::to_string(tp) + ", ep=" + std::to_string(ep) +
                        ")");
  if (ep != 1 && ep != tp)
    return servingError("serving: ep=" + std::to_string(ep) +
                        ": expert parallelism spans the tensor-parallel "
                        "ranks (ep=1 or ep=tp=" +
                        std::to_string(tp) + ")");
  if (tp > g.scaleUpDevices())
    return servingError(
        "serving: tp=" + std::to_string(tp) + " spans more than one " +
        (g.domainNodes > 1 ? "scale-up domain" : "node") + " of " +
        std::to_string(g.scaleUpDevices()) + " " + g.device->name +
        " (tensor parallelism stays inside "
        "a node's link; use pp across nodes)");
  if (int64_t(tp) * pp > int64_t(g.count) * g.devicesPerNode)
    return servingError("serving: tp x pp = " + std::to_string(tp * pp) +
                        " is more than the " +
                        std::to_string(g.count * g.devicesPerNode) + " " +
                        g.device->name + " there are");
  ServingReplica r;
  r.tp = tp;
  r.pp = pp;
  r.ep = ep;
  r.attentionDp = attentionDp;
  r.device = g.device;
  r.tpGroup = groupShapeIn(g, 1, tp);
  r.stageLink = groupShapeIn(g, tp, 2);
  return r;
}

namespace {
/// Instances of each layer kind on each stage, the stages split as
/// training splits them (Workload::layersPerChunk).
std::vector<std::vector<int64_t>> stageCounts(const Workload &w, int pp) {
  std::vector<std::vector<int64_t>> perKind(
      w.kinds.size(), std::vector<int64_t>(size_t(pp), 0));
  std::vector<int> sizes = w.layersPerChunk(pp);
  size_t stage = 0;
  int left = sizes.empty() ? 0 : sizes[0];
  for (const LayerRun &run : w.layers)
    for (int64_t i = 0; i < run.count; ++i) {
      while (left == 0 && stage + 1 < sizes.size())
        left = sizes[++stage];
      ++perKind[run.kind][stage];
      --left;
    }
  return perKind;
}
} // namespace

/// What a replica must be for `w` to be served on it.
static llvm::Error checkReplica(const Workload &w,
                                const ServingReplica &replica,
                                const ServingPrecision &precision) {
  if (!replica.device)
    return servingError("serving: the replica has no device");
  const DeviceSpec &dev = *replica.device;
  if (double(w.batchSize) * double(w.tokensPerSample) <= 0)
    return servingError("serving: the model's first input is not a [batch, "
                        "sequence] tensor of token ids, so there is no "
                        "token to serve");
  std::string problem = dev.precisionProblem(precision.linear);
  if (!problem.empty())
    return servingError("serving: " + problem);
  if (precision.linear == Precision::FP8 && !dev.hasTensorCores(Precision::FP8))
    return servingError("serving: the " + dev.name +
                        " has no fp8 tensor cores (serve it in bf16 or fp16)");
  int longest = 0;
  for (const LayerRun &run : w.layers)
    longest = std::max<int>(longest, int(run.count));
  if (replica.pp > longest)
    return servingError("serving: pp=" + std::to_string(replica.pp) +
                        " is more stages than the model's " +
                        std::to_string(longest) + " repeated layers");

  return llvm::Error::success();
}

/// Whether some attention of the model is causal (a decoder's).
static bool anyCausal(const Workload &w) {
  for (const LayerKind &k : w.kinds)
    for (const OpCost &op : k.ops)
      if (op.attentionKvHeads > 0 && op.attentionCausal)
        return true;
  return false;
}

/// The engines split attention heads evenly over tp: the query heads
/// divided, the key-value heads divided too or (fewer than tp) each
/// replicated on tp / kv ranks (vLLM's and TensorRT-LLM's rule).
static llvm::Error checkHeads(const OpCost &op, const LayerKind &k, int tp) {
  int64_t q = op.attentionQueryHeads, kv = op.attentionKvHeads;
  if (tp <= 1)
    return llvm::Error::success();
  if (q % tp != 0)
    return servingError("serving: tp=" + std::to_string(tp) +
                        " does not divide the " + std::to_string(q) +
                        " attention heads of layer kind '" + k.name +
                        "' (the engines split heads evenly over tp)");
  if (kv >= tp ? kv % tp != 0 : tp % kv != 0)
    return servingError(
        "serving: tp=" + std::to_string(tp) + " and the " + std::to_string(kv) +
        " key-value heads of layer kind '" + k.name +
        "': tp must divide them, or be a multiple of them (each then "
        "replicated on tp/" +
        std::to_string(kv) + " ranks)");
  return llvm::Error::success();
}

/// Op `op` of layer kind `k` as one step prices it per token on one rank
/// (`head`: the output head; `repeated`: a layer that quantizes).
llvm::Error StepPricer::tokenOp(const OpCost &op, const LayerKind &k, bool head,
                                bool repeated, double tokens,
                                const ServingPrecision &precision, TokenOp &t,
                                bool &anyAttention, bool &anyExperts) {
  bool rowParallel = op.tpAllReduceForwardBytes > 0;
  // The output head is vocabulary-parallel (each rank 1/tp of the
  // logits, gathered for sampling). Under attention DP every op but the
  // experts' runs whole on each rank, for its own requests.
  bool vocabParallel = head && op.contraction && op.weighted;
  int opTp = replica_.attentionDp && op.experts <= 1 ? 1 : replica_.tp;
  double tp = opTp;
  double split = op.tensorParallel || vocabParallel ? tp : 1;
  t.flopsPerToken = double(op.forwardFlops) / tokens / split;
  t.allReduceBytesPerToken =
      opTp > 1 ? double(op.tpAllReduceForwardBytes) / tokens : 0;
  if (vocabParallel && opTp > 1)
    t.logitsGatherBytesPerToken = double(op.gemmN) * 2;
  // Training's vocabulary-parallel cross-entropy all-reduces its row
  // maxima and sums; serving samples from the gathered logits instead (the
  // softmax over them stays).
  if (op.name == kImpliedLossOpName)
    t.allReduceBytesPerToken = 0;
  if (op.attentionKvHeads > 0) {
    if (auto e = checkHeads(op, k, opTp))
      return e;
    anyAttention = true;
    t.kind = TokenOp::Attention;
    t.cls = KernelClass::Attention;
    t.heads = double(op.attentionQueryHeads) / tp;
    t.kvHeads = kvHeadsPerRank(op, opTp);
    t.headDim = double(op.attentionHeadDim);
    t.valueDim = double(op.attentionValueWidth());
    t.latentDim = double(op.attentionLatentDim);
    t.ropeDim = double(op.attentionRopeDim);
    if (op.attentionWindow > 0) {
      if (window_ > 0 && window_ != op.attentionWindow)
        return servingError(
            "serving: the model's attention layers slide windows of " +
            std::to_string(window_) + " and " +
            std::to_string(op.attentionWindow) +
            " keys; one window (beside full attention) is priced");
      window_ = op.attentionWindow;
      t.windowed = true;
    }
  } else if (op.contraction && op.weighted) {
    t.kind = TokenOp::Linear;
    t.cls = KernelClass::Gemm;
    // The quantized formats (fp8, mxfp8, nvfp4, mxfp4: weights and
    // activations, as ModelOpt's checkpoints run) in the repeated layers.
    bool low = (isFp8(precision.linear) || isFp4(precision.linear)) && repeated;
    t.precision = low                                   ? precision.linear
                  : precision.linear == Precision::FP16 ? Precision::FP16
                                                        : Precision::BF16;
    double products = op.experts > 1 ? double(op.gemmBatch) : 1.0;
    double bytesPerWeight = precision.weightOnlyBytes > 0 && repeated
                                ? precision.weightOnlyBytes
                                : precisionBytes(t.precision);
    t.weightBytes =
        products * double(op.gemmK) * double(op.gemmN) * bytesPerWeight / split;
    double in = double(op.activationInputBytes) / tokens,
           outB = double(op.outputBytes) / tokens;
    t.bytesPerToken =
        split > 1 ? (rowParallel ? in / tp + outB : in + outB / tp) : in + outB;
    if (op.experts > 1) {
      anyExperts = true;
      if (replica_.ep > op.experts)
        return servingError("serving: ep=" + std::to_string(replica_.ep) +
                            " is more ranks than the " +
                            std::to_string(op.experts) + " experts of '" +
                            op.name + "' (each rank keeps whole experts)");
      t.experts = op.experts;
      double routed = double(op.gemmBatch) * double(op.gemmM) / tokens;
      t.topK = std::max<int>(1, int(std::lround(routed)));
      // The engines sum each token's top-k expert outputs, weighted by the
      // router, before the tensor-parallel all-reduce (vLLM's and SGLang's
      // fused_moe, then tensor_model_parallel_all_reduce; TensorRT-LLM's
      // MoE finalize, then its all-reduce): one row a token is reduced, not
      // one a routed copy as the graph's row-parallel product writes them.
      if (routed > 1)
        t.allReduceBytesPerToken /= routed;
      // Whole experts, E/ep of them a rank: the same bytes and work a
      // rank on average as 1/tp of each, spread unevenly (kindSeconds).
      t.expertParallel = split > 1 ? replica_.ep : 1;
      // Attention DP: the ranks' tokens gathered in and scattered back
      // out instead of the all-reduce (TensorRT-LLM's allgather and
      // reducescatter around its MoE).
      if (replica_.attentionDp) {
        t.gatherBytesPerToken = t.allReduceBytesPerToken;
        t.allReduceBytesPerToken = 0;
      }
    }
  } else if (op.contraction && op.attentionCore) {
    return servingError(
        "serving: layer kind '" + k.name +
        "' computes attention as separate products (" + op.name +
        "); serving prices attention as one fused kernel over the KV "
        "cache: import with --kernels fused");
  } else {
    t.kind = TokenOp::Other;
    t.cls = op.contraction ? KernelClass::Gemm : op.kernelClass;
    double moved = double(op.bytesRead + op.bytesWritten);
    if (op.fusesWithPrevious) {
      moved = std::max(0.0, moved - 2.0 * op.fusedIntermediateBytes);
      t.kernels = 0;
    }
    t.bytesPerToken = moved / tokens / split;
  }
  return llvm::Error::success();
}

llvm::Expected<StepPricer> StepPricer::create(const Workload &w,
                                              const ServingReplica &replica,
                                              const ServingPrecision &precision,
                                              ServingEngine engine) {
  if (auto e = checkReplica(w, replica, precision))
    return std::move(e);
  double tokens = double(w.batchSize) * double(w.tokensPerSample);
  const DeviceSpec &dev = *replica.device;
  StepPricer p;
  p.replica_ = replica;
  p.engine_ = engine;
  p.kvBytesPerElement_ = precision.kvBytesPerElement;
  p.precision_ = precision;
  p.tokens_ = tokens;
  static const Assumptions assumptions;
  p.kernels_ = &assumptions.kernelsFor(dev);
  auto stages = stageCounts(w, replica.pp);
  size_t headKind = w.layers.size() > 1 ? w.layers.back().kind : size_t(-1);
  bool anyAttention = false, anyExperts = false;
  for (size_t ki = 0; ki < w.kinds.size(); ++ki) {
    const LayerKind &k = w.kinds[ki];
    Kind out;
    out.perStage = stages[ki];
    out.head = ki == headKind && k.count == 1;
    out.outputBytesPerToken = double(k.outputBytes) / tokens;
    bool repeated =
        k.count > 1 || (!k.variantOf.empty()); // a first/last layer variant
    for (const OpCost &op : k.ops) {
      if (op.view)
        continue;
      TokenOp t;
      if (auto e = p.tokenOp(op, k, out.head, repeated, tokens, precision, t,
                             anyAttention, anyExperts))
        return std::move(e);
      out.ops.push_back(t);
    }
    if (out.head)
      p.headKind_ = int(ki);
    p.kinds_.push_back(std::move(out));
  }
  if (!anyAttention)
    return servingError("serving: the model has no fused attention op "
                        "keeping a KV cache");
  if (!anyCausal(w))
    return servingError(
        "serving: no attention layer of the model is causal: an encoder (as "
        "BERT) reads whole inputs and generates no tokens, and serving "
        "prices decoder generation over a KV cache");
  KvCachePerToken kv =
      kvCachePerToken(w, 1, replica.attentionDp ? 1 : replica.tp);
  p.windowedKvFraction_ = kv.bytes > 0 ? kv.windowedBytes / kv.bytes : 0;
  if (replica.attentionDp && !anyExperts)
    return servingError("serving: adp=1: the model has no mixture-of-experts "
                        "layer; attention data parallelism is for one (a "
                        "dense model's replicas are replicas=)");
  if (replica.ep > 1 && !anyExperts)
    return servingError("serving: ep=" + std::to_string(replica.ep) +
                        ": the model has no mixture-of-experts layer to "
                        "split by experts");
  return p;
}

double StepPricer::kindSeconds(const Kind &k, const StepBatch &all,
                               const StepBatch &rank, StepTime &t) const {
  const DeviceSpec &dev = *replica_.device;
  const KernelModel &km = *kernels_;
  double total = 0;
  for (const TokenOp &op : k.ops) {
    // The experts take every rank's tokens; under attention DP the rest
    // of the layer runs on its rank's share (`rank` is `all` otherwise).
    const StepBatch &b = op.experts > 1 ? all : rank;
    double tokens =
        k.head ? double(b.sampled + b.draftTokens) : double(b.tokens());
    if (tokens <= 0)
      continue;
    double s = 0;
    switch (op.kind) {
    case TokenOp::Linear: {
      double flops = op.flopsPerToken * tokens;
      double act = op.bytesPerToken * tokens;
      if (op.experts > 1 && op.expertParallel > 1) {
        s = expertParallelSeconds(op, tokens, act);
      } else if (op.experts > 1) {
        // Each token picks topK of the experts: the expected number that
        // some token of the step chose run as one grouped GEMM, each
        // reading its weights.
        double e = op.experts;
        double active = e * (1.0 - std::pow(1.0 - double(op.topK) / e, tokens));
        active = std::max(1.0, active);
        s = expertGemmSeconds(op, flops, op.weightBytes * active / e, act);
      } else {
        s = kernelSeconds(dev, km, op.precision, flops, op.weightBytes + act,
                          KernelClass::Gemm, op.kernels, op.weightBytes);
      }
      t.linearS += s;
      break;
    }
    case TokenOp::Attention: {
      // Each head's query-key and value widths: as the graph has them, or
      // for a latent attention's decode the absorbed form (FlashMLA,
      // TensorRT-LLM's MLA generation kernel): every head's query against
      // the cached latent and rotary part, its output in the latent.
      double width = op.headDim + op.valueDim;
      bool latent = op.latentDim > 0;
      double cached = latent ? op.latentDim + op.ropeDim : width;
      double decodeWidth = latent ? cached + op.latentDim : width;
      double kvPerToken = op.kvHeads * cached * kvBytesPerElement_;
      // One kernel over `queries` new tokens that read `keys` cached ones
      // and compute `pairs` query-key products of `w` wide heads: a
      // prefill's chunks, or the decodes (one query per request against
      // its whole context, the cache streamed as FlashDecoding / paged
      // attention do). A latent prefill attends with full heads, its
      // earlier chunks' keys and values up-projected from the cache (a
      // GEMM through kv_b_proj, its 16-bit output written and read back).
      auto kernel = [&](double queries, double keys, double pairs, double w) {
        double flops = 2 * w * op.heads * pairs;
        double bytes = keys * kvPerToken +
                       queries * (op.heads * w * 2 + kvPerToken);
        if (latent && w == width) {
          double expanded = std::max(0.0, keys - queries) * op.heads *
                            (op.headDim - op.ropeDim + op.valueDim);
          flops += 2 * op.latentDim * expanded;
          bytes += 2 * expanded * 2;
        }
        return attentionSeconds(dev, km, Precision::BF16, flops, bytes,
                                pairs / queries, false);
      };
      // vLLM's cascade attention: every query of the step against the
      // shared prefix in one kernel that reads it once, then each
      // request's attention over its own keys beyond it.
      StepBatch own = b;
      if (cascades(op, b)) {
        double q = double(b.tokens()), common = b.commonPrefixKeys;
        s += kernel(q, common, q * common, width);
        own = b.suffixBeyond(common);
      }
      if (own.prefillTokens > 0)
        s += op.windowed
                 ? kernel(double(own.prefillTokens), own.prefillKeysWindowed,
                          own.prefillPairsWindowed, width)
                 : kernel(double(own.prefillTokens), own.prefillKeys,
                          own.prefillPairs, width);
      // A request's 1 + k queries (its token and the drafts it verifies)
      // read its keys once.
      double queries = double(own.decodeRequests + own.draftTokens);
      double perRequest =
          own.decodeRequests > 0 ? queries / double(own.decodeRequests) : 1;
      // A backend whose decode kernel takes one query a request runs the
      // verification's 1 + k as a prefill over the whole context.
      double w = latent && verifyAsPrefill_ && own.draftTokens > 0
                     ? width
                     : decodeWidth;
      if (own.decodeRequests > 0)
        s += op.windowed
                 ? kernel(queries, own.decodeKeysWindowed,
                          own.decodeKeysWindowed * perRequest, w)
                 : kernel(queries, own.decodeKeys,
                          own.decodeKeys * perRequest, w);
      t.attentionS += s;
      break;
    }
    case TokenOp::Other:
      s = kernelSeconds(dev, km, Precision::BF16, op.flopsPerToken * tokens,
                        op.bytesPerToken * tokens, op.cls, op.kernels);
      t.otherS += s;
      break;
    }
    total += s;
    if (op.allReduceBytesPerToken > 0) {
      double c =
          collectiveTime(CollectiveKind::AllReduce,
                         op.allReduceBytesPerToken * tokens, replica_.tpGroup);
      t.communicationS += c;
      total += c;
    }
    if (op.logitsGatherBytesPerToken > 0) {
      double c = collectiveTime(CollectiveKind::AllGather,
                                op.logitsGatherBytesPerToken * tokens,
                                replica_.tpGroup);
      t.communicationS += c;
      total += c;
    }
    if (op.gatherBytesPerToken > 0) {
      double bytes = op.gatherBytesPerToken * tokens;
      double c =
          collectiveTime(CollectiveKind::AllGather, bytes, replica_.tpGroup) +
          collectiveTime(CollectiveKind::ReduceScatter, bytes,
                         replica_.tpGroup);
      t.communicationS += c;
      total += c;
    }
  }
  return total;
}

void StepBatch::addPrefill(double p, double q, double window) {
  prefillPairs += q * (p + (q + 1) / 2);
  prefillKeys += p + q;
  if (window <= 0)
    return;
  // Query i (0-based) of the chunk sees min(p + i + 1, window) keys: the
  // ramp up to the window, then window each.
  double ramp = std::clamp(window - p, 0.0, q); // queries below the window
  prefillPairsWindowed += ramp * (p + (ramp + 1) / 2) + (q - ramp) * window;
  prefillKeysWindowed += std::min(p + q, q + window - 1);
}

StepBatch StepBatch::perRank(int ranks) const {
  if (ranks <= 1)
    return *this;
  auto share = [ranks](int64_t n) { return (n + ranks - 1) / ranks; };
  StepBatch r = *this;
  r.prefillTokens = share(prefillTokens);
  r.prefillRequests = share(prefillRequests);
  r.decodeRequests = share(decodeRequests);
  r.draftTokens = share(draftTokens);
  r.sampled = share(sampled);
  for (double *sum : {&r.prefillPairs, &r.prefillKeys, &r.decodeKeys,
                      &r.prefillPairsWindowed, &r.prefillKeysWindowed,
                      &r.decodeKeysWindowed})
    *sum /= ranks;
  return r;
}

StepBatch StepBatch::suffixBeyond(double common) const {
  StepBatch r = *this;
  // Every chunk starts at or past the prefix: each of its q queries sees
  // `common` keys fewer, and reads that many fewer.
  r.prefillPairs -= double(prefillTokens) * common;
  r.prefillKeys -= double(prefillRequests) * common;
  r.decodeKeys -= double(decodeRequests) * common;
  r.commonPrefixKeys = 0;
  return r;
}

void StepBatch::addDecode(double context, double window) {
  decodeKeys += context;
  if (window > 0)
    decodeKeysWindowed += std::min(context, window);
}

/// A mixture-of-experts GEMM with its experts split whole over `ep` ranks:
/// the step waits for the busiest rank. The tokens' topK choices land on
/// the ranks as a multinomial draw (mean A/ep of A = tokens x topK, the
/// busiest about sqrt(2 ln ep) standard deviations above it); that rank
/// reads every one of its E/ep experts some choice picked, whole, and
/// computes its choices at the full expert width. Small decode batches
/// read fewer expert slices under tensor parallelism; large ones run
/// wider, more efficient GEMMs under expert parallelism.
double StepPricer::expertParallelSeconds(const TokenOp &op, double tokens,
                                         double act) const {
  double ep = op.expertParallel, topK = op.topK;
  double choices = tokens * topK;
  double mean = choices / ep;
  double busiest = std::min(
      choices, mean + std::sqrt(mean * (1 - 1 / ep) * 2 * std::log(ep)));
  double local = double(op.experts) / ep;
  double active =
      std::max(1.0, local * (1.0 - std::pow(1.0 - 1.0 / local, busiest)));
  // op's per-token work and weights are a rank's average share.
  double flops = op.flopsPerToken * ep / topK * busiest;
  double weights = op.weightBytes * ep / double(op.experts) * active;
  double moved = act * busiest / std::max(mean, 1e-9);
  return expertGemmSeconds(op, flops, weights, moved);
}

/// The step's active experts run as one grouped GEMM (TensorRT-LLM's and vLLM's
/// fused MoE kernels, CUTLASS's grouped GEMM): one kernel over all their
/// products' tiles, `flops` and `bytes` (the weights it reads and the
/// activations it moves) at the efficiency of that kernel, not of each
/// product launched apart.
double StepPricer::expertGemmSeconds(const TokenOp &op, double flops,
                                     double weights, double moved) const {
  const KernelModel &km = *kernels_;
  return kernelSeconds(*replica_.device, km, op.precision, flops,
                       weights + moved, KernelClass::Gemm, op.kernels,
                       weights);
}

bool StepPricer::cascades(const TokenOp &op, const StepBatch &b) const {
  // vllm/v1/attention/backends/flash_attn.py, use_cascade_attention: a
  // prefix of 256 tokens or more shared by 8 requests or more, not with a
  // sliding window (nor a latent attention's backends, which have none).
  double common = b.commonPrefixKeys;
  int64_t requests = b.prefillRequests + b.decodeRequests;
  if (engine_ != ServingEngine::Vllm || common < 256 || requests < 8 ||
      op.windowed || op.latentDim > 0)
    return false;
  // Without FlashDecoding (a prefill in the step, or one query head per kv
  // head) cascade attention is taken; with it, vLLM compares the thread
  // blocks' waves over the prefix's 128-key tiles of each way.
  double perKv = std::max(1.0, std::floor(op.heads / op.kvHeads));
  int sms = replica_.device->smCount;
  if (b.prefillTokens > 0 || perKv <= 1)
    return true;
  if (sms <= 0)
    return false; // the comparison needs the device's SMs
  auto cdiv = [](double a, double d) { return std::ceil(a / d); };
  double tiles = cdiv(common, 128);
  double cascade = cdiv(op.heads * cdiv(double(requests), 128), sms) * tiles;
  double flashDecoding =
      cdiv(double(requests) * op.kvHeads * cdiv(perKv, 128) * tiles, sms);
  return cascade < flashDecoding;
}

StepTime StepPricer::price(const StepBatch &b) const {
  StepTime t;
  if (b.tokens() <= 0)
    return t;
  // Each kind once (a layer of a kind costs the same wherever it is),
  // then the stages as sums of their layers.
  StepBatch rank = b.perRank(replica_.attentionDp ? replica_.tp : 1);
  std::vector<double> perKind(kinds_.size());
  std::vector<StepTime> parts(kinds_.size());
  for (size_t i = 0; i < kinds_.size(); ++i)
    perKind[i] = kindSeconds(kinds_[i], b, rank, parts[i]);
  int pp = replica_.pp;
  double latency = 0, slowest = 0;
  int64_t kernels = 0;
  for (int s = 0; s < pp; ++s) {
    double stage = 0;
    for (size_t i = 0; i < kinds_.size(); ++i)
      stage += double(kinds_[i].perStage[size_t(s)]) * perKind[i];
    latency += stage;
    slowest = std::max(slowest, stage);
  }
  for (size_t i = 0; i < kinds_.size(); ++i) {
    double n = 0;
    for (int64_t c : kinds_[i].perStage)
      n += double(c);
    t.linearS += n * parts[i].linearS;
    t.attentionS += n * parts[i].attentionS;
    t.otherS += n * parts[i].otherS;
    t.communicationS += n * parts[i].communicationS;
    int perInstance = 0;
    for (const TokenOp &op : kinds_[i].ops)
      perInstance += op.kind == TokenOp::Attention
                         ? (b.prefillTokens > 0) + (b.decodeRequests > 0)
                         : op.kernels;
    kernels += int64_t(n) * perInstance;
  }
  // Stage to stage: the activations of the step's tokens.
  if (pp > 1) {
    double bytes = 0;
    for (const Kind &k : kinds_)
      if (k.perStage.front() > 0 && !k.head)
        bytes = std::max(bytes, k.outputBytesPerToken);
    double send =
        collectiveTime(CollectiveKind::SendRecv, bytes * double(b.tokens()),
                       replica_.stageLink);
    latency += (pp - 1) * send;
    t.communicationS += (pp - 1) * send;
  }
  // The host (docs/serving.md, "The host"): TensorRT-LLM enqueues a
  // step's kernels from C++ ahead of the GPU; vLLM replays a CUDA graph for
  // a decode-only step of up to 512 requests and otherwise dispatches each
  // op from Python, which the GPU waits for when its kernels are shorter.
  // Both spend a fixed time a step scheduling, preparing inputs and
  // handing out the sampled tokens.
  static const Assumptions assumptions;
  double host = 0;
  if (engine_ == ServingEngine::Vllm) {
    // vLLM captures graphs by the step's tokens (up to 512), a
    // speculative step's uniform 1 + k a request included.
    bool graph = b.prefillTokens == 0 && b.tokens() <= 512;
    host = kVllmStepHostS;
    if (!graph) {
      double dispatch = double(kernels) * assumptions.hostDispatchS / pp;
      if (dispatch > slowest) {
        double wait = dispatch - slowest;
        latency += wait * pp;
        slowest = dispatch;
      }
    }
  } else {
    host = kTrtllmStepHostS;
  }
  t.draftS = draftSeconds(b);
  latency += t.draftS;
  slowest += t.draftS;
  t.hostS = host;
  t.latencyS = latency + host;
  t.intervalS = (pp > 1 ? slowest : latency) + host;
  return t;
}

llvm::Error StepPricer::setSpeculation(const Workload &w,
                                       const Speculation &s) {
  spec_ = s;
  draftKind_ = -1;
  if (!s.on())
    return llvm::Error::success();
  if (replica_.pp > 1)
    return servingError("serving: speculative decoding with pipeline "
                        "parallelism (pp=" + std::to_string(replica_.pp) +
                        ") is not modelled (vLLM up to 0.15 refuses it)");
  if (s.draftsOnDevice()) {
    draftKind_ = draftLayerKind(w, s.method);
    if (draftKind_ < 0 || headKind_ < 0)
      return servingError(std::string("serving: --speculative ") +
                          s.methodName() +
                          ": the model has no repeated decoder layer and "
                          "output head for a drafter");
    // The drafter's layer at its own precision.
    ServingPrecision at = precision_;
    at.linear = draftPrecision(s.method, precision_.linear);
    if (at.linear != precision_.linear)
      at.weightOnlyBytes = 0;
    const LayerKind &k = w.kinds[size_t(draftKind_)];
    draft_ = Kind();
    bool anyAttention = false, anyExperts = false;
    for (const OpCost &op : k.ops) {
      if (op.view)
        continue;
      TokenOp t;
      if (auto e = tokenOp(op, k, false, true, tokens_, at, t, anyAttention,
                           anyExperts))
        return e;
      draft_.ops.push_back(t);
    }
  }
  return llvm::Error::success();
}

/// vLLM's EagleProposer: after the verification, one pass of the draft
/// layer over every token the target computed (its output head at one
/// position a drafting request), then k - 1 passes of one token a request.
/// Each drafting request is one that sampled this step.
double StepPricer::draftSeconds(const StepBatch &b) const {
  if (draftKind_ < 0 || b.sampled <= 0)
    return 0;
  int ranks = replica_.attentionDp ? replica_.tp : 1;
  auto pass = [&](const StepBatch &layer, const StepBatch &head) {
    StepTime scratch;
    return kindSeconds(draft_, layer, layer.perRank(ranks), scratch) +
           kindSeconds(kinds_[size_t(headKind_)], head, head.perRank(ranks),
                       scratch);
  };
  StepBatch first = b;
  first.commonPrefixKeys = 0;
  StepBatch firstHead = first;
  firstHead.draftTokens = 0;
  double total = pass(first, firstHead);
  if (spec_.k > 1) {
    // One token a drafting request over its context (the generating
    // requests' keys, or a finished prompt's).
    StepBatch next;
    next.decodeRequests = next.sampled = b.sampled;
    next.decodeKeys = b.decodeRequests > 0
                          ? b.decodeKeys * double(b.sampled) /
                                double(b.decodeRequests)
                          : b.prefillKeys;
    next.decodeKeysWindowed = b.decodeRequests > 0
                                  ? b.decodeKeysWindowed * double(b.sampled) /
                                        double(b.decodeRequests)
                                  : b.prefillKeysWindowed;
    total += double(spec_.k - 1) * pass(next, next);
  }
  return total;
}

} // namespace orrery
