

# --- What follows is the same for every plan (compiler/export/pytorch_plan.py);
# --- the constants above are this plan's.
import contextlib
import copy
import inspect
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B, ScheduleZBVZeroBubble)
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               loss_parallel, parallelize_module)

SCHEDULES = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe,
             "interleaved": ScheduleInterleaved1F1B, "zb-v": ScheduleZBVZeroBubble}


def _start():
    """The process group over the processes torchrun started (one a
    device): Gloo on CPU plans, NCCL on GPU plans."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != DEVICES:
        raise RuntimeError(f"the plan runs on {DEVICES} processes (torchrun "
                           f"--nproc-per-node ...), this job has {world}")
    if not dist.is_initialized():
        dist.init_process_group(BACKEND)
    if DEVICE_TYPE == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def device_mesh():
    """The plan's mesh over the processes torchrun started."""
    _start()
    return init_device_mesh(DEVICE_TYPE, MESH_SHAPE, mesh_dim_names=MESH_DIMS)


def batch_rows(mesh=None):
    """[start, stop) of each global batch this process's replica trains on."""
    mesh = mesh or device_mesh()
    rows = GLOBAL_BATCH_SIZE // mesh["dp"].size()
    return mesh["dp"].get_local_rank() * rows, (mesh["dp"].get_local_rank() + 1) * rows


def loss_weight(mesh=None):
    """This replica's share of the global batch (its loss's weight)."""
    mesh = mesh or device_mesh()
    return 1.0 / mesh["dp"].size()


def finish(optim):
    """Nothing is left in flight after a step here."""


def device():
    if DEVICE_TYPE == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(DEVICE_TYPE)


def _blocks(model):
    """(name, container) of the transformer blocks: the ModuleList or
    ModuleDict (torchtitan keeps a ModuleDict) with the most children, all
    of one class."""
    best = None
    for name, m in model.named_modules():
        if isinstance(m, (nn.ModuleList, nn.ModuleDict)) and len(m) > 0:
            children = list(m.values()) if isinstance(m, nn.ModuleDict) else list(m)
            if len({type(c) for c in children}) == 1 and (best is None or len(m) > len(best[1])):
                best = (name, m)
    if best is None:
        raise ValueError("the model holds no ModuleList or ModuleDict of blocks")
    return best


def _items(container):
    return list(container.items()) if isinstance(container, nn.ModuleDict) else list(enumerate(container))


def _set(model, dotted, module):
    parent, _, leaf = dotted.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def _has(model, name):
    return bool(name) and getattr(model, name, None) is not None


def tensor_parallel(model, tp):
    """Megatron's split as DTensor states it: the embedding and head split on
    the vocabulary, attention and MLP column- then row-parallel, with
    sequence parallelism the norms and residuals split on the sequence."""
    seq = Shard(1) if SEQUENCE_PARALLEL else Replicate()
    top = {}
    if _has(model, EMBEDDING):
        top[EMBEDDING] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if _has(model, FINAL_NORM) and SEQUENCE_PARALLEL:
        top[FINAL_NORM] = SequenceParallel()
    if _has(model, HEAD):  # logits split on the vocabulary: loss_parallel
        top[HEAD] = ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1),
                                    use_local_output=False)
    if top:
        parallelize_module(model, tp, top)
    # A heterogeneous stage names its (possibly empty) container of blocks.
    blocks = model.get_submodule(model.orrery_blocks) if hasattr(model, "orrery_blocks") \
        else _blocks(model)[1]
    for _, block in _items(blocks):
        plan = {n: ColwiseParallel() for n in COLUMN_PARALLEL}
        plan.update({n: RowwiseParallel(output_layouts=seq) for n in ROW_PARALLEL})
        if SEQUENCE_PARALLEL:
            plan.update({n: SequenceParallel() for n in BLOCK_NORMS})
            plan.update({n: PrepareModuleInput(input_layouts=(Shard(1),),
                                               desired_input_layouts=(Replicate(),))
                         for n in BLOCK_INPUTS})
        parallelize_module(block, tp, plan)


def parallelize(model, mesh=None, pipelined=False):
    """Tensor parallelism, recompute, then data parallelism, as torchtitan
    orders them: FSDP2 for ZeRO-3; else DDP, or, for DTensor weights and
    pipeline chunks (which DDP does not take), the gradients all-reduced
    after the backward (train_step)."""
    mesh = mesh or device_mesh()
    if MESH_SHAPE[MESH_DIMS.index("tp")] > 1:
        tensor_parallel(model, mesh["tp"])
    name, container = _blocks(model)
    if RECOMPUTE == "full":
        for key, block in _items(container):
            container[key] = checkpoint_wrapper(block)
    dp = mesh["dp"]
    if ZERO_STAGE == 3:
        policy = MixedPrecisionPolicy(param_dtype=PARAM_DTYPE, reduce_dtype=torch.float32)
        for _, block in _items(container):
            fully_shard(block, mesh=dp, mp_policy=policy)
        fully_shard(model, mesh=dp, mp_policy=policy)
    elif dp.size() > 1 and not pipelined and not _holds_dtensors(model):
        model = nn.parallel.DistributedDataParallel(model, process_group=dp.get_group())
    return model


def _holds_dtensors(model):
    return any(isinstance(p, DTensor) for p in model.parameters())


def pipeline(model, mesh=None, loss_fn=None):
    """This rank's pipeline chunks (copies of the model holding their blocks
    of CHUNK_BLOCKS, the embedding in the first and the head in the last,
    each parallelized) and the schedule that runs them. The model's forward
    must skip an embedding, final norm or head set to None (torchtitan's
    Llama does)."""
    mesh = mesh or device_mesh()
    rank = mesh["pp"].get_local_rank()
    chunks = len(CHUNK_BLOCKS)
    parts, stages = [], []
    for c in range(chunks):
        if CHUNK_RANKS[c] != rank:
            continue
        part = copy.deepcopy(model)
        name, container = _blocks(part)
        first, last = CHUNK_BLOCKS[c]
        kept = [(k, b) for i, (k, b) in enumerate(_items(container)) if first <= i < last]
        _set(part, name, nn.ModuleDict(kept) if isinstance(container, nn.ModuleDict)
             else nn.ModuleList(b for _, b in kept))
        for attr in ([EMBEDDING] if c > 0 else []) + ([FINAL_NORM, HEAD] if c < chunks - 1 else []):
            if _has(part, attr):
                setattr(part, attr, None)
        part = parallelize(part, mesh, pipelined=True)
        parts.append(part)
        stages.append(PipelineStage(part, c, chunks, device(), group=mesh["pp"].get_group()))
    kind = SCHEDULES[SCHEDULE]
    options = {}
    if "scale_grads" in inspect.signature(kind.__init__).parameters:
        options["scale_grads"] = False  # the loss below is already a mean
    scaled = (lambda out, target: loss_fn(out, target) / MICRO_BATCHES) if loss_fn else None
    multi = kind in (ScheduleInterleaved1F1B, ScheduleZBVZeroBubble)  # several stages a rank
    schedule = kind(stages if multi else stages[0], MICRO_BATCHES, loss_fn=scaled, **options)
    return parts, schedule


def build(model, loss_fn, mesh=None):
    """The model as the plan runs it: (parts, schedule), parts this rank's
    modules (one without pipeline stages), schedule None without them."""
    mesh = mesh or device_mesh()
    if MESH_SHAPE[MESH_DIMS.index("pp")] > 1:
        return pipeline(model, mesh, loss_fn)
    return [parallelize(model, mesh)], None


def optimizer(parts, mesh=None, lr=3e-4):
    """AdamW over this rank's weights; ZeRO-1 shards its state over the
    data-parallel group (ZeroRedundancyOptimizer)."""
    mesh = mesh or device_mesh()
    params = [p for part in parts for p in part.parameters() if p.requires_grad]
    if ZERO_STAGE == 1 and mesh["dp"].size() > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=lr,
                                       process_group=mesh["dp"].get_group())
    return torch.optim.AdamW(params, lr=lr)


def _precision():
    if ZERO_STAGE == 3 or PARAM_DTYPE == torch.float32:
        return contextlib.nullcontext()  # FSDP2's policy casts; fp32 runs as is
    return torch.autocast(DEVICE_TYPE, dtype=PARAM_DTYPE)


def _reduce_gradients(parts, mesh):
    """Gradients of DTensor weights (tensor parallel without FSDP), which DDP
    does not take, all-reduced over the data-parallel group after the
    backward."""
    dp = mesh["dp"]
    if ZERO_STAGE == 3 or dp.size() == 1:
        return
    for part in parts:
        if isinstance(part, nn.parallel.DistributedDataParallel):
            continue
        for p in part.parameters():
            if p.grad is not None:
                g = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                dist.all_reduce(g, group=dp.get_group())
                g.div_(dp.size())


def _sync(parts, last):
    for part in parts:
        if ZERO_STAGE == 3:
            part.set_requires_gradient_sync(last)
        elif isinstance(part, nn.parallel.DistributedDataParallel):
            part.require_backward_grad_sync = last


def train_step(parts, schedule, optim, inputs, labels, loss_fn, mesh=None):
    """One step of this replica: `inputs`, `labels` its GLOBAL_BATCH_SIZE / dp
    rows, run as MICRO_BATCHES micro-batches of MICRO_BATCH_SIZE, gradients
    reduced as the plan's ZeRO stage does, then the optimizer's step. Returns
    the replica's mean loss where this rank computes it (the last pipeline
    stage), else None."""
    mesh = mesh or device_mesh()
    tp = MESH_SHAPE[MESH_DIMS.index("tp")] > 1
    optim.zero_grad()
    total = None
    with _precision(), (loss_parallel() if tp else contextlib.nullcontext()):
        if schedule is not None:
            losses = []
            stage_ids = [c for c in range(len(CHUNK_BLOCKS)) if CHUNK_RANKS[c] == mesh["pp"].get_local_rank()]
            args = (inputs,) if 0 in stage_ids else ()
            last = len(CHUNK_BLOCKS) - 1 in stage_ids
            schedule.step(*args, target=labels if last else None, losses=losses if last else None)
            if last:
                total = torch.stack([l.detach() for l in losses]).sum()
        else:
            total = torch.zeros(())
            pairs = list(zip(inputs.chunk(MICRO_BATCHES), labels.chunk(MICRO_BATCHES)))
            for i, (x, y) in enumerate(pairs):
                _sync(parts, i == len(pairs) - 1)
                loss = loss_fn(parts[0](x), y) / MICRO_BATCHES
                loss.backward()
                total += loss.detach().full_tensor() if isinstance(loss, DTensor) else loss.detach()
    _reduce_gradients(parts, mesh)
    optim.step()
    return total
