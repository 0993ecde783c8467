"""The V schedules: ZB-V (Qi et al. §6, PyTorch's ScheduleZBVZeroBubble) and
DualPipeV (deepseek-ai/DualPipe). Exit 1 on any difference.

    v_schedules.py ORRERY TMPDIR

1. The order: ZB-V's stage 0 of pp 4 runs 2pp-1 = 7 forwards of its first
   chunk, then F B W of its second (the loss chunk: the V's turn is on the
   last stage); DualPipeV's last stage runs overlapped forward+backward
   pairs.
2. Qwen3-30B-A3B on 4 nodes of 8 H100, pp 4, ep 8 (expert all-to-alls):
   ZB-H1 beats 1F1B, ZB-V beats ZB-H1 (its V fills the bubble), DualPipeV
   beats ZB-V (its pairs hide the all-to-alls behind the other chunk's
   compute), and ZB-V keeps about 1F1B's peak of activations (within 30 %).
"""
import json, os, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from orrery_cli import Checks, simulate
orrery, tmp = sys.argv[1:3]
check = Checks()

def trace(schedule):
    path = os.path.join(tmp, schedule + ".trace.json")
    subprocess.run([orrery, "simulate", "gpt3-1.3b", "--cluster", "4xA100-80G", "--strategy",
                    "tp=1,pp=4,mbs=1,gbs=16,schedule=" + schedule, "--trace", path],
                   capture_output=True, text=True, check=True)
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"
          and e.get("cat") in ("forward", "backward", "forward+backward")]
    by = {}
    for e in sorted(ev, key=lambda e: e["ts"]):
        by.setdefault(e["tid"], []).append(e["name"])
    return by
zbv = trace("zb-v")
first = zbv[0][:10]
print("zb-v stage 0:", " ".join(first))
check(first == [f"F{i}.0" for i in range(7)] + ["F0.1", "B0.1", "W0"], "ZB-V's warm-up on stage 0")
dpv = trace("dualpipev")
pairs = [n for n in dpv[3] if "&" in n]
print("dualpipev stage 3 pairs:", len(pairs), pairs[:2])
check(len(pairs) > 0, "DualPipeV overlaps forward and backward pairs")

def sim(schedule):
    d = simulate(orrery, "qwen3-30b-a3b", "4x8xH100-SXM",
                 "tp=1,pp=4,ep=8,mbs=1,gbs=64,zero=1,schedule=" + schedule)
    return d["step_time_s"], max(s["memory_bytes"]["activations"] for s in d["stages"])
t = {s: sim(s) for s in ("1f1b", "zb-h1", "zb-v", "dualpipev")}
for s, (step, act) in t.items():
    print(f"{s:10} step {step:.3f} s, peak activations {act/2**30:.2f} GiB")
check(t["zb-h1"][0] < t["1f1b"][0] and t["zb-v"][0] < t["zb-h1"][0] and t["dualpipev"][0] < t["zb-v"][0],
      "1F1B > ZB-H1 > ZB-V > DualPipeV")
check(t["zb-v"][1] <= 1.3 * t["1f1b"][1], "ZB-V's activations near 1F1B's")
sys.exit(1 if check.bad else 0)
