#!/usr/bin/python3
"""The corpus models/corpus/generate.py writes (real exports: PyPI's torch,
transformers, torchvision and onnxruntime tools, random weights), each
imported by `orrery stats` and its parameters checked against the source
module's count: within 1 % for every file. Prints one row per file and the
worst error.

    real_exports.py --orrery BIN --corpus DIR
"""
import argparse
import json
import os
import subprocess
import sys


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
    print(f"{len(manifest)} files, {len(manifest) - len(failures)} within 1 %, worst {100 * worst:.2f} %")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
