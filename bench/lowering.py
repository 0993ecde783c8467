#!/usr/bin/python3
"""What a rank pays to start: lowering a plan into programs at 1,024 and
16,384 ranks (docs/runtime.md, "Lowering at scale").

Each rank of `orrery run` lowers only its own program and the peers' it must
match (their sends, the next member of each of its groups) and checks
itself against them; `orrery lower` without --local-check lowers every
rank and checks the whole set, deadlock included (the offline check). For
GPT-3 175B on 1,024 A100 (Megatron-LM's published tp 8, pp 16, dp 8, and
the planner's own fastest plan, ZB-V with activation offload) and Llama-3 405B on 16,384 H100 (Llama 3's published tp 8, pp 16, dp 128) the
plan is lowered both ways where the machine allows; the benchmark prints
CPU seconds and peak resident memory of each process, and their ratio in
one run. The whole set at 16,384 ranks is not run unless --whole-at-scale
is given (it needs more memory than this machine's 24 GiB: its figure at
1,024 ranks times 16 is printed as the estimate).

    bench/lowering.py [--build build] [--whole-at-scale]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(cmd):
    """CPU seconds and peak RSS (GiB) of one process, and its output."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        err.seek(0)
        text, problem = out.read().decode(), err.read().decode().strip()
    code = os.waitstatus_to_exitcode(status)
    if code:
        return None, None, problem or f"exit {code}"
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20, text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--whole-at-scale", action="store_true",
                    help="also lower every rank of the 16,384-rank plan")
    ap.add_argument("--skip-whole", action="store_true",
                    help="do not lower every rank of the 1,024-rank plan either")
    args = ap.parse_args()
    orrery = os.path.join(args.build, "bin", "orrery")
    work = os.path.join(args.build, "bench-lowering")
    os.makedirs(work, exist_ok=True)
    cases = (("gpt3-175b", "128x8xA100-80G",
              "tp=8,pp=16,dp=8,mbs=1,gbs=1536,schedule=interleaved,vpp=2", not args.skip_whole),
             # The planner's own fastest plan (ZB-V, activation offload).
             ("gpt3-175b", "128x8xA100-80G", None, False),
             ("llama3-405b", "2048x8xH100-SXM",
              "tp=8,sp=1,pp=16,dp=128,mbs=1,gbs=2048,schedule=interleaved,vpp=2,"
              "zero=1,recompute=full",
              args.whole_at_scale))
    whole_per_rank = None
    for i, (name, cluster, strategy, whole) in enumerate(cases):
        plan = os.path.join(work, f"{name}-{i}.json")
        how = ["--strategy", strategy] if strategy else [
            "--global-batch", "1536", "--framework", "none"]
        proc = subprocess.run([orrery, "plan", name, "--cluster", cluster, *how,
                               "--json", "--quiet"], capture_output=True, text=True)
        if proc.returncode:
            print(f"{name} on {cluster}: {proc.stderr.strip()}")
            continue
        doc = json.loads(proc.stdout)
        with open(plan, "w") as f:
            f.write(proc.stdout)
        s = doc["strategy"]
        world = s["tp"] * s["pp"] * s["dp"] * s.get("cp", 1)
        print(f"{name} on {cluster}: {s['cli']} ({world} ranks)")
        last = world - 1
        per_rank = []
        for rank in (0, world // 2, last):
            cpu, rss, text = measure([orrery, "lower", plan, "--rank", str(rank),
                                      "--local-check", "--summary"])
            if cpu is None:
                print(f"  rank {rank}: {text}")
                continue
            peers = text.split(" peers it matches")[0].rsplit(" ", 1)[-1]
            per_rank.append((cpu, rss))
            print(f"  one rank, --local-check: rank {rank:5d} with {peers} peers: "
                  f"{cpu:6.2f} CPU s, {rss:6.2f} GiB peak")
        if not per_rank:
            continue
        cpu1 = max(c for c, _ in per_rank)
        rss1 = max(r for _, r in per_rank)
        if whole:
            cpu, rss, text = measure([orrery, "lower", plan, "--rank", "0", "--summary"])
            if cpu is None:
                print(f"  every rank, whole-set check: {text}")
                continue
            print(f"  every rank, whole-set check: {cpu:6.2f} CPU s, {rss:6.2f} GiB peak "
                  f"(what each rank lowered before)")
            print(f"  ratio whole / one rank: {cpu / cpu1:.0f}x CPU time, "
                  f"{rss / rss1:.1f}x memory")
            whole_per_rank = (cpu / world, rss / world, world)
        elif whole_per_rank and world > whole_per_rank[2]:
            c, r, w = whole_per_rank
            print(f"  every rank, whole-set check: not run (estimate from {w} ranks, "
                  f"linear in ranks: {c * world:.0f} CPU s, {r * world:.0f} GiB); "
                  f"ratio to one rank about {c * world / cpu1:.0f}x time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
