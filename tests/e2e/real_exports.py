#!/usr/bin/python3
"""The corpus models/corpus/generate.py writes (real exports: PyPI's torch,
transformers, torchvision and onnxruntime tools, random weights), each
imported by `orrery stats` and its parameters checked against the source
module's count: within 1 % for every file; the mixtures of experts (their
entries name `experts`) must read as experts and take expert parallelism. Prints one row per file and the
worst error.

    real_exports.py --orrery BIN --corpus DIR
"""
import argparse
import json
import os
import subprocess
import sys


def experts_split(orrery, name, path, dims, experts, stats):
    """A mixture of experts export: its layers read as experts (fewer
    parameters active a token than in all) and expert parallelism over all
    of them accepted on 8 devices per expert group."""
    out = []
    if not stats.get("active_parameters") or stats["active_parameters"] >= stats["parameters"]:
        out.append(f"{name}: no mixture-of-experts layers found ({stats.get('active_parameters')} active of "
                   f"{stats['parameters']:,})")
    ep = min(experts, 8)
    r = subprocess.run([orrery, "simulate", path, *dims, "--cluster", "8xH100-SXM", "--strategy",
                        f"tp=1,dp=8,ep={ep},mbs=1,gbs=8", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        out.append(f"{name}: ep={ep}: {r.stderr.strip()}")
    else:
        print(f"{'':34} ep={ep} over its {experts} experts: step {json.loads(r.stdout)['step_time_s']:.4f} s")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--corpus", required=True)
    args = ap.parse_args()
    manifest = json.load(open(os.path.join(args.corpus, "manifest.json")))
    failures, worst = [], 0.0
    print(f"{'file':34} {'reference':>11} {'orrery':>11} {'error':>7}  contrib and quantized ops")
    for name, entry in sorted(manifest.items()):
        dims = [f for k, v in sorted(entry["dims"].items()) for f in ("--dim", f"{k}={v}")]
        r = subprocess.run([args.orrery, "stats", os.path.join(args.corpus, entry["file"]), "--json", *dims],
                           capture_output=True, text=True)
        special = [o for o in entry["ops"] if "::" in o or o.startswith(("QLinear", "MatMulInteger", "ConvInteger",
                                                                        "DynamicQuantize", "QuantizeLinear"))]
        if r.returncode != 0:
            failures.append(f"{name}: {r.stderr.strip()}")
            print(f"{name:34} {entry['reference_parameters']:>11,} {'error':>11}")
            continue
        got = json.loads(r.stdout)["parameters"]
        ref = entry["reference_parameters"]
        err = abs(got - ref) / ref
        worst = max(worst, err)
        print(f"{name:34} {ref:>11,} {got:>11,} {100 * err:6.2f}%  {' '.join(special)}")
        if err > 0.01:
            failures.append(f"{name}: {got:,} parameters, the source module has {ref:,} ({100 * err:.2f} % off)")
        if entry.get("experts"):
            failures += experts_split(args.orrery, name, os.path.join(args.corpus, entry["file"]), dims,
                                      entry["experts"], json.loads(r.stdout))
    print(f"{len(manifest)} files, {len(manifest) - len(failures)} within 1 %, worst {100 * worst:.2f} %")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
