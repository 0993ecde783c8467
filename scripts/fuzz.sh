#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, with ASan and UBSan) in build-fuzz
# (scripts/sanitized-build.sh, the tree the test suite's sanitizer pass uses) and
# runs each for ORRERY_FUZZ_SECONDS seconds (default 60) from a seed corpus
# made of the project's own inputs: the fixture models, the benchmark
# clusters, and plans and program sets the main build writes. Any finding
# (crash, leak, UB, timeout, out-of-memory) fails the script and leaves its
# input in build-fuzz/findings/. The corpus grows in build-fuzz/corpus/ from
# run to run. docs/fuzzing.md.
# With ORRERY_FUZZ_RUNS=N each target runs N inputs from a fixed seed
# instead (what CI does: the same inputs on every run, so a finding is
# reproducible and CI does not turn red by chance), still within the time.
#   scripts/fuzz.sh                      every target
#   ORRERY_FUZZ_SECONDS=600 scripts/fuzz.sh onnx
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${ORRERY_FUZZ_SECONDS:-60}
limit=(-max_total_time="$seconds")
[ -n "${ORRERY_FUZZ_RUNS:-}" ] && limit+=(-runs="$ORRERY_FUZZ_RUNS" -seed=1)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(onnx cluster strategy plan programs serving uncertainty exports)

scripts/sanitized-build.sh "${targets[@]/#/orrery-fuzz-}"

seeds=build-fuzz/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{onnx,cluster,strategy,plan,programs,serving,uncertainty,exports} build-fuzz/findings
cp costmodel/data/validation_errors.json "$seeds/uncertainty/"
cp models/fixtures/*.onnx "$seeds/onnx/"
# A model calling model-local functions (the dynamo exporter's modules).
python3 tests/lit/import/Inputs/local_functions.py "$seeds/onnx/functions.onnx"
# Mixtures of experts as transformers writes them (FormExperts.cpp,
# ExpertLoop.cpp: batched experts, the eager loop) and the routing masks the
# loader sizes, in ONNX's textual syntax.
for form in --transposed --loop; do
  /usr/bin/python3 tests/lit/Inputs/batched_experts_export.py "$seeds/onnx/experts$form.onnx" $form \
    --experts 4 >/dev/null 2>&1
done
cp tests/lit/import/routing_masks.onnxtext "$seeds/onnx/"
# onnxruntime's contrib and quantized ops (ContribOps.cpp).
/usr/bin/python3 tests/fuzz/contrib_seeds.py tests/lit/import/contrib_ops.test "$seeds/onnx"
cp bench/clusters/*.json bench/measured/*.json "$seeds/cluster/"
cp tests/lit/Inputs/a100-hdr-sharp.json tests/lit/Inputs/a100-100gbe-switchml.json tests/lit/Inputs/gaudi2-own-chip.json tests/lit/Inputs/reliability-repairs.json tests/lit/Inputs/fabric-tiers.json tests/lit/Inputs/gb200-nvl72-racks.json "$seeds/cluster/"
i=0
for s in tp=8,pp=8,dp=16,mbs=1,gbs=1536 tp=2,cp=2,ep=4,zero=3,recompute=selective \
         pp=4,vpp=2,schedule=interleaved,overlap=grad+p2p sp=1,precision=fp8,offload=optimizer \
         pp=4,schedule=zb-h1,zero=1 pp=4,gbs=16,schedule=zb-2p dp=8,zero=2,mbs=2 pp=2,recompute=full,recompute_layers=3 pp=4,schedule=zb-v recompute=full,recompute_kinds=transformer_layer pp=2,gbs=8,schedule=dualpipev,ep=2 \
         dp=8,sdp=0.5 pp=4,mbs=4,gbs=4,schedule=mgrit,mg_coarsen=2,mg_iters=3 pp=4,gbs=16,schedule=dualpipe dp=8,gbs=8,chunks=64 tp=2,phantom=8 dp=8,sdp=0.5,sdp_mask=backward \
         tp=2,sp=1,ep=8,etp=1,moe_imbalance=1.25,moe_capacity=1.5 tp=2,sp=1,ep=16,etp=1,moe_dispatcher=deepep,precision=mxfp8 \
         recompute=selective,recompute_modules=mla_up_proj+moe_act+mlp \
         tp=2,sp=1,precision=fp8,fp8_recipe=tensorwise dp=8,ep=8,precision=fp8,fp8_recipe=blockwise,overlap=grad+param+ep; do
  printf '%s' "$s" > "$seeds/strategy/$((i++))"
done
i=0
for s in chat reasoning,requests=3 isl=100,osl=50,requests=20,rate=5 \
         isl=700,osl=900,requests=30,concurrency=4,seed=7 summarize,requests=2,offline \
         isl=600,osl=40,requests=40,rate=20,prefix=512,prefix_groups=3 \
         isl=300,osl=60,requests=30,rate=9,isl_sigma=1.1,osl_sigma=0.4; do
  printf '\0%s' "$s" > "$seeds/serving/w$((i++))"
done
printf '\1arrival_s,input_tokens,output_tokens\n0,100,20\n0.01,3000,400\n0.5,10,1\n' \
  > "$seeds/serving/trace0"
printf '\1arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens,session_id\n0,600,20,sys,512,a\n0.01,700,30,sys,512,\n0.2,900,10,,,a\n' \
  > "$seeds/serving/trace1"
printf '\1{"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [1, 2, 3]}\n{"timestamp": 500, "input_length": 700, "output_length": 9, "hash_ids": [1, 4]}\n{"arrival_s": 1, "input_tokens": 800, "output_tokens": 5, "session_id": "s"}\n' \
  > "$seeds/serving/trace2"
orrery=build/bin/orrery
if [ -x "$orrery" ]; then
  tiny=(models/fixtures/tiny-gpt.onnx --dim batch=8 --global-batch 8 --quiet)
  "$orrery" plan "${tiny[@]}" --cluster 1x4xA100-80G \
    -o "$seeds/plan/homogeneous.json" >/dev/null
  "$orrery" plan "${tiny[@]}" --cluster bench/clusters/two-cpu-pools.json \
    -o "$seeds/plan/hetero.json" >/dev/null
  "$orrery" plan "${tiny[@]}" --cluster 1x4xA100-80G --lora rank=4 \
    -o "$seeds/plan/lora.json" >/dev/null
  printf '%s' '{"schema": "orrery-layer-profile", "version": 1, "source": "seed", "layers": [{"device": "A100-80G", "tp": 1, "micro_batch_size_samples": 1, "forward_s": 0.001}]}' \
    > build-fuzz/layer-profile.json
  "$orrery" plan "${tiny[@]}" --cluster 1x4xA100-80G \
    --layer-profile build-fuzz/layer-profile.json \
    -o "$seeds/plan/layer-profile.json" >/dev/null
  "$orrery" plan "${tiny[@]}" --cluster 1x4xA100-80G \
    --strategy tp=2,pp=2,mbs=1,gbs=8 --pipeline-gradients whole \
    --pipeline-mask -o "$seeds/plan/deepspeed-sends.json" >/dev/null
  # Activation and optimizer offload: copies to and from host memory.
  "$orrery" plan models/fixtures/gpt3-125m.onnx --quiet --cluster 1x4xA100-80G \
    --strategy pp=2,dp=2,mbs=1,gbs=8,offload=both \
    -o "$seeds/plan/offload.json" >/dev/null
  printf '%s' '{"sites": [{"name": "dc", "nodes": [{"count": 2, "device": "A100-80G", "devices_per_node": 8, "host_memory_bytes": 1e12, "host_memory_bandwidth_bytes_per_s": 4e11}]}]}' \
    > "$seeds/cluster/host-memory.json"
  # Serving plans for the serving exporters, one per engine.
  for engine in vllm trtllm; do
    "$orrery" serve models/fixtures/tiny-gpt.onnx --cluster 1x4xA100-80G \
      --workload isl=16,osl=8,requests=8 --engine "$engine" \
      -o "$seeds/exports/$engine.json" >/dev/null
    # Speculative decoding, KV offload and a memory share in the plan and
    # its flags.
    "$orrery" serve models/fixtures/tiny-gpt.onnx --cluster 1x4xA100-80G \
      --workload isl=16,osl=8,requests=8 --engine "$engine" \
      --speculative ngram,k=2 --strategy spec=1 --kv-offload 1 \
      --memory-fraction 0.85 \
      -o "$seeds/exports/$engine-spec.json" >/dev/null
  done
  # vLLM's attention backend of a latent-attention model, with MTP.
  "$orrery" serve deepseek-v3 --cluster 2xGB300 --precision nvfp4 \
    --strategy tp=2,pp=1,replicas=1,spec=1 --speculative mtp,k=1 \
    --workload isl=256,osl=16,requests=8 --attention-backend cutlass_mla \
    -o "$seeds/exports/vllm-mla-backend.json" >/dev/null
  for p in "$seeds"/plan/*.json; do
    "$orrery" lower "$p" --json -o "$seeds/programs/$(basename "$p")" >/dev/null
    # A partial set: rank 0 and the peers it matches.
    "$orrery" lower "$p" --rank 0 --local-check --json \
      -o "$seeds/programs/local-$(basename "$p")" >/dev/null
  done
fi

status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  log="build-fuzz/fuzz-$t.log"
  if ! ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
       UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
       "build-fuzz/bin/orrery-fuzz-$t" "${limit[@]}" -timeout=20 \
       -rss_limit_mb=4096 -max_len=1048576 -print_final_stats=1 \
       -artifact_prefix="build-fuzz/findings/$t-" \
       "build-fuzz/corpus/$t" "$seeds/$t" >"$log" 2>&1; then
    echo "fuzz $t: FINDING (build-fuzz/findings/, log $log)"
    grep -E "ERROR|SUMMARY|==[0-9]+==|runtime error|Test unit written" "$log" | head -8
    status=1
    continue
  fi
  runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
  cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1)
  took=$(grep -oE "Done [0-9]+ runs in [0-9]+ second" "$log" | grep -oE "[0-9]+ second" || echo "${seconds} second")
  echo "fuzz $t: ${runs} executions in ${took}s, ${cov:-cov: ?}, no finding"
done
exit $status
