//===- FrameworkFlags.h - the framework flags simulate and plan share ----===//
#ifndef ORRERY_TOOLS_COMMANDS_FRAMEWORKFLAGS_H
#define ORRERY_TOOLS_COMMANDS_FRAMEWORKFLAGS_H

#include "Common.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace orrery {
namespace cli {

/// The help text of --kernels.
inline constexpr const char *kKernelsHelp =
    "which kernels the framework runs: fused (Megatron-Core with Transformer "
    "Engine: flash attention, fused norms, SwiGLU and RoPE; the default), "
    "unfused-attention (Megatron-LM before flash attention: the attention "
    "scores in memory, fused softmax and elementwise chains) or eager (plain "
    "PyTorch: one kernel per op, each dispatched by the host)";

/// How the framework that runs a plan keeps its gradients and which kernels
/// it runs: the flags `simulate` and `plan` share. Only flags given on the
/// command line override (a plan's own assumptions, for `simulate --plan`).
struct FrameworkFlags {
  bool separate = false;
  double bytes = 4, reduceBytes = 4;
  std::string kernels = "fused";
  std::vector<std::string> freeze;
  std::string lora;
  double prefetch = 0;
  std::string layerProfile;
  std::string pipelineGradients = "partitioned";
  bool pipelineMask = false;
  CLI::Option *separateOpt = nullptr, *bytesOpt = nullptr,
              *reduceBytesOpt = nullptr, *kernelsOpt = nullptr,
              *freezeOpt = nullptr, *loraOpt = nullptr, *prefetchOpt = nullptr,
              *layerProfileOpt = nullptr, *pipelineGradientsOpt = nullptr,
              *pipelineMaskOpt = nullptr;
  void add(CLI::App *cmd) {
    pipelineGradientsOpt =
        cmd->add_option(
               "--pipeline-gradients", pipelineGradients,
               "what each tensor-parallel rank sends back between pipeline "
               "stages: partitioned (its shard, gathered at the receiver: "
               "Megatron-LM, DeepSpeed's default; the default) or whole "
               "(DeepSpeed's pipeline.grad_partitioned false, as DeepSpeed "
               "0.3 ran)")
            ->check(CLI::IsMember({"partitioned", "whole"}));
    pipelineMaskOpt = cmd->add_flag(
        "--pipeline-mask", pipelineMask,
        "the [seq, seq] causal mask travels beside every activation between "
        "pipeline stages in fp16, from every tensor-parallel rank (the GPT "
        "pipeline models of DeepSpeed's Megatron examples and of "
        "Megatron-DeepSpeed)");
    layerProfileOpt = cmd->add_option(
        "--layer-profile", layerProfile,
        "a JSON file of your stack's measured forward time of the model's "
        "repeated layer per device type and tp (docs/costmodel.md, \"Layer "
        "profiles\"): what the device model does not explain is priced as "
        "host time per layer");
    freezeOpt = cmd->add_option(
        "--freeze", freeze,
        "fine-tuning: freeze these weights (a name, a dotted prefix or part "
        "of one, '*' for any run, or a layer kind): no gradient, no "
        "optimizer state (repeatable)");
    loraOpt = cmd->add_option(
        "--lora", lora,
        "fine-tuning with LoRA adapters, every base weight frozen: "
        "rank=R[,targets=attention|mlp|all-linear|NAME+...] (default "
        "targets: attention)");
    kernelsOpt =
        cmd->add_option("--kernels", kernels, kKernelsHelp)
            ->check(CLI::IsMember({"fused", "unfused-attention", "eager"}));
    separateOpt = cmd->add_flag(
        "--separate-grad-accumulation", separate,
        "accumulate weight gradients into the main gradients in a kernel of "
        "their own each micro-batch (PyTorch hooks, DeepSpeed's bf16 "
        "optimizer), not inside the weight-gradient GEMM (Megatron-LM)");
    bytesOpt = cmd->add_option("--grad-bytes", bytes,
                               "bytes per gradient element kept (and reduced): "
                               "4 (fp32 main gradients, the default) or 2 "
                               "(16-bit gradients: Megatron-LM with fp16 and "
                               "without --accumulate-allreduce-grads-in-fp32)")
                   ->check(CLI::IsMember({2.0, 4.0}));
    reduceBytesOpt =
        cmd->add_option("--grad-reduce-bytes", reduceBytes,
                        "bytes per gradient element on the wire when "
                        "gradients are reduced, if not those kept: 4 "
                        "reduces 16-bit gradients in fp32 (DeepSpeed's "
                        "fp32_allreduce / communication_data_type fp32)")
            ->check(CLI::IsMember({2.0, 4.0}));
    prefetchOpt =
        cmd->add_option("--zero3-prefetch-params", prefetch,
                        "ZeRO-3: parameters gathered ahead of their use; 0 "
                        "(the default) the next layer whole, as FSDP does "
                        "and the DeepSpeed export configures; DeepSpeed's "
                        "own default stage3_prefetch_bucket_size is 5e7")
            ->check(CLI::NonNegativeNumber);
  }
  /// The flags given on the command line.
  FrameworkOptions options() const {
    FrameworkOptions o;
    if (prefetchOpt && prefetchOpt->count())
      o.zero3PrefetchParams = prefetch;
    if (freezeOpt && freezeOpt->count())
      o.freeze = freeze;
    if (loraOpt && loraOpt->count())
      o.lora = lora;
    if (separateOpt && separateOpt->count())
      o.separateGradAccumulation = separate;
    if (bytesOpt && bytesOpt->count())
      o.gradBytes = bytes;
    if (reduceBytesOpt && reduceBytesOpt->count())
      o.gradReduceBytes = reduceBytes;
    if (kernelsOpt && kernelsOpt->count())
      o.kernels = kernels;
    if (layerProfileOpt && layerProfileOpt->count())
      o.layerProfile = layerProfile;
    if (pipelineGradientsOpt && pipelineGradientsOpt->count())
      o.pipelineGradients = pipelineGradients;
    if (pipelineMaskOpt && pipelineMaskOpt->count())
      o.pipelineMask = pipelineMask;
    return o;
  }
  llvm::Error apply(Assumptions &a) const {
    return applyFrameworkOptions(options(), a);
  }
};

} // namespace cli
} // namespace orrery

#endif // ORRERY_TOOLS_COMMANDS_FRAMEWORKFLAGS_H
