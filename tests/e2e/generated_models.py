#!/usr/bin/python3
"""End-to-end: every model the generator writes imports, outlines, and
matches its published parameter count within 1%; the large language models
also match the training-FLOPs formula within 2%:

    training FLOPs per token = 6·N + 12·L·s·d

(6·N for the forward and backward passes through N parameters' matmuls,
plus QKᵀ and AV: 2·2·s·d per layer forward, three times for training; the
attention term counts the full s×s scores, as the unfused graphs compute
them: `--kernels unfused-attention`). With fused attention (the default)
the causal kernel computes the 128 × 128 blocks on and below the diagonal,
(n + 1) / 2n of them for n = s / 128, and the attention term scales so.

The GPT models' activation memory per transformer layer, derived from the
graph op by op, must match Korthikanti et al. 2022 (eq. 1, no recompute, no
parallelism) within 1%: s·b·h·(34 + 5·a·s/h) bytes in 16-bit precision with
the scores in memory; with fused attention their flash-attention term
s·b·h·34 within 2% (Q, K, V, the output and the log-sum-exp rows kept).

ResNet-152 and ViT-H/14 also plan on a 64-GPU preset with --emit-mlir.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import Tally  # noqa: E402

# name: (parameter range from the issue, layers L, sequence s, width d)
LLM_CHECKS = {
    "gpt3-175b": ((174e9, 176e9), 96, 2048, 12288),
    "llama3-70b": ((69.5e9, 71.5e9), 80, 8192, 8192),
    "llama3-405b": ((400e9, 411e9), 126, 8192, 16384),
}


# GPT models with dropout and fp16 activations: (s, h, a).
KORTHIKANTI = {
    "gpt3-175b": (2048, 12288, 96),
    "megatron-1.7b": (2048, 2304, 24),
    "megatron-145.6b": (2048, 12288, 96),
    "megatron-1008b": (2048, 25600, 160),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--generator", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    listing = subprocess.run([sys.executable, args.generator, "--list"],
                             capture_output=True, text=True, check=True).stdout
    tally = Tally()
    for line in listing.splitlines():
        name, published, source = line.split("\t")
        published = float(published)
        path = os.path.join(args.workdir, name + ".onnx")
        subprocess.run([sys.executable, args.generator, name, "-o", path], check=True)
        runs = {k: subprocess.run([args.orrery, "stats", path, "--dim", "batch=1", "--json",
                                   "--kernels", k], capture_output=True, text=True)
                for k in ("fused", "unfused-attention")}
        problems = [f"--kernels {k}: {p.stderr.strip()}" for k, p in runs.items() if p.returncode]
        if not problems:
            stats = json.loads(runs["unfused-attention"].stdout)
            fused = json.loads(runs["fused"].stdout)
            n = stats["parameters"]
            err = abs(n - published) / published
            if err > 0.01:
                problems.append(f"parameters {n:,} vs published {published:,.0f} ({err:.2%})")
            if name in LLM_CHECKS:
                (lo, hi), layers, seq, width = LLM_CHECKS[name]
                if not lo <= n <= hi:
                    problems.append(f"parameters {n:,} outside [{lo:,.0f}, {hi:,.0f}]")
                blocks = seq // 128
                for label, st, attention in (("", stats, 1.0),
                                             (" fused", fused, (blocks + 1) / (2 * blocks))):
                    formula = 6 * n + 12 * layers * seq * width * attention
                    got = st["training_flops_per_token"]
                    ferr = abs(got - formula) / formula
                    if ferr > 0.02:
                        problems.append(f"training FLOPs/token{label} {got:.4g} vs "
                                        f"6N+12Lsd·{attention:.3f} {formula:.4g} ({ferr:.2%})")
                repeats = [l["count"] for l in stats["layers"] if l["count"] > 1]
                if repeats != [layers]:
                    problems.append(f"repeated layers {repeats}, expected [{layers}]")
            if name in KORTHIKANTI:
                seq, width, heads = KORTHIKANTI[name]
                for label, st, want, tol in (
                        ("", stats, seq * width * (34 + 5 * heads * seq / width), 0.01),
                        (" fused", fused, seq * width * 34, 0.02)):
                    layer = [l for l in st["layers"] if l["kind"] == "transformer_layer"]
                    if not layer:
                        problems.append(f"no transformer_layer{label}")
                        continue
                    got = layer[0]["activation_bytes_per_layer_per_sample"]
                    aerr = abs(got - want) / want
                    if aerr > tol:
                        problems.append(f"activations/layer{label} {got:.4g} B vs Korthikanti "
                                        f"{want:.4g} B ({aerr:.2%})")
        detail = "" if problems else \
            f"{stats['parameters']:,} params (published {published:,.0f}: {source})"
        if name in ("resnet152", "vit-h14") and not problems:
            out = path + ".sharded.mlir"
            proc = subprocess.run([args.orrery, "plan", path, "--cluster", "8x8xA100-80G",
                                   "--global-batch", "512", "--quiet", "--emit-mlir", out],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                problems.append(f"plan on 64 GPUs: {proc.stderr.strip()}")
            elif "shard.sharding" not in open(out).read():
                problems.append("plan --emit-mlir wrote no shardings")
        tally.record(name, problems, detail)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
