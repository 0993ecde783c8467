"""ZB-2p (Qi et al., ICLR 2024): twice 1F1B's micro-batches in flight, each
weight gradient moved into idle time. Exit 1 on any difference.

    zb_2p.py ORRERY TMPDIR

1. The order on a pipeline of 4: stage 0 runs 2pp-1 = 7 forwards before its
   first input gradient, the last stage one; a W runs only after its B.
2. GPT-3 1.3B on 8 A100, pp 8, the last stage (the head's) holding one
   block, as the paper balances its stages: ZB-2p beats ZB-H1, which beats 1F1B; its
   activations peak above ZB-H1's (at most twice 1F1B's on stage 0) and
   its bubble is smaller.
3. Idle time is what ZB-2p fills: with more micro-batches its gain over
   ZB-H1 shrinks (the bubble is a smaller share of the step).
"""
import json, os, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from orrery_cli import Checks, simulate
orrery, tmp = sys.argv[1:3]
check = Checks()

path = os.path.join(tmp, "zb2p.trace.json")
subprocess.run([orrery, "simulate", "gpt3-1.3b", "--cluster", "4xA100-80G", "--strategy",
                "tp=1,pp=4,mbs=1,gbs=16,schedule=zb-2p", "--trace", path],
               capture_output=True, text=True, check=True)
ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"
      and e.get("cat") in ("forward", "backward")]
by = {}
for e in sorted(ev, key=lambda e: e["ts"]):
    by.setdefault(e["tid"], []).append(e["name"])
print("zb-2p stage 0:", " ".join(by[0][:10]))
print("zb-2p stage 3:", " ".join(by[3][:10]))
check(by[0][:8] == [f"F{i}" for i in range(7)] + ["B0"], "stage 0: 7 forwards, then B0")
check(by[3][:2] == ["F0", "B0"], "last stage: F0 then B0")
ok = True
for names in by.values():
    seen = set()
    for n in names:
        if n.startswith("W"):
            ok &= ("B" + n[1:]) in seen
        seen.add(n)
    ok &= sum(n.startswith("W") for n in names) == 16
check(ok, "every W after its B, once each")

def sim(schedule, gbs):
    d = simulate(orrery, "gpt3-1.3b", "8xA100-80G",
                 f"tp=1,pp=8,mbs=1,gbs={gbs},schedule={schedule},layers=4:4:4:3:3:3:3:2")
    return d["step_time_s"], d["stages"][0]["memory_bytes"]["activations"], d["bubble_fraction"]
t = {s: sim(s, 24) for s in ("1f1b", "zb-h1", "zb-2p")}
for s, (step, act, bubble) in t.items():
    print(f"{s:6} step {step:.3f} s, stage 0 activations {act/2**30:.2f} GiB, bubble {bubble:.3f}")
check(t["zb-2p"][0] < t["zb-h1"][0] < t["1f1b"][0], "1F1B > ZB-H1 > ZB-2p")
check(t["zb-h1"][1] < t["zb-2p"][1] <= 2 * t["1f1b"][1], "ZB-2p's activations: above ZB-H1's, at most 2x 1F1B's")
check(t["zb-2p"][2] < t["zb-h1"][2], "ZB-2p leaves less bubble than ZB-H1")
long = {s: sim(s, 96)[0] for s in ("zb-h1", "zb-2p")}
gain24 = t["zb-h1"][0] / t["zb-2p"][0] - 1
gain96 = long["zb-h1"] / long["zb-2p"] - 1
print(f"ZB-2p over ZB-H1: {100 * gain24:.1f}% at 24 micro-batches, {100 * gain96:.1f}% at 96")
check(0 < gain96 < gain24, "the gain shrinks with more micro-batches")
sys.exit(1 if check.bad else 0)
