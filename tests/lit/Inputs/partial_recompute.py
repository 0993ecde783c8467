"""Partial full recompute (recompute_layers=K, Megatron-LM's block method:
the first K transformer layers of each pipeline chunk recomputed, the rest
keeping their activations). GPT-3 6.7B, tp 2 x pp 4 on 8 A100-80G (8 layers
per stage): on a middle stage (transformer layers only) each layer
recomputed saves the same activation bytes and costs the same forward, so
the activations and the step fall on a line from K = 8 (every layer) to
K = 1. Exit 1 on any difference.

    partial_recompute.py ORRERY
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from orrery_cli import simulate
orrery = sys.argv[1]
def sim(extra):
    d = simulate(orrery, "gpt3-6.7b", "8xA100-80G", "tp=2,pp=4,mbs=1,gbs=64," + extra)
    return d["stages"][1]["memory_bytes"]["activations"], d["stages"][1]["backward_s_per_micro_batch"]
bad = False
full, bfull = sim("recompute=full")
none, bnone = sim("recompute=none")
k8, b8 = sim("recompute=full,recompute_layers=8")
print(f"K=8 is every layer: {'ok' if (k8, b8) == (full, bfull) else 'DIFFERENT'}")
bad |= (k8, b8) != (full, bfull)
one, bone = sim("recompute=full,recompute_layers=1")
for k in (2, 4, 6):
    a, b = sim(f"recompute=full,recompute_layers={k}")
    # from K=1 to K=8 on a line: each recomputed layer the same bytes and time
    wa = one + (full - one) * (k - 1) / 7
    wb = bone + (bfull - bone) * (k - 1) / 7
    ok = abs(a - wa) <= 1e-6 * full and abs(b - wb) <= 1e-9 + 1e-6 * bfull
    bad |= not ok
    print(f"K={k}: activations {a/2**30:.3f} GiB (line {wa/2**30:.3f}), backward {b*1e3:.3f} ms (line {wb*1e3:.3f}) {'ok' if ok else 'DIFFERENT'}")
ok = bnone < bone < bfull and full < one < none
print(f"none < K=1 < full in backward time, full < K=1 < none in memory: {'ok' if ok else 'WRONG'}")
bad |= not ok
sys.exit(1 if bad else 0)
