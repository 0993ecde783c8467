"""Trains tiny_llama as a PyTorch export of an Orrery plan says, under
torchrun, and prints the mean loss of each step as JSON (rank 0); with
--reference, trains it in one process without the plan.

    torchrun --nproc-per-node N pytorch_train.py --plan PLAN.py --steps S --out F
    python3 pytorch_train.py --reference --global-batch G --steps S --out F
"""
import argparse
import importlib.util
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_llama  # noqa: E402


def loss_fn(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def reference(args):
    model = tiny_llama.build()
    optim = torch.optim.AdamW(model.parameters(), lr=3e-4)
    losses = []
    for x, y in tiny_llama.batches(args.steps, args.global_batch):
        optim.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return losses, "torch.float32", sum(p.numel() for p in model.parameters())


def planned(args):
    spec = importlib.util.spec_from_file_location("plan", args.plan)
    plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan)
    mesh = plan.device_mesh()
    parts, schedule = plan.build(tiny_llama.build(), loss_fn, mesh)
    optim = plan.optimizer(parts, mesh)
    # The type the first linear layer computes in: the plan's precision.
    seen = []
    linear = next(m for part in parts for m in part.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda m, i, o: seen.append(str(o.dtype)))
    # The weights this rank holds: fewer than the model's when the plan
    # splits or shards them.
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
                for part in parts for p in part.parameters())
    start, stop = plan.batch_rows(mesh)
    weight = plan.loss_weight(mesh)
    losses = []
    for x, y in tiny_llama.batches(args.steps, plan.GLOBAL_BATCH_SIZE):
        x, y = x[start:stop], y[start:stop]
        loss = plan.train_step(parts, schedule, optim, x, y, loss_fn, mesh)
        # The replicas' losses weighed by their shares of the batch, over
        # the ranks that computed one (the last stage, each tp rank).
        pair = torch.tensor([0.0, 0.0], dtype=torch.float64)
        if loss is not None:
            pair += torch.tensor([float(loss) * weight, weight], dtype=torch.float64)
        dist.all_reduce(pair)
        losses.append((pair[0] / pair[1]).item())
    plan.finish(optim)
    dist.destroy_process_group()
    return losses, seen[0] if seen else None, local


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan")
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    losses, dtype, local = reference(args) if args.reference else planned(args)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(args.out, "w") as f:
            json.dump({"losses": losses, "compute_dtype": dtype, "local_parameters": local}, f)
    # Every collective has completed and the result is written: leave without
    # the interpreter's teardown, where torch 2.15's CPU threads of FSDP2 and
    # Gloo sometimes abort ("terminate called without an active exception").
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
