#!/usr/bin/python3
"""End-to-end: the measured kernel profiles in the catalog are what
bench/gpu/fit_profile.py derives from the committed measurements (nobody
edited a rate by hand), and the simulator, given the same model shapes,
agrees with the device on which step configurations fit in its memory
(bench/gpu/compare.py)."""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import Tally  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Catalog device -> the measurements its profile was fitted to.
MEASURED = {"H200": "bench/measured/h200-sxm-pytorch.json"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="the build directory")
    args = ap.parse_args()
    tally = Tally()
    with open(os.path.join(ROOT, "costmodel", "data", "hardware.json")) as f:
        catalog = {d["name"]: d for d in json.load(f)["devices"]}
    profiled = {name for name, d in catalog.items() if "measured_kernel_profile" in d}
    tally.record("every profiled device has its measurements", [
        f"{name} has a profile but no measurements listed here" for name in profiled - set(MEASURED)
    ], ", ".join(sorted(profiled)))
    for name, path in MEASURED.items():
        device = catalog[name]
        fit = subprocess.run(
            [sys.executable, os.path.join(ROOT, "bench", "gpu", "fit_profile.py"),
             os.path.join(ROOT, path),
             "--peak-flop-per-s", str(device["peak_flop_per_s"]["bf16"]),
             "--memory-bandwidth-bytes-per-s", str(device["memory_bandwidth_bytes_per_s"])],
            capture_output=True, text=True)
        problems = []
        if fit.returncode != 0:
            problems.append(fit.stderr.strip())
        else:
            derived = json.loads(fit.stdout)
            stated = {k: v for k, v in device["measured_kernel_profile"].items() if k != "source"}
            for key in sorted(set(derived) | set(stated)):
                if key not in stated or key not in derived or \
                        abs(stated[key] - derived[key]) > 1e-9 * max(1.0, abs(derived[key])):
                    problems.append(f"{key}: catalog {stated.get(key)}, fit {derived.get(key)}")
        tally.record(f"{name} profile = fit of {path}", problems, "identical")

        out = subprocess.run(
            [sys.executable, os.path.join(ROOT, "bench", "gpu", "compare.py"),
             os.path.join(ROOT, path), "--build", args.build],
            capture_output=True, text=True)
        problems = []
        if out.returncode != 0:
            problems.append(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
        else:
            m = re.search(r"fits / does not fit as on the device: (\d+) of (\d+)", out.stdout)
            if not m:
                problems.append("no fits line")
            elif m.group(1) != m.group(2) or m.group(2) == "0":
                problems.append(f"fits as on the device in {m.group(1)} of {m.group(2)}")
            if "measured profile:" not in out.stdout:
                problems.append("no step-time summary")
        tally.record(f"{name} simulated steps fit as measured", problems,
                     m.group(0) if not problems else "")
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
