//===- Exporters.cpp - a plan in other frameworks' own formats -----------===//
//
// Targets (docs/export.md says what each maps and refuses):
//   megatron    Megatron-LM core_r0.12 command-line flags, as a bash array
//   deepspeed   DeepSpeed 0.19 ds_config.json
//   torchtitan  torchtitan 0.1 job TOML: [training], [parallelism],
//               [activation_checkpoint]
//   pytorch     PyTorch 2.6: DeviceMesh, DTensor tensor parallelism, FSDP2
//               or DDP, the pipeline schedule
//   jax         JAX 0.4.35+: the Mesh and the PartitionSpecs by weight role
//
//===----------------------------------------------------------------------===//
#include "orrery/Export/Exporters.h"
#include "orrery/CostModel/PrintableLine.h"
#include "orrery/Plan/Capabilities.h"
#include "orrery/Plan/Plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace orrery {

/// compiler/export/pytorch_plan.py, embedded by CMake: the functions every
/// PyTorch export shares after its plan's constants.
extern const char *const kPytorchPlanRuntime;
/// compiler/export/pytorch_hetero.py: what a heterogeneous plan's script
/// puts in place of the mesh, the build and the step.
extern const char *const kPytorchHeteroRuntime;

static llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const std::vector<std::string> &exportFormats() {
  static const std::vector<std::string> formats = {
      "megatron", "deepspeed", "torchtitan", "pytorch", "jax", "mlir"};
  return formats;
}

namespace {

/// Python for a fine-tuned plan: freeze as --freeze does, then PEFT's LoRA
/// on the targets (Orrery's roles as torchtitan's Llama names them).
std::string fineTuneCode(const ExportPlan &p) {
  const FineTuning &ft = p.assumptions.fineTuning;
  if (!ft.active())
    return "";
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
  bool tpPpDp = s.order == std::vector<std::string>{"tp", "cp", "pp", "dp"};
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
    if (s.dispatcher == MoeDispatcher::DeepEP) {
      flag("--moe-token-dispatcher-type", "flex");
      flag("--moe-enable-deepep");
    } else {
      flag("--moe-token-dispatcher-type", "alltoall");
    }
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
  // The layers as Megatron counts them (the capability table refused the
  // splits it cannot state).
  bool embedding = false, loss = false;
  std::vector<int64_t> b = megatronChunkLayers(p, embedding, loss);
  if (embedding)
    flag("--account-for-embedding-in-pipeline-split");
  if (loss)
    flag("--account-for-loss-in-pipeline-split");
  bool even = std::all_of(b.begin(), b.end(),
                          [&](int64_t n) { return n == b.front(); });
  if (s.virtualStages > 1) {
    flag("--num-layers-per-virtual-pipeline-stage", num(b.front()));
  } else if (!even && s.pp > 1) {
    // With two stages the first's count says the last's (core_v0.12.3
    // divides by the zero middle stages when both are set).
    flag("--decoder-first-pipeline-num-layers", num(b.front()));
    if (s.pp > 2)
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
    if (s.recomputeModules && s.recomputeModules != kRecomputeCoreAttn) {
      std::string names;
      for (unsigned b = 0; b < 6; ++b)
        if (s.recomputeModules & (1u << b))
          names += (names.empty() ? "" : " ") +
                   std::string(kRecomputeModuleNames[b]);
      flag("--recompute-modules", names);
    }
  }
  if (s.zeroStage == 1)
    flag("--use-distributed-optimizer");
  // Exactly the overlap the plan was priced with.
  if (s.dp > 1 && s.zeroStage <= 1 && s.overlapGradReduce)
    flag("--overlap-grad-reduce");
  if (s.dp > 1 && s.zeroStage == 1 && s.overlapParamGather)
    flag("--overlap-param-gather");
  if (s.tp > 1 && s.overlapTpComm)
    flag("--tp-comm-overlap");
  // Megatron-LM overlaps the pipeline's sends by default in its interleaved
  // schedule and never in 1F1B (validate_args; the capability table refused
  // a 1F1B plan priced with the overlap).
  if (s.pp > 1 && s.virtualStages > 1 && !s.overlapP2p)
    flag("--no-overlap-p2p-communication");
  switch (p.assumptions.fusion) {
  case KernelFusion::Fused:
    flag("--transformer-impl", "transformer_engine");
    flag("--attention-backend", "auto");
    break;
  case KernelFusion::UnfusedAttention:
    flag("--transformer-impl", "transformer_engine");
    flag("--attention-backend", "unfused");
    break;
  case KernelFusion::Eager: // refused by the capability table
  case KernelFusion::Sdpa:
  case KernelFusion::Compiled:
    break;
  }
  // FSDP2 refuses the fused accumulation (validate_args).
  if (!p.assumptions.fusedGradientAccumulation || s.zeroStage == 3)
    flag("--no-gradient-accumulation-fusion");
  // The loss was priced as one fused softmax cross-entropy pass (14 bytes
  // per logit each way), not Megatron's default vocab-parallel one in six.
  flag("--cross-entropy-loss-fusion");
  if (s.zeroStage == 3) {
    // FSDP2 builds no tied head (validate_args asserts the flag; the
    // capability table refused a tied model).
    flag("--use-torch-fsdp2");
    flag("--untie-embeddings-and-output-weights");
  }
  if (s.offloadOptimizer) {
    // Its hybrid optimizer runs on the precision-aware path (validate_args).
    flag("--optimizer-cpu-offload");
    flag("--optimizer-offload-fraction", "1.0");
    flag("--use-precision-aware-optimizer");
  }
  switch (s.precision) {
  case Precision::BF16:
    flag("--bf16");
    break;
  case Precision::FP16:
    flag("--fp16");
    break;
  case Precision::FP8: // delayed or current (tensorwise) per-tensor scaling
    flag("--bf16");
    flag("--fp8-format", "hybrid");
    flag("--fp8-recipe", fp8RecipeName(s.fp8Recipe));
    break;
  case Precision::MXFP8: // E4M3 blocks both ways, as MXFP8 runs
    flag("--bf16");
    flag("--fp8-format", "e4m3");
    flag("--fp8-recipe", "mxfp8");
    break;
  case Precision::NVFP4: // refused before: training in 4-bit is not priced
  case Precision::MXFP4:
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
      << launchEnv(p, "export NCCL_COLLNET_ENABLE=1");
  // Megatron-LM asserts one CUDA connection with tensor or context
  // parallelism (its kernels' order), and FSDP2 asserts more than one.
  if ((s.tp > 1 || s.cp > 1) && s.zeroStage != 3)
    out << "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  out << "ORRERY_ARGS=(\n";
  for (const std::string &a : args)
    out << "  " << a << "\n";
  out << ")\n";
  return out.str();
}

llvm::Expected<std::string> deepspeed(const ExportPlan &p) {
  const Strategy &s = p.strategy;
  bool zero12 = s.zeroStage == 1 || s.zeroStage == 2;
  nlohmann::ordered_json j;
  // With tensor parallelism DeepSpeed counts every rank of the world (or of
  // a PipelineModule's data axis, which holds the tp ranks) in its batch
  // check, though a tp group shares one micro-batch: it derives
  // train_batch_size from the two below instead.
  if (s.tp == 1)
    j["train_batch_size"] = s.globalBatch;
  j["train_micro_batch_size_per_gpu"] = s.microBatch;
  j["gradient_accumulation_steps"] = s.microBatches();
  if (s.precision == Precision::BF16)
    j["bf16"] = {{"enabled", true}};
  if (s.precision == Precision::FP16)
    j["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
  // Gradients reduced in another type than kept, as priced.
  if (p.assumptions.gradReduceBytes() != p.assumptions.gradBytesPerParam)
    j["communication_data_type"] =
        p.assumptions.gradReduceBytes() == 4 ? "fp32"
        : s.precision == Precision::BF16 ? "bf16"
                                         : "fp16";
  nlohmann::ordered_json zero = {{"stage", s.zeroStage}};
  if (s.offloadOptimizer) {
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
    double bucket = p.assumptions.zero3PrefetchParams > 0 ? p.assumptions.zero3PrefetchParams
                                              : double(std::max<int64_t>(
                                                    1, p.parameters));
    zero["stage3_prefetch_bucket_size"] = int64_t(bucket);
    zero["stage3_max_live_parameters"] =
        std::max<int64_t>(int64_t(1e9), 2 * int64_t(bucket));
    zero["overlap_comm"] = true;
  }
  j["zero_optimization"] = zero;
  if (s.tp > 1) {
    // AutoTP's own rules for the models it knows (Hugging Face's names),
    // and the blocks' projections by torchtitan's Llama names (as the
    // PyTorch export states them) for a model it does not.
    nlohmann::ordered_json specs = nlohmann::ordered_json::array();
    specs.push_back({{"patterns", {".*\\.attention\\.w[qkv]\\.weight$",
                                   ".*\\.feed_forward\\.w[13]\\.weight$"}},
                     {"partition_type", "column"}});
    specs.push_back({{"patterns", {".*\\.attention\\.wo\\.weight$",
                                   ".*\\.feed_forward\\.w2\\.weight$"}},
                     {"partition_type", "row"}});
    j["tensor_parallel"] = {
        {"autotp_size", s.tp},
        {"partition_config",
         {{"use_default_specs", true}, {"layer_specs", specs}}}};
  }
  if (s.pp > 1)
    j["pipeline"] = {{"stages", s.pp},
                     {"partition", "uniform"},
                     {"activation_checkpoint_interval",
                      s.recompute == Recompute::Full ? 1 : 0},
                     {"pipe_partitioned", true},
                     {"grad_partitioned", !p.assumptions.pipelineWholeGradients}};
  if (s.recompute == Recompute::Full || s.offloadActivations)
    j["activation_checkpointing"] = {
        {"partition_activations", s.sequenceParallel && s.tp > 1},
        {"cpu_checkpointing", s.offloadActivations},
        {"contiguous_memory_optimization", false},
        {"synchronize_checkpoint_boundary", false}};
  return j.dump(2) + "\n";
}

/// "layers.N" split points between chunks (torchtitan and torch.pipelining
/// name the transformer blocks so; the capability table refused splits
/// that are none).
std::vector<int64_t> splitPoints(const ExportPlan &p) {
  std::vector<int64_t> points;
  int64_t at = 0;
  for (size_t c = 0; c + 1 < p.chunkBodyLayers.size(); ++c) {
    at += p.chunkBodyLayers[c];
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
  std::ostringstream t;
  t << "# torchtitan (0.1) job config: the parallelism part of an Orrery "
       "plan\n"
    << "# model: " << p.model << "\n"
    << "# strategy: " << s.str() << "\n";
  if (p.assumptions.fineTuning.active())
    t << "# Fine-tuning as priced (" << p.assumptions.fineTuning.str()
      << "): torchtitan 0.1 has no option for it; freeze and adapt the "
         "weights in the model before training (`orrery export --to "
         "pytorch` writes fine_tune(model)).\n";
  if (!s.sequenceParallel && s.tp > 1)
    t << "# torchtitan always applies sequence parallelism with tensor "
         "parallelism (same traffic, less memory).\n";
  bool shard = s.zeroStage == 3;
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
    << "compile = "
    << (p.assumptions.fusion == KernelFusion::Compiled ? "true" : "false")
    << "\n";
  t << "\n[parallelism]\n"
    << "data_parallel_replicate_degree = " << (shard ? 1 : s.dp) << "\n"
    << "data_parallel_shard_degree = " << (shard ? s.dp : 1) << "\n"
    << "tensor_parallel_degree = " << s.tp << "\n"
    << "context_parallel_degree = " << s.cp << "\n"
    << "pipeline_parallel_degree = " << s.pp << "\n";
  if (s.tp > 1 && s.overlapTpComm)
    t << "enable_async_tensor_parallel = true\n";
  if (s.pp > 1) {
    std::vector<int64_t> points = splitPoints(p);
    t << "pipeline_parallel_schedule = \"" << scheduleClass(s) << "\"\n"
      << "pipeline_parallel_microbatch_size = " << s.microBatch << "\n"
      << "pipeline_parallel_split_points = [";
    for (size_t i = 0; i < points.size(); ++i)
      t << (i ? ", " : "") << "\"layers." << points[i] << "\"";
    t << "]\n";
  }
  t << "\n[activation_checkpoint]\n"
    << "mode = \""
    << (s.recompute == Recompute::Full ? "full"
        : s.recompute == Recompute::Op ? "selective"
                                       : "none")
    << "\"\n";
  if (s.recompute == Recompute::Op)
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

/// The device and the collectives' backend the script runs on: CPU plans on
/// Gloo, GPU plans (CUDA, and ROCm through the same API) on NCCL or RCCL.
std::pair<const char *, const char *> torchDevice(const ExportPlan &p) {
  if (p.deviceVendor == "generic")
    return {"cpu", "gloo"};
  return {"cuda", "nccl"};
}

/// The module names the PyTorch scripts split, by torchtitan's Llama.
const char *torchModuleNames() {
  return "# The model's modules by torchtitan's Llama names; rename for "
         "another model.\n"
         "EMBEDDING = \"tok_embeddings\"\n"
         "FINAL_NORM = \"norm\"\n"
         "HEAD = \"output\"\n"
         "BLOCK_NORMS = (\"attention_norm\", \"ffn_norm\")\n"
         "BLOCK_INPUTS = (\"attention\", \"feed_forward\")  # take the "
         "sequence whole under sequence parallelism\n"
         "COLUMN_PARALLEL = (\"attention.wq\", \"attention.wk\", "
         "\"attention.wv\", \"feed_forward.w1\", \"feed_forward.w3\")\n"
         "ROW_PARALLEL = (\"attention.wo\", \"feed_forward.w2\")\n";
}

llvm::Expected<std::string> pytorch(const ExportPlan &p) {
  const Strategy &s = p.strategy;
  auto axes = meshAxes(s);
  std::vector<std::string> names, sizes, ranks;
  for (auto &[n, d] : axes) {
    names.push_back("\"" + n + "\"");
    sizes.push_back(std::to_string(d));
  }
  for (int c = 0; c < s.pp * s.virtualStages; ++c)
    ranks.push_back(std::to_string(s.stageOfChunk(c)));
  const char *dtype = s.precision == Precision::FP32 ||
                              s.precision == Precision::TF32
                          ? "torch.float32"
                          : "torch.bfloat16"; // fp16 and fp8 are refused
  auto [deviceType, backend] = torchDevice(p);
  std::ostringstream py;
  py << "# PyTorch (2.6+) from an Orrery plan: the mesh, tensor and sequence "
        "parallelism (DTensor),\n"
     << "# FSDP2 or DDP, ZeRO-1, recompute, the pipeline chunks and schedule "
        "(torch.distributed.pipelining)\n"
     << "# and the step with its micro-batches. docs/export.md says what it "
        "expects of the model.\n"
     << "# model: " << p.model << "\n"
     << "# strategy: " << s.str() << "\n"
     << "# Run under torchrun --nproc-per-node " << p.devices
     << " (or over nodes): mesh = device_mesh(); parts, schedule = "
        "build(model, loss_fn, mesh);\n"
     << "# optim = optimizer(parts, mesh); then train_step(parts, schedule, "
        "optim, inputs, labels, loss_fn, mesh)\n"
     << "# on each replica's GLOBAL_BATCH_SIZE / dp rows.\n"
     << launchEnv(p, "import os\nos.environ.setdefault(\"NCCL_COLLNET_ENABLE\", "
                     "\"1\")  # before the process group starts")
     << "import torch\n\n"
     << "DEVICES = " << p.devices << "\n"
     << "DEVICE_TYPE = \"" << deviceType << "\"  # the plan's devices: "
     << p.deviceType << "\n"
     << "BACKEND = \"" << backend << "\"\n"
     << "MESH_DIMS = " << pyTuple(names) << "\n"
     << "MESH_SHAPE = " << pyTuple(sizes) << "\n"
     << "MICRO_BATCH_SIZE = " << s.microBatch << "\n"
     << "GLOBAL_BATCH_SIZE = " << s.globalBatch << "\n"
     << "MICRO_BATCHES = " << s.microBatches() << "  # per replica and step\n"
     << "ZERO_STAGE = " << s.zeroStage << "\n"
     << "RECOMPUTE = \"" << recomputeName(s.recompute) << "\"\n"
     << "SEQUENCE_PARALLEL = "
     << (s.sequenceParallel && s.tp > 1 ? "True" : "False") << "\n"
     << "PARAM_DTYPE = " << dtype << "  # the plan's precision: "
     << precisionName(s.precision) << "\n"
     << "# Transformer blocks [first, last) of each pipeline chunk in model "
        "order, and the pp rank each runs on.\n"
     << "CHUNK_BLOCKS = " << stageRanges(p) << "\n"
     << "CHUNK_RANKS = [";
  for (size_t i = 0; i < ranks.size(); ++i)
    py << (i ? ", " : "") << ranks[i];
  py << "]\n"
     << "SCHEDULE = "
     << (s.pp == 1                             ? "None"
         : s.schedule == Schedule::GPipe       ? "\"gpipe\""
         : s.schedule == Schedule::Interleaved ? "\"interleaved\""
         : s.schedule == Schedule::ZeroBubbleV ? "\"zb-v\""
                                               : "\"1f1b\"")
     << "\n"
     << torchModuleNames();
  if (s.precision == Precision::TF32 || s.precision == Precision::FP32)
    py << "torch.backends.cuda.matmul.allow_tf32 = "
       << (s.precision == Precision::TF32 ? "True" : "False") << "\n";
  py << kPytorchPlanRuntime;
  py << fineTuneCode(p);
  return py.str();
}

llvm::Expected<std::string> jax(const ExportPlan &p) {
  const Strategy &s = p.strategy;
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
  // What the target cannot run as priced is refused by the capability
  // table (Capabilities.cpp); the writers below only write.
  if (frameworkCapabilities(format))
    if (auto e = frameworkRuns(plan, format))
      return std::move(e);
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

namespace {

/// One stage of one replica group as the hetero script reads it.
struct HeteroStagePy {
  int tp = 1;
  int64_t firstBlock = 0, lastBlock = 0;
  bool embedding = false, head = false;
  std::vector<std::vector<int>> ranks; ///< per replica, its tp ranks
  std::string pool;
};

/// The layer kinds of model.layers, one entry a layer, in model order.
llvm::Expected<std::vector<std::string>> layerKinds(const nlohmann::json &plan,
                                                    const std::string &what) {
  const nlohmann::json &model = plan.value("model", nlohmann::json::object());
  std::vector<std::string> kinds;
  if (!model.is_object() || !model.contains("layers") ||
      !model["layers"].is_array())
    return err(what + ": model.layers: missing (the layer kinds and counts)");
  std::string body;
  for (const auto &l : model["layers"]) {
    if (!l.is_object() || !l.contains("kind") || !l["kind"].is_string() ||
        !l.contains("count") || !l["count"].is_number_integer() ||
        l["count"].get<int64_t>() < 1 || l["count"].get<int64_t>() > 100000)
      return err(what + ": model.layers: each needs a kind and a count from 1 "
                        "to 100000");
    std::string kind = l["kind"].get<std::string>();
    if (kind != "embedding" && kind != "head") {
      if (!body.empty() && body != kind)
        return err(what + ": pytorch: the model's body is " + body + " and " +
                   kind + " layers; the script splits one kind of block");
      body = kind;
    }
    kinds.insert(kinds.end(), size_t(l["count"].get<int64_t>()), kind);
  }
  if (body != "transformer_layer")
    return err(what + ": pytorch: the model has no transformer blocks (its "
                      "body: " + (body.empty() ? "none" : body) +
               "); the script splits transformer blocks");
  return kinds;
}

/// The stages of every group with their blocks and ranks (the plan's
/// devices, numbered in order among those the plan uses).
llvm::Expected<std::vector<std::vector<HeteroStagePy>>>
heteroStagesPy(const nlohmann::json &plan, const HeteroStrategy &s,
               const std::vector<std::string> &kinds, const std::string &what,
               int &devices) {
  std::map<std::pair<int, int>, std::vector<int>> placed;
  std::set<int> used;
  for (const auto &st : plan.value("stages", nlohmann::json::array())) {
    if (!st.is_object() || !st.contains("devices") || !st["devices"].is_array())
      return err(what + ": stages[]: each needs its devices");
    std::vector<int> ds;
    for (const auto &d : st["devices"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 ||
          d.get<int64_t>() > kMaxDevices || !used.insert(d.get<int>()).second)
        return err(what + ": stages[].devices: device indices must be "
                          "distinct integers from 0 to " +
                   std::to_string(kMaxDevices));
      ds.push_back(d.get<int>());
    }
    placed[{st.value("replica_group", -1), st.value("stage", -1)}] = ds;
  }
  std::map<int, int> rankOf;
  for (int d : used)
    rankOf[d] = int(rankOf.size());
  devices = int(used.size());
  const nlohmann::json &pools =
      plan.value("cluster", nlohmann::json::object()).value("pools",
                                                            nlohmann::json());
  std::vector<std::vector<HeteroStagePy>> out;
  size_t layer = 0;
  for (size_t g = 0; g < s.groups.size(); ++g, layer = 0) {
    const ReplicaGroup &rg = s.groups[g];
    std::vector<HeteroStagePy> stages;
    int64_t block = 0;
    for (size_t i = 0; i < rg.stages.size(); ++i) {
      const HeteroStage &hs = rg.stages[i];
      HeteroStagePy py;
      py.tp = hs.tp;
      py.firstBlock = block;
      for (int l = 0; l < hs.layers; ++l, ++layer) {
        if (layer >= kinds.size())
          return err(what + ": strategy.replica_groups[" + std::to_string(g) +
                     "]: its stages hold more layers than model.layers");
        py.embedding |= kinds[layer] == "embedding";
        py.head |= kinds[layer] == "head";
        block += kinds[layer] == "transformer_layer";
      }
      py.lastBlock = block;
      auto it = placed.find({int(g), int(i)});
      if (it == placed.end() ||
          it->second.size() != size_t(rg.replicas) * size_t(hs.tp))
        return err(what + ": stages: group " + std::to_string(g) + " stage " +
                   std::to_string(i) + " needs replicas x tp = " +
                   std::to_string(rg.replicas * hs.tp) + " devices");
      for (int r = 0; r < rg.replicas; ++r) {
        std::vector<int> ranks;
        for (int t = 0; t < hs.tp; ++t)
          ranks.push_back(rankOf[it->second[size_t(r * hs.tp + t)]]);
        py.ranks.push_back(ranks);
      }
      if (pools.is_array() && hs.pool < int(pools.size()) &&
          pools[size_t(hs.pool)].is_object())
        py.pool = pools[size_t(hs.pool)].value("name", "");
      stages.push_back(py);
    }
    if (layer != kinds.size())
      return err(what + ": strategy.replica_groups[" + std::to_string(g) +
                 "]: its stages hold " + std::to_string(layer) +
                 " layers, the model " + std::to_string(kinds.size()));
    out.push_back(stages);
  }
  return out;
}

/// What the script cannot run as the plan priced it, one line; "" if none.
std::string heteroRefusal(const nlohmann::json &plan, const HeteroStrategy &s,
                          std::string &deviceType) {
  if (s.zeroStage > 1)
    return "ZeRO-" + std::to_string(s.zeroStage) +
           " on a heterogeneous plan (FSDP over each stage's replicas) is not "
           "written; plan it with ZeRO-1";
  if (s.precision == Precision::FP16 || isFp8(s.precision) ||
      isFp4(s.precision))
    return std::string(precisionName(s.precision)) +
           " needs loss scaling or float8 converters the script does not "
           "apply; plan it in bf16 or fp32";
  for (const ReplicaGroup &g : s.groups)
    if (g.recompute != Recompute::None && g.recompute != Recompute::Full)
      return std::string("recompute=") + recomputeName(g.recompute) +
             " (selective) is not applied by the script; plan none or full";
  const nlohmann::json &model = plan.value("model", nlohmann::json::object());
  if (model.is_object() && model.value("tied_parameters", 0) > 0)
    return "the model ties its embedding and head, which the stages hold "
           "apart";
  std::set<std::string> kinds;
  for (const auto &p : plan.value("cluster", nlohmann::json::object())
                           .value("pools", nlohmann::json::array()))
    if (p.is_object())
      kinds.insert(deviceVendorOf(p.value("device_type", "")) == "generic"
                       ? "cpu"
                       : "cuda");
  if (kinds.size() != 1)
    return "the pools mix CPUs and accelerators, which one process group "
           "(Gloo or NCCL) does not join";
  deviceType = *kinds.begin();
  return "";
}

} // namespace

static llvm::Expected<std::string>
exportHeteroPytorchImpl(const nlohmann::json &plan, const std::string &what) {
  auto s = heteroStrategyFromPlan(plan, what);
  if (!s)
    return s.takeError();
  std::string deviceType;
  std::string why = heteroRefusal(plan, *s, deviceType);
  if (!why.empty())
    return err(what + ": pytorch: " + why);
  auto kinds = layerKinds(plan, what);
  if (!kinds)
    return kinds.takeError();
  int devices = 0;
  auto stages = heteroStagesPy(plan, *s, *kinds, what, devices);
  if (!stages)
    return stages.takeError();
  std::ostringstream py;
  py << "# PyTorch (2.6+) from a heterogeneous Orrery plan: each process runs "
        "one stage of one replica of a\n"
     << "# replica group, with its own tensor-parallel group (DTensor); the "
        "stages pass activations\n"
     << "# and gradients point to point (1F1B); gradients are reduced over "
        "the stage's replicas\n"
     << "# during the last backward and across groups after it, weighted by "
        "each replica's share.\n"
     << "# strategy: " << plan["strategy"].value("summary", "") << "\n"
     << "# Run under torchrun with " << devices
     << " processes, ranks numbered in the plan's device order (each "
        "stage's ranks and pool below):\n"
     << "# mesh = device_mesh(); parts, schedule = build(model, loss_fn, "
        "mesh); optim = optimizer(parts, mesh);\n"
     << "# then train_step(parts, schedule, optim, inputs, labels, loss_fn, "
        "mesh) on the rows batch_rows(mesh)\n"
     << "# of each global batch.\n"
     << "import torch\n\n"
     << "DEVICES = " << devices << "\n"
     << "DEVICE_TYPE = \"" << deviceType << "\"\n"
     << "BACKEND = \"" << (deviceType == "cpu" ? "gloo" : "nccl") << "\"\n"
     << "GLOBAL_BATCH_SIZE = " << s->globalBatch << "\n"
     << "ZERO_STAGE = " << s->zeroStage << "\n"
     << "OVERLAP_GRAD_REDUCE = " << (s->overlapGradReduce ? "True" : "False")
     << "\n"
     << "OVERLAP_PARAM_GATHER = "
     << (s->overlapParamGather ? "True" : "False") << "\n"
     << "SEQUENCE_PARALLEL = False\n"
     << "PARAM_DTYPE = "
     << (s->precision == Precision::FP32 || s->precision == Precision::TF32
             ? "torch.float32"
             : "torch.bfloat16")
     << "  # the plan's precision: " << precisionName(s->precision) << "\n"
     << "NUM_BLOCKS = "
     << std::count(kinds->begin(), kinds->end(), "transformer_layer") << "\n"
     << "# Replica groups: each replica takes micro_batches x micro_batch_size "
        "rows [start, stop) of the\n"
     << "# global batch and weighs its gradient by its share; stages hold "
        "blocks [first, last), the\n"
     << "# embedding, the final norm and head, and a replica's tp ranks.\n"
     << "GROUPS = [\n";
  int64_t row = 0;
  for (size_t g = 0; g < s->groups.size(); ++g) {
    const ReplicaGroup &rg = s->groups[g];
    py << "    {\"recompute\": \"" << recomputeName(rg.recompute)
       << "\", \"micro_batch_size\": " << rg.microBatch
       << ", \"micro_batches\": [";
    for (size_t r = 0; r < rg.microBatches.size(); ++r)
      py << (r ? ", " : "") << rg.microBatches[r];
    py << "],\n     \"rows\": [";
    if (rg.microBatches.size() != size_t(rg.replicas))
      return err(what + ": strategy.replica_groups[" + std::to_string(g) +
                 "].micro_batches_per_replica: " +
                 std::to_string(rg.microBatches.size()) + " counts for " +
                 std::to_string(rg.replicas) + " replicas");
    for (size_t r = 0; r < rg.microBatches.size(); ++r) {
      if (rg.microBatches[r] > (s->globalBatch - row) / rg.microBatch)
        return err(what + ": strategy: the replicas take more samples than "
                          "global_batch_size_samples, " +
                   std::to_string(s->globalBatch));
      int64_t n = rg.microBatches[r] * rg.microBatch;
      py << (r ? ", " : "") << "(" << row << ", " << row + n << ")";
      row += n;
    }
    py << "],\n     \"stages\": [\n";
    for (const HeteroStagePy &st : (*stages)[g]) {
      py << "        {\"pool\": \"" << st.pool << "\", \"tp\": " << st.tp
         << ", \"blocks\": (" << st.firstBlock << ", " << st.lastBlock
         << "), \"embedding\": " << (st.embedding ? "True" : "False")
         << ", \"head\": " << (st.head ? "True" : "False")
         << ", \"ranks\": [";
      for (size_t r = 0; r < st.ranks.size(); ++r) {
        py << (r ? ", " : "") << "[";
        for (size_t t = 0; t < st.ranks[r].size(); ++t)
          py << (t ? ", " : "") << st.ranks[r][t];
        py << "]";
      }
      py << "]},\n";
    }
    py << "     ]},\n";
  }
  py << "]\n";
  if (row != s->globalBatch)
    return err(what + ": strategy: the replicas take " + std::to_string(row) +
               " samples, global_batch_size_samples is " +
               std::to_string(s->globalBatch));
  py << torchModuleNames() << kPytorchPlanRuntime << kPytorchHeteroRuntime;
  return py.str();
}

llvm::Expected<std::string> exportHeteroPytorch(const nlohmann::json &plan,
                                                const std::string &what) {
  // nlohmann::json reports a field of the wrong type by exception.
  try {
    if (llvm::Error e = checkPlanFieldTypes(plan, what))
      return std::move(e);
    return exportHeteroPytorchImpl(plan, what);
  } catch (const nlohmann::json::exception &e) {
    return err(what + ": malformed plan: " + e.what());
  }
}

} // namespace orrery
