#!/usr/bin/python3
"""Every SC'21 configuration run with Megatron-LM (Narayanan et al. 2021:
Table 1, and Table 2's PTD-P runs of the 174.6B and 529.6B models), written as a
plan with `orrery plan --strategy` and exported with `--to megatron`, gives
Megatron-LM's own flags with the published values: tensor and pipeline
sizes, layers per virtual stage, micro and global batch, recompute,
precision. Skips (exit 0 with a message) when shared/ is absent, as on a
user's machine.

    export_sc21.py --orrery BIN --shared DIR --workdir DIR
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from validate import gpt_model, strategy_of, cluster_for  # noqa: E402


def megatron_args(text):
    """The ORRERY_ARGS array of an export, as a flag -> value dict."""
    body = text[text.index("ORRERY_ARGS=(") + len("ORRERY_ARGS=("):text.rindex(")")]
    words = shlex.split(body)
    flags, i = {}, 0
    while i < len(words):
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[words[i]] = words[i + 1]
            i += 2
        else:
            flags[words[i]] = True
            i += 1
    return flags


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(os.path.join(args.workdir, "models", "validation"), exist_ok=True)
    runs = os.path.join(args.shared, "validation", "published_runs.json")
    if not os.path.exists(runs):  # as on a user's machine, without shared/
        print(f"skipped: {runs} not found (shared/ corpus absent)")
        return 0
    data = json.load(open(runs))
    cases = [c for c in data["cases"] if c["group"] == "SC21_Table1_weak_scaling"
             or (c["group"] == "SC21_Table2_PTD_vs_ZeRO3" and "_PTD_" in c["id"])]
    failures, checked = [], 0
    for case in cases:
        p, t, m = case["parallel"], case["training"], case["model"]
        model = gpt_model(args.workdir, m)
        cluster = cluster_for(args.workdir, case)
        plan = os.path.join(args.workdir, case["id"] + ".plan.json")
        run = subprocess.run([args.orrery, "plan", model, "--cluster", cluster, "--strategy",
                              strategy_of(case), "--quiet", "-o", plan],
                             capture_output=True, text=True)
        if run.returncode:
            failures.append(f"{case['id']}: plan --strategy failed: {run.stderr.strip()}")
            continue
        out = subprocess.run([args.orrery, "export", plan, "--to", "megatron"],
                             capture_output=True, text=True)
        if out.returncode:
            failures.append(f"{case['id']}: export failed: {out.stderr.strip()}")
            continue
        flags = megatron_args(out.stdout)
        vpp = p.get("interleave_virtual_stages") or 1
        want = {
            "--tensor-model-parallel-size": str(p["tp"]),
            "--pipeline-model-parallel-size": str(p["pp"]),
            "--num-layers": str(m["layers"]),
            "--micro-batch-size": str(t["micro_batch"]),
            "--global-batch-size": str(t["global_batch"]),
            "--recompute-granularity": "full",
            "--recompute-method": "uniform",
            "--fp16": True,
        }
        if vpp > 1:
            want["--num-layers-per-virtual-pipeline-stage"] = str(m["layers"] // (p["pp"] * vpp))
        bad = {k: (v, flags.get(k)) for k, v in want.items() if flags.get(k) != v}
        if "--use-distributed-optimizer" in flags:
            bad["--use-distributed-optimizer"] = ("absent (ZeRO-0)", True)
        if vpp == 1 and "--num-layers-per-virtual-pipeline-stage" in flags:
            bad["--num-layers-per-virtual-pipeline-stage"] = ("absent", flags[
                "--num-layers-per-virtual-pipeline-stage"])
        if bad:
            failures.append(f"{case['id']}: " + ", ".join(
                f"{k} want {v[0]} got {v[1]}" for k, v in bad.items()))
            continue
        checked += 1
        print(f"{case['id']:18} tp={p['tp']} pp={p['pp']} vpp={vpp}: "
              + " ".join(f"{k} {v}" if v is not True else k for k, v in flags.items()))
    print(f"{checked} passed, {len(failures)} failed")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
