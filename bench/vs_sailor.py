#!/usr/bin/python3
"""Planning speed against Sailor's planner (Strati et al., SOSP'25;
github.com/eth-easl/sailor), issue #43: CPU seconds of the whole planning
process (user + system of the child) on three problems, interleaved pairs so
that a noisy machine slows both alike; the least of each and their ratio.

    bench/vs_sailor.py --sailor PATH [--orrery BUILD/bin/orrery] [--pairs 5]
        [--sailor-lib FILE] [--sailor-python PYTHON]
        [--orrery-args "--precision tf32"]
        [--work DIR]

PATH is a checkout of eth-easl/sailor (the directory holding sailor/Planner;
its parent, the SAILOR_PATH of Sailor's own scripts, is accepted too) with
Sailor's C++ planner built as libplanner*.so (docs/sailor-comparison.md says
how). Sailor runs in its published configuration (ae_scripts/planner/
run_*.sh -> simulator.py --planner SAILOR): its profiles of OPT-350 and
GPT-Neo-2.7 on A100-40 and V100-16, training_config_opt_350.json /
training_config_gpt_neo27.json, dummy_quotas_dict.json, the measured GCP
network (multizone_bandwidths_het.json), objective throughput, fp16 off, one
zone (us-central1-a). Each run is a fresh process that constructs the
planner and asks for its sorted plans, as simulator.py does for one row of a
GPU trace; it does not rebuild the library (SailorPlanner.__init__ runs
`make clean && make` first) nor import torch, pandas and the baselines
(simulator.py's imports), which are no part of planning.

Orrery plans the same models from its built-ins with the same layer
dimensions (gpt3-350m: 24 layers, hidden 1024, 16 heads, seq 2048, as
OPT-350M; gpt3-2.7b: 32 layers, hidden 2560, seq 2048, as GPT-Neo-2.7B) on
the same devices in nodes of four with one 50 Gb/s NIC a node (Sailor's GCP
a2-highgpu-4g and n1 + 4 V100 VMs; its measured node-to-node bandwidth is
about 6 GB/s), in tf32 by default (--orrery-args): Sailor's published runs
train in fp32 (fp16 off; its profiles were taken without --fp16, the A100's
above its fp32 peak, so in TF32), which is TF32 tensor cores on the A100s
and the fp32 rate on the V100s, as Orrery prices tf32 (docs/costmodel.md).

Only the Python standard library; the Sailor side needs only its built
libplanner (pybind11), run by --sailor-python (default: this interpreter).
"""
import argparse
import glob
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile

ZONE = "us-central1-a"

# (name, Sailor model and training config, Sailor's GPUs by type,
#  Orrery model, Orrery's node groups (device, nodes of 4), global batch)
PROBLEMS = [
    ("OPT-350M / 256 A100-40G",
     "OPT-350", "training_config_opt_350.json", {"A100-40": 256},
     "gpt3-350m", [("A100-40G", 64)], 1024),
    ("OPT-350M / 256 A100-40G + 256 V100-16G",
     "OPT-350", "training_config_opt_350.json", {"A100-40": 256, "V100-16": 256},
     "gpt3-350m", [("A100-40G", 64), ("V100-16G", 64)], 1024),
    # 2,048: the global batch of Sailor's published GPT-Neo-2.7 config.
    ("GPT-Neo-2.7B / 256 A100-40G + 256 V100-16G",
     "GPT-Neo-2.7", "training_config_gpt_neo27.json", {"A100-40": 256, "V100-16": 256},
     "gpt3-2.7b", [("A100-40G", 64), ("V100-16G", 64)], 2048),
]

# Run by --sailor-python in a fresh process per plan: what simulator.py
# does with --planner SAILOR for one trace row (cpp_src/planner.py's
# SailorPlanner without its rebuild), its CPU split written to RESULT.
DRIVER = r'''
import importlib.machinery, importlib.util, json, sys, time
lib, sailor, profiles, training, quotas, cluster, result = sys.argv[1:8]
loader = importlib.machinery.ExtensionFileLoader("libplanner", lib)
spec = importlib.util.spec_from_file_location("libplanner", lib, loader=loader)
libplanner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(libplanner)
if cluster == "--import-only":
    sys.exit(0)
t0 = time.process_time()
with open(quotas) as f:
    available_gpus = sorted(json.load(f))
planner = libplanner.SailorPlanner(
    profiles, sailor + "/providers/multizone_bandwidths_het.json", training,
    sailor + "/Planner/llm_info.json", sailor + "/providers/gcp/communication_cost.json",
    True, False, quotas, "throughput")
t1 = time.process_time()
max_gpus_per_zone = {}
for key, count in json.loads(cluster).items():
    gpu_type, zone = key.split("_", 1)
    max_gpus_per_zone.setdefault(zone, {})[gpu_type] = count
configs = planner.get_sorted_plans(max_gpus_per_zone, 0.0, 0.0)
plans = []
for config in configs:
    zones = config.get_zones()
    stages = [[(available_gpus[g], tp, zones[z]) for g, tp, z in stage]
              for stage in config.get_config_per_stage()]
    plans.append({"iter_time": config.get_Tpp(), "mbs": config.get_mbs(),
                  "layers_per_stage": [len(s) for s in config.get_stages()],
                  "stages": stages})
t2 = time.process_time()
with open(result, "w") as f:
    json.dump({"construct_cpu_s": t1 - t0, "search_cpu_s": t2 - t1,
               "plans": len(plans), "best": plans[0] if plans else None}, f)
'''


def fail(msg):
    sys.exit("vs_sailor: " + msg)


def cpu_of(cmd, **kw):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def last_line(text):
    """The exception a traceback ends in, else the last line."""
    lines = [l.strip() for l in (text or "").strip().splitlines() if l.strip()]
    errors = [l for l in lines if re.match(r"\w+(Error|Exception)\b", l)]
    return (errors or lines or ["no output"])[-1]


class Sailor:
    def __init__(self, path, lib, python, work):
        for root in (path, os.path.join(path, "sailor")):
            if os.path.isdir(os.path.join(root, "sailor", "Planner", "sailor_planner")):
                break
        else:
            fail(f"cannot run Sailor's planner: no sailor/Planner/sailor_planner under {path} "
                 "(give a checkout of github.com/eth-easl/sailor)")
        self.src = os.path.join(os.path.abspath(root), "sailor")
        if lib is None:
            found = []
            for d in ("Planner/simulations", "Planner/sailor_planner/cpp_src"):
                found += sorted(glob.glob(os.path.join(self.src, d, "libplanner*.so")))
            if not found:
                fail("cannot run Sailor's planner: no libplanner*.so in "
                     f"{self.src}/Planner/sailor_planner/cpp_src or .../simulations: build it "
                     "(docs/sailor-comparison.md) or give --sailor-lib")
            lib = found[0]
        elif not os.path.isfile(lib):
            fail(f"cannot run Sailor's planner: no file {lib}")
        self.lib, self.python, self.work = os.path.abspath(lib), python, work
        self.quotas = os.path.join(self.src, "Planner/sailor_planner/dummy_quotas_dict.json")
        need = [self.quotas, os.path.join(self.src, "Planner/llm_info.json"),
                os.path.join(self.src, "providers/multizone_bandwidths_het.json"),
                os.path.join(self.src, "providers/gcp/communication_cost.json")]
        for _, model, config, gpus, *_ in PROBLEMS:
            need.append(os.path.join(self.src, "Planner/simulations/configs", config))
            need += [os.path.join(self.src, "Planner/sailor_planner/profiles", model, g, "profile.json")
                     for g in gpus]
        for f in need:
            if not os.path.isfile(f):
                fail(f"cannot run Sailor's planner: {f} is missing")
        self.driver = os.path.join(work, "sailor_driver.py")
        with open(self.driver, "w") as f:
            f.write(DRIVER)
        p = subprocess.run([python, self.driver, self.lib, self.src, "", "", "", "--import-only", ""],
                           capture_output=True, text=True)
        if p.returncode:
            fail(f"cannot run Sailor's planner: {python} cannot load {self.lib}: "
                 + last_line(p.stderr))

    def inputs(self, index, model, config, gbs):
        """The published training config, its global batch set to the problem's."""
        with open(os.path.join(self.src, "Planner/simulations/configs", config)) as f:
            training = json.load(f)
        training["global_batch_size"] = gbs
        path = os.path.join(self.work, f"sailor_training_{index}.json")
        with open(path, "w") as f:
            json.dump(training, f, indent=1)
        return path

    def plan(self, index, model, training, gpus):
        cluster = json.dumps({f"{g}_{ZONE}": n for g, n in gpus.items()})
        result = os.path.join(self.work, f"sailor_result_{index}.json")
        log = os.path.join(self.work, f"sailor_stdout_{index}.txt")
        if os.path.exists(result):
            os.remove(result)
        profiles = os.path.join(self.src, "Planner/sailor_planner/profiles", model) + "/"
        with open(log, "w") as out:
            p, cpu = cpu_of([self.python, self.driver, self.lib, self.src, profiles, training,
                             self.quotas, cluster, result],
                            stdout=out, stderr=subprocess.PIPE, text=True)
        if p.returncode or not os.path.exists(result):
            fail(f"Sailor's planner failed on problem {index + 1} (exit {p.returncode}, "
                 f"stdout in {log}): " + last_line(p.stderr))
        with open(result) as f:
            return cpu, json.load(f)


def orrery_inputs(work, index, groups):
    spec = {"name": f"problem {index + 1}: nodes of 4, one 50 Gb/s NIC a node (GCP-like)",
            "sites": [{"name": ZONE, "nodes": [
                {"count": n, "device": d, "devices_per_node": 4,
                 "nic": {"link": "DCN-50G", "count": 1}} for d, n in groups]}]}
    path = os.path.join(work, f"orrery_cluster_{index}.json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return path


def orrery_plan(orrery, model, cluster, gbs, extra):
    p, cpu = cpu_of([orrery, "plan", model, "--cluster", cluster, "--global-batch", str(gbs),
                     "--json", "--quiet", *extra], capture_output=True, text=True)
    if p.returncode:
        fail(f"{orrery}: " + last_line(p.stderr))
    return cpu, json.loads(p.stdout)


def describe_orrery(plan):
    s = plan["strategy"]
    text = s.get("cli") or s.get("summary") or json.dumps(s)[:200]
    return f"{text}   (step {plan['predicted']['step_time_s']:.3f} s)"


def describe_sailor(result):
    best = result["best"]
    if not best:
        return "no plan"
    stages = []
    for layers, stage in zip(best["layers_per_stage"], best["stages"]):
        kinds = {}
        for gpu, tp, _zone in stage:
            kinds[(gpu, tp)] = kinds.get((gpu, tp), 0) + 1
        stages.append(" + ".join(f"{n}x {g} tp{tp}" for (g, tp), n in sorted(kinds.items()))
                      + f" ({layers} layers)")
    return (f"pp{len(stages)} [" + " | ".join(stages) + f"] mbs{best['mbs']}"
            f"   (estimated iteration {best['iter_time']:.3f} s)")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--sailor", required=True, help="a checkout of eth-easl/sailor, its planner built")
    ap.add_argument("--orrery", default=os.path.join(here, "..", "build", "bin", "orrery"))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--sailor-lib", help="Sailor's built libplanner*.so (default: found under --sailor)")
    ap.add_argument("--sailor-python", default=sys.executable,
                    help="the Python that loads it (its ABI: a cpython-310 build needs python3.10)")
    ap.add_argument("--orrery-args", default="--precision tf32",
                    help="more `orrery plan` arguments (default: %(default)s)")
    ap.add_argument("--work", help="where the inputs and Sailor's logs go (default: a temporary "
                                   "directory, removed afterwards)")
    args = ap.parse_args()
    orrery = os.path.abspath(args.orrery)
    if not os.access(orrery, os.X_OK):
        fail(f"no orrery binary at {orrery} (give --orrery BUILD/bin/orrery)")
    work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="vs_sailor.")
    os.makedirs(work, exist_ok=True)
    try:
        sailor = Sailor(args.sailor, args.sailor_lib, args.sailor_python, work)
        extra = shlex.split(args.orrery_args)
        print(f"Sailor: {sailor.src} ({os.path.basename(sailor.lib)}); orrery: {orrery}; "
              f"{args.pairs} pairs, least CPU s of each")
        print(f"{'problem':44} {'Sailor CPU s':>12} {'(search)':>9} {'Orrery CPU s':>12}"
              f" {'Sailor/Orrery':>13}")
        plans = []
        for i, (name, smodel, sconfig, gpus, omodel, groups, gbs) in enumerate(PROBLEMS):
            training = sailor.inputs(i, smodel, sconfig, gbs)
            cluster = orrery_inputs(work, i, groups)
            best = [float("inf"), float("inf")]
            search = float("inf")
            for _ in range(args.pairs):
                cpu, result = sailor.plan(i, smodel, training, gpus)
                if cpu < best[0]:
                    best[0], search = cpu, result["search_cpu_s"]
                cpu, oplan = orrery_plan(orrery, omodel, cluster, gbs, extra)
                best[1] = min(best[1], cpu)
            print(f"{name:44} {best[0]:12.3f} {search:9.3f} {best[1]:12.3f}"
                  f" {best[0] / max(best[1], 1e-3):13.1f}", flush=True)
            plans.append((name, describe_sailor(result), describe_orrery(oplan)))
        print("(search: the CPU s of Sailor's get_sorted_plans in its best run; the rest of "
              "its process is constructing the planner and Python)")
        for name, splan, oplan in plans:
            print(f"{name}\n  Sailor: {splan}\n  Orrery: {oplan}")
        return 0
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
