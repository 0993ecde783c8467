#!/usr/bin/env python3
"""What calling Orrery from Python costs against the `orrery` command, on
the same problems (the planning benchmark's GPT-3 175B on 1,024 A100 and a
GPT-3 1.3B on 16 A100): for each, the median wall time of

  cli          `orrery plan MODEL --cluster C --global-batch N --json`
               (a process: start, import, search, JSON)
  py load+plan orrery.load + orrery.plan in one process (the same work,
               without the process start)
  py plan      orrery.plan on a model loaded once (a notebook's sweep)

and the JSON bytes compared. Run it with the Python that has the wheel
(scripts/python-test.sh leaves one in build/python-test):

    build/python-test/bin/python bench/python_overhead.py [--build build] [--runs 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import orrery

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBLEMS = (("gpt3-1.3b", "2x8xA100-80G", 512), ("gpt3-175b", "128x8xA100-80G", 1536))


def median_s(fn, runs):
    times = []
    out = None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    cli = os.path.join(args.build, "bin", "orrery")
    print(f"{'problem':34} {'cli s':>8} {'py load+plan s':>15} {'py plan s':>10} {'py/cli':>7}  same bytes")
    for model, cluster, gbs in PROBLEMS:
        # A file path: the JSON records the model as named, and a built-in
        # name resolves to the build's copy for the CLI and the wheel's here.
        path = os.path.join(os.path.dirname(orrery.__file__), "models", model + ".onnx")
        cmd = [cli, "plan", path, "--cluster", cluster, "--global-batch", str(gbs), "--json", "--quiet"]
        t_cli, cli_out = median_s(lambda: subprocess.run(cmd, capture_output=True, text=True, check=True).stdout,
                                  args.runs)
        c = orrery.Cluster.preset(cluster)
        t_py, p = median_s(lambda: orrery.plan(orrery.load(path), c, gbs), args.runs)
        m = orrery.load(path)
        t_plan, _ = median_s(lambda: orrery.plan(m, c, gbs), args.runs)
        same = p.to_json() == cli_out
        print(f"{model + ' on ' + cluster:34} {t_cli:8.3f} {t_py:15.3f} {t_plan:10.3f} {t_py / t_cli:7.2f}  {same}")
        if not same:
            print("python_overhead: the plans differ", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
