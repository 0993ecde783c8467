

# --- A heterogeneous plan (compiler/export/pytorch_hetero.py): each process runs
# --- one stage of one replica of a replica group; what follows takes the place of
# --- device_mesh, build, optimizer and train_step above.
from torch.distributed.device_mesh import DeviceMesh


class Place:
    """Where this process runs (group, stage, replica, tp rank) and its
    process groups: its replica's tp group, its stage's replicas (one per tp
    rank: the data-parallel group), and, per module, every process that
    holds it in any group (the cross-group reduction). Every process
    creates every group, in one order, as torch.distributed requires."""

    def __init__(self):
        _start()
        me = dist.get_rank()
        for g, group in enumerate(GROUPS):
            for s, stage in enumerate(group["stages"]):
                for r, ranks in enumerate(stage["ranks"]):
                    pg = dist.new_group(ranks)
                    if me in ranks:
                        self.group, self.stage, self.replica = g, s, r
                        self.tp_group, self.tp_ranks = pg, ranks
                for t in range(stage["tp"]):
                    ranks = [rs[t] for rs in stage["ranks"]]
                    pg = dist.new_group(ranks)
                    if me in ranks:
                        self.dp_group, self.dp_ranks = pg, ranks
        self.holders, made = {}, {}
        for key in _module_keys():
            ranks = tuple(sorted(r for group in GROUPS for stage in group["stages"]
                                 if _holds(stage, key) for rs in stage["ranks"] for r in rs))
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks))
            if me in ranks:
                self.holders[key] = made[ranks]
        self.tp_rank = self.tp_ranks.index(me)

    @property
    def spec(self):
        return GROUPS[self.group]["stages"][self.stage]

    @property
    def stages(self):
        return len(GROUPS[self.group]["stages"])


def _module_keys():
    return ["embedding"] + [f"block{i}" for i in range(NUM_BLOCKS)] + ["head"]


def _holds(stage, key):
    if key == "embedding":
        return stage["embedding"]
    if key == "head":
        return stage["head"]
    first, last = stage["blocks"]
    return first <= int(key[5:]) < last


_PLACE = None


def device_mesh():
    """This process's place in the plan (one a device)."""
    global _PLACE
    if _PLACE is None:
        _PLACE = Place()
    return _PLACE


def batch_rows(mesh=None):
    """[start, stop) of each global batch this process's replica trains on."""
    place = mesh or device_mesh()
    return GROUPS[place.group]["rows"][place.replica]


def loss_weight(mesh=None):
    """This replica's share of the global batch (its loss's weight)."""
    start, stop = batch_rows(mesh)
    return (stop - start) / GLOBAL_BATCH_SIZE


def _keyed_parameters(part, place):
    """(module key, parameter) of this stage, in one order on every holder."""
    container = part.get_submodule(part.orrery_blocks)
    first = place.spec["blocks"][0]
    out = []
    for attr, key in ((EMBEDDING, "embedding"),):
        if _has(part, attr):
            out += [(key, p) for p in getattr(part, attr).parameters()]
    for i, (_, block) in enumerate(_items(container)):
        out += [(f"block{first + i}", p) for p in block.parameters()]
    for attr in (FINAL_NORM, HEAD):
        if _has(part, attr):
            out += [("head", p) for p in getattr(part, attr).parameters()]
    return out


def build(model, loss_fn, mesh=None):
    """This process's stage of its replica (blocks, and the embedding or the
    final norm and head where the stage holds them), tensor-parallel over
    its replica's tp ranks, and the schedule that runs it."""
    place = mesh or device_mesh()
    spec = place.spec
    part = copy.deepcopy(model)
    name, container = _blocks(part)
    first, last = spec["blocks"]
    kept = [(k, b) for i, (k, b) in enumerate(_items(container)) if first <= i < last]
    _set(part, name, nn.ModuleDict(kept) if isinstance(container, nn.ModuleDict)
         else nn.ModuleList(b for _, b in kept))
    part.orrery_blocks = name
    for attr, held in ((EMBEDDING, spec["embedding"]), (FINAL_NORM, spec["head"]),
                       (HEAD, spec["head"])):
        if not held and _has(part, attr):
            setattr(part, attr, None)
    if spec["tp"] > 1:
        tensor_parallel(part, DeviceMesh.from_group(place.tp_group, DEVICE_TYPE))
    if GROUPS[place.group]["recompute"] == "full":
        container = part.get_submodule(name)
        for key, block in _items(container):
            container[key] = checkpoint_wrapper(block)
    return [part], StageSchedule(place, part, loss_fn)


class StageSchedule:
    """1F1B over the replica's stages: warm-up forwards, then one forward and
    one backward in turn, then the remaining backwards. Activations go to the
    next stage and gradients back from tp rank 0 to tp rank 0, then to the
    stage's other tp ranks by broadcast."""

    def __init__(self, place, part, loss_fn):
        self.place, self.part, self.loss_fn = place, part, loss_fn
        self.pending = []
        group = GROUPS[place.group]
        self.prev = group["stages"][place.stage - 1]["ranks"][place.replica][0] \
            if place.stage > 0 else None
        self.next = group["stages"][place.stage + 1]["ranks"][place.replica][0] \
            if place.stage + 1 < place.stages else None
        self.last_backward = False
        self.reductions = []
        if OVERLAP_GRAD_REDUCE and len(place.dp_ranks) > 1:
            for p in part.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(self._reduce_now)

    def _reduce_now(self, p):
        """On the last backward, the gradient over the stage's replicas as
        soon as it is final (the plan's overlap with the backward)."""
        if self.last_backward:
            self.reductions.append(dist.all_reduce(_local(p.grad), group=self.place.dp_group,
                                                   async_op=True))

    def _send(self, t, dst):
        if self.place.tp_rank != 0:
            return
        t = t.detach().contiguous()
        head = torch.tensor([_DTYPES.index(t.dtype), t.dim(), *t.shape] + [0] * (6 - t.dim()))
        self.pending += [dist.isend(head, dst), dist.isend(t, dst)]
        self.keep = getattr(self, "keep", []) + [head, t]

    def _recv(self, src):
        place = self.place
        head = torch.zeros(8, dtype=torch.long)
        if place.tp_rank == 0:
            dist.recv(head, src)
        if len(place.tp_ranks) > 1:
            dist.broadcast(head, place.tp_ranks[0], group=place.tp_group)
        dtype, ndim = _DTYPES[int(head[0])], int(head[1])
        t = torch.empty([int(n) for n in head[2:2 + ndim]], dtype=dtype, device=device())
        if place.tp_rank == 0:
            dist.recv(t, src)
        if len(place.tp_ranks) > 1:
            dist.broadcast(t, place.tp_ranks[0], group=place.tp_group)
        return t

    def step(self, inputs, labels):
        """One step of this replica; the replica's mean loss where this stage
        computes it (the last), else None."""
        place, group = self.place, GROUPS[self.place.group]
        count = group["micro_batches"][place.replica]
        weight = loss_weight(place)
        xs = inputs.chunk(count) if place.stage == 0 else [None] * count
        ys = labels.chunk(count)
        saved, total = [], torch.zeros(())
        last = self.next is None

        def forward(i):
            nonlocal total
            x = xs[i].to(device()) if place.stage == 0 else self._recv(self.prev).requires_grad_()
            out = self.part(x)
            if last:
                loss = self.loss_fn(out, ys[i].to(device()))
                total += (loss.full_tensor() if isinstance(loss, DTensor) else loss).detach().cpu()
                out = loss * (weight / count)
            else:
                self._send(out, self.next)
            saved.append((x, out))

        def backward(i):
            x, out = saved.pop(0)
            self.last_backward = i == count - 1
            if last:
                out.backward()
            else:
                out.backward(self._recv(self.next).to(out.dtype))
            if self.prev is not None:
                self._send(x.grad, self.prev)

        warm = min(place.stages - place.stage - 1, count)
        for i in range(warm):
            forward(i)
        for i in range(count - warm):
            forward(warm + i)
            backward(i)
        for i in range(count - warm, count):
            backward(i)
        for work in self.pending:
            work.wait()
        self.pending, self.keep = [], []
        return total / count if last else None


_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def _local(t):
    return t.to_local() if isinstance(t, DTensor) else t


def _reduce_gradients(parts, schedule, place):
    """The stage's replicas' gradients summed (each replica's loss already
    weighs its share), unless the hooks did so during the backward; then,
    with several groups, every module's whole gradient summed over all its
    holders, each holder's tp ranks and replicas counting once."""
    part = parts[0]
    for work in schedule.reductions:
        work.wait()
    schedule.reductions = []
    if not OVERLAP_GRAD_REDUCE and len(place.dp_ranks) > 1:
        for p in part.parameters():
            if p.grad is not None:
                dist.all_reduce(_local(p.grad), group=place.dp_group)
    if len(GROUPS) == 1:
        return
    copies = place.spec["tp"] * len(place.spec["ranks"])
    for key, p in _keyed_parameters(part, place):
        if p.grad is None:
            continue
        whole = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad.clone()
        whole /= copies
        dist.all_reduce(whole, group=place.holders[key])
        if isinstance(p.grad, DTensor):
            local = whole
            for dim, placement in enumerate(p.grad.placements):
                if isinstance(placement, Shard):
                    local = local.chunk(p.grad.device_mesh.size(dim), placement.dim)[
                        p.grad.device_mesh.get_local_rank(dim)]
            p.grad.to_local().copy_(local)
        else:
            p.grad.copy_(whole)


class ShardedAdamW:
    """ZeRO-1 over the stage's replicas: each keeps AdamW's state for its
    share of the weights and steps it; the updated weights go to the others
    by broadcast, which the next forward waits for module by module when the
    plan overlaps the gather with it."""

    def __init__(self, part, place, lr):
        self.place = place
        self.params = [p for p in part.parameters() if p.requires_grad]
        loads = [0] * len(place.dp_ranks)
        self.owner = []
        for p in self.params:
            i = loads.index(min(loads))
            self.owner.append(i)
            loads[i] += p.numel()
        me = place.dp_ranks.index(dist.get_rank())
        mine = [p for p, o in zip(self.params, self.owner) if o == me]
        self.inner = torch.optim.AdamW(mine, lr=lr) if mine else None
        self.waiting = {}
        if OVERLAP_PARAM_GATHER:
            for m in part.modules():
                if m is not part and any(True for _ in m.parameters(recurse=False)):
                    m.register_forward_pre_hook(self._wait_for)

    def _wait_for(self, module, args):
        for p in module.parameters(recurse=False):
            work = self.waiting.pop(id(p), None)
            if work is not None:
                work.wait()

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        if self.inner is not None:
            self.inner.step()
        with torch.no_grad():
            for p, o in zip(self.params, self.owner):
                work = dist.broadcast(_local(p.data), self.place.dp_ranks[o],
                                      group=self.place.dp_group, async_op=True)
                self.waiting[id(p)] = work
        if not OVERLAP_PARAM_GATHER:
            for work in self.waiting.values():
                work.wait()
            self.waiting = {}


def finish(optim):
    """Waits for the weights the last step is still sending."""
    for work in getattr(optim, "waiting", {}).values():
        work.wait()


def optimizer(parts, mesh=None, lr=3e-4):
    """AdamW over this stage's weights; ZeRO-1 shards its state over the
    stage's replicas."""
    place = mesh or device_mesh()
    if ZERO_STAGE == 1 and len(place.dp_ranks) > 1:
        return ShardedAdamW(parts[0], place, lr)
    return torch.optim.AdamW([p for part in parts for p in part.parameters()
                              if p.requires_grad], lr=lr)


def train_step(parts, schedule, optim, inputs, labels, loss_fn, mesh=None):
    """One step: `inputs`, `labels` the rows batch_rows(mesh) of the global
    batch, run through the replica's stages as 1F1B, gradients reduced over
    the replicas and groups, then the optimizer's step. Returns the
    replica's mean loss on its last stage's tp rank 0, else None."""
    place = mesh or device_mesh()
    optim.zero_grad()
    split_head = place.spec["head"] and place.spec["tp"] > 1
    with _precision(), (loss_parallel() if split_head else contextlib.nullcontext()):
        total = schedule.step(inputs, labels)
    _reduce_gradients(parts, schedule, place)
    optim.step()
    return total if place.tp_rank == 0 else None
