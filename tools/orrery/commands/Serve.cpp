//===- Serve.cpp - `orrery serve`
//------------------------------------------===//
#include "Commands.h"

#include <iostream>

namespace orrery {
namespace cli {

void ServeCommand::add(CLI::App &app) {
  cmd = app.add_subcommand(
      "serve", "Size and split a model for serving: simulate a workload "
               "through an engine's scheduler and choose tp, pp and replicas "
               "(docs/serving.md)");
  addModelArgs(cmd, args);
  cmd->add_option("--cluster", request.cluster.spec,
                  "cluster spec: JSON file or preset")
      ->required();
  workloadOpt = cmd->add_option(
      "--workload", request.workload,
      "chat (1K in, 256 out), reasoning (1K in, 16K out), summarize, or "
      "isl=..,osl=..,requests=..,rate=..|concurrency=..|offline (default "
      "chat, all at once)");
  cmd->add_option("--trace", request.traceFile,
                  "requests from a CSV file (arrival_s,input_tokens,"
                  "output_tokens[,prefix_id,prefix_tokens][,session_id]) or "
                  "JSON Lines (the same fields, or a Mooncake trace's "
                  "timestamp, input_length, output_length, hash_ids)");
  cmd->add_option("--prefix-caching", request.prefixCaching,
                  "the engine's prefix caching (vLLM's automatic prefix "
                  "caching, SGLang's radix cache, TensorRT-LLM's block "
                  "reuse): on (default, as the engines) or off")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--kv-offload", request.kvOffloadGib,
                  "GiB of host memory a replica's KV cache spills to (vLLM's "
                  "--kv-offloading-size, SGLang's HiCache, TensorRT-LLM's "
                  "host_cache_size): blocks written through, loaded back "
                  "for later prompts that share them")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--memory-fraction", request.memoryFraction,
                  "the memory the engine takes (default 0.9, as each "
                  "engine): vLLM's --gpu-memory-utilization and SGLang's "
                  "--mem-fraction-static (a share of the device), "
                  "TensorRT-LLM's kv_cache_free_gpu_memory_fraction (a share "
                  "of what the weights leave free, for the KV cache)")
      ->check(CLI::Range(1e-3, 1.0));
  cmd->add_option("--attention-backend", request.attentionBackend,
                  "vLLM's attention backend for a latent-attention model: "
                  "cutlass_mla or triton_mla (a speculative verification "
                  "runs as a prefill), flashinfer_mla or flashmla (as a "
                  "decode); default: the engine's");
  cmd->add_option("--speculative", request.speculative,
                  "speculative decoding to try: off (default), or eagle, "
                  "eagle3, mtp, ngram with k= (draft tokens) and "
                  "acceptance= (per-position rates, a/b/c); each "
                  "configuration is priced with and without it");
  cmd->add_option("--strategy", request.strategy,
                  "price this configuration: tp=..,pp=..,replicas=.."
                  "[,device=TYPE]; fields left out are searched");
  cmd->add_option("--engine", request.engine,
                  "the scheduler and host loop modelled: vllm (v1) or "
                  "trtllm");
  cmd->add_option("--precision", request.precision,
                  "weights and linear layers: bf16, fp16, fp8, mxfp8, nvfp4 "
                  "or mxfp4 (weights and math), int8 or int4 (weight-only)");
  cmd->add_option("--kv-cache", request.kvCache,
                  "KV-cache elements: auto (16-bit) or fp8");
  cmd->add_option("--slo", request.slo, "p99 targets: ttft_ms=..,tpot_ms=..");
  cmd->add_option("--objective", request.objective,
                  "throughput, cost (requests per dollar) or latency "
                  "(p99 end to end)");
  cmd->add_option("--max-requests", request.maxRequests,
                  "requests a replica runs at once (default: the "
                  "engine's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--max-batched-tokens", request.maxBatchedTokens,
                  "tokens a step computes at most (default: the "
                  "engine's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("-o,--output", output, "write the serving plan JSON");
  cmd->add_option("--trace-out", request.traceOut,
                  "write the chosen configuration's steps as a Chrome "
                  "trace");
  cmd->add_flag("--json", json, "print the plan JSON");
}

int ServeCommand::run() {
  request.workloadGiven = workloadOpt && workloadOpt->count() > 0;
  defaultBatchToOne(args);
  mlir::MLIRContext ctx;
  ctx.disableMultithreading();
  int rc = 0;
  auto module = frontEnd(ctx, args, true, nullptr, rc);
  if (!module)
    return rc;
  return serveModule(*module, args, request, json, output, std::cout);
}

} // namespace cli
} // namespace orrery
