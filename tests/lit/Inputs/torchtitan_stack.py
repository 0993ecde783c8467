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
3. --loss fp32-copy (PyTorch's cross_entropy on logits.float()): the last
   stage holds 4 more bytes a logit at the loss than --loss fused, times
   the fragmentation allowance (1.05).
4. FSDP under pipeline stages (zero=3, pp 2, dp 4): each device keeps its
   shard plus a whole 16-bit copy of its stage's weights and gradients:
   weights 1/4 + 1 of ZeRO-0's 16-bit ones, gradients 1/4 of ZeRO-0's fp32
   ones plus half of them.
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


def attention_s(result):
    """Forward and backward seconds of the layer's fused attention kernel."""
    layer = next(l for l in result["layers"] if l["kind"] == "transformer_layer")
    k = next(k for k in layer["kernels"] if k["kernel"] == "fused_attention")
    return k["forward_s"] + k["backward_s"]


# SDPA's flash backend on a Hopper GPU is FlashAttention-2: the catalog's
# curve, below cuDNN's that Transformer Engine runs; on a B200 (no such
# curve) torchtitan puts cuDNN first, so compiled prices attention as fused.
pair = {(dev, k): simulate(orrery, "llama3-8b", f"1x8x{dev}", f"{base},recompute=none", "--kernels", k)
        for dev in ("H100-SXM", "B200") for k in ("fused", "compiled")}
h100 = attention_s(pair[("H100-SXM", "compiled")]) / attention_s(pair[("H100-SXM", "fused")])
b200 = attention_s(pair[("B200", "compiled")]) / attention_s(pair[("B200", "fused")])
print(f"attention compiled / fused: H100 {h100:.2f}, B200 {b200:.2f}")
check(1.5 < h100 < 2.0, "compiled attention on an H100 is FlashAttention-2's, 1.5-2x cuDNN's time")
check(abs(b200 - 1) < 1e-9, "compiled attention on a B200 is the fused curve")
check(pair[("H100-SXM", "fused")]["step_time_s"] < pair[("H100-SXM", "compiled")]["step_time_s"],
      "compiled (torchtitan's SDPA) is slower than fused on an H100")
def kept_of(d):
    return next(l for l in d["layers"] if l["kind"] == "transformer_layer")["activation_bytes_per_micro_batch"]
check(kept_of(kernels["sdpa"]) < kept_of(kernels["eager"]), "sdpa keeps no attention scores, eager does")
fused_loss = simulate(orrery, "llama3-8b", "1x8xH100-SXM", f"{base},recompute=full", "--kernels", "sdpa")
copy_loss = simulate(orrery, "llama3-8b", "1x8xH100-SXM", f"{base},recompute=full", "--kernels", "sdpa",
                     "--loss", "fp32-copy")
logits = 2 * 8192 * 128256
delta = copy_loss["stages"][0]["memory_bytes"]["activations"] - fused_loss["stages"][0]["memory_bytes"]["activations"]
print(f"fp32-copy loss: {delta / 2**30:.3f} GiB more, hand {1.05 * 4 * logits / 2**30:.3f} GiB")
check(abs(delta - 1.05 * 4 * logits) <= 1e-6 * delta, "--loss fp32-copy holds 4 bytes a logit more")

def state(zero):
    d = simulate(orrery, "llama3-8b", "1x8xH100-SXM", f"pp=2,dp=4,mbs=1,gbs=16,recompute=full,zero={zero}")
    return d["stages"][0]["memory_bytes"]
z0, z3 = state(0), state(3)
print(f"zero=3 under pp 2: weights {z3['weights'] / 2**30:.2f} GiB (ZeRO-0 {z0['weights'] / 2**30:.2f}), "
      f"gradients {z3['gradients'] / 2**30:.2f} GiB (ZeRO-0 {z0['gradients'] / 2**30:.2f})")
check(abs(z3["weights"] - 1.25 * z0["weights"]) <= 1e-6 * z0["weights"] and
      abs(z3["gradients"] - 0.75 * z0["gradients"]) <= 1e-6 * z0["gradients"],
      "FSDP under pipelining keeps the stage whole beside its shard")
sys.exit(1 if check.bad else 0)
