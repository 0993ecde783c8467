#!/usr/bin/python3
"""Mixtures of experts of today's architectures as transformers exports
them (tests/e2e/frameworks/moe_export.py, run in the frameworks' virtual
environment: transformers and torch.onnx pinned in
tests/e2e/frameworks/requirements.txt): Mixtral, Qwen3-MoE, DeepSeek-V3 and
GPT-OSS. Each must import with its parameters within 1 % of the module's,
read as experts (fewer parameters active a token than in all), take
expert parallelism over its experts, and have its attention fused and
causal (transformers 5 builds the mask through a CumSum of the position
ids; GPT-OSS with its sinks and, on alternate layers, its window). Prints
one row per model.

    moe_model_exports.py --orrery BIN --python VENV_PYTHON --workdir DIR
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    r = subprocess.run([args.python, os.path.join(HERE, "frameworks", "moe_export.py"), args.workdir],
                       capture_output=True, text=True)
    if r.returncode:
        print(r.stdout[-3000:], r.stderr[-3000:])
        print("FAIL the exports were not written")
        return 1
    manifest = json.load(open(os.path.join(args.workdir, "manifest.json")))
    dims = ["--dim", "batch=1", "--dim", "seq=256"]
    failures = []
    print(f"{'model':14} {'module':>10} {'orrery':>10} {'error':>7} {'active':>10} {'causal':>7}  ep=8 step")
    for name, entry in manifest.items():
        path = os.path.join(args.workdir, entry["file"])
        r = subprocess.run([args.orrery, "stats", path, "--json", *dims], capture_output=True, text=True)
        if r.returncode:
            failures.append(f"{name}: {r.stderr.strip()}")
            continue
        stats = json.loads(r.stdout)
        ref, got = entry["reference_parameters"], stats["parameters"]
        err = abs(got - ref) / ref
        active = stats.get("active_parameters")
        ir = subprocess.run([args.orrery, "import", path, *dims, "--outline"], capture_output=True, text=True)
        attention = [line for line in ir.stdout.splitlines() if "orrery.fused_attention" in line]
        causal = [line for line in attention if " causal," in line]
        if not attention or len(causal) != len(attention):
            failures.append(f"{name}: {len(causal)} of {len(attention)} fused attention ops causal")
        if name == "gpt_oss" and not all("sinks" in a for a in attention):
            failures.append(f"{name}: attention without its sinks")
        s = subprocess.run([args.orrery, "simulate", path, *dims, "--cluster", "8xH100-SXM", "--strategy",
                            "tp=1,dp=8,ep=8,mbs=1,gbs=8", "--json"], capture_output=True, text=True)
        step = json.loads(s.stdout)["step_time_s"] if s.returncode == 0 else None
        print(f"{name:14} {ref:>10,} {got:>10,} {100 * err:6.2f}% {active or 0:>10,} {len(causal)}/{len(attention):<5} "
              f"{f'{step:.5f} s' if step else s.stderr.strip()}")
        if err > 0.01:
            failures.append(f"{name}: {got:,} parameters, the module has {ref:,}")
        if not active or active >= got:
            failures.append(f"{name}: its experts were not found ({active} active of {got:,})")
        if step is None:
            failures.append(f"{name}: ep=8: {s.stderr.strip()}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
