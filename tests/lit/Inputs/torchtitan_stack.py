"""torchtitan's stack by mechanism: its per-op selective checkpointing
(recompute=op) and plain PyTorch calling SDPA (--kernels sdpa). Exit 1 on
any difference.

    torchtitan_stack.py ORRERY

1. recompute=op on Llama-3 8B (FSDP over 8 H100, 2 x 8192 tokens a
   micro-batch): a block keeps its input and the outputs of SDPA and of the
   1st, 3rd, 5th and 7th of its seven matmuls (q, v, gate, down): 4096 +
   4096 + 4096 + 1024 + 14336 + 4096 elements a token in bf16, plus SDPA's
   log-sum-exp rows; the step lies between no recompute's and full's, the
   memory too.
2. --kernels sdpa: attention fused, the norms and SwiGLU one kernel per op
   dispatched by the host: slower than fused, faster than eager, and its
   attention keeps no scores (eager's does).
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from orrery_cli import Checks, simulate
orrery = sys.argv[1]
check = Checks()

base = "dp=8,zero=3,mbs=2,gbs=16"
runs = {r: simulate(orrery, "llama3-8b", "1x8xH100-SXM", f"{base},recompute={r}", "--kernels", "sdpa")
        for r in ("none", "op", "full")}
for r, d in runs.items():
    print(f"recompute={r:5} step {d['step_time_s']:.3f} s, peak {d['peak_memory_bytes'] / 2**30:.1f} GiB")
layer = next(l for l in runs["op"]["layers"] if l["kind"] == "transformer_layer")
tokens = 2 * 8192
expected = tokens * 2 * (4096 + 4096 + 4096 + 1024 + 14336 + 4096)
kept = layer["activation_bytes_per_micro_batch"]
print(f"op keeps {kept / 2**20:.1f} MiB a block, the policy's tensors {expected / 2**20:.1f} MiB")
check(expected <= kept <= expected * 1.01, "recompute=op keeps the input, SDPA's output and every other matmul's")
check(runs["none"]["step_time_s"] < runs["op"]["step_time_s"] < runs["full"]["step_time_s"],
      "op recomputes less than full, more than none")
check(runs["full"]["peak_memory_bytes"] < runs["op"]["peak_memory_bytes"] < runs["none"]["peak_memory_bytes"],
      "op keeps less than none, more than full")

kernels = {k: simulate(orrery, "llama3-8b", "1x8xH100-SXM", f"{base},recompute=none", "--kernels", k)
           for k in ("fused", "sdpa", "eager")}
for k, d in kernels.items():
    print(f"--kernels {k:5} step {d['step_time_s']:.3f} s")
check(kernels["fused"]["step_time_s"] < kernels["sdpa"]["step_time_s"] < kernels["eager"]["step_time_s"],
      "fused < sdpa < eager")
def kept_of(d):
    return next(l for l in d["layers"] if l["kind"] == "transformer_layer")["activation_bytes_per_micro_batch"]
check(kept_of(kernels["sdpa"]) < kept_of(kernels["eager"]), "sdpa keeps no attention scores, eager does")
sys.exit(1 if check.bad else 0)
