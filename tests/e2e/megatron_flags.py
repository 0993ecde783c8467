#!/usr/bin/python3
"""Megatron-LM exports checked against Megatron-LM's own argument parser
and validate_args, as read from its source at a release tag.

Megatron-LM's training arguments are not in a wheel, so the flag table of
each release is extracted from megatron/training/arguments.py by
tests/e2e/data/extract_megatron_args.py (data/megatron_<tag>_args.json:
every option, its action, type and choices) and the rules below restate
the asserts of validate_args, TransformerConfig, ModelParallelConfig,
OptimizerConfig and initialize_model_parallel that concern the flags the
exporter writes (each with its place at core_v0.12.3). For a matrix of
plans (tp, sp, pp with 1F1B, interleaved with and without the sends'
overlap, uneven and embedding-counted splits, ZeRO-1 with overlaps,
FSDP2, recompute, optimizer offload, fp8, fp16, context and expert
parallelism, the tp-pp-dp order, unfused attention) and the plans
`orrery plan --framework megatron` picks, the export must parse and pass
every rule, and the refusals must be one line.

    megatron_flags.py --orrery BIN --workdir DIR
"""
import argparse
import glob
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "models", "fixtures", "gpt3-125m.onnx")

# (name, model, cluster, strategy): plans given as strategies.
PLANS = [
    ("tp+sp", FIXTURE, "8xA100-80G", "tp=4,dp=2,sp=1,mbs=2,gbs=64"),
    ("tp no sp", FIXTURE, "8xA100-80G", "tp=4,dp=2,sp=0,mbs=2,gbs=64"),
    ("pp 1f1b", FIXTURE, "8xA100-80G", "pp=4,dp=2,mbs=1,gbs=32"),
    ("interleaved overlapped", FIXTURE, "16xA100-80G", "tp=2,pp=2,dp=4,vpp=2,sp=1,mbs=2,gbs=64,overlap=grad+param+p2p"),
    ("interleaved not overlapped", FIXTURE, "8xA100-80G", "pp=4,dp=2,vpp=3,mbs=1,gbs=16,overlap=none"),
    ("uneven pp=3", FIXTURE, "12xA100-80G", "tp=2,pp=3,dp=2,mbs=2,gbs=64,layers=6:4:4"),
    ("uneven pp=2", FIXTURE, "4xA100-80G", "tp=2,pp=2,mbs=2,gbs=64,layers=8:6"),
    ("embedding counted", FIXTURE, "7xA100-80G", "pp=7,mbs=1,gbs=14,layers=2:2:2:2:2:2:2"),
    ("zero1 overlapped", FIXTURE, "16xA100-80G", "tp=2,dp=8,zero=1,mbs=2,gbs=64,overlap=grad+param"),
    ("fsdp2", "llama2-7b", "8xA100-80G", "dp=8,zero=3,mbs=1,gbs=16"),
    ("recompute full", FIXTURE, "8xA100-80G", "tp=2,dp=4,mbs=2,gbs=64,recompute=full"),
    ("recompute block", FIXTURE, "8xA100-80G", "pp=2,dp=4,mbs=2,gbs=64,recompute=full,recompute_layers=2"),
    ("recompute selective", FIXTURE, "8xA100-80G", "tp=2,dp=4,sp=1,mbs=2,gbs=64,recompute=selective"),
    ("recompute modules", "deepseek-v2-lite", "2x8xH100-SXM",
     "tp=1,pp=2,dp=8,ep=8,mbs=1,gbs=64,recompute=selective,recompute_modules=mla_up_proj+moe_act"),
    ("offload optimizer", FIXTURE, "8xA100-80G", "dp=8,zero=1,mbs=2,gbs=64,offload=optimizer,overlap=grad"),
    ("fp8", "llama2-7b", "8xH100-SXM", "tp=8,sp=1,mbs=1,gbs=16,precision=fp8"),
    ("fp8 current scaling", "llama2-7b", "8xH100-SXM",
     "tp=8,sp=1,mbs=1,gbs=16,precision=fp8,fp8_recipe=tensorwise"),
    ("fp16", FIXTURE, "8xA100-80G", "tp=2,dp=4,mbs=2,gbs=64,precision=fp16"),
    ("cp ring", "llama2-7b", "8xH100-SXM", "tp=2,cp=2,dp=2,sp=1,mbs=1,gbs=16"),
    ("cp all-to-all", "llama2-7b", "8xH100-SXM", "tp=2,cp=2,dp=2,sp=1,mbs=1,gbs=16,cp_comm=all-to-all"),
    ("tp overlap", FIXTURE, "8xA100-80G", "tp=4,dp=2,sp=1,mbs=2,gbs=64,overlap=tp"),
    ("experts", "mixtral-8x7b", "4x8xH100-SXM", "tp=2,pp=2,dp=8,ep=8,sp=1,mbs=1,gbs=64"),
    ("experts capacity", "mixtral-8x7b", "4x8xH100-SXM", "tp=2,pp=2,dp=8,ep=8,sp=1,mbs=1,gbs=64,moe_capacity=1.25"),
    ("experts deepep", "mixtral-8x7b", "4x8xH100-SXM", "tp=1,pp=4,dp=8,ep=8,zero=1,mbs=1,gbs=64,moe_dispatcher=deepep"),
    ("experts deepep folded", "qwen3-30b-a3b", "2x8xH100-SXM", "tp=2,dp=8,ep=16,etp=1,sp=1,mbs=1,gbs=64,moe_dispatcher=deepep"),
    ("tp-pp-dp order", FIXTURE, "16xA100-80G", "tp=2,pp=2,dp=4,mbs=2,gbs=64,order=tp-cp-pp-dp"),
]
# Searched plans: the best plan Megatron-LM runs, for a few problems.
SEARCHED = [
    ("search gpt3-175b", "gpt3-175b", "128x8xA100-80G", ["--global-batch", "1536"]),
    ("search llama3-70b", "llama3-70b", "8x8xH100-SXM", ["--global-batch", "512"]),
    ("search mixtral", "mixtral-8x7b", "8x8xH100-SXM", ["--global-batch", "256"]),
    ("search gpt3-125m", FIXTURE, "2x8xA100-80G", ["--global-batch", "64"]),
]
# Strategies Megatron-LM cannot run as priced: refused in one line.
REFUSED = [
    ("fsdp2 tied head", FIXTURE, "8xA100-80G", "dp=8,zero=3,mbs=1,gbs=16", "tied to the embedding"),
    ("fsdp2 with pp", "llama2-7b", "8xA100-80G", "pp=2,dp=4,zero=3,mbs=1,gbs=16", "pipeline parallelism"),
    ("interleaved pp=2 not overlapped", FIXTURE, "8xA100-80G", "pp=2,dp=4,vpp=2,mbs=1,gbs=16,overlap=none", "needs pp > 2"),
    ("experts fp16", "mixtral-8x7b", "4x8xH100-SXM", "tp=2,pp=2,dp=8,ep=8,sp=1,mbs=1,gbs=64,precision=fp16", "bf16 only"),
    ("experts tp without sp", "mixtral-8x7b", "4x8xH100-SXM", "tp=2,pp=2,dp=8,ep=8,sp=0,mbs=1,gbs=64", "sequence parallelism"),
    ("on a TPU", "llama2-7b", "8xTPU-v5p", "tp=4,dp=2,mbs=1,gbs=16", "does not run on"),
    ("a CNN", "resnet50", "8xA100-80G", "dp=8,mbs=32,gbs=256", "not transformer blocks"),
    ("fp8 blockwise", "llama2-7b", "8xH100-SXM", "tp=8,sp=1,mbs=1,gbs=16,precision=fp8,fp8_recipe=blockwise",
     "from core_r0.14 on"),
]


def read_export(path):
    """(environment, argv) of an export: bash sources it and prints both."""
    script = (f"source {shlex.quote(path)} && printf '%s\\0' \"${{ORRERY_ARGS[@]}}\" && "
              "printf 'CUDA_DEVICE_MAX_CONNECTIONS=%s\\0' \"${CUDA_DEVICE_MAX_CONNECTIONS-unset}\"")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    items = out.split("\0")[:-1]
    key, value = items[-1].split("=", 1)
    return {key: value}, items[:-1]


def parse(table, argv):
    """Megatron's argparse on `argv` with `table`'s options: the namespace
    (defaults included) or an error."""
    flags = table["flags"]
    ns = {f["dest"]: f.get("default") for f in flags.values()}
    i = 0
    while i < len(argv):
        opt = argv[i]
        if opt not in flags:
            raise ValueError(f"unrecognized argument {opt}")
        f = flags[opt]
        i += 1
        if f["action"] in ("store_true", "store_false"):
            ns[f["dest"]] = f["action"] == "store_true"
            continue
        values = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        want = 1 if f.get("nargs") in (None, "?") else None
        if not values or (want and len(values) != want):
            raise ValueError(f"{opt}: expected {'one value' if want else 'values'}, got {values}")
        conv = {"int": int, "float": float}.get(f.get("type") or "", str)
        try:
            values = [conv(v) for v in values]
        except ValueError:
            raise ValueError(f"{opt}: invalid {f['type']} value {values}")
        if f.get("choices") and any(str(v) not in map(str, f["choices"]) for v in values):
            raise ValueError(f"{opt}: invalid choice {values} (choose from {f['choices']})")
        ns[f["dest"]] = values if want is None else values[0]
    return ns


def validate(a, world, env):
    """The rules of validate_args and the configs for these flags (places at
    core_v0.12.3); an assertion error names the first that fails."""
    tp, pp, cp = a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"], a["context_parallel_size"]
    ep = a["expert_model_parallel_size"]
    etp = a["expert_tensor_parallel_size"] or tp  # arguments.py 368
    assert world % (tp * pp * cp) == 0, "world size not divisible by tp*pp*cp (arguments.py 320-335)"
    dp = world // (tp * pp * cp)
    mbs, gbs = a["micro_batch_size"], a["global_batch_size"]
    assert gbs % (mbs * dp) == 0, "global batch not divisible by micro batch x dp (num_microbatches_calculator.py 340)"
    micro = gbs // (mbs * dp)
    fsdp = a["use_torch_fsdp2"]
    if (tp > 1 or cp > 1) and not fsdp:
        assert env == "1", "tp or cp needs CUDA_DEVICE_MAX_CONNECTIONS=1 (arguments.py 778-791)"
    if fsdp:
        assert env != "1", "FSDP needs CUDA_DEVICE_MAX_CONNECTIONS > 1 (arguments.py 520-538)"
        assert pp == 1 and ep == 1, "--use-torch-fsdp2 with pp or ep (arguments.py 520-538)"
        assert not a["use_distributed_optimizer"], "--use-torch-fsdp2 with the distributed optimizer"
        assert not a["gradient_accumulation_fusion"], "--use-torch-fsdp2 needs --no-gradient-accumulation-fusion"
        assert a["untie_embeddings_and_output_weights"], "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"
        assert not a["fp16"], "--use-torch-fsdp2 not supported with fp16"
    assert not (a["fp16"] and a["bf16"]), "fp16 and bf16 both set (arguments.py 582-599)"
    layers = a["num_layers"] + bool(a["account_for_embedding_in_pipeline_split"]) + \
        bool(a["account_for_loss_in_pipeline_split"])
    first, last = a["decoder_first_pipeline_num_layers"], a["decoder_last_pipeline_num_layers"]
    vpp = None
    if a["num_layers_per_virtual_pipeline_stage"] is not None:
        assert first is None and last is None, "uneven stages with --num-layers-per-virtual-pipeline-stage (arguments.py 453-474)"
        assert layers % pp == 0, "layers not divisible by pp (arguments.py 453-474)"
        per = a["num_layers_per_virtual_pipeline_stage"]
        assert (layers // pp) % per == 0, "layers per stage not divisible by layers per virtual stage"
        vpp = (layers // pp) // per
    if vpp is None or vpp == 1:
        a["overlap_p2p_comm"] = False  # arguments.py 477-486
        if first is None and last is None:
            assert layers % pp == 0, "layers not divisible by pp (arguments.py 488-501)"
    else:
        assert pp > (1 if a["overlap_p2p_comm"] else 2), \
            "interleaved schedule: pp > 1 with the sends' overlap, > 2 without (arguments.py 443-451)"
        assert pp <= micro and micro % pp == 0, \
            "interleaved schedule: micro-batches in groups of pp (schedules.py 777-797)"
    if first is not None or last is not None:
        assert not (a["account_for_embedding_in_pipeline_split"] or a["account_for_loss_in_pipeline_split"]), \
            "uneven stages with the account-for flags (transformer_config.py 767-841)"
        middle = pp - (first is not None) - (last is not None)
        assert middle > 0, "both uneven stage counts with pp=2 divide by zero middle stages (transformer_config.py 824)"
        rest = a["num_layers"] - (first or 0) - (last or 0)
        assert rest > 0 and rest % middle == 0, "middle stages' layers uneven (transformer_config.py 767-841)"
    if a["sequence_parallel"] and tp == 1:
        a["sequence_parallel"] = False  # arguments.py 768-771
    if a["tp_comm_overlap"]:
        assert a["sequence_parallel"], "--tp-comm-overlap needs sequence parallelism (arguments.py 773)"
    if ep > 1:
        assert not a["fp16"], "expert parallelism with fp16 (arguments.py 860-865)"
        if tp > 1:
            assert a["sequence_parallel"], "ep and tp need sequence parallelism (model_parallel_config.py 382-387)"
        if a["use_tp_pp_dp_mapping"] and pp > 1:
            assert world // (etp * ep * pp) == dp, "tp-pp-dp order: expert dp must equal dp (parallel_state.py 716-720)"
    if a["moe_grouped_gemm"]:
        assert a["bf16"], "grouped GEMM for MoE needs bf16 (arguments.py 722-725)"
    if a["moe_enable_deepep"]:
        assert a["moe_token_dispatcher_type"] == "flex", "DeepEP needs the flex dispatcher (transformer_config.py: moe_enable_deepep)"
    if a["moe_token_dispatcher_type"] == "flex":
        assert not a["moe_pad_expert_input_to_capacity"], "the flex dispatcher does not pad to capacity (transformer_config.py)"
        assert tp * ep > 1, "the flex dispatcher needs tp x ep > 1 (token_dispatcher.py MoEFlexTokenDispatcher)"
    if a["moe_pad_expert_input_to_capacity"]:
        assert a["moe_expert_capacity_factor"] is not None, "padding needs a capacity factor (transformer_config.py 653-665)"
    g = a["recompute_granularity"]
    if g == "full":
        assert a["recompute_method"] in ("block", "uniform") and a["recompute_num_layers"], \
            "full recompute needs a method and a layer count (transformer_config.py 684-715)"
    if g == "selective":
        assert a["recompute_method"] is None and a["recompute_num_layers"] is None, \
            "selective recompute takes no method or count (arguments.py 760-763)"
        modules = a["recompute_modules"] or ["core_attn"]
        allowed = {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"}
        assert set(modules) <= allowed, f"unknown recompute modules {modules} (transformer_config.py recompute_modules)"
        if "moe_act" in modules:
            assert a["moe_grouped_gemm"], "moe_act recompute needs --moe-grouped-gemm (transformer_config.py)"
    elif a["recompute_modules"]:
        assert False, "--recompute-modules without selective granularity"
    if a["overlap_param_gather"]:
        assert a["use_distributed_optimizer"] and a["overlap_grad_reduce"], \
            "--overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce (arguments.py 512-518)"
    if a["optimizer_cpu_offload"]:
        assert a["use_precision_aware_optimizer"] and a["use_distributed_optimizer"], \
            "optimizer offload needs the precision-aware distributed optimizer (arguments.py 955-959, optimizer_config.py 166-171)"
    if a["fp8"]:
        assert a["bf16"] or a["fp16"], "fp8 runs beside a 16-bit type"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    tables = {}
    for path in sorted(glob.glob(os.path.join(HERE, "data", "megatron_*_args.json"))):
        table = json.load(open(path))
        tables[os.path.basename(path)[len("megatron_"):-len("_args.json")]] = table
    failures, exports = [], []

    def plan(name, model, cluster, extra):
        stem = os.path.join(args.workdir, name.replace(" ", "_").replace("=", ""))
        p = subprocess.run([args.orrery, "plan", model, "--cluster", cluster, "--quiet",
                            "-o", stem + ".json", *extra], capture_output=True, text=True)
        if p.returncode:
            return None, p.stderr.strip()
        e = subprocess.run([args.orrery, "export", stem + ".json", "--to", "megatron",
                            "-o", stem + ".sh"], capture_output=True, text=True)
        devices = json.load(open(stem + ".json"))["cluster"]["devices"]
        return ((stem + ".sh", devices) if e.returncode == 0 else None), e.stderr.strip()

    for name, model, cluster, strategy in PLANS:
        got, error = plan(name, model, cluster, ["--strategy", strategy])
        if got is None:
            failures.append(f"{name}: refused: {error}")
        else:
            exports.append((name, *got))
    for name, model, cluster, extra in SEARCHED:
        got, error = plan(name, model, cluster, extra + ["--framework", "megatron", "--top", "1"])
        if got is None:
            failures.append(f"{name}: {error}")
        else:
            exports.append((name, *got))
    refused = 0
    for name, model, cluster, strategy, why in REFUSED:
        got, error = plan(name, model, cluster, ["--strategy", strategy])
        if got is None and error.count("\n") == 0 and why in error:
            refused += 1
        else:
            failures.append(f"{name}: expected a one-line refusal naming '{why}', got "
                            f"{'an export' if got else repr(error)}")
    for tag, table in tables.items():
        accepted = 0
        for name, path, world in exports:
            env, argv = read_export(path)
            try:
                validate(parse(table, argv), world, env["CUDA_DEVICE_MAX_CONNECTIONS"])
                accepted += 1
            except (ValueError, AssertionError) as e:
                failures.append(f"{tag} {name}: {e}: {' '.join(argv)}")
        print(f"megatron {tag}: {accepted}/{len(exports)} exports parse and pass validate_args "
              f"({table['source']})")
    print(f"megatron: {len(exports)}/{len(PLANS) + len(SEARCHED)} plans exported, "
          f"{refused}/{len(REFUSED)} refused in one line")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures or not tables else 0


if __name__ == "__main__":
    sys.exit(main())
