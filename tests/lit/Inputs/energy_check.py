"""The energy model (docs/costmodel.md, "Energy"): a device's power by what it
does, over the step.

    energy_check.py ORRERY INPUTS TMPDIR

1. One simulated step (gpt3-350m, pp 2 x dp 2 on 4 A100-80G): per stage the
   seconds by activity sum to the step, the power by activity is the stated
   fractions of the A100's 400 W board power (1.0, 0.7, 0.45, 0.2), and the
   step's energy is the sum over stages of devices x seconds x watts.
2. The same cluster with the idle power halved in the cluster spec: the
   energy falls by exactly the waiting seconds times the watts saved.
3. GPT-3 2.7B on 4 nodes of 8 A100-80G joined by 25 GbE: the energy
   objective picks another plan than the time objective, slower and using
   less energy (tensor-parallel collectives draw more than a bubble).
Exit 1 on any difference.
"""
import json, os, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from orrery_cli import Checks, simulate
orrery, inputs, tmp = sys.argv[1:4]
check = Checks()

def sim(cluster):
    return simulate(orrery, "gpt3-350m", cluster, "tp=1,pp=2,dp=2,mbs=2,gbs=32")

d = sim("4xA100-80G")
step = d["step_time_s"]
total = 0
for i, st in enumerate(d["stages"]):
    a, p = st["seconds_per_step_by_activity"], st["power_w_by_activity"]
    check(abs(sum(a.values()) - step) <= 1e-9 * step,
          f"stage {i}: gemm {a['gemm_s']:.4f} + memory-bound {a['memory_bound_s']:.4f} + "
          f"communication {a['communication_s']:.4f} + idle {a['idle_s']:.4f} s = step {step:.4f} s")
    want = {"gemm_w": 400, "memory_bound_w": 280, "communication_w": 180, "idle_w": 80}
    check(all(abs(p[k] - v) < 1e-9 for k, v in want.items()), f"stage {i}: power {p}")
    total += 2 * sum(a[k[:-2] + "_s"] * p[k] for k in p)   # 2 devices per stage (dp 2)
check(abs(total - d["energy_j_per_step"]) <= 1e-9 * total,
      f"energy {d['energy_j_per_step']:.1f} J = sum of devices x seconds x watts {total:.1f} J")
parts = d["energy_j_per_step_by_activity"]
check(abs(sum(parts.values()) - total) <= 1e-9 * total, f"by activity {parts}")
check(d["stages"][0]["seconds_per_step_by_activity"]["idle_s"] > 0, "a pipeline stage waits")

spec = {"name": "4 A100-80G, idle at 40 W", "sites": [{"name": "s", "nodes": [
    {"count": 1, "devices_per_node": 4, "device": "A100-80G",
     "power_w_by_activity": {"gemm_w": 400, "memory_bound_w": 280, "communication_w": 180,
                             "idle_w": 40, "source": "a test"}}]}]}
path = os.path.join(tmp, "idle40.json")
json.dump(spec, open(path, "w"))
e = sim(path)
idle = sum(2 * st["seconds_per_step_by_activity"]["idle_s"] for st in d["stages"])
check(abs(e["step_time_s"] - step) < 1e-12, "the step time does not change")
check(abs((d["energy_j_per_step"] - e["energy_j_per_step"]) - 40 * idle) <= 1e-6 * total,
      f"idle at 40 W saves {d['energy_j_per_step'] - e['energy_j_per_step']:.2f} J = 40 W x {idle:.4f} s")

def plan(objective):
    out = os.path.join(tmp, objective + ".json")
    subprocess.run([orrery, "plan", "gpt3-2.7b", "--cluster", os.path.join(inputs, "a100-25gbe.json"),
                    "--global-batch", "256", "--objective", objective, "--framework", "none",
                    "--quiet", "-o", out],
                   capture_output=True, text=True, check=True)
    j = json.load(open(out))
    return j["strategy"]["cli"], j["predicted"]["step_time_s"], j["predicted"]["energy_j_per_step"]
ts, tt, te = plan("time")
es, et, ee = plan("energy")
print(f"time objective:   {ts}: {tt:.3f} s, {te/1e3:.2f} kJ per step")
print(f"energy objective: {es}: {et:.3f} s, {ee/1e3:.2f} kJ per step")
check(ts != es and et > tt and ee < te, "the objectives pick different plans: slower, less energy")
sys.exit(1 if check.bad else 0)
