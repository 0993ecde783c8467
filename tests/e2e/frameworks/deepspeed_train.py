"""Trains tiny_llama with DeepSpeed's own engine from a ds_config Orrery
exported, on CPU processes under torchrun (DS_ACCELERATOR=cpu, Gloo), and
writes the mean loss of each step as JSON (rank 0).

    torchrun --nproc-per-node N deepspeed_train.py --config ds_config.json \
        --plan plan.json --steps S --out F

Without a "pipeline" section the model trains as one module (ZeRO as the
config says, AutoTP with tensor_parallel.autotp_size); with it, as a
PipelineModule of the layers in order (the embedding, the blocks, the final
norm with the head) partitioned as the config says.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_llama  # noqa: E402


def loss_fn(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


class Head(nn.Module):
    def __init__(self, norm, output):
        super().__init__()
        self.norm, self.output = norm, output

    def forward(self, h):
        return self.output(self.norm(h))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    import deepspeed
    import torch.distributed as dist
    deepspeed.init_distributed(dist_backend="gloo")
    config = json.load(open(args.config))
    strategy = json.load(open(args.plan))["strategy"]
    tp, dp, pp = strategy["tp"], strategy["dp"], strategy["pp"]
    gbs, gas = strategy["global_batch_size_samples"], config["gradient_accumulation_steps"]
    mbs = config["train_micro_batch_size_per_gpu"]
    rank = dist.get_rank()
    model = tiny_llama.build()
    if "pipeline" in config:
        from deepspeed.pipe import PipelineModule
        layers = [model.tok_embeddings, *model.layers.values(), Head(model.norm, model.output)]
        model = PipelineModule(layers=layers, num_stages=config["pipeline"]["stages"],
                               loss_fn=loss_fn, partition_method=config["pipeline"]["partition"])
    elif tp > 1:
        model = deepspeed.tp_model_init(model, tp_size=tp, dtype=torch.float32)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optim, config=config)
    replica = rank // tp if "pipeline" not in config else engine.grid.get_data_parallel_rank()
    if "pipeline" not in config:
        replica = (rank // tp) % dp
    # The type the first linear layer computes in.
    seen = []
    linear = next(m for m in engine.module.modules() if isinstance(m, nn.Linear))
    linear.register_forward_hook(lambda m, i, o: seen.append(str(o.dtype)))
    # The weights this rank holds (ZeRO-3's partitions, AutoTP's shards).
    local = sum(getattr(p, "ds_tensor", p).numel() for p in engine.module.parameters())
    rows = gbs // dp
    losses = []
    for x, y in tiny_llama.batches(args.steps, gbs):
        x, y = x[replica * rows:(replica + 1) * rows], y[replica * rows:(replica + 1) * rows]
        pairs = list(zip(x.split(mbs), y.split(mbs)))
        assert len(pairs) == gas, f"{len(pairs)} micro-batches, the config {gas}"
        if "pipeline" in config:
            loss = engine.train_batch(iter(pairs)).detach().float()
        else:
            loss = torch.zeros(())
            for xi, yi in pairs:
                micro = loss_fn(engine(xi), yi)
                engine.backward(micro)
                engine.step()
                loss += micro.detach().float() / gas
        pair = torch.tensor([float(loss), 1.0], dtype=torch.float64)
        dist.all_reduce(pair)
        losses.append((pair[0] / pair[1]).item())
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"losses": losses, "compute_dtype": seen[0] if seen else None,
                       "local_parameters": local}, f)
    # Every collective has completed and the result is written: leave without
    # the interpreter's teardown, where torch 2.15's CPU threads of FSDP2 and
    # Gloo sometimes abort ("terminate called without an active exception").
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
