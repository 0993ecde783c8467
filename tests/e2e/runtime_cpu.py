#!/usr/bin/env python3
"""The CPU backend end to end: plans for 2 CPU ranks (tp, 1F1B, interleaved,
ZB-H1, ZB-V, DualPipeV, ZeRO-1, two pools) run under `orrery run --local 2`, under mpirun, and under torchrun's variables set by hand; each
reports measured against predicted. A killed rank stops the other with one
line naming it; a plan for GPUs is refused on the CPU backend.

Asserts behaviour (it runs, it reports, it stops), never a speed: the
figures are bench/runtime_cpu.py's."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clusters", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    failures = []

    def orrery(*a, env=None, check=True):
        p = subprocess.run([args.orrery, *a], capture_output=True, text=True,
                           env=env, timeout=300)
        if check and p.returncode != 0:
            failures.append(f"orrery {' '.join(a)}: exit {p.returncode}: "
                            f"{p.stderr.strip()}")
        return p

    def plan(name, strategy=None, cluster="2xCPU", batch=8):
        path = os.path.join(args.workdir, name + ".json")
        cmd = ["plan", args.model, "--cluster", cluster, "--quiet", "-o", path]
        cmd += ["--strategy", strategy] if strategy else ["--global-batch",
                                                          str(batch)]
        orrery(*cmd)
        return path

    def check_report(what, text, ranks=2):
        try:
            r = json.loads(text)
        except ValueError:
            failures.append(f"{what}: not JSON: {text[:200]}")
            return
        ok = (r["ranks"] == ranks and len(r["per_rank"]) == ranks and
              r["measured"]["step_time_s"]["median"] > 0 and
              r["predicted"]["step_time_s"] > 0 and
              all(len(x["step_time_s"]) == r["steps"] for x in r["per_rank"]) and
              all(x["peak_memory_bytes"] > 0 for x in r["per_rank"]))
        if not ok:
            failures.append(f"{what}: incomplete report {json.dumps(r)[:300]}")
        print(f"{what}: measured {r['measured']['step_time_s']['median']*1e3:.2f} ms, "
              f"predicted {r['predicted']['step_time_s']*1e3:.2f} ms")

    # Two CPU ranks whose node states host memory: activation offload's
    # copies run (host memory to host memory here).
    host_cluster = os.path.join(args.workdir, "cpu2-host.json")
    with open(host_cluster, "w") as f:
        json.dump({"name": "2xCPU with host memory",
                   "sites": [{"name": "here", "nodes": [{
                       "count": 1, "device": "CPU", "devices_per_node": 2,
                       "host_memory_bytes": 8e9,
                       "host_memory_bandwidth_bytes_per_s": 10e9}]}]}, f)
    plans = {
        "tp2": plan("tp2", "tp=2,mbs=2,gbs=8"),
        "pp2-offload": plan("pp2-offload", "pp=2,mbs=1,gbs=8,offload=activations",
                            cluster=host_cluster),
        "dp2-host-adam": plan("dp2-host-adam", "dp=2,mbs=2,gbs=8,zero=1,offload=optimizer",
                              cluster=host_cluster),
        "pp2-1f1b": plan("pp2-1f1b", "pp=2,mbs=1,gbs=8"),
        "pp2-interleaved": plan("pp2-int", "pp=2,vpp=2,schedule=interleaved,mbs=1,gbs=8"),
        # Weight gradients deferred (W tasks), and the V schedules: each
        # stage sends to and receives from its neighbour both ways.
        "pp2-zb-h1": plan("pp2-zbh1", "pp=2,schedule=zb-h1,mbs=1,gbs=8"),
        "pp2-zb-v": plan("pp2-zbv", "pp=2,schedule=zb-v,mbs=1,gbs=8"),
        "pp2-dualpipev": plan("pp2-dpv", "pp=2,schedule=dualpipev,mbs=1,gbs=8"),
        "dp2-zero1": plan("dp2-zero1", "dp=2,mbs=2,gbs=8,zero=1"),
        "hetero-two-pools": plan("hetero", None,
                                 os.path.join(args.clusters, "two-cpu-pools.json")),
    }
    for name, path in plans.items():
        p = orrery("run", path, "--local", "2", "--steps", "2", "--json")
        if p.returncode == 0:
            check_report(f"--local 2 {name}", p.stdout)
            # The measured step beside the prediction in the HTML report.
            run_json = os.path.join(args.workdir, name + "-run.json")
            with open(run_json, "w") as f:
                f.write(p.stdout)
            html = os.path.join(args.workdir, name + "-report.html")
            r = orrery("report", path, "--measured", run_json, "-o", html)
            if r.returncode == 0:
                text = open(html).read()
                if "Measured: one step, rank by rank" not in text or \
                        "measured step" not in text or "rank 1 (group" not in text:
                    failures.append(f"report --measured {name}: no measured timeline")

    # Four ranks, each lowering only its own program and its peers' (a tp
    # group, a pipeline link; a context-parallel ring and a dp group): the
    # communicators are named by their members, not by a whole set.
    for name, strategy in (("tp2-pp2", "tp=2,pp=2,mbs=1,gbs=8"),
                           ("cp2-dp2", "cp=2,dp=2,mbs=1,gbs=8,zero=1")):
        path = plan(name, strategy, cluster="4xCPU")
        p = orrery("run", path, "--local", "4", "--steps", "2", "--json")
        if p.returncode == 0:
            check_report(f"--local 4 {name}", p.stdout, ranks=4)

    # Under mpirun (Open MPI from Debian), and under torchrun's variables.
    mpirun = shutil.which("mpirun")
    if not mpirun:
        failures.append("mpirun not found (scripts/setup.sh installs openmpi-bin)")
    else:
        for name in plans:
            p = subprocess.run(
                [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                 "-x", f"MASTER_PORT={free_port()}", "-x", "OPENBLAS_NUM_THREADS=1",
                 args.orrery, "run", plans[name], "--steps", "2", "--json"],
                capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                failures.append(f"mpirun {name}: exit {p.returncode}: {p.stderr.strip()}")
            else:
                check_report(f"mpirun -np 2 {name}", p.stdout)

    def by_hand(path, extra=(), kill_rank=None):
        port = free_port()
        procs = []
        for r in range(2):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       OPENBLAS_NUM_THREADS="1")
            procs.append(subprocess.Popen(
                [args.orrery, "run", path, *extra], env=env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        return procs

    for name in plans:
        procs = by_hand(plans[name], ["--steps", "2", "--json"])
        outs = [p.communicate(timeout=300) for p in procs]
        if any(p.returncode for p in procs):
            failures.append(f"torchrun variables {name}: exits "
                            f"{[p.returncode for p in procs]}: {outs[0][1]} {outs[1][1]}")
        else:
            check_report(f"RANK/WORLD_SIZE by hand {name}", outs[0][0])

    # A rank killed mid-run: the other stops within the timeout, one line
    # naming it.
    procs = by_hand(plans["pp2-1f1b"], ["--steps", "100000", "--timeout", "20"])

    def cpu_seconds(pid):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0
    # Both ranks are in their steps once rank 0 has computed a while (the
    # step barrier needs both); a loaded machine only takes longer.
    start = time.time()
    while cpu_seconds(procs[0].pid) < 1.5 and time.time() - start < 120 and \
            procs[0].poll() is None:
        time.sleep(0.1)
    procs[1].kill()
    killed_at = time.time()
    try:
        _, err = procs[0].communicate(timeout=30)
        waited = time.time() - killed_at
        lines = [l for l in err.splitlines() if l.strip()]
        if procs[0].returncode != 1 or len(lines) != 1 or \
                not lines[0].startswith("orrery: error: rank 0: lost rank 1"):
            failures.append(f"lost rank: exit {procs[0].returncode}, stderr {err!r}")
        else:
            print(f"lost rank: rank 0 stopped {waited:.2f} s after rank 1 was killed: {lines[0][:100]}")
    except subprocess.TimeoutExpired:
        procs[0].kill()
        failures.append("lost rank: rank 0 did not stop within 30 s of rank 1's death")
    procs[1].communicate()

    # A plan for GPUs on the CPU backend: one line naming both device types.
    gpu = plan("gpu", "dp=2,mbs=1,gbs=2", cluster="2xA100-80G")
    p = orrery("run", gpu, "--local", "2", "--backend", "cpu", check=False)
    if p.returncode != 1 or "A100-80G" not in p.stderr or "CPU" not in p.stderr:
        failures.append(f"GPU plan on the CPU backend: exit {p.returncode}, {p.stderr!r}")
    # A measured run that is not one.
    bad = os.path.join(args.workdir, "not-a-run.json")
    with open(bad, "w") as f:
        f.write("{}")
    p = orrery("report", plans["tp2"], "--measured", bad, "-o",
               os.path.join(args.workdir, "x.html"), check=False)
    if p.returncode != 1 or p.stderr.count("\n") != 1 or \
            "--measured" not in p.stderr or "per_rank: missing" not in p.stderr:
        failures.append(f"report --measured of a bad file: exit {p.returncode}, {p.stderr!r}")
    # --local with the wrong rank count.
    p = orrery("run", plans["tp2"], "--local", "3", check=False)
    if p.returncode != 1 or "--local 3: the plan has 2 ranks" not in p.stderr:
        failures.append(f"--local 3: exit {p.returncode}, {p.stderr!r}")

    for f in failures:
        print("FAIL:", f)
    print("runtime-cpu:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
