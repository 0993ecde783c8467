#!/usr/bin/python3
"""A Mixtral exported by transformers (shared/models/hf, torch.onnx dynamo:
batched experts, GatherND + bmm) against models/generate.py's Mixtral of
the same dims (4 layers, d 1024, 16 heads and 4 key-value heads, expert FFN
3584, 8 experts top 2, vocab 32000, 2048 tokens): for each strategy, expert
parallel ones included, the export's simulated step and peak memory must be
within 5 % of the generator's, and served on 8 H100 (the serving search:
expert parallelism with attention data parallelism among its layouts) its
output throughput too. Prints one row per strategy.

Skips (exit 0 with a message) when shared/ is absent, as on a user's machine.

    moe_exports.py --orrery BIN --generator models/generate.py --shared DIR --workdir DIR
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

EXPORT = "models/hf/mixtral_4l_dynamo_op18_bf16.onnx"
STRATEGIES = [
    "tp=1,dp=8,ep=8,mbs=1,gbs=64",
    "tp=1,dp=8,ep=8,mbs=2,gbs=64,recompute=full",
    "tp=2,dp=4,ep=4,mbs=1,gbs=64,sp=1",
    "tp=2,dp=4,ep=2,etp=1,mbs=1,gbs=64,sp=1",
    "tp=1,dp=8,ep=1,mbs=1,gbs=64",
    "tp=1,pp=2,dp=4,ep=4,mbs=1,gbs=64",
]


def simulate(orrery, model, strategy, dims):
    r = subprocess.run([orrery, "simulate", model, "--cluster", "1x8xH100-SXM", "--strategy", strategy,
                        "--json", *dims], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"FAIL {model} {strategy}: {r.stderr.strip()}")
    d = json.loads(r.stdout)
    return d["step_time_s"], d["peak_memory_bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--generator", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    export = os.path.join(args.shared, EXPORT)
    if not os.path.exists(export):
        print(f"skipped: {export} is absent")
        return 0
    os.makedirs(args.workdir, exist_ok=True)
    spec = importlib.util.spec_from_file_location("generate", args.generator)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    ours = os.path.join(args.workdir, "mixtral-4l.onnx")
    with open(ours, "wb") as f:
        f.write(gen.llama("mixtral-4l", 4, 1024, 16, 4, 3584, 2048, 32000, 1e6, moe=(8, 2)).SerializeToString())
    failures = []
    print(f"{'strategy':44} {'export s':>9} {'generator s':>11} {'step':>7} {'export GB':>9} {'gen GB':>7} {'memory':>7}")
    for s in STRATEGIES:
        t1, m1 = simulate(args.orrery, export, s, ["--dim", "batch=1", "--dim", "seq=2048"])
        t2, m2 = simulate(args.orrery, ours, s, [])
        dt, dm = t1 / t2 - 1, m1 / m2 - 1
        print(f"{s:44} {t1:9.4f} {t2:11.4f} {100 * dt:+6.1f}% {m1 / 1e9:9.2f} {m2 / 1e9:7.2f} {100 * dm:+6.1f}%")
        if abs(dt) > 0.05 or abs(dm) > 0.05:
            failures.append(s)
    served = []
    for model, dims in ((export, ["--dim", "batch=1", "--dim", "seq=2048"]), (ours, [])):
        r = subprocess.run([args.orrery, "serve", model, "--cluster", "1x8xH100-SXM", "--workload",
                            "isl=1024,osl=256,requests=200,offline", "--json", *dims],
                           capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"FAIL serve {model}: {r.stderr.strip()}")
        chosen = json.loads(r.stdout)["chosen"]
        served.append((chosen["metrics"]["output_throughput_tok_per_s"], chosen.get("label", "")))
    ds = served[0][0] / served[1][0] - 1
    print(f"{'served (output tok/s)':44} {served[0][0]:9.0f} {served[1][0]:11.0f} {100 * ds:+6.1f}%")
    if abs(ds) > 0.05:
        failures.append("serving")
    for s in failures:
        print(f"FAIL {s}: the export is priced more than 5 % from the generator's Mixtral")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
