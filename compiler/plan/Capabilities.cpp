//===- Capabilities.cpp - what each framework runs, in one table ----------===//
//
// Per framework, its refusals in the order they are checked: each names the
// capability it is about, when the plan needs what the framework lacks,
// and the one line that says so. Rules that several frameworks share come
// first (kCommon); then each framework's own. An exporter writes a plan
// only when no rule refuses it, and the planner asks the same rules.
//
//===----------------------------------------------------------------------===//
#include "orrery/Plan/Capabilities.h"
#include "orrery/Plan/Plan.h"

#include <algorithm>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

//===----------------------------------------------------------------------===//
// A plan as a framework sees it.
//===----------------------------------------------------------------------===//

/// The plan's degrees against its own cluster and model (an exporter has
/// neither the model nor the cluster to validate against): every product
/// formed without overflow.
static llvm::Error checkShape(const ExportPlan &p, int64_t layers,
                              const std::string &what) {
  const Strategy &s = p.strategy;
  int64_t ranks = boundedProduct({s.tp, s.pp, s.cp, s.dp}, kMaxDevices);
  if (ranks < 0 || (p.devices > 0 && ranks != p.devices))
    return err(what + ": strategy: tp x pp x cp x dp = " +
               std::to_string(s.tp) + " x " + std::to_string(s.pp) + " x " +
               std::to_string(s.cp) + " x " + std::to_string(s.dp) +
               (p.devices > 0 ? " differs from the plan's " +
                                    std::to_string(p.devices) +
                                    " devices (cluster.devices)"
                              : " exceeds " + std::to_string(kMaxDevices) +
                                    " devices"));
  // The expert-parallel group is drawn from dp x cp (dp x tp folded).
  int64_t hosts = int64_t(s.dp) * (s.expertsFolded() ? s.tp : s.cp);
  if (hosts % s.ep)
    return err(what + ": strategy: ep=" + std::to_string(s.ep) +
               " must divide dp x " + (s.expertsFolded() ? "tp" : "cp") +
               " = " + std::to_string(hosts));
  if (s.recomputeLayers > layers)
    return err(what + ": strategy: recompute_layers=" +
               std::to_string(s.recomputeLayers) + " exceeds the model's " +
               std::to_string(layers) + " layers (model.layers)");
  int64_t chunks = int64_t(s.pp) * s.virtualStages;
  if (chunks > layers)
    return err(what + ": strategy: pp x vpp = " + std::to_string(chunks) +
               " exceeds the model's " + std::to_string(layers) +
               " layers (model.layers)");
  return llvm::Error::success();
}

static llvm::Expected<ExportPlan>
readExportPlanImpl(const nlohmann::json &plan, const std::string &what) {
  if (isHeteroPlan(plan))
    return err(what + ": a heterogeneous plan (stages on different device "
                      "types or sites) runs different configurations on "
                      "different devices; of the export targets only "
                      "pytorch expresses that (--to pytorch)");
  auto s = strategyFromPlan(plan, what);
  if (!s)
    return s.takeError();
  ExportPlan p;
  p.strategy = *s;
  auto assumptions = assumptionsFromPlan(plan, what);
  if (!assumptions)
    return assumptions.takeError();
  p.assumptions = *assumptions;
  const nlohmann::json &model = plan.value("model", nlohmann::json::object());
  p.model = model.value("source", "");
  if (model.contains("parameters") && model["parameters"].is_number_integer())
    p.parameters = model["parameters"].get<int64_t>();
  if (model.contains("tied_parameters")) {
    if (!model["tied_parameters"].is_number_integer() ||
        model["tied_parameters"].get<int64_t>() < 0)
      return err(what + ": model.tied_parameters: must be a non-negative "
                        "integer");
    p.tiedParameters = model["tied_parameters"].get<int64_t>();
  }
  const nlohmann::json &predicted =
      plan.value("predicted", nlohmann::json::object());
  if (predicted.is_object() && predicted.contains("in_network_aggregation")) {
    const nlohmann::json &v = predicted["in_network_aggregation"];
    if (!v.is_string() || (v != "none" && v != "sharp" && v != "switchml"))
      return err(what + ": predicted.in_network_aggregation: must be \"none\", "
                        "\"sharp\" or \"switchml\"");
    p.aggregation = v == "none" ? "" : v.get<std::string>();
  }
  if (plan.contains("cluster") && plan["cluster"].is_object()) {
    const nlohmann::json &c = plan["cluster"];
    if (c.contains("device_type") && !c["device_type"].is_string())
      return err(what + ": cluster.device_type: must be a string");
    p.deviceType = c.value("device_type", "");
    p.deviceVendor = deviceVendorOf(p.deviceType);
    if (c.contains("devices") &&
        (!c["devices"].is_number_integer() || c["devices"].get<int64_t>() < 1 ||
         c["devices"].get<int64_t>() > kMaxDevices))
      return err(what + ": cluster.devices: must be an integer from 1 to " +
                 std::to_string(kMaxDevices));
    p.devices = c.value("devices", 0);
  }
  if (!model.contains("layers") || !model["layers"].is_array() ||
      model["layers"].empty())
    return err(what + ": model.layers: missing (the layer kinds and counts)");
  int64_t layers = 0;
  for (const auto &l : model["layers"]) {
    if (!l.is_object() || !l.contains("kind") || !l["kind"].is_string() ||
        !l.contains("count") || !l["count"].is_number_integer() ||
        l["count"].get<int64_t>() < 1 ||
        l["count"].get<int64_t>() > kMaxDevices)
      return err(what + ": model.layers: each entry needs a kind and a "
                        "count from 1 to " +
                 std::to_string(kMaxDevices));
    p.layers.push_back({l["kind"], l["count"]});
    layers += l["count"].get<int64_t>();
  }
  if (auto e = checkShape(p, layers, what))
    return std::move(e);
  if (auto e = placeChunks(p, what))
    return std::move(e);
  return p;
}

llvm::Expected<ExportPlan> readExportPlan(const nlohmann::json &plan,
                                          const std::string &what) {
  // nlohmann::json reports a field of the wrong type by exception.
  try {
    if (llvm::Error e = checkPlanFieldTypes(plan, what))
      return std::move(e);
    return readExportPlanImpl(plan, what);
  } catch (const nlohmann::json::exception &e) {
    return err(what + ": malformed plan: " + e.what());
  }
}

std::string deviceVendorOf(const std::string &deviceType) {
  const DeviceSpec *d = HardwareCatalog::builtin().device(deviceType);
  return d ? d->vendor : "";
}

llvm::Error placeChunks(ExportPlan &p, const std::string &what) {
  // The body is the longest run; what precedes it, what follows it.
  size_t bodyRun = 0;
  int64_t total = 0;
  p.before = p.body = p.after = 0;
  for (size_t r = 0; r < p.layers.size(); ++r) {
    total += p.layers[r].second;
    if (p.layers[r].second > p.layers[bodyRun].second)
      bodyRun = r;
  }
  p.bodyKind = p.layers.empty() ? "" : p.layers[bodyRun].first;
  for (size_t r = 0; r < p.layers.size(); ++r)
    (r < bodyRun   ? p.before
     : r > bodyRun ? p.after
                   : p.body) += p.layers[r].second;
  // Chunks as the simulator makes them (StepLayout.cpp chunkLayers).
  const Strategy &st = p.strategy;
  int chunks = st.pp * st.virtualStages;
  p.chunkLayers.clear();
  if (!st.stageLayers.empty()) {
    p.chunkLayers = st.stageLayers;
  } else {
    int64_t body = p.body, before = p.before, after = p.after;
    if (body < chunks) {
      body = total;
      before = after = 0;
    }
    for (int i = 0; i < chunks; ++i)
      p.chunkLayers.push_back(int(body / chunks + (i < body % chunks)));
    p.chunkLayers.front() += int(before);
    p.chunkLayers.back() += int(after);
  }
  int64_t sum = 0;
  for (int n : p.chunkLayers)
    sum += n;
  if (int(p.chunkLayers.size()) != chunks || sum != total)
    return err(what + ": strategy.layers_per_stage: " +
               std::to_string(p.chunkLayers.size()) + " chunks holding " +
               std::to_string(sum) + " layers; expected " +
               std::to_string(chunks) + " holding " + std::to_string(total));
  p.chunkBodyLayers.clear();
  bool clean = true;
  for (int c = 0; c < chunks; ++c) {
    int64_t n = p.chunkLayers[c] - (c == 0 ? p.before : 0) -
                (c == chunks - 1 ? p.after : 0);
    clean &= n >= 0;
    p.chunkBodyLayers.push_back(n);
  }
  if (!clean)
    p.chunkBodyLayers.clear();
  return llvm::Error::success();
}

llvm::Expected<ExportPlan> exportPlanFor(const Workload &w, const Strategy &s,
                                         const Assumptions &a,
                                         const DeviceSpec *device) {
  ExportPlan p;
  p.strategy = s;
  if (device) {
    p.deviceType = device->name;
    p.deviceVendor = device->vendor;
  }
  p.assumptions = a;
  p.parameters = w.parameters() + w.frozenParameters();
  p.tiedParameters = w.tiedParameters();
  for (const LayerRun &run : w.layers)
    p.layers.push_back({w.kinds[run.kind].name, run.count});
  if (auto e = placeChunks(p, "strategy"))
    return std::move(e);
  return p;
}

std::vector<int64_t> megatronChunkLayers(const ExportPlan &p, bool &embedding,
                                         bool &loss) {
  // Megatron splits the body evenly over the chunks, or takes the first
  // and last stage's count and splits the rest evenly. Megatron-Core can
  // also count the input embedding and the loss head as one transformer
  // layer each in its even split (--account-for-embedding-in-pipeline-split,
  // --account-for-loss-in-pipeline-split): the first chunk then builds one
  // layer fewer, the last one fewer.
  embedding = loss = false;
  std::vector<int64_t> b = p.chunkBodyLayers;
  auto isEven = [](const std::vector<int64_t> &v) {
    return std::all_of(v.begin(), v.end(),
                       [&](int64_t n) { return n == v.front(); });
  };
  if (isEven(b) || b.size() < 2)
    return b;
  for (auto [emb, ls] : {std::pair{true, true}, std::pair{true, false},
                         std::pair{false, true}}) {
    if ((emb && p.before != 1) || (ls && p.after != 1))
      continue;
    std::vector<int64_t> counted = b;
    counted.front() += emb;
    counted.back() += ls;
    if (!isEven(counted))
      continue;
    embedding = emb;
    loss = ls;
    return counted;
  }
  return b;
}

//===----------------------------------------------------------------------===//
// The table.
//===----------------------------------------------------------------------===//

namespace {

using Plan = ExportPlan;
/// One refusal: what it is about, whether `framework` refuses the plan,
/// and why (the line after "FRAMEWORK: ").
struct Refusal {
  Capability about;
  bool (*refuses)(const Plan &p, const std::string &framework);
  std::string (*why)(const Plan &p);
};

std::string num(int64_t v) { return std::to_string(v); }

std::string fineTuningWhy(const Plan &p, const char *why) {
  return "the plan fine-tunes (" + p.assumptions.fineTuning.str() +
         "), which " + why +
         "; export --to pytorch for the code that freezes and adapts the "
         "weights";
}
std::string moeCapacityWhy(const Plan &p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", p.strategy.moeCapacity);
  return std::string("the experts' capacity factor (moe_capacity=") + buf +
         ") is the MoE layer's own setting in the model code here; export to "
         "megatron (--moe-expert-capacity-factor)";
}
std::string prefetchWhy(const Plan &p, const char *how) {
  return std::string(how) +
         std::to_string(int64_t(p.assumptions.zero3PrefetchParams)) +
         " parameters ahead (predicted.zero3_prefetch_parameters)";
}
bool needsMoeCapacity(const Plan &p, const std::string &) {
  return p.strategy.moeCapacity > 0;
}
bool prefetches(const Plan &p, const std::string &) {
  return p.strategy.zeroStage == 3 && p.assumptions.zero3PrefetchParams > 0;
}
bool ulysses(const Plan &p, const std::string &) {
  return p.strategy.cp > 1 && p.strategy.cpComm == CpComm::AllToAll;
}
bool overlapsTpOrP2p(const Plan &p, const std::string &) {
  const Strategy &s = p.strategy;
  return (s.overlapTpComm && s.tp > 1) || (s.overlapP2p && s.pp > 1);
}
/// Why `s`'s layer split cannot be given as split points ("" if it can).
std::string splitPointProblem(const Plan &p) {
  if (p.chunkBodyLayers.empty())
    return "the plan puts embedding or head layers outside the first and "
           "last pipeline stages";
  int64_t at = 0;
  for (size_t c = 0; c + 1 < p.chunkBodyLayers.size(); ++c) {
    at += p.chunkBodyLayers[c];
    if (p.chunkBodyLayers[c] == 0 || at >= p.body)
      return "a pipeline stage holds no transformer block (only the "
             "embedding or head), which a split point cannot express";
  }
  return "";
}

bool transformerBody(const Plan &p) {
  return llvm::StringRef(p.bodyKind).starts_with("transformer_layer");
}

/// Every target but mlir, before its own rules.
const Refusal kCommon[] = {
    // The devices: each target's vendors (a cluster file's own device,
    // whose vendor the plan does not say, is taken).
    {Capability::Devices,
     [](const Plan &p, const std::string &f) {
       const FrameworkCapabilities *row = frameworkCapabilities(f);
       return row && !p.deviceVendor.empty() &&
              std::find(row->vendors.begin(), row->vendors.end(),
                        p.deviceVendor) == row->vendors.end();
     },
     [](const Plan &p) -> std::string {
       return "the plan runs on " + p.deviceType + " (" + p.deviceVendor +
              "), a device this target does not run on";
     }},
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) { return p.strategy.tpBatchSplit; },
     [](const Plan &) -> std::string {
       return "the plan splits the batch of some ops inside the "
              "tensor-parallel group (tp_batch_split), a per-op layout this "
              "target cannot state; export it --to mlir, or plan without it";
     }},
    {Capability::Schedule,
     [](const Plan &p, const std::string &) {
       return (p.strategy.schedule == Schedule::ZeroBubbleH1 ||
               p.strategy.schedule == Schedule::ZeroBubble2p) &&
              p.strategy.pp > 1;
     },
     [](const Plan &p) -> std::string {
       std::string name = p.strategy.schedule == Schedule::ZeroBubbleH1
                              ? "ZB-H1 (schedule=zb-h1)"
                              : "ZB-2p (schedule=zb-2p)";
       return "the plan runs " + name +
              ", which this target does not run (Megatron-LM core_r0.12 "
              "and DeepSpeed have no zero-bubble schedule; "
              "torch.distributed.pipelining's are interleaved or "
              "V-shaped); plan with schedule=1f1b";
     }},
    // The V schedules: PyTorch 2.6's ScheduleZBVZeroBubble runs ZB-V in
    // the order priced; no target here runs DualPipeV (DeepSeek's own code,
    // and PyTorch's ScheduleDualPipeV from a later release than the 2.6
    // named); torch's V schedules refuse stages compiled with
    // torch.compile, which torchtitan's fused kernels need.
    {Capability::Schedule,
     [](const Plan &p, const std::string &f) {
       return p.strategy.vShape() &&
              (f != "pytorch" || p.strategy.schedule == Schedule::DualPipeV);
     },
     [](const Plan &p) -> std::string {
       return std::string("the plan runs ") +
              scheduleName(p.strategy.schedule) +
              ", which this target does not run (" +
              (p.strategy.schedule == Schedule::DualPipeV
                   ? "DualPipeV runs in DeepSeek's DualPipe code and "
                     "PyTorch's ScheduleDualPipeV, after PyTorch 2.6"
                   : "ZB-V runs in PyTorch's ScheduleZBVZeroBubble, on "
                     "stages not compiled with torch.compile: export "
                     "--to pytorch") +
              "); plan with schedule=interleaved or 1f1b";
     }},
    // Research strategies and schedules only their authors' code runs
    // (phantom parallelism, subnetwork data parallelism), PatrickStar,
    // DeepSeek's DualPipe (PyTorch ships the V alone, ScheduleDualPipeV)
    // and torchbraid's layer-parallel MGRIT.
    {Capability::ResearchStrategy,
     [](const Plan &p, const std::string &) {
       return p.strategy.phantomGhosts > 0;
     },
     [](const Plan &) -> std::string {
       return "the plan trains phantom parallelism's ghost layers (phantom=, "
              "Seal et al. 2025), which this target does not run";
     }},
    {Capability::ResearchStrategy,
     [](const Plan &p, const std::string &) {
       return p.strategy.chunkParams > 0;
     },
     [](const Plan &) -> std::string {
       return "the plan manages its model data in PatrickStar's chunks "
              "(chunks=), which this target does not run; plan with zero=3 "
              "or offload=optimizer";
     }},
    {Capability::Schedule,
     [](const Plan &p, const std::string &) {
       return p.strategy.schedule == Schedule::DualPipe;
     },
     [](const Plan &) -> std::string {
       return "the plan runs DualPipe (schedule=dualpipe), which this target "
              "does not run (DeepSeek's DualPipe code runs it); plan with "
              "schedule=zb-v or 1f1b";
     }},
    {Capability::ResearchStrategy,
     [](const Plan &p, const std::string &) {
       return p.strategy.schedule == Schedule::LayerParallelMgrit;
     },
     [](const Plan &) -> std::string {
       return "the plan trains layer-parallel by MGRIT (schedule=mgrit, "
              "torchbraid's method), which this target does not run";
     }},
    {Capability::ResearchStrategy,
     [](const Plan &p, const std::string &) {
       return p.strategy.subnetworkFraction > 0;
     },
     [](const Plan &) -> std::string {
       return "the plan trains subnetworks per worker (sdp, Singh et al. "
              "2025), which this target does not run";
     }},
    // Only DeepSpeed's pipeline engine sends gradients whole from every
    // tensor-parallel rank (pipeline.grad_partitioned false) and, with its
    // GPT pipeline models, the attention mask beside each activation.
    {Capability::PipelineSends,
     [](const Plan &p, const std::string &f) {
       return f != "deepspeed" && p.strategy.pp > 1 &&
              (p.assumptions.pipelineAttentionMask ||
               (p.assumptions.pipelineWholeGradients && p.strategy.tp > 1));
     },
     [](const Plan &p) -> std::string {
       return std::string("the plan was priced with ") +
              (p.assumptions.pipelineAttentionMask
                   ? "the attention mask sent between pipeline stages "
                     "(predicted.pipeline_attention_mask)"
                   : "every tensor-parallel rank sending the whole "
                     "gradient between pipeline stages "
                     "(predicted.pipeline_gradients)") +
              ", as DeepSpeed's pipeline engine does and this target's "
              "does not; export --to deepspeed, or plan without "
              "--pipeline-mask and --pipeline-gradients whole";
     }},
    // SwitchML's sum runs in its own client library, not in NCCL or Gloo.
    {Capability::Collectives,
     [](const Plan &p, const std::string &) {
       return p.aggregation == "switchml";
     },
     [](const Plan &) -> std::string {
       return "the plan's gradient all-reduce was priced through SwitchML's "
              "switch aggregation (predicted.in_network_aggregation), which "
              "this target's collectives (NCCL) do not run; plan on the "
              "cluster without nic.in_network_aggregation";
     }},
    {Capability::Recompute,
     [](const Plan &p, const std::string &) {
       return !p.strategy.recomputeKinds.empty();
     },
     [](const Plan &) -> std::string {
       return "the plan recomputes only some layer kinds (recompute_kinds), "
              "which this target does not state; plan with recompute on "
              "every kind";
     }},
    // Which selective recompute a target runs: Megatron-LM's is the
    // attention core's (--recompute-granularity selective), torchtitan's
    // the per-op policy (selective_ac_option "op"); the PyTorch script
    // checkpoints whole blocks only.
    {Capability::Recompute,
     [](const Plan &p, const std::string &f) {
       return p.strategy.recompute == Recompute::Op && f != "torchtitan";
     },
     [](const Plan &) -> std::string {
       return "the plan recomputes per op as torchtitan's selective "
              "checkpointing does (recompute=op), which only torchtitan "
              "runs; plan with recompute=selective or full";
     }},
    {Capability::Recompute,
     [](const Plan &p, const std::string &f) {
       return (p.strategy.selectiveModules() & ~unsigned(kRecomputeCoreAttn)) &&
              f != "megatron";
     },
     [](const Plan &) -> std::string {
       return "the plan checkpoints Megatron-Core's modules "
              "(recompute_modules), which only Megatron-LM runs "
              "(--recompute-modules); plan with recompute=selective alone, "
              "or full";
     }},
    {Capability::Recompute,
     [](const Plan &p, const std::string &f) {
       return p.strategy.recompute == Recompute::Selective &&
              (f == "torchtitan" || f == "pytorch");
     },
     [](const Plan &) -> std::string {
       return "the plan recomputes the attention core (recompute=selective, "
              "Megatron-LM's), which this target does not run: plan with "
              "recompute=op (torchtitan's per-op policy) or full";
     }},
    // Only Megatron-LM recomputes the first K layers of each chunk and
    // keeps the rest (--recompute-method block); DeepSpeed's checkpoint
    // interval, torchtitan's every-N-th-layer option and JAX's remat
    // policies choose other layers, with another memory peak on the uneven
    // stages.
    {Capability::Recompute,
     [](const Plan &p, const std::string &f) {
       return p.strategy.recompute == Recompute::Full &&
              p.strategy.recomputeLayers > 0 && f != "megatron";
     },
     [](const Plan &p) -> std::string {
       return "the plan recomputes only the first " +
              num(p.strategy.recomputeLayers) +
              " layers of each pipeline chunk (recompute_layers), which only "
              "Megatron-LM states (--recompute-method block); plan with "
              "recompute=full on every layer";
     }},
    // MXFP8: Transformer Engine's block-scaled recipe, which Megatron-LM
    // names (--fp8-recipe mxfp8); the other targets' fp8 is per-tensor.
    {Capability::Precision,
     [](const Plan &p, const std::string &f) {
       return p.strategy.precision == Precision::MXFP8 && f != "megatron";
     },
     [](const Plan &) -> std::string {
       return "the plan trains in mxfp8 (Transformer Engine's block-scaled "
              "recipe), which Megatron-LM states (--fp8-recipe mxfp8) and "
              "this target does not; plan with fp8 or bf16";
     }},
    // The fp8 recipes: Megatron-LM core_r0.12 states delayed and
    // tensorwise (--fp8-recipe; blockwise from core_r0.14);
    // torchtitan's float8 converter (torchao) scales each tensor from its
    // current amax, as tensorwise does.
    {Capability::Precision,
     [](const Plan &p, const std::string &f) {
       const Strategy &s = p.strategy;
       return s.precision == Precision::FP8 &&
              ((f == "megatron" && s.fp8Recipe == Fp8Recipe::Blockwise) ||
               (f == "torchtitan" && s.fp8Recipe != Fp8Recipe::Tensorwise));
     },
     [](const Plan &p) -> std::string {
       if (p.strategy.fp8Recipe == Fp8Recipe::Blockwise)
         return "the plan scales fp8 blockwise (fp8_recipe=blockwise), which "
                "Megatron-LM states from core_r0.14 on; core_r0.12's "
                "--fp8-recipe takes delayed, tensorwise and mxfp8: plan "
                "with fp8_recipe=tensorwise or delayed";
       return std::string("the plan scales fp8 with Transformer Engine's ") +
              fp8RecipeName(p.strategy.fp8Recipe) +
              " recipe; torchtitan's float8 converter (torchao) scales each "
              "tensor from its current amax: plan with fp8_recipe=tensorwise";
     }},
    // Megatron-Core's --overlap-moe-expert-parallel-comm (from core_r0.14);
    // no target this project writes states it.
    {Capability::Experts,
     [](const Plan &p, const std::string &) { return p.strategy.overlapEp; },
     [](const Plan &) -> std::string {
       return "the plan overlaps the expert all-to-alls with another "
              "micro-batch's compute (overlap=ep, Megatron-Core's "
              "--overlap-moe-expert-parallel-comm from core_r0.14 on), "
              "which this target does not state; plan without it";
     }},
    // DeepEP's dispatch kernels: Megatron-Core's flex token dispatcher
    // (--moe-token-dispatcher-type flex --moe-enable-deepep) runs them;
    // the other targets move tokens by NCCL's all-to-all.
    {Capability::Experts,
     [](const Plan &p, const std::string &f) {
       return p.strategy.dispatcher == MoeDispatcher::DeepEP &&
              f != "megatron";
     },
     [](const Plan &) -> std::string {
       return "the plan moves its experts' tokens with DeepEP's kernels "
              "(moe_dispatcher=deepep), which Megatron-LM's flex dispatcher "
              "runs and this target does not; plan with "
              "moe_dispatcher=alltoall";
     }},
    // Only DeepSpeed reduces gradients in another type than it keeps them
    // (communication_data_type); the others reduce what they keep.
    {Capability::Gradients,
     [](const Plan &p, const std::string &f) {
       return p.assumptions.gradReduceBytes() !=
                  p.assumptions.gradBytesPerParam &&
              f != "deepspeed";
     },
     [](const Plan &p) -> std::string {
       return "the plan reduces " + num(int(p.assumptions.gradBytesPerParam)) +
              "-byte gradients in " +
              num(int(p.assumptions.gradReduceBytes())) +
              " bytes (predicted.gradient_reduce_bytes_per_parameter); this "
              "target reduces gradients in the type it keeps them; plan "
              "without --grad-reduce-bytes";
     }},
    // The models: Megatron-LM and torchtitan build transformers (their GPT
    // and Llama), and tensor parallelism is written by the blocks'
    // attention and MLP projections.
    {Capability::ModelKind,
     [](const Plan &p, const std::string &f) {
       return !transformerBody(p) &&
              (f == "megatron" || f == "torchtitan" ||
               (f == "pytorch" && p.strategy.tp > 1));
     },
     [](const Plan &p) -> std::string {
       return "the model's body (its longest run of one layer kind: " +
              num(p.body) + " x " +
              (p.bodyKind.empty() ? std::string("none") : p.bodyKind) +
              ") is not transformer blocks, which this target builds or "
              "splits (export --to deepspeed or jax, or --to pytorch without "
              "tp)";
     }},
};

bool uneven(const std::vector<int64_t> &v) {
  return !v.empty() && !std::all_of(v.begin(), v.end(),
                                    [&](int64_t n) { return n == v.front(); });
}
std::string megatronLayers(const Plan &p) {
  bool emb, loss;
  std::string l;
  for (int64_t n : megatronChunkLayers(p, emb, loss))
    l += (l.empty() ? "" : ",") + std::to_string(n);
  return l;
}
/// Megatron-LM sets only the first and last stage's count: the middle
/// stages' must agree (and hold a layer).
bool megatronMiddleUneven(const Plan &p) {
  bool emb, loss;
  std::vector<int64_t> b = megatronChunkLayers(p, emb, loss);
  if (p.strategy.virtualStages > 1 || p.strategy.pp <= 1 || !uneven(b))
    return false;
  size_t chunks = b.size();
  for (size_t c = 1; c + 1 < chunks; ++c)
    if (b[c] != b[1])
      return true;
  return chunks > 2 && b[1] == 0;
}

/// Megatron-LM core_r0.12: pretrain_gpt.py's flags, as its validate_args
/// takes them (tests/e2e/megatron_flags.py checks the exports against the
/// flags and rules read from its source).
const Refusal kMegatron[] = {
    // --use-torch-fsdp2: validate_args asserts pp == 1, ep == 1, no fp16
    // and an untied head.
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.zeroStage == 3 &&
              (s.pp > 1 || s.ep > 1 || s.precision == Precision::FP16 ||
               p.tiedParameters > 0);
     },
     [](const Plan &p) {
       const Strategy &s = p.strategy;
       std::string what =
           s.pp > 1   ? "pipeline parallelism (pp=" + num(s.pp) + ")"
           : s.ep > 1 ? "expert parallelism (ep=" + num(s.ep) + ")"
           : s.precision == Precision::FP16
               ? std::string("fp16")
               : "a head tied to the embedding (" + num(p.tiedParameters) +
                     " parameters shared; FSDP2 needs "
                     "--untie-embeddings-and-output-weights)";
       return "ZeRO-3 is Megatron-LM's --use-torch-fsdp2, which does not run "
              "with " +
              what + "; plan with zero=1";
     }},
    // Without the overlap of pipeline sends (its default there) the
    // interleaved schedule needs pp > 2 (validate_args); a strategy
    // overlaps them in the interleaved schedule only.
    {Capability::Overlap,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.pp == 2 && s.virtualStages > 1 && !s.overlapP2p;
     },
     [](const Plan &) -> std::string {
       return "Megatron-LM's interleaved schedule without the overlap of "
              "pipeline sends (--no-overlap-p2p-communication) needs pp > 2; "
              "plan with overlap=...+p2p";
     }},
    // Experts: grouped GEMMs in bf16 only, no fp16 (validate_args), sequence
    // parallelism beside tp (ModelParallelConfig).
    {Capability::Experts,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.ep > 1 && ((s.precision != Precision::BF16 &&
                            !isFp8(s.precision)) ||
                           (s.tp > 1 && !s.sequenceParallel));
     },
     [](const Plan &p) {
       const Strategy &s = p.strategy;
       if (s.tp > 1 && !s.sequenceParallel)
         return std::string("Megatron-LM runs expert with tensor parallelism "
                            "only under sequence parallelism; plan with sp=1");
       return std::string("Megatron-LM's grouped GEMM for experts "
                          "(--moe-grouped-gemm) runs bf16 only; the plan is ") +
              precisionName(s.precision);
     }},
    // --use-tp-pp-dp-mapping with experts and pipeline stages: the experts'
    // data-parallel group must be the attention's (initialize_model_parallel).
    {Capability::DeviceOrder,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.ep > 1 && s.pp > 1 &&
              s.order == std::vector<std::string>{"tp", "cp", "pp", "dp"} &&
              int64_t(s.expertTp()) * s.ep != int64_t(s.tp) * s.cp;
     },
     [](const Plan &p) {
       const Strategy &s = p.strategy;
       return "with --use-tp-pp-dp-mapping and pipeline stages Megatron-LM "
              "needs the experts' data-parallel group to be the attention's "
              "(etp x ep = tp x cp); the plan has etp=" +
              num(s.expertTp()) + ", ep=" + num(s.ep) + ", tp=" + num(s.tp) +
              ", cp=" + num(s.cp);
     }},
    {Capability::FineTuning,
     [](const Plan &p, const std::string &) {
       return p.assumptions.fineTuning.active();
     },
     [](const Plan &p) {
       return fineTuningWhy(p, "Megatron-LM's flags do not state (NeMo's "
                               "PEFT does: LoRA with dim and "
                               "target_modules)");
     }},
    {Capability::Schedule,
     [](const Plan &p, const std::string &) {
       return p.strategy.schedule == Schedule::GPipe && p.strategy.pp > 1;
     },
     [](const Plan &) -> std::string {
       return "Megatron-LM has no GPipe schedule (it runs 1F1B or "
              "interleaved 1F1B); plan or simulate with schedule=1f1b";
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadActivations;
     },
     [](const Plan &) -> std::string {
       return "the plan offloads activations to host memory, which "
              "Megatron-LM's flags do not express";
     }},
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       return p.strategy.zeroStage == 2;
     },
     [](const Plan &) -> std::string {
       return "ZeRO-2 (sharded gradients without sharded weights) has no "
              "Megatron-LM flag; its distributed optimizer is ZeRO-1 and "
              "torch FSDP2 is ZeRO-3";
     }},
    {Capability::DeviceOrder,
     [](const Plan &p, const std::string &) {
       const std::vector<std::string> &o = p.strategy.order;
       return o != std::vector<std::string>{"tp", "cp", "dp", "pp"} &&
              o != std::vector<std::string>{"tp", "cp", "pp", "dp"};
     },
     [](const Plan &p) {
       return "device order " + p.strategy.str() +
              " is neither Megatron-LM's default (tp, cp, dp, pp) nor its "
              "--use-tp-pp-dp-mapping (tp, cp, pp, dp)";
     }},
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) {
       return p.chunkBodyLayers.empty();
     },
     [](const Plan &) -> std::string {
       return "the plan puts embedding or head layers outside the first and "
              "last pipeline stages";
     }},
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) {
       bool emb, loss;
       return p.strategy.virtualStages > 1 &&
              uneven(megatronChunkLayers(p, emb, loss));
     },
     [](const Plan &p) {
       return "interleaved stages of uneven size (" + p.strategy.str() +
              ") cannot be given to Megatron-LM, which splits the layers "
              "evenly over virtual stages";
     }},
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) { return megatronMiddleUneven(p); },
     [](const Plan &p) {
       return "the plan's layers per stage (" + megatronLayers(p) +
              " transformer layers) differ between middle stages; "
              "Megatron-LM sets only the first and last stage's count";
     }},
    {Capability::Overlap,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.dp > 1 && s.zeroStage == 1 && s.overlapParamGather &&
              !s.overlapGradReduce;
     },
     [](const Plan &) -> std::string {
       return "Megatron-LM overlaps the parameter all-gather "
              "(--overlap-param-gather) only with --overlap-grad-reduce; the "
              "plan overlaps one without the other";
     }},
    {Capability::Kernels,
     [](const Plan &p, const std::string &) {
       return dispatchesEachOp(p.assumptions.fusion) ||
              p.assumptions.fusion == KernelFusion::Compiled;
     },
     [](const Plan &p) -> std::string {
       return std::string("the plan was priced as PyTorch's own kernels "
                          "(--kernels ") +
              kernelFusionName(p.assumptions.fusion) +
              "); Megatron-LM runs Transformer Engine's: plan with --kernels "
              "fused or unfused-attention";
     }},
    {Capability::Zero, prefetches,
     [](const Plan &p) {
       return prefetchWhy(p, "--use-torch-fsdp2 prefetches the next layer "
                             "whole; the plan was priced gathering ");
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadOptimizer && p.strategy.zeroStage != 1;
     },
     [](const Plan &p) {
       return "Megatron-LM offloads the optimizer only with its distributed "
              "optimizer (ZeRO-1); the plan uses ZeRO-" +
              num(p.strategy.zeroStage);
     }},
};

/// DeepSpeed 0.19: a ds_config.json.
const Refusal kDeepSpeed[] = {
    {Capability::Experts, needsMoeCapacity, moeCapacityWhy},
    {Capability::FineTuning,
     [](const Plan &p, const std::string &) {
       return p.assumptions.fineTuning.active();
     },
     [](const Plan &p) {
       return fineTuningWhy(p, "a ds_config does not state (frozen weights "
                               "and adapters live in the model code)");
     }},
    {Capability::Experts,
     [](const Plan &p, const std::string &) { return p.strategy.ep > 1; },
     [](const Plan &p) {
       return "expert parallelism (ep=" + num(p.strategy.ep) +
              ") lives in DeepSpeed-MoE's model code, not in ds_config";
     }},
    {Capability::ContextParallel,
     [](const Plan &p, const std::string &) { return p.strategy.cp > 1; },
     [](const Plan &p) {
       return "context parallelism (cp=" + num(p.strategy.cp) +
              ") has no ds_config setting";
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadActivations &&
              p.strategy.recompute != Recompute::Full;
     },
     [](const Plan &p) {
       return "cpu_checkpointing offloads activation checkpoints, which only "
              "full recompute makes; the plan offloads activations with "
              "recompute=" +
              std::string(recomputeName(p.strategy.recompute));
     }},
    {Capability::Schedule,
     [](const Plan &p, const std::string &) {
       return p.strategy.virtualStages > 1;
     },
     [](const Plan &p) {
       return "DeepSpeed's pipeline engine has no interleaved schedule (the "
              "plan has vpp=" +
              num(p.strategy.virtualStages) + ")";
     }},
    {Capability::Recompute,
     [](const Plan &p, const std::string &) {
       return p.strategy.recompute == Recompute::Selective;
     },
     [](const Plan &) -> std::string {
       return "selective (attention-only) recompute is not a ds_config "
              "setting; it lives in the model code";
     }},
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       return p.strategy.pp > 1 && p.strategy.zeroStage >= 2;
     },
     [](const Plan &p) {
       return "DeepSpeed's pipeline engine runs with ZeRO-1 at most; the "
              "plan uses ZeRO-" +
              num(p.strategy.zeroStage) + " with pp=" + num(p.strategy.pp);
     }},
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) {
       if (p.strategy.pp <= 1)
         return false;
       auto [lo, hi] =
           std::minmax_element(p.chunkLayers.begin(), p.chunkLayers.end());
       return *hi - *lo > 1;
     },
     [](const Plan &p) {
       auto [lo, hi] =
           std::minmax_element(p.chunkLayers.begin(), p.chunkLayers.end());
       return "DeepSpeed's PipelineModule partitions layers uniformly (or "
              "by parameters or type); it cannot take this plan's uneven "
              "stages (" +
              num(*lo) + " to " + num(*hi) + " layers)";
     }},
    {Capability::Precision,
     [](const Plan &p, const std::string &) {
       return isFp8(p.strategy.precision);
     },
     [](const Plan &) -> std::string {
       return "fp8 training is not a ds_config precision";
     }},
    // Megatron's sequence parallelism splits the norms' and dropouts'
    // activations over tp; DeepSpeed's AutoTP does not. Under full
    // recompute only the checkpoints are kept, and partition_activations
    // splits those over tp as sequence parallelism does.
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.sequenceParallel && s.tp > 1 && s.recompute != Recompute::Full;
     },
     [](const Plan &p) {
       return "AutoTP has no sequence parallelism (the plan has sp=1 with "
              "tp=" +
              num(p.strategy.tp) +
              " and recompute=" + recomputeName(p.strategy.recompute) +
              "); plan with sp=0, or recompute=full (partition_activations)";
     }},
    {Capability::Overlap,
     [](const Plan &p, const std::string &) {
       return p.strategy.overlapTpComm && p.strategy.tp > 1;
     },
     [](const Plan &p) {
       return "AutoTP has no overlap of its collectives with the GEMMs (the "
              "plan has overlap=" +
              p.strategy.overlapName() + ")";
     }},
    {Capability::Overlap,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.dp > 1 && s.overlapGradReduce && (s.pp > 1 || s.zeroStage == 0);
     },
     [](const Plan &p) {
       return "DeepSpeed's " +
              std::string(p.strategy.pp > 1 ? "pipeline engine" : "ZeRO-0") +
              " reduces gradients after the backward, not during it; plan "
              "without the gradient overlap (overlap=none, or without "
              "'grad')";
     }},
    {Capability::Overlap,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.dp > 1 && (s.zeroStage == 1 || s.zeroStage == 2) &&
              s.overlapParamGather;
     },
     [](const Plan &p) {
       return "ZeRO-" + num(p.strategy.zeroStage) +
              " all-gathers the updated weights after the optimizer step, "
              "not during the next forward; plan without 'param' in "
              "overlap= (e.g. overlap=grad)";
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadOptimizer && p.strategy.zeroStage == 0;
     },
     [](const Plan &) -> std::string {
       return "optimizer offload needs ZeRO-1 or more";
     }},
};

/// torchtitan 0.1: its job TOML (config_manager.py and the Llama's
/// parallelize.py of the 0.1.0 wheel).
const Refusal kTorchtitan[] = {
    {Capability::Experts, needsMoeCapacity, moeCapacityWhy},
    {Capability::Precision,
     [](const Plan &p, const std::string &) {
       return p.strategy.precision == Precision::FP16;
     },
     [](const Plan &) -> std::string {
       return "fp16 is not a torchtitan parameter precision (bfloat16 or "
              "float32)";
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadActivations;
     },
     [](const Plan &) -> std::string {
       return "activation offload to host memory has no torchtitan setting";
     }},
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       return p.strategy.zeroStage == 1 || p.strategy.zeroStage == 2;
     },
     [](const Plan &p) {
       return "the plan shards " +
              std::string(p.strategy.zeroStage == 1
                              ? "the optimizer state (ZeRO-1)"
                              : "gradients and optimizer state (ZeRO-2)") +
              "; torchtitan replicates (DDP, ZeRO-0) or shards weights too "
              "(FSDP, ZeRO-3): plan with zero=0 or zero=3";
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadOptimizer && p.strategy.zeroStage == 0;
     },
     [](const Plan &) -> std::string {
       return "CPU offload needs FSDP (ZeRO-3); the plan replicates weights "
              "(ZeRO-0)";
     }},
    {Capability::ContextParallel, ulysses,
     [](const Plan &) -> std::string {
       return "its context parallelism is ring attention; the plan uses "
              "cp_comm=all-to-all (Ulysses)";
     }},
    // Its attention is scaled_dot_product_attention with FlashAttention
    // first (cuDNN first on Blackwell: torchtitan/models/attention.py); the
    // rest is torch.compile'd (compile = true: compiled) or not (sdpa).
    // Transformer Engine's fused attention (fused) runs about twice as
    // fast as FlashAttention-2 on a Hopper GPU: not what torchtitan runs.
    {Capability::Kernels,
     [](const Plan &p, const std::string &) {
       return !attentionBySdpa(p.assumptions.fusion);
     },
     [](const Plan &p) {
       return std::string("the plan was priced with --kernels ") +
              kernelFusionName(p.assumptions.fusion) +
              "; torchtitan runs PyTorch's scaled_dot_product_attention "
              "(FlashAttention-2 on A100 and H100): plan with --kernels "
              "compiled (compile = true) or sdpa (compile = false)";
     }},
    {Capability::Overlap,
     [](const Plan &p, const std::string &) {
       return p.strategy.overlapP2p && p.strategy.pp > 1;
     },
     [](const Plan &p) {
       return "its pipeline schedules have no overlap of the sends with "
              "compute (the plan has overlap=" +
              p.strategy.overlapName() + ")";
     }},
    {Capability::Zero, prefetches,
     [](const Plan &p) {
       return prefetchWhy(p, "FSDP prefetches the next block whole; the plan "
                             "was priced gathering ");
     }},
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) {
       return p.strategy.pp > 1 && !splitPointProblem(p).empty();
     },
     splitPointProblem},
    {Capability::Experts,
     [](const Plan &p, const std::string &) { return p.strategy.ep > 1; },
     [](const Plan &p) {
       return "expert parallelism (ep=" + num(p.strategy.ep) +
              ") is no [parallelism] key of torchtitan 0.1 (its job config "
              "would ignore it); export --to megatron";
     }},
    // Data parallelism over cp ranks is FSDP whatever the ZeRO stage, and
    // replicated (DDP) weights take no second mesh axis.
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.zeroStage == 0 &&
              (s.cp > 1 || (s.dp > 1 && (s.tp > 1 || s.pp > 1)));
     },
     [](const Plan &p) {
       const Strategy &s = p.strategy;
       if (s.cp > 1)
         return "with cp=" + num(s.cp) +
                " torchtitan shards the weights over the data and context "
                "ranks (FSDP) whatever the plan's ZeRO stage; plan with "
                "zero=3";
       return std::string("torchtitan replicates weights (DDP) only on a "
                          "one-dimensional mesh (\"DDP has not supported > 1D "
                          "parallelism\"); with tp or pp plan with zero=3");
     }},
};

/// PyTorch 2.6: DeviceMesh, DTensor, FSDP2, torch.distributed.pipelining.
const Refusal kPytorch[] = {
    {Capability::ContextParallel,
     [](const Plan &p, const std::string &) { return p.strategy.cp > 1; },
     [](const Plan &p) {
       return "context parallelism (cp=" + num(p.strategy.cp) +
              ") is not written by this script (torch's context_parallel "
              "is experimental in 2.6); export --to torchtitan";
     }},
    {Capability::Precision,
     [](const Plan &p, const std::string &) {
       return p.strategy.precision == Precision::FP16 ||
              isFp8(p.strategy.precision);
     },
     [](const Plan &p) {
       return std::string(p.strategy.precision == Precision::FP16
                              ? "fp16 needs loss scaling"
                              : "fp8 needs torchao's float8 linears") +
              ", which this script does not write; plan with bf16, or "
              "export --to " +
              (p.strategy.precision == Precision::FP16 ? "megatron"
                                                       : "torchtitan");
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadOptimizer;
     },
     [](const Plan &) -> std::string {
       return "optimizer offload has no FSDP2 equivalent (its "
              "CPUOffloadPolicy moves the weights and gradients too)";
     }},
    // ZeroRedundancyOptimizer broadcasts plain tensors: no DTensor weights.
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.zeroStage == 1 && s.dp > 1 && s.tp > 1;
     },
     [](const Plan &p) {
       return "ZeRO-1 with tp=" + num(p.strategy.tp) +
              ": ZeroRedundancyOptimizer takes no tensor-parallel (DTensor) "
              "weights; plan with zero=0 or zero=3";
     }},
    // DDP takes neither DTensor weights nor the pipeline's backward by
    // chunks: there the script all-reduces the gradients after the step's
    // backward, without overlap; ZeroRedundancyOptimizer broadcasts the
    // updated weights after the step.
    {Capability::Overlap,
     [](const Plan &p, const std::string &) {
       const Strategy &s = p.strategy;
       return s.dp > 1 && s.zeroStage <= 1 &&
              ((s.overlapGradReduce && (s.pp > 1 || s.tp > 1)) ||
               (s.overlapParamGather && s.zeroStage == 1));
     },
     [](const Plan &p) {
       const Strategy &s = p.strategy;
       if (s.overlapParamGather && s.zeroStage == 1)
         return std::string("ZeroRedundancyOptimizer broadcasts the updated "
                            "weights after the step, not during the next "
                            "forward; plan without 'param' in overlap=");
       return std::string("with ") + (s.pp > 1 ? "pipeline stages" : "tp") +
              " the script all-reduces gradients after the backward (DDP "
              "takes neither), not during it; plan without 'grad' in "
              "overlap=";
     }},
    {Capability::Experts, needsMoeCapacity, moeCapacityWhy},
    {Capability::LayerSplit,
     [](const Plan &p, const std::string &) {
       return p.chunkBodyLayers.empty() && p.strategy.pp > 1;
     },
     [](const Plan &) -> std::string {
       return "the plan puts embedding or head layers outside the first and "
              "last pipeline stages";
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadActivations;
     },
     [](const Plan &) -> std::string {
       return "activation offload has no FSDP2/DTensor setting";
     }},
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       return p.strategy.zeroStage == 2;
     },
     [](const Plan &) -> std::string {
       return "ZeRO-2 has no PyTorch equivalent (FSDP2 is ZeRO-3, "
              "ZeroRedundancyOptimizer is ZeRO-1)";
     }},
    {Capability::Zero, prefetches,
     [](const Plan &p) {
       return prefetchWhy(p, "FSDP2 prefetches the next block whole; the "
                             "plan was priced gathering ");
     }},
    {Capability::Experts,
     [](const Plan &p, const std::string &) { return p.strategy.ep > 1; },
     [](const Plan &p) {
       return "expert parallelism (ep=" + num(p.strategy.ep) +
              ") has no DTensor / FSDP2 setting here; export to megatron or "
              "torchtitan";
     }},
    {Capability::ContextParallel, ulysses,
     [](const Plan &) -> std::string {
       return "torch's context_parallel is ring attention; the plan uses "
              "cp_comm=all-to-all (Ulysses)";
     }},
    {Capability::Overlap, overlapsTpOrP2p,
     [](const Plan &p) {
       return "DTensor and torch.distributed.pipelining have no overlap of "
              "tensor-parallel collectives or pipeline sends with compute "
              "(the plan has overlap=" +
              p.strategy.overlapName() + ")";
     }},
    // Orrery's layer kinds are not names in the model code.
    {Capability::FineTuning,
     [](const Plan &p, const std::string &) {
       for (const std::string &f : p.assumptions.fineTuning.freeze)
         for (const auto &kind : p.layers)
           if (f == kind.first)
             return p.assumptions.fineTuning.active();
       return false;
     },
     [](const Plan &p) {
       for (const std::string &f : p.assumptions.fineTuning.freeze)
         for (const auto &kind : p.layers)
           if (f == kind.first)
             return "--freeze " + f +
                    " names one of Orrery's layer kinds, which the model "
                    "code does not; freeze by weight name to export";
       return std::string();
     }},
};

/// JAX 0.4.35+: a Mesh and PartitionSpecs by weight role.
const Refusal kJax[] = {
    {Capability::Experts, needsMoeCapacity, moeCapacityWhy},
    {Capability::FineTuning,
     [](const Plan &p, const std::string &) {
       return p.assumptions.fineTuning.active();
     },
     [](const Plan &p) {
       return fineTuningWhy(p, "a mesh and PartitionSpecs do not state (an "
                               "optax mask does, in the training code)");
     }},
    {Capability::Offload,
     [](const Plan &p, const std::string &) {
       return p.strategy.offloadActivations || p.strategy.offloadOptimizer;
     },
     [](const Plan &) -> std::string {
       return "host offload is not part of a mesh and PartitionSpecs";
     }},
    {Capability::Zero, prefetches,
     [](const Plan &p) {
       return prefetchWhy(p, "XLA schedules the sharded weights' gathers "
                             "itself; the plan was priced gathering only ");
     }},
    {Capability::Zero,
     [](const Plan &p, const std::string &) {
       return p.strategy.zeroStage == 1 || p.strategy.zeroStage == 2;
     },
     [](const Plan &p) {
       return "the plan shards the optimizer state" +
              std::string(p.strategy.zeroStage == 2 ? " and gradients" : "") +
              " but not the weights (ZeRO-" + num(p.strategy.zeroStage) +
              "); these PartitionSpecs shard weights and optimizer state "
              "alike (zero=3) or neither (zero=0): plan with one of those";
     }},
    {Capability::Experts,
     [](const Plan &p, const std::string &) { return p.strategy.ep > 1; },
     [](const Plan &p) {
       return "expert parallelism (ep=" + num(p.strategy.ep) +
              ") is not written as a mesh axis here; export to megatron or "
              "torchtitan";
     }},
    {Capability::ContextParallel, ulysses,
     [](const Plan &) -> std::string {
       return "a sequence-sharded mesh runs ring-style attention; the plan "
              "uses cp_comm=all-to-all (Ulysses)";
     }},
    {Capability::Overlap, overlapsTpOrP2p,
     [](const Plan &p) {
       return "a mesh and PartitionSpecs do not state how XLA overlaps "
              "collectives (the plan has overlap=" +
              p.strategy.overlapName() + ")";
     }},
};

/// A framework's row: the release its exports are written for, how it
/// treats gradients, and its own refusals after the common ones.
struct Row {
  FrameworkCapabilities info;
  const Refusal *begin, *end;
};
template <size_t N>
Row row(const char *name, const char *release, const char *gradients,
        std::vector<std::string> vendors, const char *devices,
        const Refusal (&rules)[N]) {
  return {{name, release, gradients, std::move(vendors), devices}, rules,
          rules + N};
}

const std::vector<Row> &table() {
  static const std::vector<Row> rows = {
      row("megatron", "Megatron-LM core_r0.12",
          "accumulated into fp32 main gradients inside the weight-gradient "
          "GEMM (or by a kernel of their own), reduced in the type kept",
          {"NVIDIA", "AMD"}, "NVIDIA and AMD GPUs (CUDA, ROCm)", kMegatron),
      row("deepspeed", "DeepSpeed 0.19",
          "accumulated by a kernel of their own; reduced in the type kept "
          "or in communication_data_type",
          {"NVIDIA", "AMD", "Intel", "generic"},
          "NVIDIA and AMD GPUs, Intel Gaudi, CPUs (its accelerators)",
          kDeepSpeed),
      row("torchtitan", "torchtitan 0.1",
          "accumulated by autograd; FSDP reduces in fp32, DDP in the type "
          "kept",
          {"NVIDIA", "AMD"}, "NVIDIA and AMD GPUs", kTorchtitan),
      row("pytorch", "PyTorch 2.6",
          "accumulated by autograd; reduced in the type kept",
          {"NVIDIA", "AMD", "generic"}, "NVIDIA and AMD GPUs (NCCL), CPUs (Gloo)",
          kPytorch),
      row("jax", "JAX 0.4.35",
          "accumulated and reduced as XLA compiles the step",
          {"NVIDIA", "AMD", "Google", "generic"},
          "NVIDIA and AMD GPUs, TPUs, CPUs", kJax),
  };
  return rows;
}

const Row *rowOf(const std::string &name) {
  for (const Row &r : table())
    if (name == r.info.name)
      return &r;
  return nullptr;
}

} // namespace

const std::vector<std::string> &frameworkFormats() {
  static const std::vector<std::string> formats = [] {
    std::vector<std::string> f;
    for (const Row &r : table())
      f.push_back(r.info.name);
    return f;
  }();
  return formats;
}

const FrameworkCapabilities *frameworkCapabilities(const std::string &name) {
  const Row *r = rowOf(name);
  return r ? &r->info : nullptr;
}

llvm::Error frameworkRuns(const ExportPlan &plan,
                          const std::string &framework) {
  if (framework == "any") {
    std::string first;
    for (const std::string &f : frameworkFormats()) {
      llvm::Error e = frameworkRuns(plan, f);
      if (!e)
        return llvm::Error::success();
      std::string why = llvm::toString(std::move(e));
      if (first.empty())
        first = why;
    }
    return err("no export target runs it (" + first + ")");
  }
  const Row *r = rowOf(framework);
  if (!r)
    return err("export: unknown framework '" + framework + "'");
  for (const Refusal &rule : kCommon)
    if (rule.refuses(plan, framework))
      return err(framework + ": " + rule.why(plan));
  for (const Refusal *rule = r->begin; rule != r->end; ++rule)
    if (rule->refuses(plan, framework))
      return err(framework + ": " + rule->why(plan));
  return llvm::Error::success();
}

std::vector<std::string> frameworksRunning(const ExportPlan &plan) {
  std::vector<std::string> running;
  for (const std::string &f : frameworkFormats())
    if (auto e = frameworkRuns(plan, f))
      llvm::consumeError(std::move(e));
    else
      running.push_back(f);
  return running;
}

/// A priced strategy as a framework sees it.
static llvm::Expected<ExportPlan> exportPlanOf(const StepResult &r,
                                               const Workload &w) {
  Assumptions a = r.assumptions;
  a.fineTuning = w.fineTuning;
  const DeviceSpec *device =
      r.stages.empty() ? nullptr
                       : HardwareCatalog::builtin().device(r.stages[0].device);
  auto p = exportPlanFor(w, r.strategy, a, device);
  if (p)
    p->aggregation = r.inNetworkAggregation;
  return p;
}

std::vector<std::string> frameworksRunning(const StepResult &r,
                                           const Workload &w) {
  auto p = exportPlanOf(r, w);
  if (!p) {
    llvm::consumeError(p.takeError());
    return {};
  }
  return frameworksRunning(*p);
}

std::vector<std::string> frameworkRefusals(const StepResult &r,
                                           const Workload &w) {
  auto p = exportPlanOf(r, w);
  if (!p)
    return {llvm::toString(p.takeError())};
  std::vector<std::string> refusals;
  for (const std::string &f : frameworkFormats())
    if (auto e = frameworkRuns(*p, f))
      refusals.push_back(llvm::toString(std::move(e)));
  return refusals;
}

} // namespace orrery
