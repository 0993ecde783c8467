"""Trains tiny_llama's shapes in JAX under a JAX export of an Orrery plan:
the weights and activations placed by the export's mesh and PartitionSpecs
on N CPU devices (XLA's host platform split in N), XLA's partitioner
inserting the collectives; or, with --reference, on one device. Writes the
loss of each step as JSON.

    python3 jax_train.py --plan PLAN.py --devices N --steps S --out F
    python3 jax_train.py --reference --global-batch G --steps S --out F

The model is tiny_llama's (same dims, weights from a fixed numpy seed, not
torch's), a step is the plan's micro-batches accumulated (lax.scan) then
one AdamW update.
"""
import argparse
import importlib.util
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    return ap.parse_args()


ARGS = parse()
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={ARGS.devices}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from tiny_llama import DIM, HEADS, HIDDEN, LAYERS, SEQ, VOCAB  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


def init():
    rng = np.random.default_rng(0)

    def w(*shape):
        return jnp.asarray(rng.normal(0, 0.02, shape), jnp.float32)

    blocks = [{"attention_norm": jnp.ones(DIM), "wq": w(DIM, DIM), "wk": w(DIM, DIM),
               "wv": w(DIM, DIM), "wo": w(DIM, DIM), "ffn_norm": jnp.ones(DIM),
               "w1": w(DIM, HIDDEN), "w3": w(DIM, HIDDEN), "w2": w(HIDDEN, DIM)}
              for _ in range(LAYERS)]
    return {"tok_embeddings": w(VOCAB, DIM), "blocks": blocks, "norm": jnp.ones(DIM),
            "output": w(DIM, VOCAB)}


def roles(plan):
    """The export's PartitionSpec for each weight, by role."""
    block = {"attention_norm": plan.REPLICATED, "ffn_norm": plan.REPLICATED,
             "wq": plan.COLUMN_PARALLEL, "wk": plan.COLUMN_PARALLEL, "wv": plan.COLUMN_PARALLEL,
             "w1": plan.COLUMN_PARALLEL, "w3": plan.COLUMN_PARALLEL,
             "wo": plan.ROW_PARALLEL, "w2": plan.ROW_PARALLEL}
    return {"tok_embeddings": plan.EMBEDDING, "blocks": [block] * LAYERS,
            "norm": plan.REPLICATED, "output": plan.COLUMN_PARALLEL}


def rms(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-5) * w


def forward(params, tokens, constrain):
    h = constrain(params["tok_embeddings"][tokens])
    b, t = tokens.shape
    mask = jnp.tril(jnp.ones((t, t), bool))
    for blk in params["blocks"]:
        x = rms(h, blk["attention_norm"])
        q, k, v = ((x @ blk[n]).reshape(b, t, HEADS, -1) for n in ("wq", "wk", "wv"))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(DIM // HEADS)
        a = jax.nn.softmax(jnp.where(mask, s, -1e30), -1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, DIM)
        h = constrain(h + o @ blk["wo"])
        x = rms(h, blk["ffn_norm"])
        h = constrain(h + (jax.nn.silu(x @ blk["w1"]) * (x @ blk["w3"])) @ blk["w2"])
    return rms(h, params["norm"]) @ params["output"]


def loss_fn(params, tokens, labels, constrain):
    logits = forward(params, tokens, constrain)
    logp = jax.nn.log_softmax(logits, -1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], -1))


def adamw(params, grads, state, lr=3e-4, b1=0.9, b2=0.999, eps=1e-8, wd=0.01):
    step, m, v = state
    step = step + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    c1, c2 = 1 - b1 ** step, 1 - b2 ** step
    params = jax.tree.map(lambda p, m, v: p - lr * (m / c1 / (jnp.sqrt(v / c2) + eps) + wd * p),
                          params, m, v)
    return params, (step, m, v)


def batches(steps, batch):
    rng = np.random.default_rng(1)
    for _ in range(steps):
        tokens = rng.integers(0, VOCAB, (batch, SEQ + 1))
        yield tokens[:, :-1], tokens[:, 1:]


def main():
    plan = None
    if ARGS.plan:
        spec = importlib.util.spec_from_file_location("plan", ARGS.plan)
        plan = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(plan)
    gbs = plan.GLOBAL_BATCH_SIZE if plan else ARGS.global_batch
    params = init()
    full = sum(x.size for x in jax.tree.leaves(params))
    if plan:
        m = plan.mesh()
        shardings = jax.tree.map(lambda s: plan.sharding(s, m), roles(plan),
                                 is_leaf=lambda s: isinstance(s, jax.sharding.PartitionSpec))
        params = jax.device_put(params, shardings)
        act = plan.sharding(plan.ACTIVATIONS, m)
        constrain = lambda x: jax.lax.with_sharding_constraint(x, act)  # noqa: E731
        dp = dict(zip(plan.AXES, plan.SHAPE))["dp"]
        micro = gbs // (plan.MICRO_BATCH_SIZE * dp)
        data = plan.sharding(jax.sharding.PartitionSpec(None, "dp", "cp"), m)
    else:
        constrain, micro, data = (lambda x: x), 1, None
    state = (0, jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params))

    @jax.jit
    def step(params, state, tokens, labels):
        def accumulate(total, xy):
            loss, grads = jax.value_and_grad(loss_fn)(params, xy[0], xy[1], constrain)
            return jax.tree.map(jnp.add, total, (loss, grads)), None
        zero = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
        (loss, grads), _ = jax.lax.scan(accumulate, zero, (tokens, labels))
        grads = jax.tree.map(lambda g: g / tokens.shape[0], grads)
        params, state = adamw(params, grads, state)
        return params, state, loss / tokens.shape[0]

    losses = []
    for x, y in batches(ARGS.steps, gbs):
        # [micro-batches, replicas x micro-batch, sequence]: micro-batch i of
        # every replica together, as each replica accumulates its own.
        if plan:
            x, y = (a.reshape(dp, micro, -1, SEQ).transpose(1, 0, 2, 3).reshape(micro, -1, SEQ)
                    for a in (x, y))
        else:
            x, y = x[None], y[None]
        if data is not None:
            x, y = jax.device_put(x, data), jax.device_put(y, data)
        params, state, loss = step(params, state, x, y)
        losses.append(float(loss))
    # The type the model computes in (its logits'), as the sharded step ran.
    dtype = jax.eval_shape(lambda p, t: forward(p, t, constrain), params,
                           jax.ShapeDtypeStruct((1, SEQ), jnp.int32)).dtype
    leaves = jax.tree.leaves(params)
    local = sum(leaf.addressable_shards[0].data.size for leaf in leaves)
    with open(ARGS.out, "w") as f:
        json.dump({"losses": losses, "compute_dtype": f"jax.{dtype}",
                   "local_parameters": local, "parameters": full}, f)


if __name__ == "__main__":
    main()
