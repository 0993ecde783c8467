//===- AssumptionFields.cpp - the framework assumptions as one table ------===//

#include "orrery/CostModel/AssumptionFields.h"

#include <cmath>
#include <sstream>

namespace orrery {

static std::vector<AssumptionField> buildFields() {
  std::vector<AssumptionField> t;
  AssumptionField f;

  f = {};
  f.planKey = "gradient_accumulation";
  f.flag = "separate-grad-accumulation";
  f.help = "accumulate weight gradients into the main gradients in a kernel "
           "of their own each micro-batch (PyTorch hooks, DeepSpeed's bf16 "
           "optimizer), not inside the weight-gradient GEMM (Megatron-LM)";
  f.names = {"fused", "separate"};
  f.isSwitch = true;
  f.get = [](const Assumptions &a) {
    return a.fusedGradientAccumulation ? 0.0 : 1.0;
  };
  f.set = [](Assumptions &a, double v) {
    a.fusedGradientAccumulation = v == 0;
  };
  t.push_back(f);

  f = {};
  f.planKey = "gradient_bytes_per_parameter";
  f.flag = "grad-bytes";
  f.help = "bytes per gradient element kept (and reduced): 4 (fp32 main "
           "gradients, the default) or 2 (16-bit gradients: Megatron-LM with "
           "fp16 and without --accumulate-allreduce-grads-in-fp32)";
  f.allowed = {2, 4};
  f.get = [](const Assumptions &a) { return a.gradBytesPerParam; };
  f.set = [](Assumptions &a, double v) { a.gradBytesPerParam = v; };
  t.push_back(f);

  f = {};
  f.planKey = "gradient_reduce_bytes_per_parameter";
  f.flag = "grad-reduce-bytes";
  f.help = "bytes per gradient element on the wire when gradients are "
           "reduced, if not those kept: 4 reduces 16-bit gradients in fp32 "
           "(DeepSpeed's fp32_allreduce / communication_data_type fp32)";
  f.allowed = {2, 4};
  f.get = [](const Assumptions &a) { return a.gradReduceBytes(); };
  f.set = [](Assumptions &a, double v) { a.gradReduceBytesPerParam = v; };
  t.push_back(f);

  f = {};
  f.planKey = "zero3_prefetch_parameters";
  f.flag = "zero3-prefetch-params";
  f.help = "ZeRO-3: parameters gathered ahead of their use; 0 (the default) "
           "the next layer whole, as FSDP does and the DeepSpeed export "
           "configures; DeepSpeed's own default stage3_prefetch_bucket_size "
           "is 5e7";
  f.range = "a non-negative number (0: the next layer whole)";
  f.get = [](const Assumptions &a) { return a.zero3PrefetchParams; };
  f.set = [](Assumptions &a, double v) { a.zero3PrefetchParams = v; };
  t.push_back(f);

  f = {};
  f.planKey = "memory_headroom_fraction";
  f.flag = "memory-headroom";
  f.help = "device memory no plan may use, as a fraction of it (default "
           "0.05): the caching allocator's fragmentation and what the stack "
           "allocates beyond what is priced; a step needing more does not "
           "fit";
  f.range = "a fraction from 0 to 0.5";
  f.maxValue = 0.5;
  // Plans written before it were priced with none.
  f.absentFromPlan = 0.0;
  f.get = [](const Assumptions &a) { return a.memoryHeadroom; };
  f.set = [](Assumptions &a, double v) { a.memoryHeadroom = v; };
  t.push_back(f);

  f = {};
  f.planKey = "kernels";
  f.flag = "kernels";
  f.help = "which kernels the framework runs: fused (Megatron-Core with "
           "Transformer Engine: flash attention, fused norms, SwiGLU and "
           "RoPE; the default), unfused-attention (Megatron-LM before flash "
           "attention: the attention scores in memory, fused softmax and "
           "elementwise chains) or eager (plain PyTorch: one kernel per op, "
           "each dispatched by the host)";
  f.names = {"fused", "unfused-attention", "eager"};
  // Plans written before `kernels` existed were priced with the attention
  // scores in memory.
  f.absentFromPlan = double(KernelFusion::UnfusedAttention);
  f.pythonKeyword = false; // orrery.load(kernels=...)
  f.get = [](const Assumptions &a) { return double(a.fusion); };
  f.set = [](Assumptions &a, double v) { a.fusion = KernelFusion(int(v)); };
  t.push_back(f);

  f = {};
  f.planKey = "pipeline_gradients";
  f.flag = "pipeline-gradients";
  f.help = "what each tensor-parallel rank sends back between pipeline "
           "stages: partitioned (its shard, gathered at the receiver: "
           "Megatron-LM, DeepSpeed's default; the default) or whole "
           "(DeepSpeed's pipeline.grad_partitioned false, as DeepSpeed 0.3 "
           "ran)";
  f.names = {"partitioned", "whole"};
  f.get = [](const Assumptions &a) {
    return a.pipelineWholeGradients ? 1.0 : 0.0;
  };
  f.set = [](Assumptions &a, double v) { a.pipelineWholeGradients = v == 1; };
  t.push_back(f);

  f = {};
  f.planKey = "pipeline_attention_mask";
  f.flag = "pipeline-mask";
  f.help = "the [seq, seq] causal mask travels beside every activation "
           "between pipeline stages in fp16, from every tensor-parallel rank "
           "(the GPT pipeline models of DeepSpeed's Megatron examples and of "
           "Megatron-DeepSpeed)";
  f.names = {"none", "fp16"};
  f.isSwitch = true;
  f.get = [](const Assumptions &a) {
    return a.pipelineAttentionMask ? 1.0 : 0.0;
  };
  f.set = [](Assumptions &a, double v) { a.pipelineAttentionMask = v == 1; };
  t.push_back(f);
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
