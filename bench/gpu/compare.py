#!/usr/bin/env python3
"""Measured on a GPU against predicted: the GPT training steps of
bench/gpu/measure.py's JSON, simulated with `orrery simulate` on the same
model shapes, with the device's measured kernel profile and without it
(--no-kernel-profile: the stated assumptions alone).

  python3 bench/gpu/compare.py bench/measured/h200-sxm-pytorch.json --build build

Step time is compared with the twin that runs Megatron-LM's fused kernels
(fusion=megatron: bias-GELU, bias-dropout-add, scale-mask-softmax), which
is what the model prices; PyTorch's one-op-at-a-time time (fusion=none)
and Inductor's whole-layer fusion (fusion=inductor) are printed beside it.
Peak memory is compared with the unfused twin's, as the device memory the
process held (Megatron's and Inductor's kernels keep other tensors). The
profile was fitted to the same file's GEMMs and kernels, never to these
step times. The stated assumptions take their memory-bound rates from that
profile too (docs/costmodel.md), so on this device the two columns differ
only in the GEMM rates; the published A100 runs (bench/validate.py) are
where the stated rates meet a device they were not measured on.

The twin accumulates each weight gradient into its fp32 main gradient in a
hook of its own, not inside the weight-gradient GEMM as Megatron-LM does;
the simulation is told so (--separate-grad-accumulation). Its attention is
unfused (scores in memory, Megatron's fused softmax chain): the Megatron-
kernel steps are simulated with --kernels unfused-attention, and the steps
that ran PyTorch's kernels one op at a time with --kernels eager (the host's
dispatch per op included), with the measured profile.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GIB = float(1 << 30)


def simulate(orrery, model, cluster, strategy, profile, kernels="unfused-attention"):
    cmd = [orrery, "simulate", model, "--cluster", cluster, "--strategy", strategy, "--json",
           "--separate-grad-accumulation", "--kernels", kernels]
    if not profile:
        cmd.append("--no-kernel-profile")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or out.stdout.strip())
    return json.loads(out.stdout)


def pct(pred, meas):
    return f"{100 * (pred / meas - 1):+6.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cluster", default="1xH200")
    args = ap.parse_args()
    orrery = os.path.join(args.build, "bin", "orrery")
    with open(args.measured) as f:
        measured = json.load(f)
    dev = measured["device"]
    print(f"device {dev['name']} (torch {dev['torch']}, measured {measured['measured_on']}); "
          f"simulated on {args.cluster}")

    steps = measured["steps"]
    by_config = {}
    for s in steps:
        key = (s["name"], s["seq"], s["mbs"], s["recompute"])
        by_config.setdefault(key, {})[s["fusion"]] = s

    time_errors = {True: [], False: []}
    eager_errors = []
    mem_errors = []
    fit_agree = 0
    print(f"\n{'':<36}{'-- measured step s --':^29}{'-- predicted step s --':^36}")
    print(f"{'case':<36}{'unfused':>9}{'inductor':>10}{'megatron':>10}{'datasheet':>12}{'err':>8}"
          f"{'profile':>10}{'err':>8}{'eager':>8}{'err':>8}   memory GiB measured / predicted")
    with tempfile.TemporaryDirectory() as tmp:
        for (name, seq, mbs, recompute), runs in by_config.items():
            any_run = next(iter(runs.values()))
            model = os.path.join(tmp, f"{name}-s{seq}.onnx")
            if not os.path.exists(model):
                subprocess.run([sys.executable, os.path.join(ROOT, "models", "generate.py"), "gpt",
                                "--layers", str(any_run["layers"]), "--hidden", str(any_run["hidden"]),
                                "--heads", str(any_run["heads"]), "--seq", str(any_run["seq"]),
                                "--vocab", str(any_run["vocab"]), "-o", model], check=True)
            strategy = f"tp=1,pp=1,dp=1,mbs={mbs},gbs={mbs},recompute={recompute}"
            pred = {p: simulate(orrery, model, args.cluster, strategy, p) for p in (False, True)}
            pred_eager = simulate(orrery, model, args.cluster, strategy, True, "eager")
            label = f"{name} mbs={mbs} rc={recompute}" + (f" s={seq}" if seq != 2048 else "")
            eager, fused = runs.get("none"), runs.get("megatron")
            ok = lambda r: r is not None and r["status"] == "ok"
            step = lambda r, w: f"{r['step_seconds_median']:{w}.3f}" if ok(r) else f"{'-':>{w}}"
            cols = f"{label:<36}"
            cols += f"{eager['step_seconds_median']:9.3f}" if ok(eager) else f"{'oom' if eager else '-':>9}"
            cols += step(runs.get("inductor"), 10) + step(fused, 10)
            for p in (False, True):
                cols += f"{pred[p]['step_time_s']:{12 if not p else 10}.3f}"
                if ok(fused):
                    cols += f"{pct(pred[p]['step_time_s'], fused['step_seconds_median']):>8}"
                    time_errors[p].append(pred[p]["step_time_s"] / fused["step_seconds_median"] - 1)
                else:
                    cols += f"{'':>8}"
            cols += f"{pred_eager['step_time_s']:8.3f}"
            if ok(eager):
                cols += f"{pct(pred_eager['step_time_s'], eager['step_seconds_median']):>8}"
                eager_errors.append(pred_eager["step_time_s"] / eager["step_seconds_median"] - 1)
            else:
                cols += f"{'':>8}"
            fits = pred[True]["fits"]
            if ok(eager):
                used = eager["device_used_bytes"] / GIB
                mem = pred[True]["peak_memory_bytes"] / GIB
                mem_errors.append(mem / used - 1)
                cols += f"   {used:6.1f} / {mem:6.1f} {pct(mem, used)}"
                fit_agree += fits
            elif eager is not None:
                cols += f"   out of memory / {'fits (wrong)' if fits else 'does not fit'}"
                fit_agree += not fits
            print(cols)

    def summary(errors):
        if not errors:
            return "no cases"
        mean = sum(abs(e) for e in errors) / len(errors)
        bias = sum(errors) / len(errors)
        worst = max(errors, key=abs)
        return (f"mean abs error {100 * mean:.1f}%, mean {100 * bias:+.1f}%, "
                f"worst {100 * worst:+.1f}% ({len(errors)} cases)")

    print(f"\nstep time vs Megatron's kernels, stated assumptions:  {summary(time_errors[False])}")
    print(f"step time vs Megatron's kernels, measured profile:    {summary(time_errors[True])}")
    print(f"step time one op at a time, --kernels eager, profile: {summary(eager_errors)}")
    print(f"peak memory vs the unfused twin:                      {summary(mem_errors)}")
    print(f"fits / does not fit as on the device: {fit_agree} of "
          f"{sum(1 for r in by_config.values() if 'none' in r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
