#!/usr/bin/python3
"""The simulator against published training runs (shared/validation).

For every case that states a model, a parallel configuration, hardware and a
measured step time (or a TFLOP/s figure, converted to a step time with the
formula that case used), this builds the model with models/generate.py,
simulates it with `orrery simulate`, and prints measured vs predicted and the
error; then the mean absolute percentage error and the worst case per group.
Korthikanti et al.'s memory cases compare the simulator's memory breakdown;
the NCCL cases compare the collective model (orrery-bench-collectives).
Nothing here is fitted: the figures are what the model predicts.

    bench/validate.py [--build build] [--shared ../shared]
"""
import argparse
import hashlib
import json
import re
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _generator_version():
    """The generator's own hash: a model cached by an older generate.py is
    written again, not priced stale."""
    with open(os.path.join(ROOT, "models", "generate.py"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


GENERATED = _generator_version()


def generated_path(build, name):
    """Where a generated model is cached (under the generator's hash)."""
    return os.path.join(build, "models", "validation", GENERATED, name)


def gpt_model(build, m):
    """The case's GPT as ONNX (cached)."""
    ffn = m.get("ffn", 4 * m["hidden"])
    kv = m.get("kv_heads", m["heads"])
    name = (f"gpt-l{m['layers']}-h{m['hidden']}-a{m['heads']}-s{m['seq_len']}-v{m['vocab']}-f{ffn}"
            + (f"-kv{kv}" if kv != m["heads"] else "") + ("-untied" if m.get("untied") else "")
            + ".onnx")
    out = generated_path(build, name)
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models", "generate.py"), "gpt",
                        "--layers", str(m["layers"]), "--hidden", str(m["hidden"]),
                        "--heads", str(m["heads"]), "--seq", str(m["seq_len"]),
                        "--vocab", str(m["vocab"]), "--ffn", str(ffn), "--kv-heads", str(kv),
                        *(["--untied"] if m.get("untied") else []), "-o", out], check=True)
    return out


def cluster_for(build, case):
    """The case's cluster: DGX A100 nodes (NVSwitch, 8 HDR InfiniBand ports)
    unless the case names another network (BLOOM: 4 Omni-Path links/node)."""
    hw = case["hardware"]
    gpus, per_node = hw["num_gpus"], hw.get("gpus_per_node", 8)
    inter = hw.get("inter_node", "")
    if "Omni-Path" in inter:
        spec = {"name": case["id"], "sites": [{"name": "site", "nodes": [
            {"count": gpus // per_node, "device": "A100-80G", "devices_per_node": per_node,
             "nic": {"link": "OPA-100G", "count": 4}}]}]}
        path = os.path.join(build, "models", "validation", case["id"] + ".cluster.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(spec, f)
        return path
    return f"{gpus // per_node}x{per_node}xA100-80G"


def strategy_of(case):
    p, t = case["parallel"], case["training"]
    rec = t.get("recompute", "none")
    rec = "full" if rec.startswith("full") else "selective" if rec.startswith("selective") else "none"
    parts = [f"tp={p['tp']}", f"pp={p['pp']}", f"dp={p['dp']}", f"mbs={t['micro_batch']}",
             f"gbs={t['global_batch']}", f"recompute={rec}", f"zero={p.get('zero', 0) or 0}",
             "sp=" + ("1" if p.get("sp") else "0"), "precision=fp16"]
    v = p.get("interleave_virtual_stages") or 1
    if v > 1:
        parts.append(f"vpp={v}")
    return ",".join(parts)


def framework_flags(case):
    """What the case's training stack does that the default (today's
    Megatron-Core: flash attention and fused kernels, gradients accumulated
    into fp32 main gradients inside the weight-gradient GEMM) does not, and
    why, for the report's note.
    - The A100 runs of 2021-22 (SC'21, Korthikanti et al., BLOOM) predate
      FlashAttention: Megatron-LM computed the attention scores in memory
      with its fused scale-mask-softmax (Korthikanti et al.'s selective
      recompute exists because of those scores): --kernels unfused-attention.
    - DeepSpeed's optimizers (BLOOM's bf16 one) accumulate each micro-batch's
      gradients into fp32 in a pass of their own.
    - SC'21's ZeRO-3 rows ran DeepSpeed's ZeRO-3 with its default prefetch
      bucket (5e7 parameters).
    - The SC'21 runs are fp16 on Megatron-LM of early 2021: its fused
      accumulation did not exist yet (and Megatron-LM enables it only with
      fp32 accumulation, which it forces for bf16, not fp16), so gradients
      stayed fp16 and were accumulated by PyTorch's DDP or Megatron's local
      DDP hook, a pass per micro-batch."""
    flags, why = [], []
    if case["group"].startswith(("SC21", "Korthikanti", "BLOOM")):
        flags += ["--kernels", "unfused-attention"]
        why.append("attention scores in memory (before flash attention)")
    if "deepspeed" in json.dumps(case.get("source", {})).lower():
        flags += ["--separate-grad-accumulation"]
        why.append("fp32 gradient accumulation in a pass of its own (DeepSpeed)")
    if case["group"].startswith("SC21") and case.get("parallel", {}).get("zero", 0) == 3:
        # SC'21's ZeRO-3 baseline is DeepSpeed's, at its defaults: a
        # prefetch bucket of 5e7 parameters, so most of a 1.8B-parameter
        # layer is gathered on demand.
        flags += ["--zero3-prefetch-params", "5e7"]
        why.append("DeepSpeed ZeRO-3's default prefetch (stage3_prefetch_bucket_size 5e7)")
    elif case["group"].startswith("SC21") and case.get("parallel", {}).get("zero", 0) == 0:
        flags += ["--separate-grad-accumulation", "--grad-bytes", "2"]
        why.append("fp16 gradients accumulated in a pass of their own (Megatron-LM of 2021)")
    return flags, "; ".join(why)


def simulate(orrery, model, cluster, strategy, flags=()):
    return run_simulate([orrery, "simulate", model, "--cluster", cluster, "--strategy", strategy,
                         "--json", *flags])


def run_simulate(command):
    """One `orrery simulate --json`: its result (with the command under
    "_command", for the held-out bands) or its error."""
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode:
        return None, proc.stderr.strip()
    result = json.loads(proc.stdout)
    result["_command"] = command
    return result, None


# Every case priced: id -> (group, measured step, result, measured peak
# memory or None). A measured peak is (bytes, "max" or "last"[, False]):
# compared with the largest device's predicted peak, or the last pipeline
# stage's (what a run logging from its last rank measured); False keeps it
# out of the band's basis.
PRICED = {}


def predicted_peak(result, which):
    """The predicted peak memory per device the measurement compares with."""
    metrics = result.get("predicted", result)
    if which == "last" and result.get("stages"):
        return result["stages"][-1]["memory_bytes"]["total"]
    return metrics["peak_memory_bytes"]


def measured_step(case):
    m = case["measured"]
    if "iteration_time_s" in m:
        return m["iteration_time_s"], "measured"
    d = case.get("derived", {})
    if "iteration_time_s_from_F96" in d:
        return d["iteration_time_s_from_F96"], "from TFLOP/s (F96)"
    return None, None


def f72(m, batch):
    """Model FLOPs of one step (Korthikanti et al.; Megatron-Core's MFU)."""
    s, l, h, v = m["seq_len"], m["layers"], m["hidden"], m["vocab"]
    return 72 * batch * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


# Megatron-Core r0.8 on H100 (its README's table) states tp, pp, dp, the
# global batch and the overlaps, not the rest; what its performance runs
# use is assumed: micro-batch 1, sequence parallelism with tp, no
# recompute, the distributed optimizer (ZeRO-1: --overlap-param-gather
# needs it), bf16, the 1F1B schedule, flash attention (Transformer Engine).
def mcore_strategy(case):
    p, t = case["parallel"], case["training"]
    # The overlaps the README states: --overlap-grad-reduce,
    # --overlap-param-gather, --tp-comm-overlap (with sequence parallelism).
    overlap = "grad+param+tp" if p["tp"] > 1 else "grad+param"
    return (f"tp={p['tp']},pp={p['pp']},dp={p['dp']},mbs=1,gbs={t['global_batch']},"
            f"sp={1 if p['tp'] > 1 else 0},recompute=none,zero=1,precision=bf16,"
            f"overlap={overlap}")


def named_model(build, m):
    """A named generator model (models/generate.py) at the case's sequence
    length (cached)."""
    out = generated_path(build, f"{m['name']}-s{m['seq_len']}.onnx")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models", "generate.py"), m["name"],
                        "--seq", str(m["seq_len"]), "-o", out], check=True)
    return out


def moe_cluster(case):
    hw = case["hardware"]
    per_node = hw.get("gpus_per_node", 8)
    return f"{hw['num_gpus'] // per_node}x{per_node}x{hw['gpu']}"


# A MoE run as its recipe states it: Megatron-Core's distributed optimizer
# with --overlap-grad-reduce and --overlap-param-gather, no recompute, the
# interleaved schedule when the mapping has virtual stages (its p2p
# overlapped), sequence parallelism with tp, the experts' own tp (etp),
# fp8 as Transformer Engine runs it where the row says fp8, the token
# dispatcher the recipe names.
def moe_strategy(case):
    p, t = case["parallel"], case["training"]
    vpp = p.get("vpp", 1)
    precision = "fp8" if t["precision"].startswith("fp8") else "bf16"
    if "current scaling" in t["precision"]:  # Transformer Engine's Float8CurrentScaling
        precision += ",fp8_recipe=tensorwise"
    overlap = "grad+param" + ("+p2p" if vpp > 1 else "")
    # Megatron-Core's --overlap-moe-expert-parallel-comm (moe_a2a_overlap).
    if "EP communication overlap" in t.get("dispatcher", ""):
        overlap += "+ep"
    s = (f"tp={p['tp']},pp={p['pp']},dp={p['dp']},ep={p['ep']},cp={p.get('cp', 1)},"
         f"mbs={t['micro_batch']},gbs={t['global_batch']},zero=1,recompute=none,"
         f"precision={precision},overlap={overlap},sp={1 if p['tp'] > 1 else 0}")
    if p.get("etp", p["tp"]) != p["tp"]:
        s += f",etp={p['etp']}"
    if vpp > 1:
        s += f",vpp={vpp},schedule=interleaved"
    # Megatron-Core's flex dispatcher (DeepEP, or HybridEP which sends the
    # same way) where the recipe names it; its alltoall dispatcher otherwise.
    if "DeepEP" in t.get("dispatcher", "") or "HybridEP" in t.get("dispatcher", ""):
        s += ",moe_dispatcher=deepep"
    return s


def recipe_cluster(build, case):
    """A run's cluster: DGX nodes of 8 as a preset; GB200/GB300 trays of 4
    in NVL72 racks as a cluster file whose NVLink domains are the run's
    trays in a rack (18 a rack, or the most below that divide the run's
    trays: 64 GPUs of a rack when the run takes 64 per rack)."""
    hw = case["hardware"]
    per = hw.get("gpus_per_node", 8)
    trays = hw["num_gpus"] // per
    if per == 8:
        return f"{trays}x8x{hw['gpu']}"
    domain = max(d for d in range(1, 19) if trays % d == 0)
    out = os.path.join(build, "validation", f"{hw['gpu']}-{trays}x{per}-d{domain}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"name": f"{trays} {hw['gpu']} trays of {per}", "sites": [{"nodes": [
            {"count": trays, "device": hw["gpu"], "devices_per_node": per,
             "scale_up_domain_nodes": domain}]}]}, f)
    return out


def megatron_layout_chunks(layout):
    """Megatron-Core's --pipeline-model-parallel-layout as Orrery's layers=:
    the layers of each pipeline chunk in model order ("|" separates the
    chunks, "(..)*N" and "x*N" repeat; t a transformer layer, E the
    embedding and L the loss with the head, each a layer here; m, the
    multi-token-prediction block, is part of the head's)."""
    while "(" in layout:
        layout = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    layout = re.sub(r"([a-zA-Z])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    return ":".join(str(sum(c in "tEL" for c in chunk)) for chunk in layout.split("|"))


def recipe_strategy(case):
    """A Megatron-Bridge recipe's strategy (moe_strategy's, with its ZeRO
    stage, mxfp8 and block recompute), or (None, why) where Orrery cannot
    state it."""
    p, t = case["parallel"], case["training"]
    if t.get("cpu_offload"):
        return None, "offloads some layers' activations: " + t["cpu_offload"]
    modules = re.match(r"selective \(([a-z_, ]+)\)", t.get("recompute", ""))
    if t.get("recompute", "none").startswith("selective") and not modules:
        return None, "selective recompute of " + t["recompute"]
    s = moe_strategy(case)
    if modules:  # Megatron-Core's --recompute-modules
        names = "+".join(m.strip() for m in modules.group(1).split(","))
        s = s.replace("recompute=none", "recompute=selective,recompute_modules=" + names)
    if t["precision"].startswith("mxfp8"):
        s = s.replace("precision=fp8", "precision=mxfp8").replace("precision=bf16", "precision=mxfp8")
    if p.get("zero") == 3:
        s = s.replace("zero=1", "zero=3")
    if p.get("pipeline_layout"):
        s += ",layers=" + megatron_layout_chunks(p["pipeline_layout"])
    m = re.match(r"full \(block method, (\d+) layers\)", t.get("recompute", ""))
    if m:
        s = s.replace("recompute=none", f"recompute=full,recompute_layers={m.group(1)}")
    return s, None


def megatron_bridge_group(orrery, build, groups):
    """NVIDIA Megatron-Bridge's published pre-training tables (25.11 and
    26.04.01 containers) on B200, GB200, GB300 and H100: each run as its
    recipe states it (bench/published/megatron_bridge_runs.json)."""
    path = os.path.join(HERE, "published", "megatron_bridge_runs.json")
    names = {"llama3.1-405b": "llama3-405b"}
    for case in json.load(open(path))["cases"]:
        m = dict(case["model"], name=names.get(case["model"]["name"], case["model"]["name"]))
        step = case["derived"]["iteration_time_s"]
        if case["training"].get("mtp_layers"):
            m["name"] += "-mtp"  # the multi-token-prediction module trained beside
        if m["name"] not in ("llama3-8b", "llama3-70b", "llama3-405b", "qwen3-30b-a3b",
                             "qwen3-235b-a22b", "deepseek-v3", "deepseek-v3-mtp"):
            print_row(case["id"], step, None, "no built-in of " + m["name"])
            continue
        strategy, why = recipe_strategy(case)
        if strategy is None:
            print_row(case["id"], step, None, why)
            continue
        result, error = simulate(orrery, named_model(build, m), recipe_cluster(build, case),
                                 strategy)
        add_case(groups.setdefault(case["group"], []), case["id"], step, result, error,
                 moe_note(case), group=case["group"])


def moe_layer_model(build, m):
    """Three of a case's MoE layers alone (models/generate.py moe), cached."""
    name = (f"moe-h{m['hidden']}-f{m['ffn']}-e{m['experts']}-k{m['top_k']}"
            f"-sh{m['shared_ffn'] or 0}-{m['gating']}-s{m['seq_len']}")
    out = generated_path(build, name + ".onnx")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "models", "generate.py"), "moe",
               "--layers", "3", "--hidden", str(m["hidden"]), "--ffn", str(m["ffn"]),
               "--experts", str(m["experts"]), "--top-k", str(m["top_k"]),
               "--gating", m["gating"], "--seq", str(m["seq_len"]), "-o", out]
        if m["shared_ffn"]:
            cmd += ["--shared-ffn", str(m["shared_ffn"])]
        subprocess.run(cmd, check=True)
    return out


def moe_layer_group(orrery, build, groups):
    """Megatron-Core's own MoE-layer timings (bench/published/megatron_moe_perf.json):
    one MoELayer on 8 H100 of a node, ep 8, 4096 tokens, its forward and
    backward against the repeated layer's forward and backward per
    micro-batch (expert all-to-alls included). The fp8 rows ran Transformer
    Engine's blockwise recipe."""
    path = os.path.join(HERE, "published", "megatron_moe_perf.json")
    rows = groups.setdefault("MegatronCore_moe_perf_H100_layer", [])
    print(f"\n{'MoE layer alone (ms)':34} {'fwd meas':>9} {'fwd pred':>9} {'bwd meas':>9} "
          f"{'bwd pred':>9} {'fwd+bwd':>8}")
    for case in json.load(open(path))["cases"]:
        m, d = case["model"], case["dispatcher"]
        precision = "bf16" if case["precision"] == "bf16" else "fp8,fp8_recipe=blockwise"
        strategy = (f"tp=1,pp=1,dp=8,ep=8,mbs={m['micro_batch']},gbs=8,zero=1,"
                    f"recompute=none,precision={precision}")
        if d["token_dispatcher"] == "flex":  # DeepEP, or HybridEP which sends the same way
            strategy += ",moe_dispatcher=deepep"
        result, error = simulate(orrery, moe_layer_model(build, m), "1x8xH100-SXM", strategy)
        meas = case["measured"]
        step = (meas["forward_ms"] + meas["backward_ms"]) / 1e3
        if result is None:
            print(f"{case['id']:34} cannot simulate: {error}")
            rows.append((case["id"], step, None, None))
            continue
        layer = max(result["layers"], key=lambda l: l["count"])
        fwd, bwd = layer["forward_s_per_micro_batch"], layer["backward_s_per_micro_batch"]
        e = 100 * (fwd + bwd - step) / step
        print(f"{case['id']:34} {meas['forward_ms']:9.2f} {fwd * 1e3:9.2f} "
              f"{meas['backward_ms']:9.2f} {bwd * 1e3:9.2f} {e:+7.1f}%")
        rows.append((case["id"], step, fwd + bwd, e))


def moe_note(case):
    p = case["parallel"]
    m = case["measured"]
    how = ("measured step" if "iteration_time_s" in m
           else "from tokens/s/GPU" if "tokens_per_s_per_gpu" in m
           else "from TFLOP/s (Megatron-Core's FLOPs)")
    fold = "f" if p.get("etp", p["tp"]) != p["tp"] else ""
    overlap = (", EP overlap" if "EP communication overlap" in
               case["training"].get("dispatcher", "") else "")
    return (f"{how}; tp{p['tp']} pp{p['pp']} ep{p['ep']}{fold} dp{p['dp']}, "
            f"{case['training']['precision'].split(' ')[0]}{overlap}")


# AMP (Li et al., NeurIPS'22) on 3 AWS p3.8xlarge (4 V100-16G each) and 1
# g4dn.12xlarge (4 T4), with the bandwidths AMP's src/het_cluster.py gives
# its own model (measured by its estimate_bandwidth.py): 10 Gb/s between the
# V100 nodes and 170 Gb/s inside each, 50 Gb/s between and inside the T4
# node.
AMP_CLUSTER = {
    "name": "AMP: 3 x p3.8xlarge (4 V100-16G) + 1 x g4dn.12xlarge (4 T4)",
    "sites": [{"name": "aws", "nodes": [
        {"count": 3, "device": "V100-16G", "devices_per_node": 4,
         "intra_node_link": {"link": "NVLink2", "bandwidth_bytes_per_s": 21.25e9},
         "nic": {"link": "Eth-10G", "count": 1}},
        {"count": 1, "device": "T4", "devices_per_node": 4,
         "intra_node_link": {"link": "PCIe3", "bandwidth_bytes_per_s": 6.25e9},
         "nic": {"link": "Eth-25G", "bandwidth_bytes_per_s": 6.25e9, "count": 1}}]}]}

# Micro-batch size of each AMP trial: the first field of its line in AMP's
# src/results/het_cluster_results.txt ("rank N: ((mbs, {...}), ...)"; the
# case amp_het_NN is rank NN), which published_runs.json does not carry.
AMP_MICRO_BATCH = [1, 1, 1, 2, 2, 2, 4, 1, 1, 4, 4, 1, 2, 1, 2, 4, 2, 2, 1, 2, 4, 1, 2, 8, 4, 4,
                   8, 1, 4, 1, 1, 2, 4, 8, 8, 2, 2, 4, 8, 4, 8, 8, 8, 8, 16, 16, 16, 16, 16, 16,
                   32, 32, 32]


# AMP's own measurement of its stack: a transformer block's forward at
# micro-batch 1 per device type and tp (its src/known_cost profile, which
# its cost model takes too); what Orrery's device model does not explain
# there is priced as the stack's host time per layer (docs/costmodel.md,
# "Layer profiles").
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "published",
                       "amp_layer_profile.json")) as _f:
    AMP_LAYER_PROFILE = json.load(_f)


def amp_plan(case, mbs):
    """AMP's trial as an Orrery heterogeneous plan. DeepSpeed's pipeline
    topology numbers ranks ((stage * dp) + replica) * tp + tp_rank, four to a
    node, the T4 node last; its PipelineModule's 30 entries are the
    embedding, a transpose, the 24 blocks (entries 2-25), a transpose, the
    final norm and the tied head, a cast: a stage holding entry 0 holds the
    embedding, one ending at 30 the head."""
    p = case["parallel"]
    tp, dp, pp = p["tp"], p["dp"], p["pp"]
    bounds = p["layer_partition_boundaries"]
    layers = []
    for a, b in zip(bounds, bounds[1:]):
        blocks = max(0, min(b, 26) - max(a, 2))
        layers.append(blocks + (a == 0) + (b == 30))
    gbs = case["training"]["global_batch"]
    groups = {}
    for d in range(dp):
        pools = tuple(int(((i * dp + d) * tp) // 4 == 3) for i in range(pp))
        groups.setdefault(pools, []).append(d)
    replica_groups = []
    for pools, replicas in groups.items():
        replica_groups.append({
            "replicas": len(replicas), "micro_batch_size_samples": mbs, "recompute": "none",
            "micro_batches_per_replica": [gbs // (dp * mbs)] * len(replicas),
            "stages": [{"pool": pool, "tp": tp, "layers": n} for pool, n in zip(pools, layers)]})
    # DeepSpeed 2021 (ZeRO-0 under its pipeline engine): fp16 gradients
    # accumulated by autograd and reduced after the backward, in fp32 (AMP's
    # examples/ds_config.json sets "fp32_allreduce": true); attention
    # scores in memory. Its pipeline engine (deepspeed/runtime/pipe/
    # engine.py in AMP's fork) partitions activations over the tp ranks but
    # sets is_grad_partitioned = False: each tp rank sends the whole
    # gradient back; GPT2ModelPipe passes (hidden, attention mask) between
    # stages, the [1, 1, s, s] mask cast to half for NCCL.
    return {"schema": "orrery-plan", "version": 1,
            "strategy": {"kind": "heterogeneous", "global_batch_size_samples": gbs,
                         "zero_stage": 0, "precision": "fp16",
                         "overlap": {"grad_reduce": False, "param_gather": False},
                         "replica_groups": replica_groups},
            "predicted": {"kernels": "unfused-attention", "gradient_accumulation": "separate",
                          "gradient_bytes_per_parameter": 2,
                          "gradient_reduce_bytes_per_parameter": 4,
                          "pipeline_gradients": "whole",
                          "pipeline_attention_mask": "fp16",
                          "layer_profile": AMP_LAYER_PROFILE}}


def spearman(xs, ys):
    """Spearman's rank correlation, ties given their mean rank."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx and vy else float("nan")


def amp_group(orrery, build, cases):
    """Simulates AMP's 43 trials; prints their errors and both models' rank
    correlation with the measured times."""
    work = os.path.join(build, "models", "validation")
    os.makedirs(work, exist_ok=True)
    cluster = os.path.join(work, "amp-cluster.json")
    with open(cluster, "w") as f:
        json.dump(AMP_CLUSTER, f)
    rows = []
    for case in cases:
        idx = int(case["id"].rsplit("_", 1)[1])
        mbs = AMP_MICRO_BATCH[idx]
        m = dict(case["model"], heads=16)
        plan = os.path.join(work, case["id"] + ".plan.json")
        with open(plan, "w") as f:
            json.dump(amp_plan(case, mbs), f)
        r, error = run_simulate([orrery, "simulate", gpt_model(build, m), "--cluster", cluster,
                                 "--plan", plan, "--json"])
        step = case["measured"]["iteration_time_s"]
        amp = case["reference_prediction"]["amp_predicted_s"]
        if r is None:
            print_row(case["id"], step, None, error)
            continue
        PRICED[case["id"]] = ("AMP_heterogeneous_cluster", step, r, None)
        pred = r["predicted"]["step_time_s"]
        p = case["parallel"]
        note = (f"tp{p['tp']} dp{p['dp']} pp{p['pp']} mbs{mbs}; AMP's model {amp:.2f} s"
                + ("" if r["fits"] else "; predicted not to fit: " + r["does_not_fit"]))
        e = print_row(case["id"], step, pred, note)
        rows.append((case["id"], step, pred, e, amp))
    return rows


ZB_SCHEDULES = {"1f1b": "schedule=1f1b", "zb-1p": "schedule=zb-h1", "zb-2p": "schedule=zb-2p",
                "1f1b-i": "schedule=interleaved", "zb-v": "schedule=zb-v"}


def zero_bubble_group(orrery, build, groups):
    """Qi et al.'s zero-bubble measurements (bench/published/
    zero_bubble_runs.json): each row's schedules simulated on its pipeline;
    prints every case and, per schedule, the predicted gain over 1F1B beside
    the measured one. ZB-1p is priced as ZB-H1 (the paper's Table 5 gives
    both the same bubble), 1F1B-I as the interleaved schedule with one
    layer per chunk (the embedding and the head count as layers, as the
    paper's stages do)."""
    data = json.load(open(os.path.join(HERE, "published", "zero_bubble_runs.json")))
    gains = {}
    for table, group in (("table4", "ZeroBubble_Table4"), ("v2_table6_zbv", "ZeroBubble_V_Table6")):
        for row in data[table]:
            m = dict(data["models"][row["model"]], seq_len=1024, vocab=32000)
            m["ffn"] = 4 * m["hidden"]
            pp, mbs, nmb = row["pp"], row["mbs"], row["m"]
            base = (f"tp=1,pp={pp},dp=1,mbs={mbs},gbs={mbs * nmb},precision=fp16,"
                    f"recompute=none,zero=1")
            steps = {}
            for name, sched in ZB_SCHEDULES.items():
                if name not in row:
                    continue
                strategy = base + "," + sched
                if name == "1f1b-i":
                    strategy += f",vpp={(m['layers'] + 2) // pp}"
                measured = mbs * nmb / (row[name] * pp)
                result, error = simulate(orrery, gpt_model(build, m), f"{max(1, pp // 8)}x8xA100-80G",
                                         strategy)
                case_id = f"zb-{row['model']}-p{pp}-b{mbs}-m{nmb}-{name}"
                # The paper states neither what its memory column measures
                # (allocated or reserved) nor its attention kernels: printed
                # with the peak-memory group, kept out of the band's basis.
                memory = row.get("memory_gb", {}).get(name)
                add_case(groups.setdefault(group, []), case_id, measured, result, error,
                         f"{row[name]} samples/GPU/s measured; mbs {mbs}", group=group,
                         memory_bytes=(memory * 2**30, "max", False) if memory else None)
                if result is not None:
                    steps[name] = (measured, result["step_time_s"])
            if "1f1b" not in steps:
                continue
            for name, (measured, pred) in steps.items():
                if name != "1f1b":
                    g = gains.setdefault(name, [])
                    g.append((steps["1f1b"][0] / measured - 1, steps["1f1b"][1] / pred - 1))
    print("\nzero-bubble schedules, throughput gain over 1F1B (mean over the rows), "
          "measured vs predicted:")
    for name, g in gains.items():
        meas = 100 * sum(x[0] for x in g) / len(g)
        pred = 100 * sum(x[1] for x in g) / len(g)
        print(f"  {name:7} measured {meas:+6.1f}%  predicted {pred:+6.1f}%  ({len(g)} rows)")


def torchtitan_cluster(build, case):
    """Meta's Grand Teton H100s as torchtitan's 2024-12 tables ran them: the
    catalog's H100 SXM (its clocks and the GH100 kernel profile measured on
    the H200: the 500 W power limit is not priced, so these rows read fast
    by what it costs) with 96 GiB; the H200 rows on the catalog's H200."""
    per_node, nodes = 8, case["gpus"] // 8
    if case["hw"] == "H200":
        return f"{nodes}x{per_node}xH200"
    path = os.path.join(build, "models", "validation", f"grand-teton-{nodes}.cluster.json")
    catalog = json.load(open(os.path.join(ROOT, "costmodel", "data", "hardware.json")))
    h100 = dict(next(d for d in catalog["devices"] if d["name"] == "H100-SXM"))
    h200 = next(d for d in catalog["devices"] if d["name"] == "H200")
    h100.update(name="H100-96G-500W", memory_bytes=96 * 2**30, power_w=500,
                measured_kernel_profile=h200["measured_kernel_profile"])
    h100.pop("aliases", None)
    h100.pop("kernel_profile_of", None)
    h100["source"] = "torchtitan's Grand Teton H100: 96 GB HBM2e, 500 W limit; the rest H100 SXM's"
    spec = {"name": "grand-teton", "sites": [{"name": "site", "nodes": [
        {"count": nodes, "device": h100, "devices_per_node": per_node,
         "nic": {"link": "IB-NDR", "count": 8}}]}]}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def torchtitan_strategy(case):
    """The row's torchtitan run as a strategy: FSDP2 is ZeRO-3 over dp
    (prefetching the next block's gather, overlap=grad+param); TP with
    sequence-parallel norms, AsyncTP as the tp overlap; CP's ring; full AC,
    or its per-op selective AC (recompute=op); float8 linears as fp8. The
    pipeline rows split
    the local batch into pp micro-batches (torchtitan's default count)."""
    pp = case["pp"]
    mbs = case["local_batch"] // pp if pp > 1 else case["local_batch"]
    overlap = "grad+param" + ("+tp" if case["async_tp"] else "")
    s = (f"tp={case['tp']},pp={pp},dp={case['dp']},cp={case['cp']},mbs={mbs},"
         f"gbs={case['local_batch'] * case['dp']},zero=3,"
         f"recompute={'op' if case['ac'] == 'selective' else case['ac']},"
         f"precision={'fp8,fp8_recipe=tensorwise' if case['float8'] else 'bf16'},sp={1 if case['tp'] > 1 else 0},"
         f"overlap={overlap}")
    if case.get("schedule") == "interleaved":
        s += ",vpp=2"
    return s


def torchtitan_group(orrery, build, groups):
    """torchtitan's published Llama 3.1 tables (bench/published/
    torchtitan_runs.json): tokens/s per GPU converted to a step time.
    torch.compile's runs as --kernels compiled (its fused elementwise
    chains), the others as plain PyTorch (--kernels sdpa); both call SDPA,
    whose flash backend is FlashAttention-2 on the H100 and H200."""
    data = json.load(open(os.path.join(HERE, "published", "torchtitan_runs.json")))
    for case in data["cases"]:
        tokens = case["local_batch"] * case["dp"] * case["seq"]
        measured = tokens / (case["tps_per_gpu"] * case["gpus"])
        flags = ["--kernels", "compiled" if case["compile"] else "sdpa"]
        # torchtitan of 2024-12 computes the loss uncompiled on an fp32
        # copy of the logits; the 2025-06 run compiles it with the model.
        if case["hw"] != "H200":
            flags += ["--loss", "fp32-copy"]
        model = named_model(build, {"name": case["model"], "seq_len": case["seq"]})
        result, error = simulate(orrery, model, torchtitan_cluster(build, case),
                                 torchtitan_strategy(case), flags)
        note = (f"{case['table']}: {case['tps_per_gpu']} TPS/GPU; "
                f"tp{case['tp']} pp{case['pp']} fsdp{case['dp']} cp{case['cp']}"
                + (" compile" if case["compile"] else "") + (" fp8" if case["float8"] else "")
                + (" asyncTP" if case["async_tp"] else ""))
        if result is not None:
            peak = result["peak_memory_bytes"] / 2**30
            note += f"; memory {peak:.1f} GiB predicted, {case['memory_gib']} reserved"
        group = "torchtitan_" + case["hw"]
        add_case(groups.setdefault(group, []), case["id"], measured, result, error, note,
                 unfit_counts=False, group=group, memory_bytes=(case["memory_gib"] * 2**30, "max"))


# torchtitan's tables isolate one mechanism between two rows: its gain in
# tokens/s, measured against predicted (the second row over the first).
TORCHTITAN_GAINS = [
    ("torch.compile", "tt_t1_8b_8_bf16", "tt_t1_8b_8_compile"),
    ("torch.compile", "tt_t3_8b_128_bf16", "tt_t3_8b_128_compile"),
    ("float8", "tt_t1_8b_8_compile", "tt_t1_8b_8_compile_fp8"),
    ("float8", "tt_t3_8b_128_compile", "tt_t3_8b_128_compile_fp8"),
    ("async TP", "tt_t4_70b_256_tp", "tt_t4_70b_256_asynctp"),
    ("interleaved 1F1B", "tt_t5_405b_512_1f1b", "tt_t5_405b_512_interleaved"),
]


def torchtitan_gains():
    """Prints each isolated mechanism's throughput gain, measured vs
    predicted, from the priced torchtitan rows."""
    print("\ntorchtitan mechanisms, throughput gain of the second row over the first, "
          "measured vs predicted:")
    for name, base, other in TORCHTITAN_GAINS:
        if base not in PRICED or other not in PRICED:
            continue
        (_, mb, rb, _), (_, mo, ro, _) = PRICED[base], PRICED[other]
        meas = 100 * (mb / mo - 1)
        pred = 100 * (rb["step_time_s"] / ro["step_time_s"] - 1)
        print(f"  {name:17} {base} -> {other}: measured {meas:+6.1f}%  predicted {pred:+6.1f}%")


def print_row(case_id, step, pred, note):
    """One case: measured and predicted seconds, the error (returned)."""
    if pred is None:
        print(f"{case_id:34} {step:11.2f} {'-':>12} {'-':>8}  cannot simulate: {note}")
        return None
    e = 100 * (pred - step) / step
    print(f"{case_id:34} {step:11.2f} {pred:12.2f} {e:+7.1f}%  {note}")
    return e


def add_case(rows, case_id, step, result, error, note, unfit_counts=True, group=None,
             memory_bytes=None):
    """Prints one simulated case and adds it to its group's rows (and to
    PRICED under `group`); a case predicted not to fit counts towards the
    group's error unless unfit_counts is False."""
    if result is not None and group:
        PRICED[case_id] = (group, step, result, memory_bytes)
    if result is None:
        print_row(case_id, step, None, error)
        rows.append((case_id, step, None, None))
        return
    pred = result["step_time_s"]
    if not result["fits"]:
        note += "; predicted not to fit: " + result["does_not_fit"]
    e = print_row(case_id, step, pred, note)
    rows.append((case_id, step, pred, e if result["fits"] or unfit_counts else None))


def report(rows, group):
    """Prints the group's mean absolute and mean signed error (a model that
    is fast or slow across the board shows in the second) and worst case;
    returns the signed errors."""
    errs = [r[3] for r in rows if r[3] is not None]
    if errs:
        worst = max(rows, key=lambda r: abs(r[3]) if r[3] is not None else -1)
        print(f"  {group}: mean abs error {sum(map(abs, errs)) / len(errs):.1f}%, "
              f"mean {sum(errs) / len(errs):+.1f}% over {len(errs)} cases; "
              f"worst {worst[0]} {worst[3]:+.1f}%")
    return errs


def mlperf_gpt3_group(orrery, groups):
    """NVIDIA's MLPerf Training v3.1 GPT-3 175B runs on 512 to 10,752 H100
    (bench/published/mlperf_gpt3_runs.json): the logged step time (median
    train_step_timing) against the predicted one on DGX H100 nodes with 8
    NDR 400 Gb/s cards under the SuperPOD fabric, each row's configuration
    as submitted."""
    data = json.load(open(os.path.join(HERE, "published", "mlperf_gpt3_runs.json")))
    group = "MLPerf_v3.1_GPT3_175B_H100"
    print(f"\n{group}:")
    # On Eos's fabric: a DGX SuperPOD, 32-node scalable units under a
    # full-bisection leaf-spine-core InfiniBand (docs/cluster.md).
    clusters = os.path.join(os.path.dirname(os.path.dirname(orrery)), "validate-clusters")
    os.makedirs(clusters, exist_ok=True)
    for case in data["cases"]:
        strategy = (f"tp=4,pp=8,vpp=12,mbs=1,gbs={case['gbs']},sp=1,precision=fp8,zero=1,"
                    f"recompute=none,overlap=grad+param+tp")
        eos = os.path.join(clusters, f"eos-{case['nodes']}.json")
        with open(eos, "w") as f:
            json.dump({"name": f"Eos, {case['nodes']} DGX H100", "sites": [
                {"name": "eos", "fabric": "dgx-superpod-h100", "nodes": [
                    {"count": case["nodes"], "device": "H100-SXM", "devices_per_node": 8}]}]}, f)
        result, error = simulate(orrery, "gpt3-175b", eos, strategy)
        add_case(groups.setdefault(group, []), case["id"], case["step_s"], result, error,
                 f"{case['nodes'] * 8} H100, gbs {case['gbs']}: tp4 pp8 vpp12 dp"
                 f"{case['nodes'] * 8 // 32}, fp8", group=group)


def gpt3_at_scale(orrery, groups):
    """GPT-3 175B on 1,024 A100: a published configuration at that scale
    predicted (Megatron-LM's README: tp 8, pp 16, batch 1536, "each
    iteration takes around 32 seconds"; its example script: micro-batch 1,
    full recompute, fp16, the 2021 stack as SC'21's rows are priced), and
    the default plan's MFU (scripts/run-default.sh) beside the best
    published at that scale (docs/mfu-at-scale-sources.md)."""
    print("\nGPT-3 175B on 1,024 A100:")
    strategy = "tp=8,pp=16,dp=8,mbs=1,gbs=1536,recompute=full,precision=fp16,zero=0,overlap=none"
    flags = ["--kernels", "unfused-attention", "--separate-grad-accumulation", "--grad-bytes", "2"]
    result, error = simulate(orrery, "gpt3-175b", "128x8xA100-80G", strategy, flags)
    add_case(groups.setdefault("MegatronREADME_175B_1024", []), "megatron_readme_175b_1024", 32.0,
             result, error, "Megatron-LM README: around 32 s; tp8 pp16 dp8, full recompute",
             group="MegatronREADME_175B_1024")
    proc = subprocess.run([orrery, "plan", "gpt3-175b", "--cluster", "128x8xA100-80G",
                           "--global-batch", "1536", "--json"], capture_output=True, text=True)
    if proc.returncode:
        print(f"  default plan: {proc.stderr.strip()}")
        return
    plan = json.loads(proc.stdout)
    pred = plan["predicted"]
    band = pred.get("step_time_band_s")
    at_p50 = f", {100 * pred['mfu'] * pred['step_time_s'] / band['p50']:.1f}% at its band's p50" if band else ""
    print(f"  default plan (scripts/run-default.sh): MFU {100 * pred['mfu']:.1f}% as simulated{at_p50}; "
          f"best published at this scale: MegaScale 59.0% (its own stack, 1,024 Ampere GPUs, "
          f"batch 768), Megatron-LM 44.7% in the same table (MegaScale Table 2)")


def megatron_golden_group(orrery, build, groups):
    """Megatron-LM's functional tests of a 7B GPT on 8 H100 or A100: the
    step and the allocated peak their golden values hold
    (bench/published/megatron_golden_runs.json)."""
    data = json.load(open(os.path.join(HERE, "published", "megatron_golden_runs.json")))
    model = gpt_model(build, data["model"])
    for case in data["cases"]:
        strategy = (f"tp={case['tp']},pp={case['pp']},dp={case['dp']},mbs={case['mbs']},"
                    f"gbs={case['gbs']},zero=1,precision=bf16,recompute=none,sp=0,"
                    f"overlap=grad+param" + (f",vpp={case['vpp']}" if case["vpp"] > 1 else ""))
        result, error = simulate(orrery, model, f"1x8x{case['gpu']}", strategy,
                                 ["--separate-grad-accumulation"])
        add_case(groups.setdefault("MegatronGolden_7B", []), case["id"], case["iteration_time_s"],
                 result, error, f"tp{case['tp']} pp{case['pp']} dp{case['dp']}; {case['note']}",
                 group="MegatronGolden_7B", memory_bytes=(case["max_allocated_bytes"], "last"))


def memory_group():
    """Every priced case whose run published its peak memory: measured
    against predicted, per device (torchtitan's reserved peak, the largest
    device; Megatron-LM's allocated peak, its last stage; the zero-bubble
    tables', the largest device); the mean absolute error and the
    configurations that ran but are predicted not to fit."""
    print("\npeak memory per device, published runs (GiB):")
    errs, unfit = [], []
    for case_id, (group, _, result, memory) in sorted(PRICED.items()):
        if not memory:
            continue
        pred = predicted_peak(result, memory[1])
        e = 100 * (pred - memory[0]) / memory[0]
        errs.append(e)
        fits = result.get("predicted", result).get("fits", result.get("fits", True))
        if not fits:
            unfit.append(case_id)
        print(f"  {case_id:34} measured {memory[0] / 2**30:7.2f}  predicted {pred / 2**30:7.2f}  "
              f"{e:+6.1f}%" + ("" if fits else "  predicted not to fit"))
    if errs:
        print(f"  peak memory: mean abs error {sum(map(abs, errs)) / len(errs):.1f}%, "
              f"mean {sum(errs) / len(errs):+.1f}% over {len(errs)} configurations (aim 8 %); "
              f"{len(unfit)} that ran predicted not to fit" + (f": {', '.join(unfit)}" if unfit else ""))


def source_of(group):
    """The publication a group comes from (its name up to the first '_'):
    the unit a band is held out by."""
    return group.split("_")[0]


def error_rows(exclude_source=None):
    """PRICED as costmodel/data/validation_errors.json's rows: each case's
    regime as the simulator states it and measured over predicted."""
    rows = []
    for case_id in sorted(PRICED):
        group, step, result, memory = PRICED[case_id]
        if source_of(group) == exclude_source:
            continue
        metrics = result.get("predicted", result)
        u = metrics["uncertainty"]
        row = {"id": case_id, "group": group, "device_family": u["device_family"],
               "kernels": u["kernels"], "mechanisms": u["mechanisms"],
               "measured_over_predicted_step": round(step / metrics["step_time_s"], 4)}
        if memory and (len(memory) < 3 or memory[2]):
            row["measured_over_predicted_peak_memory"] = round(
                memory[0] / predicted_peak(result, memory[1]), 4)
        rows.append(row)
    return rows


def write_errors(path, rows):
    with open(path, "w") as f:
        f.write('{"schema": "orrery-validation-errors", "version": 1,\n'
                ' "note": "measured over predicted for every published run bench/validate.py '
                'prices, with the regime the simulator states for it; written by '
                'bench/validate.py --write-errors (docs/costmodel.md, Uncertainty band)",\n'
                ' "rows": [\n')
        f.write(",\n".join("  " + json.dumps(r, sort_keys=True) for r in rows))
        f.write("\n ]}\n")


def band_coverage(build):
    """Each publication's cases priced with a band derived from every other
    publication's (held out, so a band is never checked against the runs it
    came from): the share of measured steps inside p10-p90 and the median
    width (p90 - p10) / p50, per publication and overall."""
    work = os.path.join(build, "models", "validation")
    total_hits, widths = 0, []
    print("\nuncertainty band, each publication held out of the basis it is checked against:")
    for source in sorted({source_of(g) for g, _, _, _ in PRICED.values()}):
        basis = os.path.join(work, f"held-out-{source}.errors.json")
        write_errors(basis, error_rows(exclude_source=source))
        hits, ws = 0, []
        for case_id, (group, step, result, _) in sorted(PRICED.items()):
            if source_of(group) != source:
                continue
            again, _ = run_simulate(result["_command"] + ["--uncertainty-basis", basis])
            band = again and again.get("predicted", again).get("step_time_band_s")
            if not band:
                continue
            hits += band["p10"] <= step <= band["p90"]
            ws.append((band["p90"] - band["p10"]) / band["p50"])
        if ws:
            total_hits += hits
            widths += ws
            print(f"  {source:14} {100 * hits / len(ws):5.1f}% of {len(ws):3} measured steps inside "
                  f"p10-p90, median width {100 * sorted(ws)[len(ws) // 2]:.1f}%")
    if widths:
        print(f"  all publications: {100 * total_hits / len(widths):.1f}% of {len(widths)} "
              f"measured steps inside p10-p90 (aim 80 %), median width "
              f"{100 * sorted(widths)[len(widths) // 2]:.1f}% (aim 25 %)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--write-errors", metavar="PATH",
                    help="write measured over predicted of every case priced, with its regime "
                         "(costmodel/data/validation_errors.json: the band's basis)")
    args = ap.parse_args()
    orrery = os.path.join(args.build, "bin", "orrery")
    data = json.load(open(os.path.join(args.shared, "validation", "published_runs.json")))
    groups = {}
    print(f"{'case':34} {'measured s':>11} {'predicted s':>12} {'error':>8}  note")
    for case in data["cases"]:
        g = case["group"]
        if g not in ("SC21_Table1_weak_scaling", "Korthikanti_Table5", "BLOOM",
                     "SC21_Table2_PTD_vs_ZeRO3"):
            continue
        step, how = measured_step(case)
        m = dict(case["model"])
        if "vocab" not in m:
            m["vocab"] = 51200
        hw = case["hardware"]
        if step is None or "layers" not in m or "parallel" not in case:
            print(f"{case['id']:34} {'-':>11} {'-':>12} {'-':>8}  cannot simulate: no step time or shape")
            continue
        gpus, per_node = hw["num_gpus"], hw.get("gpus_per_node", 8)
        cluster = cluster_for(args.build, case)
        flags, why = framework_flags(case)
        strategy = strategy_of(case)
        if "deepspeed" in json.dumps(case.get("source", {})).lower():
            # DeepSpeed's ZeRO-1/2 gathers the updated weights after the
            # step; only the gradient reduction overlaps (overlap_comm).
            strategy += ",overlap=grad"
        result, error = simulate(orrery, gpt_model(args.build, m), cluster, strategy, flags)
        add_case(groups.setdefault(g, []), case["id"], step, result, error,
                 how + ("; " + why if why else ""), group=g)
    # Megatron-Core on H100 at sequence 4096: TFLOP/s per GPU (model FLOPs)
    # converted to a step time with F72.
    for case in data["cases"]:
        g = case["group"]
        if g != "MegatronCore_r0.8_H100_weak_scaling":
            continue
        m, hw = case["model"], case["hardware"]
        gpus = hw["num_gpus"]
        step = f72(m, case["training"]["global_batch"]) / (
            case["measured"]["tflops_per_gpu"] * 1e12 * gpus)
        cluster = f"{gpus // hw.get('gpus_per_node', 8)}x{hw.get('gpus_per_node', 8)}xH100-SXM"
        result, error = simulate(orrery, gpt_model(args.build, m), cluster, mcore_strategy(case))
        add_case(groups.setdefault(g, []), case["id"], step, result, error,
                 "from TFLOP/s (F72); mbs 1, sp, no recompute, ZeRO-1 assumed",
                 unfit_counts=False, group=g)

    # Mixture-of-experts runs (bench/published/moe_runs.json).
    for case in json.load(open(os.path.join(HERE, "published", "moe_runs.json")))["cases"]:
        result, error = simulate(orrery, named_model(args.build, case["model"]),
                                 moe_cluster(case), moe_strategy(case))
        peak = case["measured"].get("peak_allocated_gib_rank0")
        add_case(groups.setdefault(case["group"], []), case["id"],
                 case["derived"]["iteration_time_s"], result, error,
                 moe_note(case), group=case["group"],
                 memory_bytes=(peak * 2**30, "max") if peak else None)

    # Megatron-Bridge's Blackwell and H100 pre-training tables.
    megatron_bridge_group(orrery, args.build, groups)
    moe_layer_group(orrery, args.build, groups)

    zero_bubble_group(orrery, args.build, groups)
    torchtitan_group(orrery, args.build, groups)
    torchtitan_gains()
    megatron_golden_group(orrery, args.build, groups)
    gpt3_at_scale(orrery, groups)
    mlperf_gpt3_group(orrery, groups)

    amp = [c for c in data["cases"] if c["group"] == "AMP_heterogeneous_cluster"]
    amp_rows = amp_group(orrery, args.build, amp) if amp else []
    for r in amp_rows:
        groups.setdefault("AMP_heterogeneous_cluster", []).append(r[:4])

    print("\nstep time, per group:")
    headline = []
    for g, rows in groups.items():
        errs = report(rows, g)
        if g in ("SC21_Table1_weak_scaling", "Korthikanti_Table5", "BLOOM"):
            headline += errs
    if amp_rows:
        meas = [r[1] for r in amp_rows]
        print(f"  AMP_heterogeneous_cluster rank correlation with the measured times (Spearman): "
              f"Orrery {spearman([r[2] for r in amp_rows], meas):.2f}, "
              f"AMP's own model {spearman([r[4] for r in amp_rows], meas):.2f} "
              f"({len(amp_rows)} trials)")
    if headline:
        print(f"  SC21 Table 1 + Korthikanti Table 5 + BLOOM: mean abs error "
              f"{sum(map(abs, headline)) / len(headline):.1f}%, mean {sum(headline) / len(headline):+.1f}%, "
              f"worst {max(map(abs, headline)):.1f}% ({len(headline)} cases)")

    # Memory (Korthikanti Fig. 1): the configurations of Table 5.
    print("\nmemory per GPU (Korthikanti Fig. 1), GiB:")
    configs = {c["model"]["name"]: c for c in data["cases"] if c["group"] == "Korthikanti_Table5"}
    mem_errs = []
    for case in data["cases"]:
        if case["group"] != "Korthikanti_Fig1_memory":
            continue
        name = case["model"]["name"]
        base = configs.get(name + "" if name != "1T" else "1T")
        if base is None:
            print(f"  {case['id']}: cannot simulate: no configuration for {name}")
            continue
        m = base["model"]
        gpus = base["hardware"]["num_gpus"]
        cluster = f"{gpus // 8}x8xA100-80G"
        p, t = base["parallel"], base["training"]
        common = (f"tp={p['tp']},pp={p['pp']},dp={p['dp']},mbs={t['micro_batch']},"
                  f"gbs={t['global_batch']},precision=fp16")
        v = p.get("interleave_virtual_stages") or 1
        if v > 1:
            common += f",vpp={v}"
        for key, extra in (("activations_GiB_no_recompute", ",recompute=none,sp=0"),
                           ("activations_GiB_seqpar_selective", ",recompute=selective,sp=1")):
            result, error = simulate(orrery, gpt_model(args.build, m), cluster, common + extra,
                                     ["--kernels", "unfused-attention"])
            if result is None:
                print(f"  {case['id']} {key}: cannot simulate: {error}")
                continue
            # The first stage's activations at the schedule's peak (the
            # figure's basis), without the simulator's fragmentation allowance.
            st = result["stages"][0]
            pred = st["memory_bytes"]["activations"] / 1.05 / 2**30
            meas = case["measured"][key]
            e = 100 * (pred - meas) / meas
            mem_errs.append(abs(e))
            print(f"  {case['id']:22} {key:34} measured {meas:8.2f}  predicted {pred:8.2f}  {e:+6.1f}%")
        result, _ = simulate(orrery, gpt_model(args.build, m), cluster, common + ",recompute=full",
                             ["--kernels", "unfused-attention"])
        if result:
            # Fig. 1's bar is the model's weights and optimizer state spread
            # over tp x pp GPUs (18 bytes x parameters / (t p)): the mean over
            # pipeline stages.
            mems = [st["memory_bytes"] for st in result["stages"]]
            pred = sum(m["weights"] + m["gradients"] + m["optimizer"] for m in mems) / len(mems) / 2**30
            meas = case["measured"]["params_plus_optimizer_GiB"]
            e = 100 * (pred - meas) / meas
            mem_errs.append(abs(e))
            print(f"  {case['id']:22} {'params_plus_optimizer_GiB':34} measured {meas:8.2f}  predicted {pred:8.2f}  {e:+6.1f}%")
    if mem_errs:
        print(f"  memory: mean abs error {sum(mem_errs) / len(mem_errs):.1f}%, worst {max(mem_errs):.1f}%")

    memory_group()
    if args.write_errors:
        write_errors(args.write_errors, error_rows())
        print(f"\nwrote {args.write_errors}")
    band_coverage(args.build)

    coll = os.path.join(args.build, "bin", "orrery-bench-collectives")
    if os.path.exists(coll):
        print()
        sys.stdout.flush()
        subprocess.run([coll, os.path.join(args.shared, "validation", "published_runs.json")])
        # 8 and 4 x H100 by message size, 1 MiB up (docs/nccl-allreduce-sources.md).
        print()
        sys.stdout.flush()
        subprocess.run([coll, os.path.join(HERE, "published", "nccl_allreduce_runs.json")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
