//===- Strategy.cpp - parse and validate strategies ----------------------===//
#include "orrery/CostModel/Strategy.h"
#include "orrery/CostModel/Cluster.h"
#include "orrery/CostModel/Errors.h"
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/CostModel/Workload.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

namespace orrery {

static llvm::Error err(const std::string &msg) { return inputError(msg); }

const char *scheduleName(Schedule s) {
  return s == Schedule::GPipe                ? "gpipe"
         : s == Schedule::OneFOneB           ? "1f1b"
         : s == Schedule::ZeroBubbleH1       ? "zb-h1"
         : s == Schedule::ZeroBubble2p       ? "zb-2p"
         : s == Schedule::ZeroBubbleV        ? "zb-v"
         : s == Schedule::DualPipeV          ? "dualpipev"
         : s == Schedule::DualPipe           ? "dualpipe"
         : s == Schedule::LayerParallelMgrit ? "mgrit"
                                             : "interleaved";
}

const char *recomputeName(Recompute r) {
  return r == Recompute::None        ? "none"
         : r == Recompute::Selective ? "selective"
         : r == Recompute::Op        ? "op"
                                     : "full";
}

const char *cpCommName(CpComm c) {
  return c == CpComm::Ring ? "ring" : "all-to-all";
}

const char *moeDispatcherName(MoeDispatcher d) {
  return d == MoeDispatcher::AllToAll ? "alltoall" : "deepep";
}

const char *fp8RecipeName(Fp8Recipe r) {
  return r == Fp8Recipe::Delayed      ? "delayed"
         : r == Fp8Recipe::Tensorwise ? "tensorwise"
                                      : "blockwise";
}

std::optional<Fp8Recipe> fp8RecipeFromName(const std::string &name) {
  for (Fp8Recipe r :
       {Fp8Recipe::Delayed, Fp8Recipe::Tensorwise, Fp8Recipe::Blockwise})
    if (name == fp8RecipeName(r))
      return r;
  return std::nullopt;
}

std::optional<Schedule> scheduleFromName(const std::string &name) {
  for (Schedule s :
       {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved,
        Schedule::ZeroBubbleH1, Schedule::ZeroBubble2p, Schedule::ZeroBubbleV,
        Schedule::DualPipeV,
        Schedule::DualPipe, Schedule::LayerParallelMgrit})
    if (name == scheduleName(s))
      return s;
  return std::nullopt;
}

const char *const kRecomputeModuleNames[6] = {
    "core_attn", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts"};

std::string recomputeModuleBits(const std::vector<std::string> &names,
                                unsigned &bits) {
  bits = 0;
  if (names.empty())
    return "recompute_modules needs module names joined by '+' (core_attn, "
           "mla_up_proj, moe_act, mlp, moe, shared_experts)";
  for (const std::string &name : names) {
    unsigned bit = 0;
    for (unsigned b = 0; b < 6; ++b)
      if (name == kRecomputeModuleNames[b])
        bit = 1u << b;
    if (name == "layernorm")
      return "recompute_modules: layernorm is not priced (Megatron discards "
             "the unfused norms' outputs; here each norm's output is kept as "
             "the next product's input); leave it out";
    if (!bit)
      return "recompute_modules: '" + printableLine(name) +
             "' is not one of core_attn, mla_up_proj, moe_act, mlp, moe, "
             "shared_experts";
    bits |= bit;
  }
  return "";
}

std::optional<Recompute> recomputeFromName(const std::string &name) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full,
                      Recompute::Op})
    if (name == recomputeName(r))
      return r;
  return std::nullopt;
}

std::optional<Precision> precisionFromName(const std::string &name) {
  for (Precision p : kAllPrecisions)
    if (name == precisionName(p))
      return p;
  return std::nullopt;
}

int Strategy::degree(const std::string &axis) const {
  return axis == "tp"   ? tp
         : axis == "cp" ? cp
         : axis == "dp" ? dp
         : axis == "pp" ? pp
                        : 1;
}

int Strategy::stride(const std::string &axis) const {
  int st = 1;
  for (const std::string &a : order) {
    if (a == axis)
      return st;
    st *= degree(a);
  }
  return st;
}

std::string Strategy::overlapName() const {
  std::string out;
  for (auto [on, name] :
       {std::pair<bool, const char *>{overlapGradReduce, "grad"},
        {overlapParamGather, "param"},
        {overlapTpComm, "tp"},
        {overlapP2p, "p2p"},
        {overlapEp, "ep"}})
    if (on)
      out += (out.empty() ? "" : "+") + std::string(name);
  return out.empty() ? "none" : out;
}

std::string Strategy::str() const {
  std::string s = "tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) +
                  ",dp=" + std::to_string(dp) + ",cp=" + std::to_string(cp) +
                  ",ep=" + std::to_string(ep) +
                  ",sp=" + (sequenceParallel ? "1" : "0") +
                  ",vpp=" + std::to_string(virtualStages) +
                  ",schedule=" + scheduleName(schedule) +
                  ",mbs=" + std::to_string(microBatch) +
                  ",gbs=" + std::to_string(globalBatch) +
                  ",zero=" + std::to_string(zeroStage) +
                  ",recompute=" + recomputeName(recompute) +
                  ",precision=" + precisionName(precision);
  if (offloadOptimizer || offloadActivations)
    s += std::string(",offload=") + (offloadOptimizer && offloadActivations
                                         ? "both"
                                     : offloadOptimizer ? "optimizer"
                                                        : "activations");
  if (order != std::vector<std::string>{"tp", "cp", "dp", "pp"}) {
    s += ",order=";
    for (size_t i = 0; i < order.size(); ++i)
      s += (i ? "-" : "") + order[i];
  }
  if (recomputeLayers > 0)
    s += ",recompute_layers=" + std::to_string(recomputeLayers);
  if (schedule == Schedule::LayerParallelMgrit)
    s += ",mg_coarsen=" + std::to_string(mgCoarsening) +
         ",mg_iters=" + std::to_string(mgIterations);
  if (chunkParams > 0)
    s += ",chunks=" + std::to_string(chunkParams / 1000000);
  if (phantomGhosts > 0)
    s += ",phantom=" + std::to_string(phantomGhosts);
  if (subnetworkFraction > 0) {
    s += ",sdp=" + printableNumber(subnetworkFraction);
    if (subnetworkBackwardMask)
      s += ",sdp_mask=backward";
  }
  if (recomputeModules && recomputeModules != kRecomputeCoreAttn) {
    s += ",recompute_modules=";
    bool first = true;
    for (unsigned b = 0; b < 6; ++b)
      if (recomputeModules & (1u << b)) {
        s += (first ? "" : "+") + std::string(kRecomputeModuleNames[b]);
        first = false;
      }
  }
  if (!recomputeKinds.empty()) {
    s += ",recompute_kinds=";
    for (size_t i = 0; i < recomputeKinds.size(); ++i)
      s += (i ? "+" : "") + recomputeKinds[i];
  }
  if (tpBatchSplit)
    s += ",tpbatch=1";
  if (expertsFolded())
    s += ",etp=" + std::to_string(expertTp());
  if (moeImbalance != 1)
    s += ",moe_imbalance=" + printableNumber(moeImbalance);
  if (moeCapacity > 0)
    s += ",moe_capacity=" + printableNumber(moeCapacity);
  if (cpComm != CpComm::Ring)
    s += std::string(",cp_comm=") + cpCommName(cpComm);
  if (dispatcher != MoeDispatcher::AllToAll)
    s += std::string(",moe_dispatcher=") + moeDispatcherName(dispatcher);
  if (fp8Recipe != Fp8Recipe::Delayed)
    s += std::string(",fp8_recipe=") + fp8RecipeName(fp8Recipe);
  if (overlapName() != "grad+param")
    s += ",overlap=" + overlapName();
  if (!stageLayers.empty()) {
    s += ",layers=";
    for (size_t i = 0; i < stageLayers.size(); ++i)
      s += (i ? ":" : "") + std::to_string(stageLayers[i]);
  }
  return s;
}

int64_t strategyFieldLimit(const std::string &key) {
  if (key == "mbs" || key == "gbs" || key == "micro_batch_size_samples" ||
      key == "global_batch_size_samples")
    return kMaxBatchSamples;
  if (key == "zero" || key == "zero_stage")
    return 3;
  return kMaxDevices;
}

int64_t boundedProduct(std::initializer_list<int64_t> factors, int64_t limit) {
  int64_t product = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(product, f, &product) || product > limit)
      return -1;
  return product;
}

namespace {

/// One KEY=VALUE of --strategy and the readers of its value; each error
/// names the item.
struct StrategyField {
  llvm::StringRef key, value;
  std::string where;

  template <typename T> llvm::Error integer(T &out, long long lo) const {
    // Never narrowed past the field's range (2^32 must not wrap to 0).
    long long hi = std::min<long long>(std::numeric_limits<T>::max(),
                                       strategyFieldLimit(key.str()));
    long long v;
    if (value.getAsInteger(10, v) || v < lo || v > hi)
      return err(where + ": " + key.str() + " must be an integer from " +
                 std::to_string(lo) + " to " + std::to_string(hi));
    out = static_cast<T>(v);
    return llvm::Error::success();
  }
  llvm::Error boolean(bool &out) const {
    std::string v = value.lower();
    if (v == "1" || v == "true" || v == "on")
      out = true;
    else if (v == "0" || v == "false" || v == "off")
      out = false;
    else
      return err(where + ": " + key.str() + " must be 0 or 1");
    return llvm::Error::success();
  }
  /// A number in (lo, hi], or [lo, hi] when lo is included.
  llvm::Error real(double &out, double lo, bool withLo, double hi,
                   const char *what) const {
    double f = 0;
    if (value.getAsDouble(f) || !(withLo ? f >= lo : f > lo) || f > hi)
      return err(where + ": " + key.str() + " must be " + what);
    out = f;
    return llvm::Error::success();
  }
};

/// The numeric fields; false when `f` names none of them.
bool numberField(const StrategyField &f, Strategy &s, llvm::Error &e) {
  llvm::StringRef key = f.key;
  if (key == "tp")
    e = f.integer(s.tp, 1);
  else if (key == "pp")
    e = f.integer(s.pp, 1);
  else if (key == "dp")
    e = f.integer(s.dp, 1);
  else if (key == "cp")
    e = f.integer(s.cp, 1);
  else if (key == "ep")
    e = f.integer(s.ep, 1);
  else if (key == "etp")
    e = f.integer(s.etp, 1);
  else if (key == "vpp")
    e = f.integer(s.virtualStages, 1);
  else if (key == "mbs")
    e = f.integer(s.microBatch, 1);
  else if (key == "gbs")
    e = f.integer(s.globalBatch, 1);
  else if (key == "zero")
    e = f.integer(s.zeroStage, 0);
  else if (key == "sp")
    e = f.boolean(s.sequenceParallel);
  else if (key == "tpbatch")
    e = f.boolean(s.tpBatchSplit);
  else if (key == "recompute_layers")
    e = f.integer(s.recomputeLayers, 1);
  else if (key == "mg_coarsen")
    e = f.integer(s.mgCoarsening, 2);
  else if (key == "mg_iters")
    e = f.integer(s.mgIterations, 1);
  else if (key == "phantom")
    e = f.integer(s.phantomGhosts, 1);
  else if (key == "chunks") {
    int64_t millions = 0;
    e = f.integer(millions, 1);
    if (!e && millions > 100000)
      e = err(f.where + ": chunks is the chunk size in millions of "
                        "elements, at most 100000");
    s.chunkParams = millions * 1000000;
  } else if (key == "sdp")
    e = f.real(s.subnetworkFraction, 0, false, 1,
               "the fraction of the repeated blocks each worker holds, in "
               "(0, 1]");
  else if (key == "moe_imbalance")
    e = f.real(s.moeImbalance, 1, true, kMaxExpertLoad,
               "the busiest expert-parallel rank's tokens over the mean, from "
               "1 to 64");
  else if (key == "moe_capacity")
    e = f.real(s.moeCapacity, 0, false, kMaxExpertLoad,
               "the experts' capacity factor, above 0 and at most 64");
  else
    return false;
  return true;
}

/// overlap=none or grad, param, tp, p2p and ep joined by '+'.
llvm::Error overlapField(const StrategyField &f, Strategy &s) {
  s.overlapGradReduce = s.overlapParamGather = s.overlapTpComm = s.overlapP2p =
      s.overlapEp = false;
  if (f.value == "none")
    return llvm::Error::success();
  llvm::SmallVector<llvm::StringRef> parts;
  f.value.split(parts, '+');
  for (llvm::StringRef p : parts) {
    bool *flag = p == "grad"    ? &s.overlapGradReduce
                 : p == "param" ? &s.overlapParamGather
                 : p == "tp"    ? &s.overlapTpComm
                 : p == "p2p"   ? &s.overlapP2p
                 : p == "ep"    ? &s.overlapEp
                                : nullptr;
    if (!flag)
      return err(f.where +
                 ": overlap takes none or grad, param, tp, p2p and ep "
                 "joined by '+', not '" +
                 p.str() + "'");
    *flag = true;
  }
  return llvm::Error::success();
}

/// order= and layers=: the axes' order and the layers per chunk.
llvm::Error listField(const StrategyField &f, Strategy &s) {
  llvm::SmallVector<llvm::StringRef> parts;
  if (f.key == "order") {
    f.value.split(parts, '-');
    std::vector<std::string> order;
    for (llvm::StringRef p : parts)
      order.push_back(p.str());
    std::vector<std::string> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != std::vector<std::string>{"cp", "dp", "pp", "tp"})
      return err(f.where + ": order must list tp, cp, dp and pp once each, "
                           "e.g. tp-cp-dp-pp");
    s.order = order;
    return llvm::Error::success();
  }
  f.value.split(parts, ':');
  for (llvm::StringRef p : parts) {
    int n;
    if (p.getAsInteger(10, n) || n <= 0)
      return err(f.where + ": layers must be positive counts separated by ':'");
    s.stageLayers.push_back(n);
  }
  return llvm::Error::success();
}

/// The named choices and lists; false when `f` names none of them.
bool wordField(const StrategyField &f, Strategy &s, bool &sdpMask,
               llvm::Error &e) {
  llvm::StringRef key = f.key, value = f.value;
  const std::string &where = f.where;
  if (key == "recompute") {
    if (auto r = recomputeFromName(value.str()))
      s.recompute = *r;
    else
      e = err(where + ": recompute must be none, selective, op or full");
  } else if (key == "sdp_mask") {
    if (value == "backward")
      s.subnetworkBackwardMask = true;
    else if (value != "forward")
      e = err(where + ": sdp_mask must be forward or backward");
    sdpMask = true;
  } else if (key == "recompute_modules") {
    llvm::SmallVector<llvm::StringRef> parts;
    value.split(parts, '+', -1, /*KeepEmpty=*/false);
    std::vector<std::string> names(parts.begin(), parts.end());
    std::string why = recomputeModuleBits(names, s.recomputeModules);
    if (!why.empty())
      e = err(where + ": " + why);
  } else if (key == "recompute_kinds") {
    llvm::SmallVector<llvm::StringRef> kinds;
    value.split(kinds, '+', -1, /*KeepEmpty=*/false);
    if (kinds.empty())
      e = err(where + ": recompute_kinds needs layer kind names joined by "
                      "'+'");
    for (llvm::StringRef k : kinds)
      s.recomputeKinds.push_back(k.str());
  } else if (key == "schedule") {
    if (auto sc = scheduleFromName(value.str()))
      s.schedule = *sc;
    else
      e = err(where + ": schedule must be gpipe, 1f1b, interleaved, zb-h1, "
                      "zb-2p, zb-v, dualpipev, dualpipe or mgrit");
  } else if (key == "offload") {
    if (value == "optimizer")
      s.offloadOptimizer = true;
    else if (value == "activations")
      s.offloadActivations = true;
    else if (value == "both")
      s.offloadOptimizer = s.offloadActivations = true;
    else if (value != "none")
      e = err(where + ": offload must be none, optimizer, activations or both");
  } else if (key == "precision") {
    if (auto p = precisionFromName(value.str()))
      s.precision = *p;
    else
      e = err(where + ": precision must be fp32, tf32, fp16, bf16, fp8, mxfp8, nvfp4 or mxfp4");
  } else if (key == "cp_comm") {
    if (value == "ring")
      s.cpComm = CpComm::Ring;
    else if (value == "all-to-all")
      s.cpComm = CpComm::AllToAll;
    else
      e = err(where + ": cp_comm must be ring or all-to-all");
  } else if (key == "moe_dispatcher") {
    if (value == "alltoall")
      s.dispatcher = MoeDispatcher::AllToAll;
    else if (value == "deepep")
      s.dispatcher = MoeDispatcher::DeepEP;
    else
      e = err(where + ": moe_dispatcher must be alltoall or deepep");
  } else if (key == "fp8_recipe") {
    if (auto r = fp8RecipeFromName(value.str()))
      s.fp8Recipe = *r;
    else
      e = err(where + ": fp8_recipe must be delayed, tensorwise or blockwise");
  } else if (key == "overlap") {
    e = overlapField(f, s);
  } else if (key == "order" || key == "layers") {
    e = listField(f, s);
  } else {
    return false;
  }
  return true;
}

} // namespace

llvm::Expected<Strategy> parseStrategy(const std::string &text) {
  Strategy s;
  llvm::SmallVector<llvm::StringRef> items;
  llvm::StringRef(text).split(items, ',', -1, /*KeepEmpty=*/false);
  if (items.empty())
    return err(
        "--strategy: empty; expected e.g. tp=8,pp=8,dp=16,mbs=1,gbs=1536");
  std::set<std::string> seen;
  std::string mgKey; // an MGRIT knob given
  bool sdpMask = false;
  for (llvm::StringRef item : items) {
    std::pair<llvm::StringRef, llvm::StringRef> kv = item.trim().split('=');
    StrategyField f{kv.first, kv.second,
                    "--strategy '" + item.trim().str() + "'"};
    if (f.value.empty())
      return err(f.where + ": expected KEY=VALUE");
    if (!seen.insert(f.key.str()).second)
      return err(f.where + ": " + f.key.str() + " is given twice");
    llvm::Error e = llvm::Error::success();
    if (!numberField(f, s, e) && !wordField(f, s, sdpMask, e))
      e = err(f.where + ": unknown key '" + f.key.str() +
              "' (known: tp, pp, dp, cp, ep, etp, moe_imbalance, moe_capacity, "
              "sp, tpbatch, vpp, schedule, mbs, gbs, "
              "zero, recompute, recompute_layers, recompute_kinds, sdp, "
              "mg_coarsen, mg_iters, offload, precision, layers, order, "
              "overlap, cp_comm, moe_dispatcher, fp8_recipe)");
    if (e)
      return std::move(e);
    if (f.key == "mg_coarsen" || f.key == "mg_iters")
      mgKey = f.key.str();
  }
  if (sdpMask && s.subnetworkFraction == 0)
    return err("--strategy '" + text + "': sdp_mask applies with sdp only");
  if (seen.count("fp8_recipe") && s.precision != Precision::FP8)
    return err("--strategy '" + text + "': fp8_recipe scales fp8: it needs "
               "precision=fp8 (mxfp8 is a recipe of its own)");
  // MGRIT's knobs price nothing under another schedule.
  if (!mgKey.empty() && s.schedule != Schedule::LayerParallelMgrit)
    return err("--strategy '" + text + "': " + mgKey +
               " applies to schedule=mgrit only");
  if (s.virtualStages > 1 && s.schedule == Schedule::OneFOneB)
    s.schedule = Schedule::Interleaved;
  // ZB-V and DualPipeV run two chunks per stage.
  if ((s.schedule == Schedule::ZeroBubbleV ||
       s.schedule == Schedule::DualPipeV) &&
      s.virtualStages == 1)
    s.virtualStages = 2;
  return s;
}

/// ZeRO-2 and subnetwork data parallelism against the other fields,
/// recompute_kinds and recompute_layers.
static llvm::Error checkSaversAndRecompute(Strategy &s, const Workload &w) {
  // ZeRO-2 keeps only its shard of the gradients, so it reduce-scatters
  // them after every micro-batch's backward: DeepSpeed runs it without
  // pipeline stages (its pipeline engine takes ZeRO-1 at most), and so
  // does the simulator.
  if (s.zeroStage == 2 && s.pp > 1)
    return err("strategy: zero=2 with pp=" + std::to_string(s.pp) +
               ": ZeRO-2 reduce-scatters the gradients after every "
               "micro-batch, which no pipeline schedule here runs (DeepSpeed "
               "takes ZeRO-1 at most with pipeline stages); use zero=1 or 3");
  if (s.subnetworkFraction > 0) {
    const char *clash = s.pp > 1                                     ? "pp"
                        : s.cp > 1                                   ? "cp"
                        : s.ep > 1                                   ? "ep"
                        : s.zeroStage > 0                            ? "zero"
                        : s.offloadOptimizer || s.offloadActivations ? "offload"
                                                                     : nullptr;
    if (clash)
      return err(std::string("strategy: sdp with ") + clash +
                 ": subnetwork data parallelism is modelled over plain data "
                 "parallelism (tp allowed; pp, cp, ep, ZeRO and offload "
                 "not)");
  }
  if (s.recomputeModules) {
    if (s.recompute != Recompute::Selective)
      return err(std::string("strategy: recompute_modules with recompute=") +
                 recomputeName(s.recompute) +
                 ": the modules are what selective recompute checkpoints; "
                 "use recompute=selective");
    static const char *const what[6] = {
        "attention", "multi-head latent attention", "experts' activation",
        "dense MLP layer", "mixture-of-experts layer", "shared experts"};
    for (unsigned b = 0; b < 6; ++b) {
      unsigned bit = 1u << b;
      if (!(s.recomputeModules & bit))
        continue;
      bool found = false;
      for (const LayerKind &k : w.kinds)
        for (const OpCost &op : k.ops)
          found |= k.count > 1 && (bit == kRecomputeCoreAttn
                                       ? op.attentionCore
                                       : (op.recomputeModules & bit) != 0);
      if (!found)
        return err(std::string("strategy: recompute_modules: ") +
                   kRecomputeModuleNames[b] + " checkpoints a " + what[b] +
                   ", and no repeated layer of the model has one");
    }
  }
  if (!s.recomputeKinds.empty()) {
    if (s.recompute == Recompute::None)
      return err("strategy: recompute_kinds with recompute=none: say which "
                 "recompute (selective or full) the kinds take");
    for (const std::string &name : s.recomputeKinds) {
      bool found = false;
      std::string known;
      for (const LayerKind &k : w.kinds)
        if (k.count > 1) {
          found |= k.name == name;
          known += (known.empty() ? "" : ", ") + k.name;
        }
      if (!found)
        return err("strategy: recompute_kinds: '" + printableLine(name) +
                   "' is not a repeated layer kind of the model (its "
                   "repeated kinds: " +
                   known + ")");
    }
  }
  if (s.recomputeLayers > w.totalLayers())
    return err("strategy: recompute_layers=" +
               std::to_string(s.recomputeLayers) + " exceeds the model's " +
               std::to_string(w.totalLayers()) + " layers");
  if (s.recomputeLayers > 0 && s.recompute != Recompute::Full)
    return err(
        "strategy: recompute_layers=" + std::to_string(s.recomputeLayers) +
        " with recompute=" + recomputeName(s.recompute) +
        ": it says how many layers of each pipeline chunk full "
        "recompute takes; use recompute=full");
  return llvm::Error::success();
}

/// tp splits whole attention heads and whole key-value groups.
static llvm::Error checkHeads(Strategy &s, const Workload &w) {
  int heads = w.attentionHeads();
  if (heads > 0 && heads % s.tp)
    return err("strategy: tp=" + std::to_string(s.tp) +
               " does not divide the " + std::to_string(heads) +
               " attention heads");
  for (const LayerKind &k : w.kinds)
    if (k.attentionKvHeads > 0 && k.attentionKvHeads % s.tp)
      return err("strategy: tp=" + std::to_string(s.tp) +
                 " does not divide the " + std::to_string(k.attentionKvHeads) +
                 " key-value heads of " + k.name +
                 " (each tp rank needs whole key-value groups)");

  return llvm::Error::success();
}

/// tp x pp x cp x dp fills the cluster (dp from it when not given).
static llvm::Error fillDevices(Strategy &s, const Cluster &c) {
  int64_t devices = c.numDevices();
  int64_t model = boundedProduct({s.tp, s.pp, s.cp}, kMaxDevices);
  if (model < 0)
    return err("strategy: tp x pp x cp = " + std::to_string(s.tp) + " x " +
               std::to_string(s.pp) + " x " + std::to_string(s.cp) +
               " exceeds the " + std::to_string(devices) +
               " devices of the cluster");
  if (s.dp == 0) {
    if (devices % model)
      return err("strategy: tp x pp x cp = " + std::to_string(model) +
                 " does not divide the " + std::to_string(devices) +
                 " devices of the cluster");
    s.dp = int(devices / model);
  }
  if (model * s.dp != devices)
    return err("strategy: tp x pp x cp x dp = " +
               (boundedProduct({model, s.dp}, kMaxDevices) < 0
                    ? std::to_string(model) + " x " + std::to_string(s.dp)
                    : std::to_string(model * s.dp)) +
               " differs from the " + std::to_string(devices) +
               " devices of the cluster");
  return llvm::Error::success();
}

/// Expert parallelism, the MoE settings and folded experts (etp 1).
static llvm::Error checkExperts(Strategy &s, const Workload &w) {
  // Expert parallelism splits the experts of mixture-of-experts layers
  // over ep of the data-parallel (x cp) ranks (Megatron-Core's expert
  // parallel group).
  if (s.ep > 1) {
    if (w.experts() < 2)
      return err("strategy: ep=" + std::to_string(s.ep) +
                 ": the model has no mixture-of-experts layers to split");
    for (const LayerKind &k : w.kinds)
      if (k.experts > 1 && k.experts % s.ep)
        return err("strategy: ep=" + std::to_string(s.ep) +
                   " does not divide the " + std::to_string(k.experts) +
                   " experts of " + k.name);
    if (!s.expertsFolded() && (int64_t(s.dp) * s.cp) % s.ep)
      return err("strategy: ep=" + std::to_string(s.ep) +
                 " must divide dp x cp = " + std::to_string(s.dp * s.cp));
    if (s.expertsFolded() && (int64_t(s.dp) * s.tp) % s.ep)
      return err("strategy: ep=" + std::to_string(s.ep) +
                 " must divide dp x tp = " + std::to_string(s.dp * s.tp) +
                 " (etp=1 draws the expert-parallel group from both)");
  }
  if (s.dispatcher == MoeDispatcher::DeepEP) {
    if (s.ep < 2)
      return err("strategy: moe_dispatcher=deepep moves tokens between "
                 "expert-parallel ranks: it needs ep > 1");
    if (s.tp > 1 && !s.expertsFolded())
      return err("strategy: moe_dispatcher=deepep with the experts split "
                 "over tp=" +
                 std::to_string(s.tp) +
                 ": Megatron-Core's flex dispatcher then runs over tp x ep "
                 "ranks, which is not priced; fold the experts (etp=1)");
    if (s.moeCapacity > 0)
      return err("strategy: moe_dispatcher=deepep is dropless (Megatron-"
                 "Core's flex dispatcher does not pad to a capacity): drop "
                 "moe_capacity");
    for (const LayerKind &k : w.kinds)
      if (k.experts > 1 && k.expertTopK < 1)
        return err("strategy: moe_dispatcher=deepep: the experts of " +
                   k.name +
                   " have no top-k the graph states (their dispatched "
                   "tokens are not k copies of the layer's input); use "
                   "moe_dispatcher=alltoall");
  }
  if ((s.moeImbalance != 1 || s.moeCapacity > 0) && w.experts() < 2)
    return err(std::string("strategy: ") +
               (s.moeCapacity > 0 ? "moe_capacity" : "moe_imbalance") +
               ": the model has no mixture-of-experts layers");
  if (s.etp > 0 && s.etp != s.tp) {
    // Megatron-Core's MoE parallel folding, as priced: each expert whole
    // (etp 1) on the tp x dp ranks, tokens split over tp by sequence
    // parallelism.
    if (w.experts() < 2)
      return err("strategy: etp=" + std::to_string(s.etp) +
                 ": the model has no mixture-of-experts layers");
    if (s.etp != 1)
      return err("strategy: etp=" + std::to_string(s.etp) +
                 ": expert tensor parallelism is priced equal to tp (" +
                 std::to_string(s.tp) + ") or folded to 1");
    if (s.ep < 2)
      return err("strategy: etp=1 folds the experts' tensor parallelism into "
                 "expert parallelism: it needs ep > 1");
    if (!s.sequenceParallel)
      return err("strategy: etp=1 with tp=" + std::to_string(s.tp) +
                 " needs sequence parallelism (sp=1): the tp ranks dispatch "
                 "their own tokens");
    if (s.cp > 1)
      return err("strategy: etp=1 with cp=" + std::to_string(s.cp) +
                 ": folding experts over tp and context parallelism at once "
                 "is not priced");
    if (s.stride("tp") != 1 || s.stride("dp") != s.tp)
      return err("strategy: etp=1 needs the tp ranks adjacent and dp next "
                 "to them (order tp-cp-dp-pp or tp-dp-...): the folded "
                 "expert-parallel group runs over both");
  }
  return llvm::Error::success();
}

/// The global batch (gbs from mbs x dp when not given) and context parallelism
/// (Ulysses' heads, a sequence to split).
static llvm::Error checkBatchAndContext(Strategy &s, const Workload &w) {
  int heads = w.attentionHeads();
  if (s.globalBatch == 0)
    s.globalBatch = s.microBatch * s.dp;
  if (s.globalBatch % (s.microBatch * s.dp))
    return err("strategy: mbs x dp = " + std::to_string(s.microBatch * s.dp) +
               " does not divide the global batch gbs=" +
               std::to_string(s.globalBatch));
  // DeepSpeed-Ulysses gives each cp rank whole heads (and key-value
  // heads) for the whole sequence; the ring splits the sequence only.
  if (s.cp > 1 && s.cpComm == CpComm::AllToAll) {
    if (heads > 0 && (heads / s.tp) % s.cp)
      return err("strategy: cp=" + std::to_string(s.cp) +
                 ",cp_comm=all-to-all needs the " +
                 std::to_string(heads / s.tp) +
                 " heads per tp rank divisible by cp (Ulysses scatters "
                 "heads); use cp_comm=ring");
    for (const LayerKind &k : w.kinds)
      if (k.attentionKvHeads > 0 && (k.attentionKvHeads / s.tp) % s.cp)
        return err("strategy: cp=" + std::to_string(s.cp) +
                   ",cp_comm=all-to-all needs the " +
                   std::to_string(k.attentionKvHeads / s.tp) +
                   " key-value heads per tp rank divisible by cp; use "
                   "cp_comm=ring");
  }
  if (s.cp > 1 && heads == 0)
    return err("strategy: cp=" + std::to_string(s.cp) +
               ": context parallelism splits attention's sequence, and the "
               "model has no attention");
  if (w.tokensPerSample > 0 && s.cp > 1 && w.tokensPerSample % (2 * s.cp))
    return err("strategy: cp=" + std::to_string(s.cp) +
               " needs a sequence divisible by 2 x cp");
  return llvm::Error::success();
}

/// Pipeline chunks, the schedules' own needs, layers=, the tp overlap and
/// MGRIT.
static llvm::Error checkPipeline(Strategy &s, const Workload &w) {
  int64_t layers = w.totalLayers();
  if ((s.schedule == Schedule::ZeroBubbleV ||
       s.schedule == Schedule::DualPipeV || s.schedule == Schedule::DualPipe) &&
      s.pp < 2)
    return err(std::string("strategy: schedule=") + scheduleName(s.schedule) +
               " needs pp >= 2");
  if (s.virtualStages > 1 && s.pp == 1)
    return err("strategy: vpp=" + std::to_string(s.virtualStages) +
               " needs pp > 1: virtual stages interleave a pipeline");
  int64_t chunks = int64_t(s.pp) * s.virtualStages; // both <= kMaxDevices
  if (chunks > layers)
    return err(
        "strategy: pp x vpp = " + std::to_string(chunks) +
        " exceeds the model's " + std::to_string(layers) + " layers");
  if (boundedProduct({s.microBatches(), chunks}, kMaxStepTasks) < 0)
    return err("strategy: gbs=" + std::to_string(s.globalBatch) + " is " +
               std::to_string(s.microBatches()) +
               " micro-batches of mbs=" + std::to_string(s.microBatch) +
               " per replica, times " + std::to_string(chunks) +
               " pipeline chunks: more than the " +
               std::to_string(kMaxStepTasks) +
               " the simulator takes in one step");
  if (s.schedule == Schedule::Interleaved && s.virtualStages > 1 &&
      s.microBatches() % s.pp)
    return err("strategy: the interleaved schedule needs the " +
               std::to_string(s.microBatches()) +
               " micro-batches to be a multiple of pp=" + std::to_string(s.pp));
  if (!s.stageLayers.empty()) {
    if (int(s.stageLayers.size()) != s.pp * s.virtualStages)
      return err("strategy: layers= gives " +
                 std::to_string(s.stageLayers.size()) +
                 " stages, expected pp x vpp = " +
                 std::to_string(s.pp * s.virtualStages));
    int64_t sum = 0;
    for (int n : s.stageLayers)
      sum += n;
    if (sum != layers)
      return err("strategy: layers= sums to " + std::to_string(sum) +
                 ", the model has " + std::to_string(layers) + " layers");
  }
  if (s.overlapTpComm && s.tp > 1 && !s.sequenceParallel)
    return err("strategy: overlap=tp needs sp=1 (Megatron-Core overlaps the "
               "sequence-parallel all-gathers and reduce-scatters with the "
               "GEMMs; it has no overlap for tensor parallelism alone)");
  if (s.schedule == Schedule::LayerParallelMgrit) {
    if (s.pp < 2)
      return err("strategy: schedule=mgrit needs pp >= 2 (the devices the "
                 "layers are spread over)");
    if (s.virtualStages > 1 || s.microBatches() != 1)
      return err("strategy: schedule=mgrit solves each replica's batch at "
                 "once: vpp=1 and gbs = mbs x dp (one micro-batch), not " +
                 std::to_string(s.microBatches()));
    if (s.mgCoarsening < 2 || s.mgIterations < 1)
      return err("strategy: schedule=mgrit needs mg_coarsen >= 2 and "
                 "mg_iters >= 1");
    for (int i = 0; i < s.pp; ++i) {
      int64_t n = s.stageLayers.empty() ? layers / s.pp + (i < layers % s.pp)
                                        : s.stageLayers[i];
      if (n < s.mgCoarsening)
        return err("strategy: schedule=mgrit with mg_coarsen=" +
                   std::to_string(s.mgCoarsening) + ": stage " +
                   std::to_string(i) + " holds " + std::to_string(n) +
                   " layers, fewer than one coarse step");
    }
  }
  if ((s.schedule == Schedule::ZeroBubbleH1 ||
       s.schedule == Schedule::ZeroBubble2p) &&
      s.virtualStages > 1)
    return err(std::string("strategy: schedule=") + scheduleName(s.schedule) +
               " runs one chunk per stage (vpp=1); schedule=zb-v runs two");
  if (s.schedule == Schedule::ZeroBubbleV ||
      s.schedule == Schedule::DualPipeV) {
    std::string name = scheduleName(s.schedule);
    if (s.virtualStages != 2)
      return err("strategy: schedule=" + name +
                 " runs two chunks per stage (vpp=2), not vpp=" +
                 std::to_string(s.virtualStages));
    if (s.schedule == Schedule::DualPipeV && s.microBatches() < 2 * s.pp)
      return err("strategy: schedule=dualpipev needs at least 2 x pp = " +
                 std::to_string(2 * s.pp) +
                 " micro-batches per replica, "
                 "not " +
                 std::to_string(s.microBatches()) +
                 " (DualPipe's own requirement)");
  }
  return llvm::Error::success();
}

/// Phantom parallelism and PatrickStar's chunks.
static llvm::Error checkResearchStrategies(Strategy &s, const Workload &w) {
  if (s.phantomGhosts > 0) {
    if (s.tp < 2)
      return err("strategy: phantom=" + std::to_string(s.phantomGhosts) +
                 " replaces tensor parallelism: it needs tp >= 2");
    if (s.sequenceParallel || s.tpBatchSplit || s.overlapTpComm)
      return err("strategy: phantom: sequence parallelism, tp batch splits "
                 "and tp overlap are tensor parallelism's, not phantom "
                 "parallelism's");
    if (s.ep > 1 || s.cp > 1)
      return err("strategy: phantom with ep or cp is not priced");
  }
  if (s.chunkParams > 0) {
    // PatrickStar trains data parallel only, shards the model data by
    // chunk (its own ZeRO-3), moves it to the host itself and keeps each
    // gradient in its parameter's chunk.
    if (s.tp > 1 || s.pp > 1 || s.cp > 1 || s.ep > 1)
      return err("strategy: chunks (PatrickStar) trains data parallel "
                 "only: tp, pp, cp and ep must be 1");
    if (s.zeroStage > 0 || s.offloadOptimizer || s.offloadActivations)
      return err("strategy: chunks (PatrickStar) shards its chunks over dp "
                 "and places them on the host itself: zero and offload do "
                 "not apply");
    if (s.microBatches() > 1)
      return err("strategy: chunks (PatrickStar) keeps each gradient in its "
                 "parameter's chunk, so it accumulates none over micro-"
                 "batches: gbs must be mbs x dp = " +
                 std::to_string(s.microBatch * s.dp) + ", not " +
                 std::to_string(s.globalBatch));
    if (w.fineTuning.active())
      return err("strategy: chunks (PatrickStar) with frozen weights or "
                 "adapters is not priced");
  }
  return llvm::Error::success();
}

/// DualPipe (dualpipe.py's own requirements) and the pipeline sends' overlap.
static llvm::Error checkDualPipeAndP2p(Strategy &s, const Workload &w) {
  if (s.schedule == Schedule::DualPipe) {
    // dualpipe.py's assertions: an even number of ranks, an even number
    // of micro-batches (half from each end), at least two per rank.
    if (s.pp % 2)
      return err("strategy: schedule=dualpipe needs an even pp (ranks r and "
                 "pp-1-r hold the two directions' stages), not pp=" +
                 std::to_string(s.pp));
    if (s.virtualStages != 1)
      return err("strategy: schedule=dualpipe holds one stage of each "
                 "direction per rank (vpp=1), not vpp=" +
                 std::to_string(s.virtualStages));
    if (s.microBatches() % 2 || s.microBatches() < 2 * s.pp)
      return err("strategy: schedule=dualpipe needs an even number of at "
                 "least 2 x pp = " +
                 std::to_string(2 * s.pp) + " micro-batches per replica, not " +
                 std::to_string(s.microBatches()) +
                 " (dualpipe.py's own requirement)");
    if (s.zeroStage > 1)
      return err("strategy: schedule=dualpipe with zero=" +
                 std::to_string(s.zeroStage) +
                 ": sharding the two weight copies' gradients or weights "
                 "is not priced (DeepSeek-V3 runs DualPipe under ZeRO-1)");
    if (s.subnetworkFraction > 0)
      return err("strategy: schedule=dualpipe with sdp is not priced");
  }
  if (s.overlapP2p && s.pp > 1 && s.schedule != Schedule::Interleaved)
    return err("strategy: overlap=p2p needs the interleaved schedule "
               "(vpp > 1): Megatron-Core overlaps pipeline sends only there");
  return llvm::Error::success();
}

/// Every integer field within its reader's range (a strategy built in code
/// passes the same bounds as one read), before any is multiplied.
/// overlap=ep as Megatron-Core takes --overlap-moe-expert-parallel-comm
/// (TransformerConfig's checks): expert parallelism, the interleaved
/// schedule when pipelined, no full recompute and no recomputed experts, a
/// 16-bit model.
static llvm::Error checkExpertOverlap(const Strategy &s) {
  if (!s.overlapEp)
    return llvm::Error::success();
  auto refuse = [](const std::string &why) {
    return err("strategy: overlap=ep (Megatron-Core's "
               "--overlap-moe-expert-parallel-comm) " + why);
  };
  if (s.ep < 2)
    return refuse("overlaps the expert all-to-alls: it needs ep > 1");
  if (s.pp > 1 && s.schedule != Schedule::Interleaved)
    return refuse("with pp=" + std::to_string(s.pp) +
                  " runs the interleaved schedule: give vpp > 1");
  if (s.pp == 1 && s.schedule != Schedule::OneFOneB)
    return refuse("pairs each micro-batch's forward with another's "
                  "backward: schedule=" + std::string(scheduleName(s.schedule)) +
                  " is not that");
  if (s.recompute == Recompute::Full)
    return refuse("does not take full recompute");
  if (s.recompute == Recompute::Selective &&
      (s.recomputeModules & kRecomputeMoe))
    return refuse("does not take the experts recomputed (recompute_modules "
                  "moe)");
  if (s.precision == Precision::FP32 || s.precision == Precision::TF32)
    return refuse("runs 16-bit models only: precision=" +
                  std::string(precisionName(s.precision)));
  return llvm::Error::success();
}

static llvm::Error checkFieldRanges(const Strategy &s) {
  for (auto [key, value, lo] :
       std::initializer_list<std::tuple<const char *, int64_t, int64_t>>{
           {"tp", s.tp, 1},
           {"pp", s.pp, 1},
           {"dp", s.dp, 0},
           {"cp", s.cp, 1},
           {"ep", s.ep, 1},
           {"etp", s.etp, 0},
           {"vpp", s.virtualStages, 1},
           {"mbs", s.microBatch, 1},
           {"gbs", s.globalBatch, 0},
           {"zero", s.zeroStage, 0},
           {"recompute_layers", s.recomputeLayers, 0},
           {"mg_coarsen", s.mgCoarsening, 0},
           {"mg_iters", s.mgIterations, 0},
           {"phantom", s.phantomGhosts, 0}})
    if (value < lo || value > strategyFieldLimit(key))
      return err(std::string("strategy: ") + key + "=" +
                 std::to_string(value) + " is outside " +
                 std::to_string(lo) + " to " +
                 std::to_string(strategyFieldLimit(key)));
  return llvm::Error::success();
}

llvm::Error completeAndValidate(Strategy &s, const Workload &w,
                                const Cluster &c) {
  if (auto e = checkFieldRanges(s))
    return e;
  if (auto e = checkSaversAndRecompute(s, w))
    return e;
  if (auto e = checkHeads(s, w))
    return e;
  if (auto e = fillDevices(s, c))
    return e;
  if (auto e = checkExperts(s, w))
    return e;
  if (auto e = checkBatchAndContext(s, w))
    return e;
  if (auto e = checkPipeline(s, w))
    return e;
  if (auto e = checkResearchStrategies(s, w))
    return e;
  if (auto e = checkDualPipeAndP2p(s, w))
    return e;
  if (auto e = checkExpertOverlap(s))
    return e;
  if (s.sequenceParallel && s.tp == 1)
    s.sequenceParallel = false; // nothing to split
  return llvm::Error::success();
}

Strategy Strategy::dualPipeFolded() const {
  Strategy v = *this;
  v.schedule = Schedule::DualPipeV;
  v.pp = pp / 2;
  v.virtualStages = 2;
  v.dp = dp * 2;
  return v;
}

} // namespace orrery
