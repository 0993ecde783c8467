"""Activation offload (offload=activations: Transformer Engine's CPU
offload, DeepSpeed's cpu_checkpointing under full recompute). Llama-3 8B,
dp 8 on 8 A100-80G, micro-batch 1 at 8,192 tokens (one micro-batch in
flight): the device keeps the head's activations, the last transformer
layer's, two layers in flight and the loss's transient (2 bytes a logit
beyond the probabilities kept), the host the other 31 layers' for each
of the node's 8 devices; the step pays the PCIe transfers compute cannot
hide. Exit 1 on any difference.

    activation_offload.py ORRERY
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from orrery_cli import simulate
orrery = sys.argv[1]
def sim(extra):
    return simulate(orrery, "llama3-8b", "8xA100-80G", "tp=1,dp=8,mbs=1,gbs=64,zero=1" + extra)
none, off = sim(""), sim(",offload=activations")
kept = {l["kind"]: l["activation_bytes_per_micro_batch"] for l in none["layers"]}
K, H, L, frag = kept["transformer_layer"], kept["head"], 32, 1.05
want_dev = frag * (H + K + 2 * K + 2 * 8192 * 128256)
want_host = (L - 1) * K * 8
got_dev = off["stages"][0]["memory_bytes"]["activations"]
got_host = off["host_memory_bytes_per_node"]
bad = False
for name, got, want in (("device activations", got_dev, want_dev), ("host memory per node", got_host, want_host)):
    ok = abs(got - want) <= 1e-6 * want
    bad |= not ok
    print(f"{name}: {got/2**30:.3f} GiB, hand {want/2**30:.3f} GiB {'ok' if ok else 'DIFFERENT'}")
saved = none["stages"][0]["memory_bytes"]["activations"] - got_dev
ok = saved > 0 and off["step_time_s"] > none["step_time_s"]
bad |= not ok
print(f"saves {saved/2**30:.1f} GiB for {off['step_time_s'] - none['step_time_s']:.2f} s more per step: {'ok' if ok else 'WRONG'}")
sys.exit(1 if bad else 0)
