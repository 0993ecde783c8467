//===- Exporters.cpp - a plan in other frameworks' own formats -----------===//
//
// Targets (docs/export.md says what each maps and refuses):
//   megatron    Megatron-LM core_r0.12 command-line flags, as a bash array
//   deepspeed   DeepSpeed 0.16 ds_config.json
//   torchtitan  torchtitan 0.1 job TOML: [training], [parallelism],
//               [activation_checkpoint]
//   pytorch     PyTorch 2.6: DeviceMesh, DTensor tensor parallelism, FSDP2
//               or DDP, the pipeline schedule
//   jax         JAX 0.4.35+: the Mesh and the PartitionSpecs by weight role
//
//===----------------------------------------------------------------------===//
#include "orrery/Export/Exporters.h"
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/Plan/Plan.h"

#include <algorithm>
#include <sstream>

namespace orrery {

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const std::vector<std::string> &exportFormats() {
  static const std::vector<std::string> formats = {
      "megatron", "deepspeed", "torchtitan", "pytorch", "jax", "mlir"};
  return formats;
}

const std::vector<std::string> &frameworkFormats() {
  static const std::vector<std::string> formats = [] {
    std::vector<std::string> f;
    for (const std::string &name : exportFormats())
      if (name != "mlir")
        f.push_back(name);
    return f;
  }();
  return formats;
}

llvm::Expected<ExportPlan> readExportPlan(const nlohmann::json &plan,
                                          const std::string &what) {
  if (isHeteroPlan(plan))
    return err(what + ": a heterogeneous plan (stages on different device "
                      "types or sites) runs different configurations on "
                      "different devices; none of the export targets can "
                      "express that");
  auto s = strategyFromPlan(plan, what);
  if (!s)
    return s.takeError();
  ExportPlan p;
  p.strategy = *s;
  auto assumptions = assumptionsFromPlan(plan, what);
  if (!assumptions)
    return assumptions.takeError();
  p.kernels = assumptions->fusion;
  p.gradBytes = assumptions->gradBytesPerParam;
  p.gradReduceBytes = assumptions->gradReduceBytes();
  p.fusedGradAccumulation = assumptions->fusedGradientAccumulation;
  p.fineTuning = assumptions->fineTuning;
  p.zero3PrefetchParams = assumptions->zero3PrefetchParams;
  p.pipelineWholeGradients = assumptions->pipelineWholeGradients;
  p.pipelineAttentionMask = assumptions->pipelineAttentionMask;
  const nlohmann::json &model = plan.value("model", nlohmann::json::object());
  p.model = model.value("source", "");
  if (model.contains("parameters") && model["parameters"].is_number_integer())
    p.parameters = model["parameters"].get<int64_t>();
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
    p.deviceType = plan["cluster"].value("device_type", "");
    p.devices = plan["cluster"].value("devices", 0);
  }
  if (!model.contains("layers") || !model["layers"].is_array() ||
      model["layers"].empty())
    return err(what + ": model.layers: missing (the layer kinds and counts)");
  for (const auto &l : model["layers"]) {
    if (!l.is_object() || !l.contains("kind") || !l["kind"].is_string() ||
        !l.contains("count") || !l["count"].is_number_integer() ||
        l["count"].get<int64_t>() < 1)
      return err(what + ": model.layers: each entry needs a kind and a "
                        "positive count");
    p.layers.push_back({l["kind"], l["count"]});
  }
  if (auto e = placeChunks(p, what))
    return std::move(e);
  return p;
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
  for (size_t r = 0; r < p.layers.size(); ++r)
    (r < bodyRun ? p.before : r > bodyRun ? p.after : p.body) +=
        p.layers[r].second;
  // Chunks as the simulator makes them (Simulator.cpp chunkLayers).
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
                                         const Assumptions &a) {
  ExportPlan p;
  p.strategy = s;
  p.kernels = a.fusion;
  p.gradBytes = a.gradBytesPerParam;
  p.gradReduceBytes = a.gradReduceBytes();
  p.fusedGradAccumulation = a.fusedGradientAccumulation;
  p.fineTuning = a.fineTuning;
  p.zero3PrefetchParams = a.zero3PrefetchParams;
  p.pipelineWholeGradients = a.pipelineWholeGradients;
  p.pipelineAttentionMask = a.pipelineAttentionMask;
  p.parameters = w.parameters() + w.frozenParameters();
  for (const LayerRun &run : w.layers)
    p.layers.push_back({w.kinds[run.kind].name, run.count});
  if (auto e = placeChunks(p, "strategy"))
    return std::move(e);
  return p;
}

namespace {

/// The refusal of a target that cannot state fine-tuning, or success.
llvm::Error noFineTuning(const ExportPlan &p, const char *target,
                         const char *why) {
  if (!p.fineTuning.active())
    return llvm::Error::success();
  return err(std::string(target) + ": the plan fine-tunes (" +
             p.fineTuning.str() + "), which " + why +
             "; export --to pytorch for the code that freezes and adapts "
             "the weights");
}

/// The experts' capacity factor is a setting of the MoE layer in the model
/// code everywhere but Megatron-LM's command line.
llvm::Error noMoeCapacity(const Strategy &s, const char *target) {
  if (s.moeCapacity <= 0)
    return llvm::Error::success();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s.moeCapacity);
  return err(std::string(target) +
             ": the experts' capacity factor "
             "(moe_capacity=" +
             buf +
             ") is the MoE layer's own setting in "
             "the model code here; export to megatron "
             "(--moe-expert-capacity-factor)");
}

/// Python for a fine-tuned plan: freeze as --freeze does, then PEFT's LoRA
/// on the targets (Orrery's roles as torchtitan's Llama names them).
llvm::Expected<std::string> fineTuneCode(const ExportPlan &p) {
  const FineTuning &ft = p.fineTuning;
  if (!ft.active())
    return "";
  for (const std::string &f : ft.freeze)
    for (const auto &[kind, count] : p.layers)
      if (f == kind)
        return err("pytorch: --freeze " + f + " names one of Orrery's layer "
                   "kinds, which the model code does not; freeze by weight "
                   "name to export");
  auto list = [](const std::vector<std::string> &v) {
    std::string out = "(";
    for (const std::string &x : v)
      out += "\"" + x + "\", ";
    return out + ")";
  };
  std::vector<std::string> targets;
  for (const std::string &t : ft.loraTargets) {
    if (t == "attention")
      targets.insert(targets.end(), {"wq", "wk", "wv", "wo"});
    else if (t == "mlp")
      targets.insert(targets.end(), {"w1", "w2", "w3"});
    else
      targets.push_back(t);
  }
  bool allLinear = std::find(targets.begin(), targets.end(), "all-linear") !=
                   targets.end();
  std::ostringstream py;
  py << "\n# Fine-tuning as priced (" << ft.str() << "): call fine_tune(model) "
        "before parallelize(model).\n"
     << "FREEZE = " << list(ft.freeze)
     << "  # weight names, dotted prefixes or parts; '*' any run\n"
     << "LORA_RANK = " << ft.loraRank << "\n"
     << "LORA_TARGETS = "
     << (allLinear ? std::string("\"all-linear\"") : list(targets))
     << "  # PEFT target_modules (attention: wq, wk, wv, wo; mlp: w1, w2, w3)\n\n\n"
     << "def fine_tune(model):\n"
     << "    import fnmatch\n"
     << "    def frozen(name):\n"
     << "        return LORA_RANK > 0 or any(\n"
     << "            fnmatch.fnmatchcase(name, f) for p in FREEZE\n"
     << "            for f in (p, p + \".*\", \"*.\" + p, \"*.\" + p + \".*\"))\n"
     << "    for name, param in model.named_parameters():\n"
     << "        if frozen(name):\n"
     << "            param.requires_grad_(False)\n"
     << "    if LORA_RANK > 0:  # every base weight frozen, adapters train\n"
     << "        from peft import LoraConfig, get_peft_model\n"
     << "        model = get_peft_model(model, LoraConfig(\n"
     << "            r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,\n"
     << "            target_modules=LORA_TARGETS))\n"
     << "    return model\n";
  return py.str();
}

/// Megatron-LM's transformer layers: the body; the embedding and head are
/// not layers there.
/// What the launch must set for the switches' sum the plan was priced
/// with: `line` (the target's way of setting NCCL_COLLNET_ENABLE=1) under
/// a comment that says why; nothing without it.
std::string launchEnv(const ExportPlan &p, const std::string &line) {
  if (p.aggregation != "sharp")
    return "";
  return "# the gradient all-reduce was priced through InfiniBand SHARP "
         "(NCCL's CollNet, with the SHARP plugin)\n" +
         line + "\n";
}

llvm::Expected<std::string> megatron(const ExportPlan &p) {
  const Strategy &s = p.strategy;
  std::vector<std::string> args;
  auto flag = [&](const std::string &name, const std::string &value = "") {
    args.push_back(name + (value.empty() ? "" : " " + value));
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  if (auto e = noFineTuning(p, "megatron",
                            "Megatron-LM's flags do not state (NeMo's PEFT "
                            "does: LoRA with dim and target_modules)"))
    return std::move(e);
  if (s.schedule == Schedule::GPipe && s.pp > 1)
    return err("megatron: Megatron-LM has no GPipe schedule (it runs 1F1B "
               "or interleaved 1F1B); plan or simulate with schedule=1f1b");
  if (s.offloadActivations)
    return err("megatron: the plan offloads activations to host memory, "
               "which Megatron-LM's flags do not express");
  if (s.zeroStage == 2)
    return err("megatron: ZeRO-2 (sharded gradients without sharded "
               "weights) has no Megatron-LM flag; its distributed optimizer "
               "is ZeRO-1 and torch FSDP2 is ZeRO-3");
  std::vector<std::string> order = s.order;
  bool tpPpDp = order == std::vector<std::string>{"tp", "cp", "pp", "dp"};
  if (order != std::vector<std::string>{"tp", "cp", "dp", "pp"} && !tpPpDp)
    return err("megatron: device order " + s.str() +
               " is neither Megatron-LM's default (tp, cp, dp, pp) nor its "
               "--use-tp-pp-dp-mapping (tp, cp, pp, dp)");
  if (p.chunkBodyLayers.empty())
    return err("megatron: the plan puts embedding or head layers outside the "
               "first and last pipeline stages");
  int chunks = int(p.chunkBodyLayers.size());
  flag("--tensor-model-parallel-size", num(s.tp));
  flag("--pipeline-model-parallel-size", num(s.pp));
  flag("--context-parallel-size", num(s.cp));
  if (s.cp > 1) // Megatron-Core's names: the ring is p2p, Ulysses a2a
    flag("--cp-comm-type", s.cpComm == CpComm::Ring ? "p2p" : "a2a");
  if (s.ep > 1) {
    // As priced: experts split over ep, split over tp as the rest are or
    // whole (etp 1: MoE parallel folding), tokens moved by all-to-all into
    // grouped GEMMs.
    flag("--expert-model-parallel-size", num(s.ep));
    flag("--expert-tensor-parallel-size", num(s.expertTp()));
    flag("--moe-token-dispatcher-type", "alltoall");
    flag("--moe-grouped-gemm");
  }
  if (s.moeCapacity > 0) {
    // Each expert's buffer padded to capacity x its mean share, the tokens
    // above dropped, as priced.
    flag("--moe-expert-capacity-factor", printableNumber(s.moeCapacity));
    flag("--moe-pad-expert-input-to-capacity");
  }
  if (s.sequenceParallel && s.tp > 1)
    flag("--sequence-parallel");
  if (tpPpDp)
    flag("--use-tp-pp-dp-mapping");
  flag("--num-layers", num(p.body));
  // Megatron splits the body evenly over the chunks, or takes the first
  // and last stage's count and splits the rest evenly. Megatron-Core can
  // also count the input embedding and the loss head as one transformer
  // layer each in its even split (--account-for-embedding-in-pipeline-split,
  // --account-for-loss-in-pipeline-split): the first chunk then builds one
  // layer fewer, the last one fewer.
  auto isEven = [](const std::vector<int64_t> &v) {
    return std::all_of(v.begin(), v.end(),
                       [&](int64_t n) { return n == v.front(); });
  };
  std::vector<int64_t> b = p.chunkBodyLayers; // layers as Megatron counts them
  if (!isEven(b) && chunks > 1)
    for (auto [emb, loss] : {std::pair{true, true}, std::pair{true, false},
                             std::pair{false, true}}) {
      if ((emb && p.before != 1) || (loss && p.after != 1))
        continue;
      std::vector<int64_t> counted = b;
      counted.front() += emb;
      counted.back() += loss;
      if (!isEven(counted))
        continue;
      if (emb)
        flag("--account-for-embedding-in-pipeline-split");
      if (loss)
        flag("--account-for-loss-in-pipeline-split");
      b = counted;
      break;
    }
  bool even = isEven(b);
  if (s.virtualStages > 1) {
    if (!even)
      return err("megatron: interleaved stages of uneven size (" +
                 s.str() + ") cannot be given to Megatron-LM, which splits "
                           "the layers evenly over virtual stages");
    flag("--num-layers-per-virtual-pipeline-stage", num(b.front()));
  } else if (!even && s.pp > 1) {
    bool middleEven = true;
    for (int c = 1; c + 1 < chunks; ++c)
      middleEven &= b[c] == b[1];
    if (!middleEven || (chunks > 2 && b[1] == 0))
      return err("megatron: the plan's layers per stage (" +
                 [&] {
                   std::string l;
                   for (int64_t n : b)
                     l += (l.empty() ? "" : ",") + std::to_string(n);
                   return l;
                 }() +
                 " transformer layers) differ between middle stages; "
                 "Megatron-LM sets only the first and last stage's count");
    flag("--decoder-first-pipeline-num-layers", num(b.front()));
    flag("--decoder-last-pipeline-num-layers", num(b.back()));
  }
  flag("--micro-batch-size", num(s.microBatch));
  flag("--global-batch-size", num(s.globalBatch));
  if (s.recompute == Recompute::Full && s.recomputeLayers > 0) {
    // The first K transformer layers of each chunk (TransformerBlock).
    flag("--recompute-granularity", "full");
    flag("--recompute-method", "block");
    flag("--recompute-num-layers", num(s.recomputeLayers));
  } else if (s.recompute == Recompute::Full) {
    flag("--recompute-granularity", "full");
    flag("--recompute-method", "uniform");
    flag("--recompute-num-layers", "1");
  } else if (s.recompute == Recompute::Selective) {
    flag("--recompute-granularity", "selective");
  }
  if (s.zeroStage == 1)
    flag("--use-distributed-optimizer");
  // Exactly the overlap the plan was priced with.
  if (s.dp > 1 && s.zeroStage <= 1 && s.overlapGradReduce)
    flag("--overlap-grad-reduce");
  if (s.dp > 1 && s.zeroStage == 1 && s.overlapParamGather) {
    if (!s.overlapGradReduce)
      return err("megatron: Megatron-LM overlaps the parameter all-gather "
                 "(--overlap-param-gather) only with --overlap-grad-reduce; "
                 "the plan overlaps one without the other");
    flag("--overlap-param-gather");
  }
  if (s.tp > 1 && s.overlapTpComm)
    flag("--tp-comm-overlap");
  if (s.pp > 1 && s.overlapP2p)
    flag("--overlap-p2p-communication");
  switch (p.kernels) {
  case KernelFusion::Fused:
    flag("--transformer-impl", "transformer_engine");
    flag("--attention-backend", "auto");
    break;
  case KernelFusion::UnfusedAttention:
    flag("--transformer-impl", "transformer_engine");
    flag("--attention-backend", "unfused");
    break;
  case KernelFusion::Eager:
    return err("megatron: the plan was priced as plain PyTorch, one kernel "
               "per op (--kernels eager); Megatron-LM runs its fused kernels: "
               "plan with --kernels fused or unfused-attention");
  }
  if (!p.fusedGradAccumulation)
    flag("--no-gradient-accumulation-fusion");
  // The loss was priced as one fused softmax cross-entropy pass (14 bytes
  // per logit each way), not Megatron's default vocab-parallel one in six.
  flag("--cross-entropy-loss-fusion");
  if (s.zeroStage == 3 && p.zero3PrefetchParams > 0)
    return err("megatron: --use-torch-fsdp2 prefetches the next layer "
               "whole; the plan was priced gathering " +
               std::to_string(int64_t(p.zero3PrefetchParams)) +
               " parameters ahead (predicted.zero3_prefetch_parameters)");
  if (s.zeroStage == 3)
    flag("--use-torch-fsdp2");
  if (s.offloadOptimizer) {
    if (s.zeroStage != 1)
      return err("megatron: Megatron-LM offloads the optimizer only with its "
                 "distributed optimizer (ZeRO-1); the plan uses ZeRO-" +
                 num(s.zeroStage));
    flag("--optimizer-cpu-offload");
    flag("--optimizer-offload-fraction", "1.0");
  }
  switch (s.precision) {
  case Precision::BF16:
    flag("--bf16");
    break;
  case Precision::FP16:
    flag("--fp16");
    break;
  case Precision::FP8:
    flag("--bf16");
    flag("--fp8-format", "hybrid");
    break;
  case Precision::TF32:
  case Precision::FP32:
    break; // Megatron-LM's default: fp32 parameters, TF32 math on Ampere+
  }
  std::ostringstream out;
  out << "# Megatron-LM (core_r0.12) parallelism flags from an Orrery plan\n"
      << "# model: " << p.model << "\n"
      << "# strategy: " << s.str() << "\n"
      << "# use: python pretrain_gpt.py \"${ORRERY_ARGS[@]}\" <model and data "
         "flags>\n"
      << launchEnv(p, "export NCCL_COLLNET_ENABLE=1")
      << "ORRERY_ARGS=(\n";
  for (const std::string &a : args)
    out << "  " << a << "\n";
  out << ")\n";
  return out.str();
}

llvm::Expected<std::string> deepspeed(const ExportPlan &p) {
  const Strategy &s = p.strategy;
  if (auto e = noMoeCapacity(s, "deepspeed"))
    return std::move(e);
  if (auto e = noFineTuning(p, "deepspeed",
                            "a ds_config does not state (frozen weights and "
                            "adapters live in the model code)"))
    return std::move(e);
  if (s.ep > 1)
    return err("deepspeed: expert parallelism (ep=" + std::to_string(s.ep) +
               ") lives in DeepSpeed-MoE's model code, not in ds_config");
  if (s.cp > 1)
    return err("deepspeed: context parallelism (cp=" + std::to_string(s.cp) +
               ") has no ds_config setting");
  if (s.offloadActivations && s.recompute != Recompute::Full)
    return err("deepspeed: cpu_checkpointing offloads activation "
               "checkpoints, which only full recompute makes; the plan "
               "offloads activations with recompute=" +
               std::string(recomputeName(s.recompute)));
  if (s.virtualStages > 1)
    return err("deepspeed: DeepSpeed's pipeline engine has no interleaved "
               "schedule (the plan has vpp=" +
               std::to_string(s.virtualStages) + ")");
  if (s.recompute == Recompute::Selective)
    return err("deepspeed: selective (attention-only) recompute is not a "
               "ds_config setting; it lives in the model code");
  if (s.pp > 1 && s.zeroStage >= 2)
    return err("deepspeed: DeepSpeed's pipeline engine runs with ZeRO-1 at "
               "most; the plan uses ZeRO-" +
               std::to_string(s.zeroStage) + " with pp=" +
               std::to_string(s.pp));
  if (s.pp > 1) {
    int lo = *std::min_element(p.chunkLayers.begin(), p.chunkLayers.end()),
        hi = *std::max_element(p.chunkLayers.begin(), p.chunkLayers.end());
    if (hi - lo > 1)
      return err("deepspeed: DeepSpeed's PipelineModule partitions layers "
                 "uniformly (or by parameters or type); it cannot take this "
                 "plan's uneven stages (" +
                 std::to_string(lo) + " to " + std::to_string(hi) +
                 " layers)");
  }
  if (s.precision == Precision::FP8)
    return err("deepspeed: fp8 training is not a ds_config precision");
  // Megatron's sequence parallelism splits the norms' and dropouts'
  // activations over tp; DeepSpeed's AutoTP does not. Under full
  // recompute only the checkpoints are kept, and partition_activations
  // splits those over tp as sequence parallelism does.
  if (s.sequenceParallel && s.tp > 1 && s.recompute != Recompute::Full)
    return err("deepspeed: AutoTP has no sequence parallelism (the plan has "
               "sp=1 with tp=" + std::to_string(s.tp) +
               " and recompute=" + recomputeName(s.recompute) +
               "); plan with sp=0, or recompute=full (partition_activations)");
  if (s.overlapTpComm && s.tp > 1)
    return err("deepspeed: AutoTP has no overlap of its collectives with the "
               "GEMMs (the plan has overlap=" + s.overlapName() + ")");
  bool zero12 = s.zeroStage == 1 || s.zeroStage == 2;
  if (s.dp > 1 && s.overlapGradReduce && (s.pp > 1 || s.zeroStage == 0))
    return err("deepspeed: DeepSpeed's " +
               std::string(s.pp > 1 ? "pipeline engine" : "ZeRO-0") +
               " reduces gradients after the backward, not during it; plan "
               "without the gradient overlap (overlap=none, or without "
               "'grad')");
  if (s.dp > 1 && zero12 && s.overlapParamGather)
    return err("deepspeed: ZeRO-" + std::to_string(s.zeroStage) +
               " all-gathers the updated weights after the optimizer step, "
               "not during the next forward; plan without 'param' in overlap= "
               "(e.g. overlap=grad)");
  nlohmann::ordered_json j;
  j["train_batch_size"] = s.globalBatch;
  j["train_micro_batch_size_per_gpu"] = s.microBatch;
  j["gradient_accumulation_steps"] = s.microBatches();
  if (s.precision == Precision::BF16)
    j["bf16"] = {{"enabled", true}};
  if (s.precision == Precision::FP16)
    j["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
  // Gradients reduced in another type than kept, as priced.
  if (p.gradReduceBytes != p.gradBytes)
    j["communication_data_type"] =
        p.gradReduceBytes == 4 ? "fp32"
        : s.precision == Precision::BF16 ? "bf16"
                                         : "fp16";
  nlohmann::ordered_json zero = {{"stage", s.zeroStage}};
  if (s.offloadOptimizer) {
    if (s.zeroStage == 0)
      return err("deepspeed: optimizer offload needs ZeRO-1 or more");
    zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  }
  // The gradient reduction overlapped with the backward, as priced.
  if (s.dp > 1 && s.pp == 1 && zero12)
    zero["overlap_comm"] = s.overlapGradReduce;
  // ZeRO-3's prefetch as priced: the next layer whole (no bucket or live
  // limit below the model), or the bucket the plan states. DeepSpeed's
  // own defaults (5e7 and 1e9 parameters) gather most of a large layer on
  // demand.
  if (s.zeroStage == 3) {
    double bucket = p.zero3PrefetchParams > 0 ? p.zero3PrefetchParams
                                              : double(std::max<int64_t>(
                                                    1, p.parameters));
    zero["stage3_prefetch_bucket_size"] = int64_t(bucket);
    zero["stage3_max_live_parameters"] =
        std::max<int64_t>(int64_t(1e9), 2 * int64_t(bucket));
    zero["overlap_comm"] = true;
  }
  j["zero_optimization"] = zero;
  if (s.tp > 1)
    j["tensor_parallel"] = {{"autotp_size", s.tp}};
  if (s.pp > 1)
    j["pipeline"] = {{"stages", s.pp},
                     {"partition", "uniform"},
                     {"activation_checkpoint_interval",
                      s.recompute == Recompute::Full ? 1 : 0},
                     {"pipe_partitioned", true},
                     {"grad_partitioned", !p.pipelineWholeGradients}};
  if (s.recompute == Recompute::Full || s.offloadActivations)
    j["activation_checkpointing"] = {
        {"partition_activations", s.sequenceParallel && s.tp > 1},
        {"cpu_checkpointing", s.offloadActivations},
        {"contiguous_memory_optimization", false},
        {"synchronize_checkpoint_boundary", false}};
  return j.dump(2) + "\n";
}

/// "layers.N" split points between chunks (torchtitan and torch.pipelining
/// name the transformer blocks so).
llvm::Expected<std::vector<int64_t>> splitPoints(const ExportPlan &p,
                                                 const char *target) {
  if (p.chunkBodyLayers.empty())
    return err(std::string(target) +
               ": the plan puts embedding or head layers outside the first "
               "and last pipeline stages");
  std::vector<int64_t> points;
  int64_t at = 0;
  for (size_t c = 0; c + 1 < p.chunkBodyLayers.size(); ++c) {
    at += p.chunkBodyLayers[c];
    if (p.chunkBodyLayers[c] == 0 || at >= p.body)
      return err(std::string(target) + ": a pipeline stage holds no "
                                       "transformer block (only the "
                                       "embedding or head), which a split "
                                       "point cannot express");
    points.push_back(at);
  }
  return points;
}

const char *scheduleClass(const Strategy &s) {
  if (s.pp == 1)
    return "1F1B";
  return s.schedule == Schedule::GPipe         ? "GPipe"
         : s.schedule == Schedule::Interleaved ? "Interleaved1F1B"
                                               : "1F1B";
}

llvm::Expected<std::string> torchtitan(const ExportPlan &p) {
  const Strategy &s = p.strategy;
  if (auto e = noMoeCapacity(s, "torchtitan"))
    return std::move(e);
  if (s.precision == Precision::FP16)
    return err("torchtitan: fp16 is not a torchtitan parameter precision "
               "(bfloat16 or float32)");
  if (s.offloadActivations)
    return err("torchtitan: activation offload to host memory has no "
               "torchtitan setting");
  if (s.zeroStage == 1 || s.zeroStage == 2)
    return err("torchtitan: the plan shards " +
               std::string(s.zeroStage == 1 ? "the optimizer state (ZeRO-1)"
                                            : "gradients and optimizer "
                                              "state (ZeRO-2)") +
               "; torchtitan replicates (DDP, ZeRO-0) or shards weights too "
               "(FSDP, ZeRO-3): plan with zero=0 or zero=3");
  if (s.offloadOptimizer && s.zeroStage == 0)
    return err("torchtitan: CPU offload needs FSDP (ZeRO-3); the plan "
               "replicates weights (ZeRO-0)");
  if (s.cp > 1 && s.cpComm == CpComm::AllToAll)
    return err("torchtitan: its context parallelism is ring attention; the "
               "plan uses cp_comm=all-to-all (Ulysses)");
  if (p.kernels != KernelFusion::Fused)
    return err(std::string("torchtitan: its models run attention through "
                           "SDPA's flash kernels and fuse the rest with "
                           "torch.compile; the plan was priced with --kernels ") +
               kernelFusionName(p.kernels) + ": plan with --kernels fused");
  if (s.overlapP2p && s.pp > 1)
    return err("torchtitan: its pipeline schedules have no overlap of the "
               "sends with compute (the plan has overlap=" +
               s.overlapName() + ")");
  std::ostringstream t;
  t << "# torchtitan (0.1) job config: the parallelism part of an Orrery "
       "plan\n"
    << "# model: " << p.model << "\n"
    << "# strategy: " << s.str() << "\n";
  if (p.fineTuning.active())
    t << "# Fine-tuning as priced (" << p.fineTuning.str()
      << "): torchtitan 0.1 has no option for it; freeze and adapt the "
         "weights in the model before training (`orrery export --to "
         "pytorch` writes fine_tune(model)).\n";
  if (!s.sequenceParallel && s.tp > 1)
    t << "# torchtitan always applies sequence parallelism with tensor "
         "parallelism (same traffic, less memory).\n";
  bool shard = s.zeroStage == 3;
  if (shard && p.zero3PrefetchParams > 0)
    return err("torchtitan: FSDP prefetches the next block whole; the plan "
               "was priced gathering " +
               std::to_string(int64_t(p.zero3PrefetchParams)) +
               " parameters ahead (predicted.zero3_prefetch_parameters)");
  t << launchEnv(p, "# launch with NCCL_COLLNET_ENABLE=1 in the environment");
  t << "\n[training]\n";
  int64_t local = s.pp > 1 ? s.globalBatch / s.dp : s.microBatch;
  t << "local_batch_size = " << local << "\n"
    << "global_batch_size = " << s.globalBatch << "\n"
    << "mixed_precision_param = \""
    << (s.precision == Precision::BF16 || s.precision == Precision::FP8
            ? "bfloat16"
            : "float32")
    << "\"\n"
    << "enable_cpu_offload = " << (s.offloadOptimizer ? "true" : "false")
    << "\n"
    << "compile = true\n";
  t << "\n[parallelism]\n"
    << "data_parallel_replicate_degree = " << (shard ? 1 : s.dp) << "\n"
    << "data_parallel_shard_degree = " << (shard ? s.dp : 1) << "\n"
    << "tensor_parallel_degree = " << s.tp << "\n"
    << "context_parallel_degree = " << s.cp << "\n"
    << "expert_parallel_degree = " << s.ep << "\n";
  if (s.ep > 1)
    t << "expert_tensor_parallel_degree = " << s.expertTp() << "\n";
  t << "pipeline_parallel_degree = " << s.pp << "\n";
  if (s.tp > 1 && s.overlapTpComm)
    t << "enable_async_tensor_parallel = true\n";
  if (s.pp > 1) {
    auto points = splitPoints(p, "torchtitan");
    if (!points)
      return points.takeError();
    t << "pipeline_parallel_schedule = \"" << scheduleClass(s) << "\"\n"
      << "pipeline_parallel_microbatch_size = " << s.microBatch << "\n"
      << "pipeline_parallel_split_points = [";
    for (size_t i = 0; i < points->size(); ++i)
      t << (i ? ", " : "") << "\"layers." << (*points)[i] << "\"";
    t << "]\n";
  }
  t << "\n[activation_checkpoint]\n"
    << "mode = \""
    << (s.recompute == Recompute::Full        ? "full"
        : s.recompute == Recompute::Selective ? "selective"
                                              : "none")
    << "\"\n";
  if (s.recompute == Recompute::Selective)
    t << "selective_ac_option = \"op\"\n";
  if (s.precision == Precision::FP8)
    t << "\n[model]\nconverters = [\"float8\"]\n";
  return t.str();
}

/// The mesh axes slowest first (the strategy's order reversed), with sizes.
std::vector<std::pair<std::string, int>> meshAxes(const Strategy &s) {
  std::vector<std::pair<std::string, int>> axes;
  for (auto it = s.order.rbegin(); it != s.order.rend(); ++it)
    axes.push_back({*it, s.degree(*it)});
  return axes;
}

std::string pyTuple(const std::vector<std::string> &items) {
  std::string out = "(";
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + items[i];
  return out + (items.size() == 1 ? ",)" : ")");
}

std::string stageRanges(const ExportPlan &p) {
  // Per chunk: [first, last) transformer blocks.
  std::string out = "[";
  int64_t at = 0;
  for (size_t c = 0; c < p.chunkBodyLayers.size(); ++c) {
    out += (c ? ", " : "") + std::string("(") + std::to_string(at) + ", " +
           std::to_string(at + p.chunkBodyLayers[c]) + ")";
    at += p.chunkBodyLayers[c];
  }
  return out + "]";
}

llvm::Expected<std::string> pytorch(const ExportPlan &p) {
  const Strategy &s = p.strategy;
  if (auto e = noMoeCapacity(s, "pytorch"))
    return std::move(e);
  if (p.chunkBodyLayers.empty() && s.pp > 1)
    return err("pytorch: the plan puts embedding or head layers outside the "
               "first and last pipeline stages");
  if (s.offloadActivations)
    return err("pytorch: activation offload has no FSDP2/DTensor setting");
  if (s.zeroStage == 2)
    return err("pytorch: ZeRO-2 has no PyTorch equivalent (FSDP2 is ZeRO-3, "
               "ZeroRedundancyOptimizer is ZeRO-1)");
  if (s.zeroStage == 3 && p.zero3PrefetchParams > 0)
    return err("pytorch: FSDP2 prefetches the next block whole; the plan "
               "was priced gathering " +
               std::to_string(int64_t(p.zero3PrefetchParams)) +
               " parameters ahead (predicted.zero3_prefetch_parameters)");
  if (s.ep > 1)
    return err("pytorch: expert parallelism (ep=" + std::to_string(s.ep) +
               ") has no DTensor / FSDP2 setting here; export to megatron or "
               "torchtitan");
  if (s.cp > 1 && s.cpComm == CpComm::AllToAll)
    return err("pytorch: torch's context_parallel is ring attention; the plan "
               "uses cp_comm=all-to-all (Ulysses)");
  if ((s.overlapTpComm && s.tp > 1) || (s.overlapP2p && s.pp > 1))
    return err("pytorch: DTensor and torch.distributed.pipelining have no "
               "overlap of tensor-parallel collectives or pipeline sends with "
               "compute (the plan has overlap=" + s.overlapName() + ")");
  auto axes = meshAxes(s);
  std::vector<std::string> names, sizes;
  for (auto &[n, d] : axes) {
    names.push_back("\"" + n + "\"");
    sizes.push_back(std::to_string(d));
  }
  const char *dtype = s.precision == Precision::FP16 ? "torch.float16"
                      : s.precision == Precision::FP32 ||
                              s.precision == Precision::TF32
                          ? "torch.float32"
                          : "torch.bfloat16";
  std::ostringstream py;
  py << "# PyTorch (2.6) parallelism from an Orrery plan.\n"
     << "# model: " << p.model << "\n"
     << "# strategy: " << s.str() << "\n"
     << "# Run under torchrun with " << p.devices << " processes; call "
     << "parallelize(model) on a model whose transformer blocks are\n"
     << "# model.layers[i] (the torchtitan Llama naming; adjust "
        "COLUMN_PARALLEL / ROW_PARALLEL for other models).\n"
     << launchEnv(p, "import os\nos.environ.setdefault(\"NCCL_COLLNET_ENABLE\", "
                     "\"1\")  # before the process group starts")
     << "import torch\n"
     << "from torch.distributed.device_mesh import init_device_mesh\n"
     << "from torch.distributed.tensor.parallel import (\n"
     << "    ColwiseParallel, RowwiseParallel, parallelize_module)\n"
     << "from torch.distributed.fsdp import MixedPrecisionPolicy, "
        "fully_shard\n"
     << "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper "
        "import checkpoint_wrapper\n"
     << "from torch.distributed.pipelining import Schedule1F1B, "
        "ScheduleGPipe, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble\n\n"
     << "MESH_DIMS = " << pyTuple(names) << "\n"
     << "MESH_SHAPE = " << pyTuple(sizes) << "\n"
     << "MICRO_BATCH_SIZE = " << s.microBatch << "\n"
     << "GLOBAL_BATCH_SIZE = " << s.globalBatch << "\n"
     << "MICRO_BATCHES = " << s.microBatches() << "  # per replica and step\n"
     << "ZERO_STAGE = " << s.zeroStage << "\n"
     << "RECOMPUTE = \"" << recomputeName(s.recompute) << "\"\n"
     << (s.vShape() ? "# Transformer blocks [first, last) of each pipeline "
                      "chunk; chunk c runs on pp rank c (c < " +
                          std::to_string(s.pp) + ") or " +
                          std::to_string(2 * s.pp - 1) +
                          " - c (a V: ScheduleZBVZeroBubble's stage mapping).\n"
                    : "# Transformer blocks [first, last) of each pipeline "
                      "chunk; chunk c runs on pp rank c % " +
                          std::to_string(s.pp) + ".\n")
     << "CHUNK_BLOCKS = " << stageRanges(p) << "\n"
     << "SCHEDULE = "
     << (s.pp == 1                                ? "None"
         : s.schedule == Schedule::GPipe          ? "ScheduleGPipe"
         : s.schedule == Schedule::Interleaved    ? "ScheduleInterleaved1F1B"
         : s.schedule == Schedule::ZeroBubbleV    ? "ScheduleZBVZeroBubble"
                                                  : "Schedule1F1B")
     << "\n"
     << "COLUMN_PARALLEL = (\"attention.wq\", \"attention.wk\", "
        "\"attention.wv\", \"feed_forward.w1\", \"feed_forward.w3\")\n"
     << "ROW_PARALLEL = (\"attention.wo\", \"feed_forward.w2\")\n\n\n"
     << "def device_mesh():\n"
     << "    return init_device_mesh(\"cuda\", MESH_SHAPE, "
        "mesh_dim_names=MESH_DIMS)\n\n\n"
     << "def parallelize(model, mesh=None):\n"
     << "    \"\"\"Tensor parallel blocks, recompute, then data parallel "
        "(FSDP2 for ZeRO-3).\"\"\"\n"
     << "    mesh = mesh or device_mesh()\n"
     << "    for i, block in enumerate(model.layers):\n"
     << "        if mesh[\"tp\"].size() > 1:\n"
     << "            plan = {n: ColwiseParallel() for n in COLUMN_PARALLEL}\n"
     << "            plan.update({n: RowwiseParallel() for n in "
        "ROW_PARALLEL})\n"
     << "            parallelize_module(block, mesh[\"tp\"], plan)\n"
     << "        if RECOMPUTE == \"full\":\n"
     << "            model.layers[i] = block = checkpoint_wrapper(block)\n"
     << "        if ZERO_STAGE == 3:\n"
     << "            fully_shard(block, mesh=mesh[\"dp\"], "
        "mp_policy=MixedPrecisionPolicy(\n"
     << "                param_dtype=" << dtype
     << ", reduce_dtype=torch.float32))\n"
     << "    if ZERO_STAGE == 3:\n"
     << "        fully_shard(model, mesh=mesh[\"dp\"])\n"
     << "    elif mesh[\"dp\"].size() > 1:  # replicated weights, "
        "all-reduced gradients\n"
     << "        from torch.distributed._composable.replicate import "
        "replicate\n"
     << "        replicate(model, device_mesh=mesh[\"dp\"])\n"
     << "    return model\n\n\n"
     << "def optimizer(model, mesh=None, lr=3e-4):\n"
     << "    \"\"\"ZeRO-1 shards the optimizer state over the data-parallel "
        "group.\"\"\"\n"
     << "    mesh = mesh or device_mesh()\n"
     << "    if ZERO_STAGE == 1:\n"
     << "        from torch.distributed.optim import "
        "ZeroRedundancyOptimizer\n"
     << "        return ZeroRedundancyOptimizer(\n"
     << "            model.parameters(), optimizer_class=torch.optim.AdamW, "
        "lr=lr,\n"
     << "            process_group=mesh[\"dp\"].get_group())\n"
     << "    return torch.optim.AdamW(model.parameters(), lr=lr)\n";
  auto tune = fineTuneCode(p);
  if (!tune)
    return tune.takeError();
  py << *tune;
  return py.str();
}

llvm::Expected<std::string> jax(const ExportPlan &p) {
  const Strategy &s = p.strategy;
  if (auto e = noMoeCapacity(s, "jax"))
    return std::move(e);
  if (auto e = noFineTuning(p, "jax",
                            "a mesh and PartitionSpecs do not state (an "
                            "optax mask does, in the training code)"))
    return std::move(e);
  if (s.offloadActivations || s.offloadOptimizer)
    return err("jax: host offload is not part of a mesh and PartitionSpecs");
  if (s.zeroStage == 3 && p.zero3PrefetchParams > 0)
    return err("jax: XLA schedules the sharded weights' gathers itself; the "
               "plan was priced gathering only " +
               std::to_string(int64_t(p.zero3PrefetchParams)) +
               " parameters ahead (predicted.zero3_prefetch_parameters)");
  if (s.zeroStage == 1 || s.zeroStage == 2)
    return err("jax: the plan shards the optimizer state" +
               std::string(s.zeroStage == 2 ? " and gradients" : "") +
               " but not the weights (ZeRO-" + std::to_string(s.zeroStage) +
               "); these PartitionSpecs shard weights and optimizer state "
               "alike (zero=3) or neither (zero=0): plan with one of those");
  if (s.ep > 1)
    return err("jax: expert parallelism (ep=" + std::to_string(s.ep) +
               ") is not written as a mesh axis here; export to megatron or "
               "torchtitan");
  if (s.cp > 1 && s.cpComm == CpComm::AllToAll)
    return err("jax: a sequence-sharded mesh runs ring-style attention; the "
               "plan uses cp_comm=all-to-all (Ulysses)");
  if ((s.overlapTpComm && s.tp > 1) || (s.overlapP2p && s.pp > 1))
    return err("jax: a mesh and PartitionSpecs do not state how XLA overlaps "
               "collectives (the plan has overlap=" + s.overlapName() + ")");
  auto axes = meshAxes(s);
  std::vector<std::string> names, sizes;
  for (auto &[n, d] : axes) {
    names.push_back("\"" + n + "\"");
    sizes.push_back(std::to_string(d));
  }
  // Weights additionally over dp under ZeRO-3 (FSDP); the batch over dp,
  // the sequence over cp (and tp with sequence parallelism).
  bool fsdp = s.zeroStage >= 3;
  std::string seq = s.sequenceParallel && s.tp > 1 ? "(\"cp\", \"tp\")"
                                                   : "\"cp\"";
  std::ostringstream py;
  py << "# JAX (0.4.35+) mesh and PartitionSpecs from an Orrery plan.\n"
     << "# model: " << p.model << "\n"
     << "# strategy: " << s.str() << "\n"
     << "# Device r of jax.devices() is rank r of the plan; the mesh axes are "
        "slowest first.\n"
     << launchEnv(p, "import os\nos.environ.setdefault(\"NCCL_COLLNET_ENABLE\", "
                     "\"1\")  # before jax starts its backend")
     << "import numpy as np\n"
     << "import jax\n"
     << "from jax.sharding import Mesh, NamedSharding, PartitionSpec as P\n\n"
     << "AXES = " << pyTuple(names) << "\n"
     << "SHAPE = " << pyTuple(sizes) << "\n"
     << "MICRO_BATCH_SIZE = " << s.microBatch << "\n"
     << "GLOBAL_BATCH_SIZE = " << s.globalBatch << "\n"
     << "# Transformer blocks [first, last) per pipeline chunk (chunk c on pp "
        "index c % "
     << s.pp << ").\n"
     << "CHUNK_BLOCKS = " << stageRanges(p) << "\n"
     << "RECOMPUTE = \"" << recomputeName(s.recompute)
     << "\"  # full: jax.checkpoint each block; selective: "
        "checkpoint_dots policy\n\n"
     << "# Activations [batch, sequence, hidden].\n"
     << "ACTIVATIONS = P(\"dp\", " << seq << ", None)\n"
     << "# Weights by role, kernels stored [in, out] (Megatron's layout).\n"
     << "COLUMN_PARALLEL = P(" << (fsdp ? "\"dp\"" : "None")
     << ", \"tp\")  # qkv, mlp up/gate\n"
     << "ROW_PARALLEL = P(\"tp\", " << (fsdp ? "\"dp\"" : "None")
     << ")  # attention out, mlp down\n"
     << "EMBEDDING = P(\"tp\", " << (fsdp ? "\"dp\"" : "None")
     << ")  # [vocab, hidden], vocabulary split\n"
     << "REPLICATED = P(" << (fsdp ? "\"dp\"" : "") << ")  # norms, biases\n\n\n"
     << "def mesh(devices=None):\n"
     << "    devices = np.asarray(devices if devices is not None else "
        "jax.devices())\n"
     << "    return Mesh(devices.reshape(SHAPE), AXES)\n\n\n"
     << "def sharding(spec, m=None):\n"
     << "    return NamedSharding(m if m is not None else mesh(), spec)\n";
  return py.str();
}

} // namespace

llvm::Expected<std::string> exportPlan(const ExportPlan &plan,
                                       const std::string &format) {
  if (plan.strategy.tpBatchSplit &&
      std::find(exportFormats().begin(), exportFormats().end(), format) !=
          exportFormats().end())
    return err(format + ": the plan splits the batch of some ops inside the "
                        "tensor-parallel group (tp_batch_split), a per-op "
                        "layout this target cannot state; export it --to "
                        "mlir, or plan without it");
  const Strategy &st = plan.strategy;
  bool target = std::find(exportFormats().begin(), exportFormats().end(),
                          format) != exportFormats().end() &&
                format != "mlir";
  if (st.schedule == Schedule::ZeroBubbleH1 && st.pp > 1 && target)
    return err(format + ": the plan runs ZB-H1 (schedule=zb-h1), which this "
                        "target does not run (Megatron-LM core_r0.12 and "
                        "DeepSpeed have no zero-bubble schedule; "
                        "torch.distributed.pipelining's are interleaved or "
                        "V-shaped); plan with schedule=1f1b");
  // The V schedules: PyTorch 2.6's ScheduleZBVZeroBubble runs ZB-V in the
  // order priced; no target here runs DualPipeV (DeepSeek's own code, and
  // PyTorch's ScheduleDualPipeV from a later release than the 2.6 named);
  // torch's V schedules refuse stages compiled with torch.compile, which
  // torchtitan's fused kernels need.
  if (st.vShape() && target &&
      (format != "pytorch" || st.schedule == Schedule::DualPipeV))
    return err(format + ": the plan runs " + scheduleName(st.schedule) +
               ", which this target does not run (" +
               (st.schedule == Schedule::DualPipeV
                    ? "DualPipeV runs in DeepSeek's DualPipe code and "
                      "PyTorch's ScheduleDualPipeV, after PyTorch 2.6"
                    : "ZB-V runs in PyTorch's ScheduleZBVZeroBubble, on "
                      "stages not compiled with torch.compile: export "
                      "--to pytorch") +
               "); plan with schedule=interleaved or 1f1b");
  // Research strategies and schedules only their authors' code runs
  // (phantom parallelism, subnetwork data parallelism), PatrickStar,
  // DeepSeek's DualPipe (PyTorch ships the V alone, ScheduleDualPipeV) and
  // torchbraid's layer-parallel MGRIT: one line each.
  struct Unrunnable {
    bool used;
    const char *what, *hint;
  };
  const Unrunnable unrunnable[] = {
      {st.phantomGhosts > 0,
       "trains phantom parallelism's ghost layers (phantom=, Seal et al. "
       "2025)",
       ""},
      {st.chunkParams > 0,
       "manages its model data in PatrickStar's chunks (chunks=)",
       "; plan with zero=3 or offload=optimizer"},
      {st.schedule == Schedule::DualPipe, "runs DualPipe (schedule=dualpipe)",
       " (DeepSeek's DualPipe code runs it); plan with schedule=zb-v or 1f1b"},
      {st.schedule == Schedule::LayerParallelMgrit,
       "trains layer-parallel by MGRIT (schedule=mgrit, torchbraid's method)",
       ""},
      {st.subnetworkFraction > 0,
       "trains subnetworks per worker (sdp, Singh et al. 2025)", ""}};
  for (const Unrunnable &u : unrunnable)
    if (u.used && target)
      return err(format + ": the plan " + u.what +
                 ", which this target does not run" + u.hint);
  // Only DeepSpeed's pipeline engine sends gradients whole from every
  // tensor-parallel rank (pipeline.grad_partitioned false) and, with its
  // GPT pipeline models, the attention mask beside each activation.
  if (target && format != "deepspeed" && st.pp > 1 &&
      (plan.pipelineAttentionMask ||
       (plan.pipelineWholeGradients && st.tp > 1)))
    return err(format + ": the plan was priced with " +
               (plan.pipelineAttentionMask
                    ? "the attention mask sent between pipeline stages "
                      "(predicted.pipeline_attention_mask)"
                    : "every tensor-parallel rank sending the whole "
                      "gradient between pipeline stages "
                      "(predicted.pipeline_gradients)") +
               ", as DeepSpeed's pipeline engine does and this target's "
               "does not; export --to deepspeed, or plan without "
               "--pipeline-mask and --pipeline-gradients whole");
  // SwitchML's sum runs in its own client library, not in NCCL or Gloo.
  if (plan.aggregation == "switchml" && target)
    return err(format + ": the plan's gradient all-reduce was priced "
                        "through SwitchML's switch aggregation "
                        "(predicted.in_network_aggregation), which this "
                        "target's collectives (NCCL) do not run; plan on the "
                        "cluster without nic.in_network_aggregation");
  // Recompute chosen per layer kind: no target states it.
  if (!plan.strategy.recomputeKinds.empty() && target)
    return err(format + ": the plan recomputes only some layer kinds "
                        "(recompute_kinds), which this target does not "
                        "state; plan with recompute on every kind");
  // Only Megatron-LM recomputes the first K layers of each chunk and keeps
  // the rest (--recompute-method block); DeepSpeed's checkpoint interval,
  // torchtitan's every-N-th-layer option and JAX's remat policies choose
  // other layers, with another memory peak on the uneven stages.
  if (plan.strategy.recompute == Recompute::Full &&
      plan.strategy.recomputeLayers > 0 &&
      (format == "deepspeed" || format == "torchtitan" ||
       format == "pytorch" || format == "jax"))
    return err(format + ": the plan recomputes only the first " +
               std::to_string(plan.strategy.recomputeLayers) +
               " layers of each pipeline chunk (recompute_layers), which "
               "only Megatron-LM states (--recompute-method block); plan "
               "with recompute=full on every layer");
  // Only DeepSpeed reduces gradients in another type than it keeps them
  // (communication_data_type); the others reduce what they keep.
  bool framework = format == "megatron" || format == "torchtitan" ||
                   format == "pytorch" || format == "jax";
  if (plan.gradReduceBytes != plan.gradBytes && framework)
    return err(format + ": the plan reduces " +
               std::to_string(int(plan.gradBytes)) + "-byte gradients in " +
               std::to_string(int(plan.gradReduceBytes)) +
               " bytes (predicted.gradient_reduce_bytes_per_parameter); this "
               "target reduces gradients in the type it keeps them; plan "
               "without --grad-reduce-bytes");
  if (format == "megatron")
    return megatron(plan);
  if (format == "deepspeed")
    return deepspeed(plan);
  if (format == "torchtitan")
    return torchtitan(plan);
  if (format == "pytorch")
    return pytorch(plan);
  if (format == "jax")
    return jax(plan);
  std::string known;
  for (const std::string &f : exportFormats())
    known += (known.empty() ? "" : ", ") + f;
  return err("export: unknown format '" + format + "' (known: " + known + ")");
}

llvm::Error frameworkRuns(const ExportPlan &plan, const std::string &format) {
  auto text = exportPlan(plan, format);
  return text ? llvm::Error::success() : text.takeError();
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

std::vector<std::string> frameworksRunning(const StepResult &r,
                                           const Workload &w) {
  Assumptions a; // as the result was priced
  a.fusion = r.kernels;
  a.fusedGradientAccumulation = !r.separateGradientAccumulation;
  a.gradBytesPerParam = r.gradientBytesPerParameter;
  a.gradReduceBytesPerParam = r.gradientReduceBytesPerParameter;
  a.zero3PrefetchParams = r.zero3PrefetchParameters;
  a.pipelineWholeGradients = r.pipelineWholeGradients;
  a.pipelineAttentionMask = r.pipelineAttentionMask;
  a.fineTuning = w.fineTuning;
  auto p = exportPlanFor(w, r.strategy, a);
  if (!p) {
    llvm::consumeError(p.takeError());
    return {};
  }
  p->aggregation = r.inNetworkAggregation;
  return frameworksRunning(*p);
}

} // namespace orrery
