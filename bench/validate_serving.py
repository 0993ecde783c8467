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
           "--kv-cache", "fp8" if fp8 else "auto", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr else "failed"
    plan = json.loads(p.stdout)
    return plan["chosen"]["metrics"]["output_throughput_tok_per_s"], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--rows", type=int, default=0,
                    help="only the first N rows (0: all)")
    args = ap.parse_args()
    orrery = os.path.join(args.build, "bin", "orrery")
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
    print()
    print("MAPE per GPU type (output tokens/s)")
    every = []
    for gpu, errs in sorted(by_gpu.items()):
        every += errs
        print(f"  {gpu:18} {len(errs):3} rows  MAPE {100 * sum(errs) / len(errs):5.1f}%  "
              f"worst {100 * max(errs):5.1f}%")
    print("MAPE per model")
    for model, errs in sorted(by_model.items()):
        print(f"  {model:18} {len(errs):3} rows  MAPE {100 * sum(errs) / len(errs):5.1f}%")
    if every:
        print(f"all: {len(every)} rows, MAPE {100 * sum(every) / len(every):.1f}%"
              + (f"; {failed} rows not simulated" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
