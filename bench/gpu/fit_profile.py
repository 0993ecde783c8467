#!/usr/bin/env python3
"""Fit a device's measured kernel profile from bench/gpu/measure.py's JSON.

The cost model prices a kernel as (docs/costmodel.md)
  max(FLOPs / (peak · e), bytes / (HBM bandwidth · m),
      weight bytes / (HBM bandwidth · m) + t) + launch,
  e = E · t / (t + T),  t = FLOPs / peak (GEMMs; other ops use e = 1),
where the weight is a layer GEMM's (batch 1: its k x n operand; the
batched products are attention's, of two activations, and have none) and
m depends on the kernel's class: a GEMM, an elementwise pass
(pointwise), a reduction along rows (softmax, normalizations) or a pass
that draws random numbers (dropout). By default every m is 0.8, E = 0.8,
T = 15 µs and launch = 3 µs. This script finds the E, T and GEMM m that
minimise the squared log error over the file's GEMMs, and each other
class's m over its kernels (add and GELU; softmax and layer norm;
dropout), by grid search, so the result is the same on every machine, and
prints them as the catalog's `measured_kernel_profile`. Step times are not
used: they are what the profile is checked against (bench/gpu/compare.py).

The launch gap stays at 3 µs: a GEMM's fixed cost is T/E + launch, so
these timings cannot tell the two apart, and the kernels long enough to be
timed on the device (20 µs and more: PyTorch's host issues a kernel every
few microseconds, so shorter ones are timed at the host's pace) hardly
feel it.

  python3 bench/gpu/fit_profile.py bench/measured/h200-sxm-pytorch.json \\
      --peak-flop-per-s 989.4e12 --memory-bandwidth-bytes-per-s 4.8e12
"""
import argparse
import json
import math
import sys

LAUNCH_S = 3e-6
CLASSES = {"pointwise": ("add", "gelu"), "reduction": ("softmax", "layernorm"),
           "random": ("dropout",)}


def predict(row, peak, bandwidth, gemm_eff, half_s, mem_eff, launch_s=LAUNCH_S):
    flops = row.get("flops", 0.0)
    compute = memory = row["bytes"] / (bandwidth * mem_eff)
    if flops:
        ideal = flops / peak
        compute = ideal / (gemm_eff * ideal / (ideal + half_s))
        if row.get("batch", 1) == 1 and "k" in row:
            weight = 2.0 * row["k"] * row["n"]
            memory = max(memory, weight / (bandwidth * mem_eff) + ideal)
    return max(compute, memory) + launch_s


def loss(rows, peak, bandwidth, *params):
    return sum(math.log(predict(r, peak, bandwidth, *params) / r["seconds_median"]) ** 2
               for r in rows)


def grid(lo, hi, n):
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def search(rows, peak, bandwidth, spans, fixed):
    """Grid search over the parameters in `spans` (others from `fixed`),
    narrowing around the best point five times."""
    spans = dict(spans)
    best = None
    for _ in range(5):
        names = list(spans)
        points = [[]]
        for name in names:
            points = [p + [v] for p in points for v in grid(*spans[name], 17)]
        for p in points:
            params = dict(fixed, **dict(zip(names, p)))
            value = loss(rows, peak, bandwidth, params["gemm"], params["half"], params["mem"])
            if best is None or value < best[0]:
                best = (value, params)
        for name in names:
            lo, hi = spans[name]
            width = (hi - lo) / 8
            centre = best[1][name]
            spans[name] = (max(lo, centre - width), min(hi, centre + width))
    return best


def fit(measured, peak, bandwidth, min_seconds):
    timed = lambda rows: [r for r in rows if r["seconds_median"] >= min_seconds]
    gemms = timed(measured["gemms"])
    value, g = search(gemms, peak, bandwidth,
                      {"gemm": (0.4, 1.0), "half": (0.1e-6, 40e-6), "mem": (0.3, 1.0)}, {})
    profile = {"gemm_efficiency": round(g["gemm"], 3),
               "gemm_half_efficiency_s": float(f"{g['half']:.3g}"),
               "gemm_memory_efficiency": round(g["mem"], 3)}
    report = {"gemm": (len(gemms), math.sqrt(value / len(gemms)))}
    for cls, ops in CLASSES.items():
        rows = timed(k for k in measured["kernels"] if k["op"] in ops)
        if not rows:
            raise ValueError(f"no {cls} kernels ({', '.join(ops)}) of {min_seconds} s or more")
        value, m = search(rows, peak, bandwidth, {"mem": (0.1, 1.0)}, {"gemm": 1.0, "half": 0.0})
        profile[f"{cls}_memory_efficiency"] = round(m["mem"], 3)
        report[cls] = (len(rows), math.sqrt(value / len(rows)))
    profile["kernel_launch_s"] = LAUNCH_S
    return profile, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured", help="JSON written by bench/gpu/measure.py")
    ap.add_argument("--peak-flop-per-s", type=float, required=True,
                    help="the catalog's bf16 tensor peak of the device")
    ap.add_argument("--memory-bandwidth-bytes-per-s", type=float, required=True,
                    help="the catalog's HBM bandwidth of the device")
    ap.add_argument("--min-seconds", type=float, default=20e-6,
                    help="leave out kernels faster than this (default 20e-6)")
    args = ap.parse_args()
    try:
        with open(args.measured) as f:
            measured = json.load(f)
        profile, report = fit(measured, args.peak_flop_per_s,
                              args.memory_bandwidth_bytes_per_s, args.min_seconds)
    except (OSError, ValueError, KeyError) as e:
        print(f"fit_profile.py: error: {args.measured}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(profile))
    for cls, (n, rms) in report.items():
        print(f"{cls}: {n} kernels, rms log error {rms:.3f} "
              f"(about {100 * (math.exp(rms) - 1):.0f} % per kernel)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
