"""LoRA on Llama-3 8B (rank 16 on q, k, v, o; 8 A100-40G, tp 1, dp 8,
ZeRO-1, micro-batch 1 at 8,192 tokens): each memory term against full
fine-tuning of the same strategy, computed by hand from the model's shape,
and the step faster. Exit 1 on any difference.

    lora_memory.py ORRERY
"""
import json, subprocess, sys
orrery = sys.argv[1]
def sim(*extra):
    out = subprocess.run([orrery, "simulate", "llama3-8b", "--cluster", "8xA100-40G", "--strategy",
                          "tp=1,dp=8,mbs=1,gbs=64,zero=1", "--json", *extra], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    return d["stages"][0]["memory_bytes"], d["step_time_s"]
full, tfull = sim()
lora, tlora = sim("--lora", "rank=16")
L, h, ffn, kv, vocab, s, r = 32, 4096, 14336, 1024, 128256, 8192, 16
N = vocab*h*2 + L*(h*h*2 + h*kv*2 + 3*h*ffn + 2*h) + h      # embedding, head, layers, final norm
A = L*r*((h + h) + (h + kv) + (h + kv) + (h + h))            # q, k, v, o adapters
print("trainable full", N, "adapters", A)
frag = 1.05  # the allocator's fragmentation (Assumptions::fragmentation)
bad = False
want = {
 "weights": 2*(N + A) - 2*N,                                 # the adapters' weights more
 "gradients": 4*A - 4*N,
 "optimizer": 12*A/8 - 12*N/8,
 # the frozen gate/up and down no longer keep their inputs (s·h, s·ffn), nor
 # the frozen head its (s·h); each adapter keeps x·A (s·r)
 "activations": frag*2*(-L*(s*h + s*ffn) - s*h + L*4*s*r),
}
for k, v in want.items():
    got = lora[k] - full[k]
    ok = abs(got - v) <= 1e-6 * abs(full[k]) + 1
    bad |= not ok
    print(f"{k:12} lora-full {got/2**30:10.4f} GiB, hand {v/2**30:10.4f} GiB, {'ok' if ok else 'DIFFERENT'}")
print(f"step: full {tfull:.3f} s, lora {tlora:.3f} s, {'faster' if tlora < tfull else 'NOT FASTER'}")
sys.exit(1 if bad or tlora >= tfull else 0)
