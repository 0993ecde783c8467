#!/usr/bin/python3
"""Planning speed of two builds side by side, in one run: CPU seconds of the
whole `orrery plan` process (user + system) for GPT-3 175B on 1,024 A100 and
Llama-3 405B on 16,384 H100 (bench/planner.py's problems), interleaved pairs
so that a noisy machine slows both alike; the least of each and their ratio.
Also checks that both builds print the same plans (the JSON but for the
search's counts, which a tighter bound lowers; both are printed).

    bench/planner_ratio.py --base BUILD_A --head BUILD_B [--pairs 5]
        [--base-args "--framework none"] [--head-args "--framework none"]

Builds from 2026-12-05 on default to `--framework any` (a second search
where the fastest plan runs on no target); give `--framework none` to the
newer side to compare one search with an older build's default.
"""
import shlex
import argparse
import json
import os
import resource
import subprocess
import sys

PROBLEMS = [("gpt3-175b", "128x8xA100-80G", "1536"),
            ("llama3-405b", "2048x8xH100-SXM", "2048")]


def timed(orrery, model, cluster, gbs, extra=()):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([orrery, "plan", model, "--cluster", cluster, "--global-batch", gbs,
                        "--json", "--quiet", *extra], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit("planner_ratio: %s: %s" % (orrery, p.stderr.strip()))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    plan = json.loads(p.stdout)
    # The plans, not how many candidates each build priced to find them (a
    # tighter bound prices fewer).
    search = plan.pop("search", {})
    counts = (search.get("candidates_priced", 0), search.get("candidates_pruned", 0))
    return cpu, json.dumps(plan, sort_keys=True), counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="a build directory (with bin/orrery)")
    ap.add_argument("--head", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--base-args", default="", help="more `orrery plan` arguments for the base")
    ap.add_argument("--head-args", default="", help="more `orrery plan` arguments for the head")
    args = ap.parse_args()
    exes = [os.path.join(b, "bin", "orrery") for b in (args.base, args.head)]
    extras = [shlex.split(args.base_args), shlex.split(args.head_args)]
    same = True
    print(f"{'problem':36} {'base CPU s':>10} {'head CPU s':>10} {'head/base':>9}"
          f"   priced/pruned base -> head")
    for model, cluster, gbs in PROBLEMS:
        best = [float("inf"), float("inf")]
        plans = [None, None]
        counts = [None, None]
        for _ in range(args.pairs):
            for i, exe in enumerate(exes):
                cpu, plan, counted = timed(exe, model, cluster, gbs, extras[i])
                best[i] = min(best[i], cpu)
                plans[i], counts[i] = plan, counted
        same &= plans[0] == plans[1]
        name = f"{model} / {cluster}"
        print(f"{name:36} {best[0]:10.3f} {best[1]:10.3f} {best[1] / best[0]:9.3f}"
              f"   {counts[0][0]}/{counts[0][1]} -> {counts[1][0]}/{counts[1][1]}")
    print("same plans (all but the search's counts):", "yes" if same else "NO")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
