#!/usr/bin/python3
"""The planner against the published SC'21 Table 1 configurations, and its
speed. For each model the planner searches the same cluster and global batch;
the published configuration is simulated with the same cost model; the
benchmark prints both side by side and their ratio (>= 1 means the planner's
plan is predicted at least as fast). Then planning time for GPT-3 175B on
1,024 A100 and Llama-3 405B on 16,384 H100.

    bench/planner.py [--build build] [--shared ../shared]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validate import gpt_model, strategy_of, cluster_for, ROOT  # noqa: E402


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        return None, proc.stderr.strip()
    return json.loads(proc.stdout), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    args = ap.parse_args()
    orrery = os.path.join(args.build, "bin", "orrery")
    data = json.load(open(os.path.join(args.shared, "validation", "published_runs.json")))
    print(f"{'case':18} {'published (tp,pp,dp,mbs)':>26} {'s':>8}   {'planner (tp,pp,dp,mbs)':>24} {'s':>8} {'ratio':>6}")
    for case in data["cases"]:
        if case["group"] != "SC21_Table1_weak_scaling":
            continue
        model = gpt_model(args.build, case["model"])
        cluster = cluster_for(args.build, case)
        pub, e1 = run([orrery, "simulate", model, "--cluster", cluster,
                       "--strategy", strategy_of(case), "--json"])
        plan, e2 = run([orrery, "plan", model, "--cluster", cluster, "--global-batch",
                        str(case["training"]["global_batch"]), "--precision", "fp16",
                        "--json", "--quiet", "--top", "1"])
        p = case["parallel"]
        published = f"({p['tp']},{p['pp']},{p['dp']},{case['training']['micro_batch']})"
        if pub is None or plan is None:
            print(f"{case['id']:18} {published:>26}  cannot compare: {e1 or e2}")
            continue
        s = plan["strategy"]
        chosen = f"({s['tp']},{s['pp']},{s['dp']},{s['micro_batch_size_samples']})"
        t_pub, t_plan = pub["step_time_s"], plan["predicted"]["step_time_s"]
        print(f"{case['id']:18} {published:>26} {t_pub:8.2f}   {chosen:>24} {t_plan:8.2f} {t_pub / t_plan:6.2f}")
    print()
    for name, cluster, gbs in (("gpt3-175b", "128x8xA100-80G", 1536),
                               ("llama3-405b", "2048x8xH100-SXM", 2048)):
        start = time.time()
        # One search (--framework none): the default (any) searches again
        # when the fastest plan runs on no export target.
        plan, err = run([orrery, "plan", name, "--cluster", cluster, "--global-batch", str(gbs),
                         "--framework", "none", "--json", "--quiet"])
        wall = time.time() - start
        if plan is None:
            print(f"{name} on {cluster}: {err}")
            continue
        priced = plan["search"]["candidates_priced"]
        print(f"planning {name} on {cluster} (gbs {gbs}): {wall:.2f} s wall for the whole command "
              f"(import, outlining, search), {priced} candidates priced; best "
              f"{plan['strategy']['cli']} at {plan['predicted']['step_time_s']:.2f} s/step")
    fabric_tiers(orrery, args.build)
    rack_moe(orrery)
    phases(orrery)
    return 0


def rack_moe(orrery):
    """DeepSeek-V3 on Blackwell racks (issue 39): training planned on four
    GB200 NVL72 racks (288 GPUs, gbs 4096) and serving planned on one, with
    the wall time of each whole command and where the plan's groups sit."""
    start = time.time()
    proc = subprocess.run([orrery, "plan", "deepseek-v3", "--cluster", "4xGB200-NVL72",
                           "--global-batch", "4096", "--explain", "--quiet"],
                          capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode:
        print(f"deepseek-v3 training on 4xGB200-NVL72: {proc.stderr.strip()}")
    else:
        lines = proc.stdout.splitlines()
        best = next((l for l in lines if l.startswith("best plan")), "")
        groups = next((l.strip() for l in lines if l.strip().startswith("groups:")), "")
        print(f"\nplanning deepseek-v3 training on 4xGB200-NVL72 (gbs 4096): {wall:.2f} s wall\n"
              f"  {best}\n  {groups}")
    start = time.time()
    serve = subprocess.run([orrery, "serve", "deepseek-v3", "--cluster", "1xGB200-NVL72",
                            "--engine", "trtllm", "--precision", "nvfp4", "--kv-cache", "fp8",
                            "--workload", "isl=1024,osl=1024,requests=3000,offline", "--json"],
                           capture_output=True, text=True)
    wall = time.time() - start
    if serve.returncode:
        print(f"deepseek-v3 serving on 1xGB200-NVL72: {serve.stderr.strip()}")
        return
    chosen = json.loads(serve.stdout)["chosen"]
    print(f"planning deepseek-v3 serving on 1xGB200-NVL72 (trtllm, nvfp4, 1024/1024): "
          f"{wall:.2f} s wall; chosen tp={chosen['tp']} ep={chosen['ep']} "
          f"adp={int(chosen.get('attention_dp', False))} pp={chosen['pp']} x{chosen['replicas']}, "
          f"{chosen['metrics']['output_throughput_tok_per_s']:.0f} output tok/s")


def phases(orrery):
    """Where the planning time goes (`orrery plan --timings`): CPU seconds
    per phase and the steps simulated, for the two problems above (one
    search, --framework none) and a heterogeneous one (GPT-3 6.7B on 256
    H100 + 256 A100 + 256 V100)."""
    three = os.path.join(ROOT, "bench", "clusters", "3x256.json")
    for name, cluster, gbs in (("gpt3-175b", "128x8xA100-80G", 1536),
                               ("llama3-405b", "2048x8xH100-SXM", 2048),
                               ("gpt3-6.7b", three, 512)):
        proc = subprocess.run([orrery, "plan", name, "--cluster", cluster, "--global-batch",
                               str(gbs), "--framework", "none", "--quiet", "--timings"],
                              capture_output=True, text=True)
        print(f"\n{name} on {cluster}:")
        print(proc.stderr.rstrip() if proc.returncode == 0 else f"  failed: {proc.stderr.strip()}")


def cpu_seconds(cmd):
    """CPU seconds of one process and its JSON output."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage, (json.loads(out) if proc.returncode == 0 else None), err.strip()


def fabric_tiers(orrery, build):
    """Planning with the fabric's tiers (docs/cluster.md) against the same
    nodes on one non-blocking network, in one run: Meta's RoCE design
    (AI zones of 3,072 GPUs joined at 1:7) under GPT-3 175B on 1,024 A100
    and Llama-3 405B on 16,384 H100. An oversubscribed tier adds the
    placement with data parallelism outermost to every pipelined
    candidate."""
    work = os.path.join(build, "bench-planner")
    os.makedirs(work, exist_ok=True)
    print()
    for name, nodes, device, nic, gbs in (("gpt3-175b", 128, "A100-80G", "IB-HDR", 1536),
                                          ("llama3-405b", 2048, "H100-SXM", "RoCE-400G", 2048)):
        seconds = {}
        for fabric in ("meta-roce-llama3", None):
            site = {"name": "dc", "nodes": [{"count": nodes, "device": device,
                                             "devices_per_node": 8,
                                             "nic": {"link": nic, "count": 8}}]}
            if fabric:
                site["fabric"] = fabric
            path = os.path.join(work, f"{name}-{fabric or 'flat'}.json")
            with open(path, "w") as f:
                json.dump({"name": f"{nodes} x 8 {device}", "sites": [site]}, f)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            after, plan, err = cpu_seconds([orrery, "plan", name, "--cluster", path,
                                            "--global-batch", str(gbs), "--framework", "none",
                                            "--json", "--quiet"])
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            if plan is None:
                print(f"planning {name} ({fabric or 'no tiers'}): {err}")
                break
            seconds[fabric] = cpu
            print(f"planning {name} on {nodes * 8} {device}, {fabric or 'no tiers'}: "
                  f"{cpu:.2f} CPU s, {plan['search']['candidates_priced']} candidates priced; "
                  f"best {plan['strategy']['cli']} at {plan['predicted']['step_time_s']:.3f} s/step")
        if len(seconds) == 2:
            print(f"  with tiers / without: {seconds['meta-roce-llama3'] / seconds[None]:.2f}x CPU time")


if __name__ == "__main__":
    sys.exit(main())
