#!/usr/bin/python3
"""The serving simulator against published throughput (shared/validation).

Every row of inference_runs.json is a TensorRT-LLM v0.17 offline throughput
measurement: a model, a GPU, TP (x PP), FP8 or FP16, uniform input and output
lengths, requests fed at an infinite rate. This runs each as the source did
(`orrery serve --engine trtllm` with the row's configuration, trtllm-bench's
engine sizing, the request count the source's table used for those lengths)
and prints measured vs simulated output tokens/s and the error; then the mean
absolute percentage error per GPU type and per model. FP8 rows are served
with fp8 weights and an fp8 KV cache (NVIDIA's ModelOpt FP8 checkpoints
quantize both). Nothing here is fitted: the figures are what the model
predicts.

    bench/validate_serving.py [--build build] [--shared ../shared] [--rows N]
"""
import argparse
import collections
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = {
    "Llama-3.1-8B": "llama3-8b",
    "Llama-3.1-70B": "llama3-70b",
    "Llama-3.1-405B": "llama3-405b",
    "Mistral-7B": "mistral-7b",
    "Mixtral-8x7B": "mixtral-8x7b",
    "Mixtral-8x22B": "mixtral-8x22b",
}
GPUS = {
    "A100-SXM4-80GB": "A100-80G",
    "H100 80GB HBM3": "H100-SXM",
    "H200 141GB HBM3": "H200",
    "GH200 480GB": "GH200",
    "L40S": "L40S",
}
# The source's $num_requests for each (input, output) length
# (perf-overview.md, "Preparing a Dataset").
REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500,
            (2048, 128): 3000, (2048, 2048): 1500, (5000, 500): 1500,
            (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000}


def simulate(orrery, row):
    hw, par, wl = row["hardware"], row["parallel"], row["workload"]
    device = GPUS[hw["gpu"]]
    tp, pp = par["tp"], par.get("pp", 1)
    # trtllm-bench splits a mixture of experts' experts by tp (moe_tp_size)
    # unless told an ep size: the rows give none.
    ep = par.get("ep", 1)
    n = tp * pp
    isl, osl = wl["isl"], wl["osl"]
    requests = REQUESTS.get((isl, osl), 1000)
    fp8 = row["precision"].upper() == "FP8"
    cmd = [orrery, "serve", MODELS[row["model"]["key"]],
           "--cluster", f"{n}x{device}" if n <= 8 else f"{n // 8}x8x{device}",
           "--engine", "trtllm",
           "--strategy", f"tp={tp},pp={pp},ep={ep},replicas=1",
           "--workload", f"isl={isl},osl={osl},requests={requests},offline",
           "--precision", "fp8" if fp8 else "fp16",
           "--kv-cache", "fp8" if fp8 else "auto",
           # The performance overview's command line: trtllm-bench throughput
           # ... --kv_cache_free_gpu_mem_fraction 0.95 (the default is 0.9).
           "--memory-fraction", "0.95", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr else "failed"
    plan = json.loads(p.stdout)
    return plan["chosen"]["metrics"]["output_throughput_tok_per_s"], None


def print_mape(title, groups, by_model, suffix):
    """The absolute errors' mean per group (with the worst) and per model,
    then over every row."""
    print()
    print(title)
    every = []
    for name, errs in sorted(groups.items()):
        every += errs
        print(f"  {name:18} {len(errs):3} rows  MAPE {100 * sum(errs) / len(errs):5.1f}%  "
              f"worst {100 * max(errs):5.1f}%")
    print("MAPE per model")
    for model, errs in sorted(by_model.items()):
        print(f"  {model:18} {len(errs):3} rows  MAPE {100 * sum(errs) / len(errs):5.1f}%")
    if every:
        print(f"all: {len(every)} rows, MAPE {100 * sum(every) / len(every):.1f}%" + suffix)


# TensorRT-LLM 1.0-1.2 (PyTorch backend) on Blackwell and Hopper
# (bench/published/trtllm_blackwell_runs.json, transcribed from the
# perf-overview tables with their commits).
BLACKWELL_MODELS = {
    "Llama-3.3-70B": "llama3-70b",  # Llama 3.1 70B's architecture
    "Llama-3.1-8B": "llama3-8b",
    "Llama-3.1-405B": "llama3-405b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "DeepSeek-R1-0528": "deepseek-v3",  # DeepSeek-V3's architecture
    "GPT-OSS-120B": "gpt-oss-120b",
    "GPT-OSS-20B": "gpt-oss-20b",
    "Llama-4-Scout": "llama4-scout",
    "Llama-4-Maverick": "llama4-maverick",
}


def blackwell_precision(row):
    """The --precision a row's checkpoint runs in: ModelOpt's NVFP4 or FP8
    checkpoints, except GPT-OSS, whose one checkpoint holds its experts in
    MXFP4: on Blackwell the engine runs them in MXFP4 (the "FP4" columns),
    on Hopper (the "FP8" columns, Triton's MoE) it dequantizes them to
    16-bit math: weight-only 4-bit."""
    fp4 = row["precision"].upper() == "FP4"
    if row["model"]["key"].startswith("GPT-OSS"):
        return "mxfp4" if fp4 else "int4"
    return "nvfp4" if fp4 else "fp8"
BLACKWELL_GPUS = {
    "B200 180GB (DGX B200)": "B200",
    "GB200 192GB (GB200 NVL72)": "GB200",
    "B300 288GB (DGX B300) (beta)": "B300",
    "GB300 288 GB (GB300 NVL72) (beta)": "GB300",
    "RTX 6000 Pro Blackwell Server Edition": "RTX-PRO-6000",
    "H200 SXM 141GB (DGX H200)": "H200",
    "H100 SXM 80GB (DGX H100)": "H100-SXM",
}


def simulate_blackwell(orrery, row):
    """A TensorRT-LLM 1.x row as its table ran it: FP4 rows serve an NVFP4
    checkpoint (weights and activations in NVFP4), FP8 rows an FP8 one,
    both with the FP8 KV cache ModelOpt's checkpoints state; an NVL72 GPU
    from one rack (its trays joined by NVLink); "DEP" rows with attention
    data parallelism beside expert parallelism. Returns (output tokens/s
    of the whole group, None) or (None, why not)."""
    hw, par, wl = row["hardware"], row["parallel"], row["workload"]
    if row["model"]["key"] not in BLACKWELL_MODELS:
        return None, "no built-in of " + row["model"]["key"]
    device = BLACKWELL_GPUS[hw["gpu"]]
    tp, pp = par["tp"], par.get("pp", 1)
    # "DEPn": attention data parallel over n ranks beside expert parallel
    # over them (TensorRT-LLM's enable_attention_dp with ep = tp).
    layout = f"ep={tp},adp=1" if par.get("attention_dp") else "ep=1"
    n = tp * pp
    cluster = (f"1x{device}-NVL72" if device in ("GB200", "GB300")
               else f"{n}x{device}" if n <= 8 else f"{n // 8}x8x{device}")
    requests = wl.get("num_requests") or REQUESTS.get((wl["isl"], wl["osl"]), 1000)
    cmd = [orrery, "serve", BLACKWELL_MODELS[row["model"]["key"]],
           "--cluster", cluster, "--engine", "trtllm",
           "--strategy", f"tp={tp},pp={pp},{layout},replicas=1",
           "--workload", f"isl={wl['isl']},osl={wl['osl']},requests={requests},offline",
           "--precision", blackwell_precision(row),
           "--kv-cache", "fp8",
           # "In many cases, we also use a higher KV cache percentage by
           # setting --kv_cache_free_gpu_mem_fraction 0.95" (the page).
           "--memory-fraction", "0.95", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr else "failed"
    return json.loads(p.stdout)["chosen"]["metrics"]["output_throughput_tok_per_s"], None


def validate_blackwell(orrery, rows):
    """Prints each row and the MAPE per GPU x precision and per model."""
    groups = collections.defaultdict(list)
    by_model = collections.defaultdict(list)
    skipped = collections.Counter()
    print(f"{'id':11} {'model':16} {'gpu':13} {'par':8} {'prec':4} {'isl/osl':>11} "
          f"{'measured':>9} {'simulated':>9} {'error':>7}")
    for row in rows:
        m = row["metrics"]
        per_gpu = "output_throughput_per_gpu_tok_s" in m
        measured = m.get("output_throughput_per_gpu_tok_s", m.get("output_throughput_tok_s"))
        n = row["parallel"]["tp"] * row["parallel"].get("pp", 1)
        sim, why = simulate_blackwell(orrery, row)
        if sim is None:
            skipped[why] += 1
            continue
        if per_gpu:
            sim /= n
        wl = row["workload"]
        e = (sim - measured) / measured
        gpu = BLACKWELL_GPUS[row["hardware"]["gpu"]]
        groups[(gpu, row["precision"])].append(abs(e))
        by_model[row["model"]["key"]].append(abs(e))
        print(f"{row['id']:11} {row['model']['key'][:16]:16} {gpu:13} "
              f"{row['parallel']['label'][:8]:8} {row['precision']:4} "
              f"{str(wl['isl']) + '/' + str(wl['osl']):>11} {measured:9.0f} {sim:9.0f} "
              f"{e * 100:+6.1f}%")
    print_mape("MAPE per GPU and precision (output tokens/s; per GPU where the table is)",
               {f"{gpu:13} {prec:4}": e for (gpu, prec), e in groups.items()}, by_model, "")
    for why, count in skipped.most_common():
        print(f"  not simulated: {count} rows: {why}")


TTFT_MODELS = {"Llama-3.3-70B-Instruct": "llama3-70b", "Llama-3.1-8B": "llama3-8b",
               "gpt-oss-20b": "gpt-oss-20b"}
TTFT_GPUS = {"H100-80GB": "H100-SXM", "H100": "H100-SXM"}


def ttft_row(orrery, row):
    """One published online run (bench/published/serving_ttft_runs.json)
    as it ran: its engine (NVIDIA NIM on TensorRT-LLM, or vLLM), model, GPUs,
    lengths and closed-loop concurrency. Returns ((simulated TTFT ms, which
    statistic), None) or (None, why not)."""
    model = TTFT_MODELS.get(row.get("model"))
    gpu = TTFT_GPUS.get(row.get("gpu"))
    if not model or not gpu or not row.get("isl") or not row.get("concurrency"):
        return None, "setup not stated (model, GPU, lengths or concurrency)"
    engine = "trtllm" if row["engine"].startswith("NVIDIA NIM") else "vllm"
    prec = row.get("precision") or "bf16"
    # "fp8 KV" is the KV cache's type alone (the weights stay bf16).
    weights = "fp8" if prec.startswith("fp8") and "KV" not in prec else "bf16"
    kv = "fp8" if "fp8 KV" in prec or weights == "fp8" else "bf16"
    c, n = row["concurrency"], row.get("n_gpus") or 1
    cmd = [orrery, "serve", model, "--cluster", f"{n}x{gpu}", "--engine", engine,
           "--precision", weights, "--kv-cache", kv,
           "--strategy", f"tp={row.get('tp') or n},pp=1,replicas=1",
           "--workload", f"isl={row['isl']},osl={row['osl']},requests={max(100, 10 * c)},"
                         f"concurrency={c}", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr else "failed"
    ttft = json.loads(p.stdout)["chosen"]["metrics"]["ttft"]
    which = "mean" if row["metrics"].get("ttft_mean_ms") is not None else "p50"
    return (ttft[which + "_ms"], which), None


def validate_ttft(orrery):
    """Time-to-first-token of the published online runs: the error per row
    and the MAPE (light load apart: concurrency 1)."""
    with open(os.path.join(HERE, "published", "serving_ttft_runs.json")) as f:
        rows = json.load(f)["rows"]
    print(f"\n{'TTFT, published online runs':44} {'conc':>4} {'measured':>9} "
          f"{'simulated':>9} {'error':>7}")
    errs, light, skipped = [], [], 0
    for row in rows:
        if row.get("caveat"):
            skipped += 1
            continue
        sim, why = ttft_row(orrery, row)
        if sim is None:
            skipped += 1
            continue
        value, which = sim
        measured = row["metrics"]["ttft_" + which + "_ms"]
        e = (value - measured) / measured
        errs.append(abs(e))
        if row["concurrency"] == 1:
            light.append(abs(e))
        print(f"{row['id'][:44]:44} {row['concurrency']:>4} {measured:9.1f} {value:9.1f} "
              f"{e * 100:+6.1f}%  ({which} ms)")
    if errs:
        print(f"  TTFT: MAPE {100 * sum(errs) / len(errs):.1f}% over {len(errs)} rows; "
              f"at concurrency 1 {100 * sum(light) / max(1, len(light)):.1f}% over "
              f"{len(light)}; {skipped} rows without a stated setup")


def serve_metrics(orrery, args):
    """`orrery serve ... --json`'s chosen metrics, or None and why not."""
    p = subprocess.run([orrery, "serve"] + args + ["--json"], capture_output=True,
                       text=True)
    if p.returncode:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr else "failed"
    return json.loads(p.stdout)["chosen"]["metrics"], None


def pr9668_trace(path):
    """vLLM PR #9668's benchmark_prefix_caching run as a trace: 200 prompts
    of 256 to 512 tokens, each sent twice (the second copy's whole prompt
    the first's), shuffled, all at once, 10 output tokens. The lengths and
    the order are drawn here with a fixed seed (the source sampled
    ShareGPT)."""
    import random
    rng = random.Random(9668)
    prompts = [(i, rng.randint(256, 512)) for i in range(200)]
    reqs = prompts * 2
    rng.shuffle(reqs)
    with open(path, "w") as f:
        f.write("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n")
        for i, n in reqs:
            f.write(f"0,{n},10,p{i},{n}\n")


def validate_prefix(orrery):
    """Prefix caching on against off (bench/published/serving_prefix_runs.json):
    the published speedup of each on/off pair and the simulated one."""
    with open(os.path.join(HERE, "published", "serving_prefix_runs.json")) as f:
        rows = {r["id"]: r for r in json.load(f)["rows"]}
    print(f"\n{'prefix caching on vs off':44} {'measured':>9} {'simulated':>9} "
          f"{'error':>7}")
    errs = []
    pairs = []
    # The vLLM V1 blog: 1 H100, Llama-3.1-8B, 2,048 in / 128 out, a share of
    # each prompt common to all (the request count is not stated: vLLM's
    # benchmark_throughput default, 1,000).
    for hit in (0, 25, 50, 75):
        on = rows[f"vllm_v1blog_llama31_8b_h100_hit{hit}_on"]
        shared = on["workload"]["shared_prefix_tokens"]
        w = "isl=2048,osl=128,requests=1000,offline" + (
            f",prefix={shared}" if shared else "")
        base = ["llama3-8b", "--cluster", "1xH100-SXM", "--engine", "vllm",
                "--strategy", "tp=1,pp=1,replicas=1", "--workload", w]
        pairs.append((on["id"], on["metrics"]["throughput_rel_to_no_prefix_caching"],
                      base, "request_throughput_req_per_s"))
    import tempfile
    trace = os.path.join(tempfile.mkdtemp(), "pr9668.csv")
    pr9668_trace(trace)
    off9668 = rows["vllm_pr9668_llama3_8b_fp8_l40s_offline_off"]
    on9668 = rows["vllm_pr9668_llama3_8b_fp8_l40s_offline_on"]
    pairs.append((on9668["id"] + " (V0)",
                  off9668["metrics"]["elapsed_s"] / on9668["metrics"]["elapsed_s"],
                  ["llama3-8b", "--cluster", "1xL40S", "--engine", "vllm",
                   "--precision", "fp8", "--strategy", "tp=1,pp=1,replicas=1",
                   "--trace", trace], "request_throughput_req_per_s"))
    for name, measured, base, metric in pairs:
        on, why = serve_metrics(orrery, base + ["--prefix-caching", "on"])
        off, why_off = serve_metrics(orrery, base + ["--prefix-caching", "off"])
        if on is None or off is None:
            print(f"{name[:44]:44} {measured:9.3f} {'-':>9}   ({why or why_off})")
            continue
        ratio = on[metric] / off[metric]
        e = (ratio - measured) / measured
        errs.append(abs(e))
        print(f"{name[:44]:44} {measured:9.3f} {ratio:9.3f} {e * 100:+6.1f}%  "
              f"(hit rate {on['prefix_cache_hit_rate'] * 100:.0f}%)")
    if errs:
        print(f"  prefix caching speedup: MAPE {100 * sum(errs) / len(errs):.1f}% "
              f"over {len(errs)} pairs")


def iid_acceptance(length, k):
    """The per-position rate a whose 1 + a + ... + a^k is `length` (the
    measured mean acceptance length at k drafts), by bisection."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        if sum(a ** i for i in range(k + 1)) < length:
            lo = a
        else:
            hi = a
    return (lo + hi) / 2


# Pairs whose two runs are published as absolute figures too (the metric's
# on and off values), by pair: the ratio's error then splits into each
# side's.
ABSOLUTE = {}


def specdec_pairs(rows):
    """The published pairs whose setup is stated, as (group, name, measured
    speedup, serve arguments, --speculative, metric)."""
    pairs = []
    # TensorRT-LLM tech blog 1: DeepSeek-R1 (DeepSeek-V3's architecture) on
    # 8 B200, batch 1, 1K in / 2K out, MTP with k = 1..5 at the measured
    # acceptance lengths.
    off = rows["trtllm_blog1_dsr1_b200x8_bs1_off"]["metrics"]["output_tok_s_per_user"]
    for k in range(1, 6):
        r = rows[f"trtllm_blog1_dsr1_b200x8_bs1_mtp{k}"]
        al = r["metrics"]["acceptance_length_mean"]
        base = ["deepseek-v3", "--cluster", "8xB200", "--engine", "trtllm",
                "--precision", "nvfp4", "--strategy", "tp=8,pp=1,replicas=1",
                "--workload", "isl=1024,osl=2048,requests=4,concurrency=1"]
        pairs.append(("TensorRT-LLM MTP, DeepSeek-R1, 8 B200, batch 1", r["id"],
                      r["metrics"]["output_tok_s_per_user"] / off, base,
                      f"mtp,k={k},acceptance={iid_acceptance(al, k):.4f}",
                      "output_throughput_tok_per_s"))
    # The EAGLE-3 paper's SGLang sweep: Llama-3.1-8B on 1 H100, MT-Bench
    # (lengths not stated: 128 in / 512 out here), chains of 3 drafts at the
    # default acceptance.
    for method, tag in (("eagle3", "eagle3"), ("eagle", "eagle")):
        for bs in (1, 2, 4, 8, 16, 32, 64):
            rid = f"sglang_eagle3paper_llama31_8b_h100_bs{bs}_{tag}"
            if bs == 1:
                rid = "sglang_eagle3paper_llama31_8b_h100_bs1_" + (
                    "eagle3" if tag == "eagle3" else "eagle2")
            r = rows.get(rid)
            if not r:
                continue
            m = r["metrics"]
            speedup = m.get("speedup_throughput") or m.get("speedup")
            base = ["llama3-8b", "--cluster", "1xH100-SXM", "--strategy",
                    "tp=1,pp=1,replicas=1", "--workload",
                    f"isl=128,osl=512,requests={8 * bs},concurrency={bs}"]
            # The sweep (batch 2 to 64) is one configuration; batch 1 is a
            # separate experiment whose configuration the paper does not
            # state (docs/specdec-sources.md, 6.1): a group of its own.
            group = (f"SGLang {method}, Llama-3.1-8B, 1 H100, MT-Bench" +
                     (", batch 1 (own setup)" if bs == 1 else ", batch 2-64"))
            pairs.append((group, rid, speedup, base, method,
                          "output_throughput_tok_per_s"))
    # vLLM on GB300: DeepSeek-R1 NVFP4 at tp=2, 2K in / 64 out, 1,000
    # requests, MTP k=1 (acceptance "> 80 %": the default). The blog sets
    # no attention backend; v0.14's default on SM100 was still CUTLASS MLA
    # (docs/specdec-sources.md, M2: an inference from the backends' priority
    # list and the release dates, not stated by the source). Its recipe
    # serves `vllm serve nvidia/DeepSeek-R1-0528-NVFP4 -tp 2`: tensor
    # parallelism alone, no expert or attention data parallelism.
    for c in (64, 128, 192, 256, 320, 384):
        r_off = rows[f"vllm_gb300_dsr1_nvfp4_tp2_isl2k_osl64_c{c}_off"]["metrics"]
        r_on = rows[f"vllm_gb300_dsr1_nvfp4_tp2_isl2k_osl64_c{c}_mtp1"]
        base = ["deepseek-v3", "--cluster", "2xGB300", "--engine", "vllm",
                "--precision", "nvfp4", "--kv-cache", "fp8",
                "--attention-backend", "cutlass_mla",
                "--strategy", "tp=2,ep=1,adp=0,pp=1,replicas=1", "--workload",
                f"isl=2048,osl=64,requests=1000,concurrency={c}"]
        pairs.append(("vLLM MTP, DeepSeek-R1, 2 GB300", r_on["id"],
                      r_on["metrics"]["total_tok_s"] / r_off["total_tok_s"], base,
                      "mtp,k=1", "total_token_throughput_tok_per_s"))
        ABSOLUTE[r_on["id"]] = (r_on["metrics"]["total_tok_s"],
                                r_off["total_tok_s"])
    return pairs


def validate_specdec(orrery):
    """Speculative decoding on against off
    (bench/published/serving_specdec_runs.json): the published speedup of
    each pair whose setup is stated and the simulated one, per group."""
    with open(os.path.join(HERE, "published", "serving_specdec_runs.json")) as f:
        rows = {r["id"]: r for r in json.load(f)["rows"]}
    print(f"\n{'speculative decoding on vs off':52} {'measured':>9} "
          f"{'simulated':>9} {'error':>7}")
    groups = collections.OrderedDict()
    absolute = {}
    for group, name, measured, base, spec, metric in specdec_pairs(rows):
        runs = []
        for on in ("1", "0"):
            args = list(base)
            i = args.index("--strategy") + 1
            args[i] += ",spec=" + on
            m, why = serve_metrics(orrery, args + ["--speculative", spec])
            runs.append(m[metric] if m else None)
        if None in runs:
            print(f"{name[:52]:52} {measured:9.3f} {'-':>9}   ({why})")
            continue
        ratio = runs[0] / runs[1]
        e = (ratio - measured) / measured
        groups.setdefault(group, []).append(abs(e))
        line = f"{name[:52]:52} {measured:9.3f} {ratio:9.3f} {e * 100:+6.1f}%"
        if name in ABSOLUTE:
            sides = [(p - m) / m for p, m in zip(runs, ABSOLUTE[name])]
            absolute.setdefault(group, []).append(sides)
            line += f"   on {sides[0] * 100:+.0f}%, off {sides[1] * 100:+.0f}%"
        print(line)
    for group, errs in groups.items():
        print(f"  {group}: MAPE {100 * sum(errs) / len(errs):.1f}% over "
              f"{len(errs)} pairs")
        if group in absolute:
            on, off = zip(*absolute[group])
            print(f"    each side's own figure: on MAPE "
                  f"{100 * sum(map(abs, on)) / len(on):.1f}%, off MAPE "
                  f"{100 * sum(map(abs, off)) / len(off):.1f}%")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--rows", type=int, default=0,
                    help="only the first N rows (0: all)")
    ap.add_argument("--blackwell", action="store_true",
                    help="the TensorRT-LLM 1.x Blackwell and Hopper rows "
                         "(bench/published/trtllm_blackwell_runs.json) instead")
    args = ap.parse_args()
    orrery = os.path.join(args.build, "bin", "orrery")
    if args.blackwell:
        with open(os.path.join(HERE, "published", "trtllm_blackwell_runs.json")) as f:
            rows = json.load(f)["rows"]
        validate_blackwell(orrery, rows[:args.rows] if args.rows else rows)
        return 0
    with open(os.path.join(args.shared, "validation", "inference_runs.json")) as f:
        data = json.load(f)
    rows = data["rows"][:args.rows] if args.rows else data["rows"]
    by_gpu = collections.defaultdict(list)
    by_model = collections.defaultdict(list)
    failed = 0
    print(f"{'id':9} {'model':15} {'gpu':16} {'tp':>2} {'prec':4} {'isl/osl':>11} "
          f"{'measured':>9} {'simulated':>9} {'error':>7}")
    for row in rows:
        measured = row["metrics"].get("output_throughput_tok_s")
        if measured is None:
            continue
        sim, err = simulate(orrery, row)
        wl = row["workload"]
        head = (f"{row['id']:9} {row['model']['key']:15} {row['hardware']['gpu'][:16]:16} "
                f"{row['parallel']['tp']:>2} {row['precision']:4} "
                f"{str(wl['isl']) + '/' + str(wl['osl']):>11} {measured:9.0f}")
        if sim is None:
            failed += 1
            print(f"{head} {'-':>9}   ({err})")
            continue
        e = (sim - measured) / measured
        by_gpu[row["hardware"]["gpu"]].append(abs(e))
        by_model[row["model"]["key"]].append(abs(e))
        print(f"{head} {sim:9.0f} {e * 100:+6.1f}%")
    print_mape("MAPE per GPU type (output tokens/s)", by_gpu, by_model,
               f"; {failed} rows not simulated" if failed else "")
    if not args.rows:
        validate_ttft(orrery)
        validate_prefix(orrery)
        validate_specdec(orrery)
    return 0


if __name__ == "__main__":
    sys.exit(main())
