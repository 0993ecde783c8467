#!/usr/bin/env python3
"""Measure one GPU for the cost model's validation: GEMMs, memory-bound
kernels and whole GPT training steps, written as JSON.

Runs where PyTorch sees a CUDA device (the project's own code never needs
it). The GPT is the twin of models/generate.py's `gpt`: pre-LN, learned
positions, fused QKV with bias, unfused attention (scores, scale, causal
mask, softmax, dropout), exact GELU, dropout on the embeddings and on both
residual branches, tied output head. Each step case runs with PyTorch's
kernels one op at a time (fusion=none), with Megatron-LM's fused kernels
(fusion=megatron: bias-GELU, bias-dropout-add, scale-mask-softmax, each
compiled into one kernel) and with whole layers compiled by Inductor
(fusion=inductor). Training is Megatron-style mixed
precision: bf16 weights, gradients accumulated into fp32 main gradients as
each is produced (the bf16 gradient is then freed), fused AdamW on fp32
main weights after clipping the gradient norm at 1.0 (Megatron's default),
copied back to bf16: 18 bytes per parameter. The loss is
cross-entropy on fp32 logits, as Megatron computes it.

  python3 bench/gpu/measure.py -o measured.json [--quick]

bench/gpu/compare.py prices the same GEMMs, kernels and steps with the
cost model and prints measured against predicted.
"""
import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


DEVICE = "cuda"


def log(msg):
    print(f"[measure {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def timed(fn, warmup, reps, inner=1):
    """Median and minimum seconds per call of fn (CUDA events): `inner`
    calls back to back between two events, so that short kernels queue as
    they do in training rather than wait for the host's launch."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / inner)
    return statistics.median(times), min(times)


# ---------------------------------------------------------------- GEMMs
def gemm_shapes(quick):
    """(batch, m, k, n): the GPT layers' GEMMs at the sizes the step cases
    use, plus attention's batched products and small ones."""
    shapes = []
    tokens = [2048, 8192] if quick else [2048, 4096, 8192, 16384]
    hidden = [1024, 2048] if quick else [1024, 1536, 2048, 2560, 4096, 8192]
    for t in tokens:
        for h in hidden:
            for k, n in ((h, 3 * h), (h, h), (h, 4 * h), (4 * h, h)):
                shapes.append((1, t, k, n))
    for t in (256, 512):
        for h in (1024, 4096):
            shapes.append((1, t, h, h))
    for bh, dh in ((16, 64), (64, 64), (128, 128), (256, 80)):
        shapes.append((bh, 2048, dh, 2048))   # scores = q . k^T
        shapes.append((bh, 2048, 2048, dh))   # probs . v
    return shapes


def measure_gemms(quick):
    rows = []
    for b, m, k, n in gemm_shapes(quick):
        a = torch.randn(b, m, k, device=DEVICE, dtype=torch.bfloat16)
        w = torch.randn(b, k, n, device=DEVICE, dtype=torch.bfloat16)
        if b == 1:
            a, w = a[0], w[0]
        med, best = timed(lambda: torch.matmul(a, w), 3, 5, 5 if quick else 20)
        flops = 2.0 * b * m * k * n
        rows.append({"batch": b, "m": m, "k": k, "n": n, "dtype": "bf16",
                     "flops": flops, "bytes": 2.0 * b * (m * k + k * n + m * n),
                     "seconds_median": med, "seconds_min": best,
                     "tflop_per_s": flops / med / 1e12})
        del a, w
    return rows


# ------------------------------------------------------ memory-bound ops
def measure_kernels(quick, compiled):
    """Memory-bound kernels as PyTorch runs them one by one (eager), or as
    a fusing framework generates them (torch.compile: one Triton kernel per
    op, a single pass for the softmax and the layer norm, like Megatron's
    fused kernels). Compiled calls cost the host tens of microseconds, so
    they are timed only at sizes where the device is the slower side."""
    rows = []
    if compiled:
        sizes = [1 << 26] if quick else [1 << 26, 1 << 27, 1 << 28]
    else:
        sizes = [1 << 22, 1 << 26] if quick else [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]
    ops = {
        "add": (lambda a, b, ln: a + b, 3, False),
        "gelu": (lambda a, b, ln: F.gelu(a), 2, False),
        "dropout": (lambda a, b, ln: F.dropout(a, 0.1, True), 2, False),
        "softmax": (lambda a, b, ln: torch.softmax(a, -1), 2, True),
        "layernorm": (lambda a, b, ln: ln(a), 2, True),
    }
    kernels = {name: (torch.compile(fn, dynamic=False) if compiled else fn)
               for name, (fn, _, _) in ops.items()}
    for numel in sizes:
        x = torch.randn(numel, device=DEVICE, dtype=torch.bfloat16)
        y = torch.randn(numel, device=DEVICE, dtype=torch.bfloat16)
        x2 = x.view(numel // 2048, 2048)
        ln = nn.LayerNorm(2048, device=DEVICE, dtype=torch.bfloat16)
        for name, (_, tensors, rowwise) in ops.items():
            a, b = (x2, None) if rowwise else (x, y)
            fn = kernels[name]
            med, best = timed(lambda: fn(a, b, ln), 3, 5, 5 if quick else 20)
            nbytes = 2.0 * numel * tensors
            rows.append({"op": name, "implementation": "compiled" if compiled else "eager",
                         "elements": numel, "dtype": "bf16", "bytes": nbytes,
                         "seconds_median": med, "seconds_min": best,
                         "gbytes_per_s": nbytes / med / 1e9})
        del x, y, x2, ln
    return rows


# ---------------------------------------------------------- GPT steps
class Layer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.heads = heads
        self.fused = None
        self.ln_1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, ffn)
        self.proj = nn.Linear(ffn, d)

    def forward(self, x, mask):
        if self.fused is not None:
            return self.forward_fused(x, mask)
        b, s, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, dh).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dh)) + mask
        probs = F.dropout(torch.softmax(scores, dim=-1), 0.1, self.training)
        a = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)
        x = x + F.dropout(self.out(a), 0.1, self.training)
        h = F.gelu(self.fc(self.ln_2(x)))
        return x + F.dropout(self.proj(h), 0.1, self.training)

    def forward_fused(self, x, mask):
        """Megatron-LM's kernels: GEMMs without their bias, which the fused
        bias-GELU and bias-dropout-add kernels add; the fused scale-mask-
        softmax, then dropout in a kernel of its own."""
        b, s, d = x.shape
        dh = d // self.heads
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, dh).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2))
        probs = F.dropout(self.fused["softmax"](scores, mask, 1.0 / math.sqrt(dh)), 0.1, True)
        a = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)
        x = self.fused["bias_dropout_add"](F.linear(a, self.out.weight), self.out.bias, x)
        h = self.fused["bias_gelu"](F.linear(self.ln_2(x), self.fc.weight), self.fc.bias)
        return self.fused["bias_dropout_add"](F.linear(h, self.proj.weight), self.proj.bias, x)


def megatron_fusions():
    """Megatron-LM's fused elementwise kernels (torch.jit there), each
    compiled into one kernel."""
    def bias_gelu(y, bias):
        return F.gelu(y + bias)

    def bias_dropout_add(y, bias, residual):
        return residual + F.dropout(y + bias, 0.1, True)

    def scale_mask_softmax(scores, mask, scale):
        return torch.softmax(scores * scale + mask, dim=-1)

    c = lambda f: torch.compile(f, dynamic=False)
    return {"bias_gelu": c(bias_gelu), "bias_dropout_add": c(bias_dropout_add),
            "softmax": c(scale_mask_softmax)}


class GPT(nn.Module):
    def __init__(self, layers, d, heads, seq, vocab, recompute, fusion="none"):
        super().__init__()
        self.recompute = recompute
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.h = nn.ModuleList(Layer(d, heads, 4 * d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1),
                             persistent=False)
        if fusion != "none":
            # Inductor's pattern matcher would turn the attention into flash
            # attention, which the twin must not do.
            import torch._inductor.config as inductor
            inductor.pattern_matcher = False
        if fusion == "megatron":
            fused = megatron_fusions()
            for layer in self.h:
                layer.fused = fused
        elif fusion == "inductor":
            # The whole layer compiled: Inductor fuses every elementwise
            # chain, forward and backward, more than Megatron does.
            for layer in self.h:
                layer.compile(dynamic=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = F.dropout(self.wte(ids) + self.wpe(pos), 0.1, self.training)
        mask = self.mask.to(x.dtype)
        for layer in self.h:
            if self.recompute == "full":
                x = checkpoint(layer, x, mask, use_reentrant=False)
            else:
                x = layer(x, mask)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())

    def init_like_gpt(self):
        """GPT-2's initialisation (normal, std 0.02), so logits stay small."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)
        return self


def measure_step(case, quick):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    row = dict(case)
    model = None
    try:
        torch.manual_seed(0)
        with torch.device(DEVICE):
            model = GPT(case["layers"], case["hidden"], case["heads"], case["seq"],
                        case["vocab"], case["recompute"], case["fusion"]).init_like_gpt().to(torch.bfloat16)
        params = list(model.parameters())
        row["parameters"] = sum(p.numel() for p in params)
        main = [p.detach().float() for p in params]
        for m in main:
            m.grad = torch.zeros_like(m)
        for p, m in zip(params, main):
            def accumulate(p, m=m):
                m.grad.add_(p.grad)
                p.grad = None
            p.register_post_accumulate_grad_hook(accumulate)
        opt = torch.optim.AdamW(main, lr=1e-4, fused=True)
        b, s, v = case["mbs"], case["seq"], case["vocab"]
        ids = torch.randint(0, v, (b, s), device=DEVICE)
        labels = torch.randint(0, v, (b * s,), device=DEVICE)

        def loss_of(logits):
            return F.cross_entropy(logits.view(-1, v).float(), labels)

        def update():
            # Megatron-LM clips the gradient norm at 1.0 by default.
            torch.nn.utils.clip_grad_norm_(main, 1.0, foreach=True)
            opt.step()
            with torch.no_grad():
                torch._foreach_copy_(params, main)
                torch._foreach_zero_([m.grad for m in main])

        def step():
            loss_of(model(ids)).backward()
            update()

        steps = 3 if quick else 8
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        med, best = timed(step, 2 if case["fusion"] == "none" else 3, steps)
        free, total = torch.cuda.mem_get_info()
        row.update({
            "status": "ok", "steps_timed": steps,
            "step_seconds_median": med, "step_seconds_min": best,
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "device_used_bytes": total - free,
        })
        # Parts of the step, timed alone: the optimizer update, and the loss
        # (forward and backward of the cross-entropy over the logits).
        row["optimizer_seconds_median"] = timed(update, 1, 3)[0]
        logits = torch.randn(b, s, v, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
        row["loss_seconds_median"] = timed(lambda: loss_of(logits).backward(), 1, 3)[0]
        del logits
    except torch.cuda.OutOfMemoryError as e:
        row.update({"status": "out_of_memory", "error": str(e).splitlines()[0]})
    finally:
        del model
        torch.cuda.empty_cache()
    log(f"{case['name']} mbs={case['mbs']} recompute={case['recompute']}"
        f" fusion={case['fusion']}: {row['status']}"
        + (f" {row['step_seconds_median']:.4f} s" if row["status"] == "ok" else ""))
    return row


def step_cases(quick, which="all"):
    gpt = lambda name, layers, d, heads, seq=2048: dict(
        name=name, layers=layers, hidden=d, heads=heads, seq=seq, vocab=51200)
    small, xl, big, huge = (gpt("gpt-350m", 24, 1024, 16), gpt("gpt-1.3b", 24, 2048, 16),
                            gpt("gpt-2.7b", 32, 2560, 32), gpt("gpt-6.7b", 32, 4096, 32))
    cases = [(small, 8, "none"), (xl, 2, "none"), (xl, 4, "none"), (xl, 8, "none"),
             (xl, 8, "full"), (big, 2, "none"), (big, 4, "full"),
             (huge, 1, "full"), (huge, 1, "none")]
    megatron = cases[:-1]
    inductor = [(small, 8, "none"), (xl, 4, "none")]
    # Longer sequences: the attention core grows with s², the rest with s.
    xl4k, xl8k = gpt("gpt-1.3b", 24, 2048, 16, 4096), gpt("gpt-1.3b", 24, 2048, 16, 8192)
    long = [(xl4k, 2, "none"), (xl4k, 2, "full"), (xl8k, 1, "full"), (xl8k, 1, "none")]
    if which == "long":
        cases, megatron, inductor = long, long[:-1], []
    else:
        cases, megatron = cases + long, megatron + long[:-1]
    if quick:
        cases, megatron, inductor = cases[:1], cases[:1], []
    return ([dict(c, mbs=b, recompute=r, fusion="none") for c, b, r in cases] +
            [dict(c, mbs=b, recompute=r, fusion="megatron") for c, b, r in megatron] +
            [dict(c, mbs=b, recompute=r, fusion="inductor") for c, b, r in inductor])


def device_info():
    p = torch.cuda.get_device_properties(0)
    info = {"name": p.name, "multiprocessors": p.multi_processor_count,
            "memory_bytes": p.total_memory, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,"
                            "clocks.max.mem,power.limit", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30).stdout.strip()
        info["nvidia_smi"] = q
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--quick", action="store_true", help="a few shapes and one step case")
    ap.add_argument("--skip-steps", action="store_true")
    ap.add_argument("--skip-kernels", action="store_true", help="no GEMMs or kernels")
    ap.add_argument("--cases", choices=["all", "long"], default="all",
                    help="step cases: all, or only the longer sequences")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("measure.py: error: PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"device": device_info(), "measured_on": time.strftime("%Y-%m-%d"),
           "method": __doc__.split("\n\n")[1].replace("\n", " ")}

    def save():  # after each part, so that a run cut short keeps what it measured
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)

    out["steps"] = []
    log(f"device {out['device']['name']}")
    out["gemms"], out["kernels"] = [], []
    if not args.skip_kernels:
        out["gemms"] = measure_gemms(args.quick)
        log(f"{len(out['gemms'])} GEMMs")
        out["kernels"] = measure_kernels(args.quick, False)
        log(f"{len(out['kernels'])} memory-bound kernels (eager)")
        save()
        out["kernels"] += measure_kernels(args.quick, True)
        log(f"{len(out['kernels'])} memory-bound kernels (eager and compiled)")
    save()
    for case in ([] if args.skip_steps else step_cases(args.quick, args.cases)):
        out["steps"].append(measure_step(case, args.quick))
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
