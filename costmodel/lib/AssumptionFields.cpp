//===- AssumptionFields.cpp - the framework assumptions as one table ------===//

#include "orrery/CostModel/AssumptionFields.h"

#include <cmath>
#include <sstream>

namespace orrery {

using Getter = double (*)(const Assumptions &);
using Setter = void (*)(Assumptions &, double);

template <bool Assumptions::*M> double flagOf(const Assumptions &a) {
  return a.*M ? 1.0 : 0.0;
}
template <bool Assumptions::*M> void setFlag(Assumptions &a, double v) {
  a.*M = v == 1;
}
template <double Assumptions::*M> double numberOf(const Assumptions &a) {
  return a.*M;
}
template <double Assumptions::*M> void setNumber(Assumptions &a, double v) {
  a.*M = v;
}

/// A row: a choice of `names` (a switch when `isSwitch`), or a number
/// (names empty).
static AssumptionField row(const char *planKey, const char *flag,
                           const char *help, std::vector<std::string> names,
                           bool isSwitch, Getter get, Setter set) {
  AssumptionField f;
  f.planKey = planKey;
  f.flag = flag;
  f.help = help;
  f.names = std::move(names);
  f.isSwitch = isSwitch;
  f.get = get;
  f.set = set;
  return f;
}

static std::vector<AssumptionField> buildFields() {
  std::vector<AssumptionField> t;
  t.push_back(row(
      "gradient_accumulation", "separate-grad-accumulation",
      "accumulate weight gradients into the main gradients in a kernel of "
      "their own each micro-batch (PyTorch hooks, DeepSpeed's bf16 "
      "optimizer), not inside the weight-gradient GEMM (Megatron-LM)",
      {"fused", "separate"}, true,
      [](const Assumptions &a) {
        return a.fusedGradientAccumulation ? 0.0 : 1.0;
      },
      [](Assumptions &a, double v) { a.fusedGradientAccumulation = v == 0; }));
  t.push_back(row("gradient_bytes_per_parameter", "grad-bytes",
                  "bytes per gradient element kept (and reduced): 4 (fp32 "
                  "main gradients, the default) or 2 (16-bit gradients: "
                  "Megatron-LM with fp16 and without "
                  "--accumulate-allreduce-grads-in-fp32)",
                  {}, false, numberOf<&Assumptions::gradBytesPerParam>,
                  setNumber<&Assumptions::gradBytesPerParam>));
  t.back().allowed = {2, 4};
  t.push_back(row(
      "gradient_reduce_bytes_per_parameter", "grad-reduce-bytes",
      "bytes per gradient element on the wire when gradients are reduced, "
      "if not those kept: 4 reduces 16-bit gradients in fp32 (DeepSpeed's "
      "fp32_allreduce / communication_data_type fp32)",
      {}, false, [](const Assumptions &a) { return a.gradReduceBytes(); },
      setNumber<&Assumptions::gradReduceBytesPerParam>));
  t.back().allowed = {2, 4};
  t.push_back(row("zero3_prefetch_parameters", "zero3-prefetch-params",
                  "ZeRO-3: parameters gathered ahead of their use; 0 (the "
                  "default) the next layer whole, as FSDP does and the "
                  "DeepSpeed export configures; DeepSpeed's own default "
                  "stage3_prefetch_bucket_size is 5e7",
                  {}, false, numberOf<&Assumptions::zero3PrefetchParams>,
                  setNumber<&Assumptions::zero3PrefetchParams>));
  t.back().range = "a non-negative number (0: the next layer whole)";
  t.push_back(row(
      "loss", "loss",
      "how the training loss holds memory beyond the fp32 probabilities its "
      "backward keeps: fused (the default: Megatron-LM's vocab-parallel "
      "cross-entropy works in place, or a compiled loss; 2 bytes a logit) "
      "or fp32-copy (PyTorch's cross_entropy on logits.float() uncompiled, "
      "as torchtitan ran it in 2024: 6 bytes a logit)",
      {"fused", "fp32-copy"}, false, flagOf<&Assumptions::lossFp32Copy>,
      setFlag<&Assumptions::lossFp32Copy>));
  t.back().absentFromPlan = 0.0;
  t.push_back(row("memory_headroom_fraction", "memory-headroom",
                  "device memory no plan may use, as a fraction of it "
                  "(default 0.05): the caching allocator's fragmentation "
                  "and what the stack allocates beyond what is priced; a "
                  "step needing more does not fit",
                  {}, false, numberOf<&Assumptions::memoryHeadroom>,
                  setNumber<&Assumptions::memoryHeadroom>));
  t.back().range = "a fraction from 0 to 0.5";
  t.back().maxValue = 0.5;
  t.back().absentFromPlan = 0.0; // plans before it were priced with none
  t.push_back(row(
      "kernels", "kernels",
      "which kernels the framework runs: fused (Megatron-Core with "
      "Transformer Engine: flash attention, fused norms, SwiGLU and RoPE; "
      "the default), unfused-attention (Megatron-LM before flash attention: "
      "the attention scores in memory, fused softmax and elementwise "
      "chains), eager (plain PyTorch: one kernel per op, each dispatched "
      "by the host), sdpa (plain PyTorch with scaled_dot_product_attention, "
      "as torchtitan runs without torch.compile: attention as SDPA runs it "
      "on the device, FlashAttention-2 on A100 and H100, every other op a "
      "kernel dispatched by the host) or compiled (torch.compile with "
      "scaled_dot_product_attention, as torchtitan runs with compile = "
      "true: elementwise chains fused, attention as sdpa's)",
      {"fused", "unfused-attention", "eager", "sdpa", "compiled"}, false,
      [](const Assumptions &a) { return double(a.fusion); },
      [](Assumptions &a, double v) { a.fusion = KernelFusion(int(v)); }));
  // Plans written before `kernels` existed were priced with the attention
  // scores in memory; the model is loaded for its kernels
  // (orrery.load(kernels=...)).
  t.back().absentFromPlan = double(KernelFusion::UnfusedAttention);
  t.back().pythonKeyword = false;
  t.push_back(row("pipeline_gradients", "pipeline-gradients",
                  "what each tensor-parallel rank sends back between "
                  "pipeline stages: partitioned (its shard, gathered at the "
                  "receiver: Megatron-LM, DeepSpeed's default; the default) "
                  "or whole (DeepSpeed's pipeline.grad_partitioned false, as "
                  "DeepSpeed 0.3 ran)",
                  {"partitioned", "whole"}, false,
                  flagOf<&Assumptions::pipelineWholeGradients>,
                  setFlag<&Assumptions::pipelineWholeGradients>));
  t.push_back(row("pipeline_attention_mask", "pipeline-mask",
                  "the [seq, seq] causal mask travels beside every "
                  "activation between pipeline stages in fp16, from every "
                  "tensor-parallel rank (the GPT pipeline models of "
                  "DeepSpeed's Megatron examples and of Megatron-DeepSpeed)",
                  {"none", "fp16"}, true,
                  flagOf<&Assumptions::pipelineAttentionMask>,
                  setFlag<&Assumptions::pipelineAttentionMask>));
  return t;
}

const std::vector<AssumptionField> &assumptionFields() {
  static const std::vector<AssumptionField> fields = buildFields();
  return fields;
}

const AssumptionField *assumptionFieldByFlag(const std::string &flag) {
  for (const AssumptionField &f : assumptionFields())
    if (flag == f.flag)
      return &f;
  return nullptr;
}

const AssumptionField *assumptionFieldByKeyword(const std::string &keyword) {
  for (const AssumptionField &f : assumptionFields())
    if (f.pythonKeyword && keyword == f.keyword())
      return &f;
  return nullptr;
}

std::string AssumptionField::keyword() const {
  std::string k = flag;
  for (char &c : k)
    if (c == '-')
      c = '_';
  return k;
}

static std::string numberText(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string AssumptionField::expected(bool quoted) const {
  std::vector<std::string> items;
  for (const std::string &n : names)
    items.push_back(quoted ? "\"" + n + "\"" : n);
  for (double v : allowed)
    items.push_back(numberText(v));
  if (items.empty())
    return range;
  std::string text = items.front();
  for (size_t i = 1; i < items.size(); ++i)
    text += (i + 1 == items.size() ? " or " : ", ") + items[i];
  return text;
}

nlohmann::ordered_json AssumptionField::planValue(const Assumptions &a) const {
  double v = get(a);
  if (isChoice())
    return names[size_t(v)];
  return v;
}

static llvm::Error fieldError(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<double> assumptionChoice(const AssumptionField &f,
                                        const std::string &name) {
  for (size_t i = 0; i < f.names.size(); ++i)
    if (f.names[i] == name)
      return double(i);
  return fieldError(std::string("--") + f.flag + " '" + name + "': expected " +
                    f.expected(false));
}

/// Whether `v` is one of `f`'s values.
static bool admits(const AssumptionField &f, double v) {
  if (f.isChoice())
    return v >= 0 && v < double(f.names.size()) && v == std::floor(v);
  if (!f.allowed.empty()) {
    for (double ok : f.allowed)
      if (v == ok)
        return true;
    return false;
  }
  return v >= 0 && std::isfinite(v) && v <= f.maxValue;
}

llvm::Error setAssumption(const AssumptionField &f, double v, Assumptions &a) {
  if (!admits(f, v))
    return fieldError(std::string("--") + f.flag + " " + std::to_string(v) +
                      ": expected " + f.expected(false));
  f.set(a, v);
  return llvm::Error::success();
}

void writeAssumptionFields(const Assumptions &a,
                           nlohmann::ordered_json &predicted) {
  for (const AssumptionField &f : assumptionFields())
    predicted[f.planKey] = f.planValue(a);
}

/// The value of `v` for `f`, or -1 when it is none of them.
static double planSetting(const AssumptionField &f, const nlohmann::json &v) {
  if (f.isChoice()) {
    if (!v.is_string())
      return -1;
    for (size_t i = 0; i < f.names.size(); ++i)
      if (v.get<std::string>() == f.names[i])
        return double(i);
    return -1;
  }
  if (!v.is_number())
    return -1;
  double n = v.get<double>();
  return admits(f, n) ? n : -1;
}

llvm::Error readAssumptionFields(const nlohmann::json &predicted,
                                 const std::string &what, Assumptions &a) {
  for (const AssumptionField &f : assumptionFields()) {
    if (!predicted.contains(f.planKey)) {
      if (f.absentFromPlan)
        f.set(a, *f.absentFromPlan);
      continue;
    }
    double v = planSetting(f, predicted[f.planKey]);
    if (v < 0)
      return fieldError(what + ": predicted." + f.planKey + ": must be " +
                        f.expected(true));
    f.set(a, v);
  }
  return llvm::Error::success();
}

} // namespace orrery
