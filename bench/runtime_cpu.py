#!/usr/bin/env python3
"""The CPU backend as a benchmark: profile this machine (2 ranks), plan a
small GPT on the measured 2-rank CPU cluster under several strategies, run
each plan, print the predicted step beside the measured one; the error is
the figure (docs/runtime.md). Never fitted: the profile measures kernels
and links, not steps.

  bench/runtime_cpu.py [--orrery build/bin/orrery] [--steps 10]"""
import argparse
import json
import os
import subprocess
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", default=os.path.join(root, "build", "bin", "orrery"))
    ap.add_argument("--workdir", default=os.path.join(root, "build", "bench-runtime"))
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model = os.path.join(args.workdir, "gpt-small.onnx")
    subprocess.run(["/usr/bin/python3", os.path.join(root, "models", "generate.py"),
                    "gpt", "--layers", "4", "--hidden", "256", "--heads", "4",
                    "--seq", "256", "--vocab", "8192", "-o", model], check=True)
    cluster = os.path.join(args.workdir, "cpu2.json")
    prof = subprocess.run([args.orrery, "profile", "--local", "2", "-o", cluster],
                          capture_output=True, text=True, check=True)
    print(prof.stdout.strip())
    strategies = [
        "dp=2,mbs=2,gbs=8,zero=1",
        "dp=2,mbs=4,gbs=8,zero=0,overlap=none",
        "tp=2,mbs=2,gbs=8",
        "pp=2,mbs=1,gbs=8",
        "pp=2,mbs=1,gbs=8,schedule=gpipe",
        "pp=2,vpp=2,schedule=interleaved,mbs=1,gbs=8",
        "cp=2,mbs=2,gbs=4",
    ]
    print(f"\n{'strategy':48s} {'predicted ms':>12s} {'measured ms':>12s} {'error':>8s}")
    errors = []
    for st in strategies:
        plan = os.path.join(args.workdir, "plan.json")
        subprocess.run([args.orrery, "plan", model, "--cluster", cluster, "--strategy",
                        st + ",precision=fp32", "--quiet", "-o", plan],
                       check=True, capture_output=True)
        run = subprocess.run([args.orrery, "run", plan, "--local", "2", "--steps",
                              str(args.steps), "--warmup", "2", "--json"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{st:48s} failed: {run.stderr.strip()}")
            continue
        r = json.loads(run.stdout)
        m = r["measured"]["step_time_s"]["median"]
        p = r["predicted"]["step_time_s"]
        errors.append(abs(p - m) / m)
        print(f"{st:48s} {p*1e3:12.1f} {m*1e3:12.1f} {100*(p-m)/m:+7.1f}%")
    if errors:
        print(f"\nCPU backend, 2 ranks: mean abs error {100*sum(errors)/len(errors):.1f}% "
              f"over {len(errors)} plans (measured: median of {args.steps} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
