#!/usr/bin/python3
"""Writes shape-only ONNX models of named published architectures.

Every weight is an initializer with dims and a data type but no bytes
(data_location=EXTERNAL, pointing at a file that is never written), so even
Llama-3 405B is a few hundred KB. Needs Debian's python3-onnx (1.12).

    models/generate.py --list
    models/generate.py gpt3-175b -o gpt3-175b.onnx
    models/generate.py --all DIR

Each model's published parameter count and its source are in REFERENCES;
`orrery stats` on the written file must agree within 1% (tests/e2e checks).
The graphs use ONNX opset 20 (Gelu, LayerNormalization, axes as inputs), which
ONNX 1.12's own shape inference does not know: Orrery infers their shapes
itself.
"""

import argparse
import math
import os
import sys

import onnx
from onnx import TensorProto, helper

OPSET = 20
IR_VERSION = 9

F16 = TensorProto.FLOAT16
F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


class Graph:
    """A small builder: unique names, shape-only weights, constants."""

    def __init__(self, name, dtype=F16):
        self.name = name
        self.dtype = dtype
        self.nodes = []
        self.inits = []
        self.inputs = []
        self.outputs = []
        self.count = 0

    def fresh(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def weight(self, name, shape, dtype=None):
        t = TensorProto()
        t.name = name
        t.data_type = self.dtype if dtype is None else dtype
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        size = 2 if t.data_type == F16 else 4
        for key, value in (("location", f"{self.name}.weights.bin"),
                           ("offset", "0"),
                           ("length", str(size * math.prod(shape)))):
            entry = t.external_data.add()
            entry.key = key
            entry.value = value
        self.inits.append(t)
        return name

    def const(self, values, dtype=I64, shape=None):
        out = self.fresh("const")
        if shape is None:
            shape = [len(values)] if isinstance(values, (list, tuple)) else []
        vals = list(values) if isinstance(values, (list, tuple)) else [values]
        self.nodes.append(helper.make_node(
            "Constant", [], [out], name=out,
            value=helper.make_tensor(out + "_value", dtype, shape, vals)))
        return out

    def op(self, op_type, inputs, outputs=1, hint=None, **attrs):
        names = [self.fresh(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names,
                                           name=names[0] + "_node", **attrs))
        return names[0] if outputs == 1 else names

    def input(self, name, dtype, shape):
        self.inputs.append(helper.make_tensor_value_info(name, dtype, shape))
        return name

    def output(self, value, name, dtype, shape):
        self.nodes.append(helper.make_node("Identity", [value], [name], name=name + "_out"))
        self.outputs.append(helper.make_tensor_value_info(name, dtype, shape))

    def model(self):
        graph = helper.make_graph(self.nodes, self.name, self.inputs,
                                  self.outputs, self.inits)
        m = helper.make_model(graph, producer_name="orrery-models",
                              opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = IR_VERSION
        return m

    # Building blocks ---------------------------------------------------

    def linear(self, x, prefix, d_in, d_out, bias=True):
        y = self.op("MatMul", [x, self.weight(prefix + ".weight", [d_in, d_out])])
        if bias:
            y = self.op("Add", [y, self.weight(prefix + ".bias", [d_out])])
        return y

    def layer_norm(self, x, prefix, d):
        return self.op("LayerNormalization",
                       [x, self.weight(prefix + ".weight", [d]),
                        self.weight(prefix + ".bias", [d])],
                       axis=-1, epsilon=1e-5)

    def rms_norm(self, x, prefix, d):
        sq = self.op("Mul", [x, x])
        mean = self.op("ReduceMean", [sq, self.const([-1])], keepdims=1)
        eps = self.const(1e-5, self.dtype)
        inv = self.op("Reciprocal", [self.op("Sqrt", [self.op("Add", [mean, eps])])])
        return self.op("Mul", [self.op("Mul", [x, inv]), self.weight(prefix + ".weight", [d])])

    def dropout(self, x, training):
        if not training:
            return x
        return self.op("Dropout", [x, self.const(0.1, F32), self.const(True, TensorProto.BOOL)])

    def heads(self, x, n, dh, perm):
        """[B, S, n*dh] -> [B, n, S, dh] (or another perm)."""
        return self.op("Transpose", [self.op("Reshape", [x, self.const([0, 0, n, dh])])],
                       perm=perm)

    def merge_heads(self, x, d):
        """[B, n, S, dh] -> [B, S, n*dh]."""
        return self.op("Reshape", [self.op("Transpose", [x], perm=[0, 2, 1, 3]),
                                   self.const([0, 0, d])])

    def causal_mask(self, seq):
        """[seq, seq] with -inf above the diagonal, built once from constants."""
        fill = helper.make_tensor("fill", self.dtype, [1], [-65504.0 if self.dtype == F16 else -1e9])
        full = self.op("ConstantOfShape", [self.const([seq, seq])], value=fill)
        return self.op("Trilu", [full, self.const(1)], upper=1)

    def sliding_window_mask(self, seq, window):
        """The causal mask with the keys `window` or more positions back
        masked too (torch.tril(full, -window)): a band of `window` keys."""
        fill = helper.make_tensor("fill", self.dtype, [1], [-65504.0 if self.dtype == F16 else -1e9])
        full = self.op("ConstantOfShape", [self.const([seq, seq])], value=fill)
        far = self.op("Trilu", [full, self.const(-window)], upper=0)
        return self.op("Add", [self.causal_mask(seq), far])

    def chunked_mask(self, seq, chunk):
        """The causal mask with the keys outside the query's own
        `chunk`-token block masked too (Llama 4's chunked attention:
        causal within block-diagonal blocks); block ids are position //
        chunk, and the block mask keeps its lower triangle so it never
        overlaps the causal one. The causal mask when seq <= chunk."""
        fill = -65504.0 if self.dtype == F16 else -1e9
        pos = self.op("Range", [self.const(0), self.const(seq), self.const(1)])
        block = self.op("Div", [pos, self.const(chunk)])
        same = self.op("Equal", [self.op("Unsqueeze", [block, self.const([1])]),
                                 self.op("Unsqueeze", [block, self.const([0])])])
        other = self.op("Where", [same, self.const(0.0, self.dtype), self.const(fill, self.dtype)])
        far = self.op("Trilu", [other, self.const(0)], upper=0)
        return self.op("Add", [self.causal_mask(seq), far])

    def attention(self, x, prefix, d, heads, kv_heads, seq, mask, bias, training,
                  rope=None, head_dim=None, qk_norm=False, sinks=False):
        """Multi-head attention; `head_dim` when heads × head_dim is not d
        (Qwen3), `qk_norm`: RMSNorm of each query and key head (Qwen3),
        `sinks`: a learned logit per head (GPT-OSS's attention sinks, HF's
        eager_attention_forward) joins each row of scores as one more
        column, takes part in the softmax and is dropped before V."""
        dh = head_dim or d // heads
        if kv_heads == heads and rope is None and dh * heads == d:
            qkv = self.linear(x, prefix + ".qkv", d, 3 * d, bias)
            q, k, v = self.op("Split", [qkv, self.const([d, d, d])], outputs=3, axis=-1)
        else:
            q = self.linear(x, prefix + ".q", d, heads * dh, bias)
            k = self.linear(x, prefix + ".k", d, kv_heads * dh, bias)
            v = self.linear(x, prefix + ".v", d, kv_heads * dh, bias)
        q = self.heads(q, heads, dh, [0, 2, 1, 3])
        k = self.heads(k, kv_heads, dh, [0, 2, 1, 3])
        v = self.heads(v, kv_heads, dh, [0, 2, 1, 3])
        if qk_norm:
            q = self.rms_norm(q, prefix + ".q_norm", dh)
            k = self.rms_norm(k, prefix + ".k_norm", dh)
        if rope is not None:
            q = self.rotary(q, rope)
            k = self.rotary(k, rope)
        if kv_heads != heads:
            # Grouped-query attention: each K/V head serves heads/kv_heads queries.
            k = self.repeat_kv(k, kv_heads, heads // kv_heads, seq, dh)
            v = self.repeat_kv(v, kv_heads, heads // kv_heads, seq, dh)
        kt = self.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = self.op("Mul", [self.op("MatMul", [q, kt]),
                                 self.const(1.0 / math.sqrt(dh), self.dtype)])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        if sinks:
            # [heads] -> [b, heads, q, 1], concatenated after the k columns;
            # softmax over k + 1; probs[..., :-1].
            sink = self.op("Reshape", [self.weight(prefix + ".sinks", [heads]),
                                       self.const([1, heads, 1, 1])])
            rows = self.op("Slice", [self.op("Shape", [scores]), self.const([0]),
                                     self.const([3]), self.const([0])])
            sink = self.op("Expand", [sink, self.op("Concat", [rows, self.const([1])], axis=0)])
            probs = self.op("Softmax", [self.op("Concat", [scores, sink], axis=-1)], axis=-1)
            probs = self.op("Slice", [probs, self.const([0]), self.const([-1]), self.const([-1])])
            probs = self.dropout(probs, training)
        else:
            probs = self.dropout(self.op("Softmax", [scores], axis=-1), training)
        out = self.merge_heads(self.op("MatMul", [probs, v]), heads * dh)
        return self.dropout(self.linear(out, prefix + ".out", heads * dh, d, bias), training)

    def repeat_kv(self, x, kv, groups, seq, dh):
        x = self.op("Reshape", [x, self.const([0, kv, 1, seq, dh])])
        x = self.op("Expand", [x, self.const([1, kv, groups, seq, dh])])
        return self.op("Reshape", [x, self.const([0, kv * groups, seq, dh])])

    def rotary_tables(self, seq, dh, theta):
        """cos and sin [seq, dh] computed in the graph (buffers, not weights)."""
        pos = self.op("Cast", [self.op("Range", [self.const(0), self.const(seq), self.const(1)])], to=F32)
        idx = self.op("Cast", [self.op("Range", [self.const(0), self.const(dh), self.const(2)])], to=F32)
        expo = self.op("Neg", [self.op("Div", [idx, self.const(float(dh), F32)])])
        inv = self.op("Pow", [self.const(float(theta), F32), expo])
        freqs = self.op("Mul", [self.op("Unsqueeze", [pos, self.const([1])]),
                                self.op("Unsqueeze", [inv, self.const([0])])])
        emb = self.op("Concat", [freqs, freqs], axis=-1)
        cos = self.op("Cast", [self.op("Cos", [emb])], to=self.dtype)
        sin = self.op("Cast", [self.op("Sin", [emb])], to=self.dtype)
        return cos, sin, dh

    def rotary(self, x, rope):
        cos, sin, dh = rope
        half = dh // 2
        x1 = self.op("Slice", [x, self.const([0]), self.const([half]), self.const([-1])])
        x2 = self.op("Slice", [x, self.const([half]), self.const([dh]), self.const([-1])])
        rotated = self.op("Concat", [self.op("Neg", [x2]), x1], axis=-1)
        return self.op("Add", [self.op("Mul", [x, cos]), self.op("Mul", [rotated, sin])])


# Decoder-only language models ---------------------------------------------

def gpt(name, layers, d, heads, seq, vocab, ffn=None, training=True, kv_heads=None,
        untied=False):
    """GPT-2/3 and Megatron GPT: learned positions, pre-LN, GELU, tied head
    (or, `untied`, a head of its own: Megatron's
    --untie-embeddings-and-output-weights); `kv_heads` below `heads` for
    grouped-query attention (--num-query-groups)."""
    g = Graph(name)
    ffn = ffn or 4 * d
    kv_heads = kv_heads or heads
    ids = g.input("input_ids", I64, ["batch", seq])
    wte = g.weight("wte", [vocab, d])
    pos = g.op("Range", [g.const(0), g.const(seq), g.const(1)])
    x = g.op("Add", [g.op("Gather", [wte, ids]), g.op("Gather", [g.weight("wpe", [seq, d]), pos])])
    x = g.dropout(x, training)
    mask = g.causal_mask(seq)
    for i in range(layers):
        p = f"h.{i}"
        x = g.op("Add", [x, g.attention(g.layer_norm(x, p + ".ln_1", d), p + ".attn", d,
                                        heads, kv_heads, seq, mask, True, training)])
        h = g.op("Gelu", [g.linear(g.layer_norm(x, p + ".ln_2", d), p + ".mlp.fc", d, ffn)])
        x = g.op("Add", [x, g.dropout(g.linear(h, p + ".mlp.proj", ffn, d), training)])
    x = g.layer_norm(x, "ln_f", d)
    head = g.weight("lm_head", [vocab, d]) if untied else wte
    logits = g.op("MatMul", [x, g.op("Transpose", [head], perm=[1, 0])])
    g.output(logits, "logits", F16, ["batch", seq, vocab])
    return g.model()


def llama(name, layers, d, heads, kv_heads, ffn, seq, vocab, theta, moe=None,
          head_dim=None, qk_norm=False, window=None):
    """Llama-2/3 (and Mixtral when `moe` = (experts, top_k); Qwen3 with its
    `head_dim` and `qk_norm`; Mistral 7B v0.1 with its sliding `window`):
    RMSNorm, RoPE, grouped-query attention, SwiGLU, untied head, no biases,
    no dropout."""
    g = Graph(name)
    dh = head_dim or d // heads
    x = token_embedding(g, vocab, d, seq)
    mask = g.sliding_window_mask(seq, window) if window else g.causal_mask(seq)
    rope = g.rotary_tables(seq, dh, theta)
    for i in range(layers):
        p = f"layers.{i}"
        x = g.op("Add", [x, g.attention(g.rms_norm(x, p + ".input_layernorm", d),
                                        p + ".self_attn", d, heads, kv_heads, seq,
                                        mask, False, False, rope, dh, qk_norm)])
        h = g.rms_norm(x, p + ".post_attention_layernorm", d)
        if moe is None:
            gate = g.linear(h, p + ".mlp.gate", d, ffn, False)
            up = g.linear(h, p + ".mlp.up", d, ffn, False)
            act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
            y = g.linear(act, p + ".mlp.down", ffn, d, False)
        else:
            y = moe_ffn(g, h, p + ".moe", d, ffn, moe[0], moe[1])
        x = g.op("Add", [x, y])
    return untied_head(g, x, d, vocab, seq)


def token_embedding(g, vocab, d, seq):
    """The token ids input and their rows of an embedding table."""
    ids = g.input("input_ids", I64, ["batch", seq])
    return g.op("Gather", [g.weight("embed_tokens", [vocab, d]), ids])


def untied_head(g, x, d, vocab, seq):
    """The final RMSNorm and an output head of its own; the model."""
    logits = g.linear(g.rms_norm(x, "norm", d), "lm_head", d, vocab, False)
    g.output(logits, "logits", F16, ["batch", seq, vocab])
    return g.model()


def llama4(name, layers, d, heads, kv_heads, head_dim, expert_ffn, dense_ffn, experts, moe_every,
           seq, vocab, theta, chunk=8192, nope_every=4):
    """Llama 4's text model (Scout, Maverick; no vision tower): RMSNorm,
    grouped-query attention, no biases, untied head. Layer i with
    (i + 1) % `moe_every` == 0 (HF's interleave_moe_layer_step) is a mixture
    of `experts` routed experts, top 1, the sigmoid of the chosen router
    logit scaling the token into its expert, plus one shared expert, all
    SwiGLU of width `expert_ffn`; the others a dense SwiGLU of `dense_ffn`
    (intermediate_size_mlp). Layer i with (i + 1) % `nope_every` == 0 (HF's
    no_rope_layers) has no RoPE and attends causally over the whole
    sequence; the others use RoPE and chunked attention (causal within
    `chunk`-token blocks). Not written: Scout's weightless L2 norm of q and
    k on the RoPE layers (use_qk_norm), the NoPE layers' query temperature
    (attn_temperature_tuning), RoPE's llama3 frequency scaling (values only)
    and its interleaved pairs (the same shapes)."""
    g = Graph(name)
    x = token_embedding(g, vocab, d, seq)
    chunked = g.chunked_mask(seq, chunk)
    causal = g.causal_mask(seq)
    rope = g.rotary_tables(seq, head_dim, theta)
    for i in range(layers):
        p = f"layers.{i}"
        nope = (i + 1) % nope_every == 0
        x = g.op("Add", [x, g.attention(g.rms_norm(x, p + ".input_layernorm", d),
                                        p + ".self_attn", d, heads, kv_heads, seq,
                                        causal if nope else chunked, False, False,
                                        None if nope else rope, head_dim)])
        h = g.rms_norm(x, p + ".post_attention_layernorm", d)
        if (i + 1) % moe_every == 0:
            y = moe_ffn(g, h, p + ".feed_forward", d, expert_ffn, experts, 1,
                        gating="sigmoid_input", shared_ffn=expert_ffn)
        else:
            y = swiglu(g, h, p + ".feed_forward", d, dense_ffn)
        x = g.op("Add", [x, y])
    return untied_head(g, x, d, vocab, seq)


def gpt_oss(name, layers, d, heads, kv_heads, head_dim, experts, top_k, expert_ffn, seq, vocab,
            window=128, theta=150000):
    """OpenAI's GPT-OSS: RMSNorm, RoPE, grouped-query attention with biases
    on q, k, v and out and a learned sink logit per head; even layers attend
    over a sliding window of `window` keys, odd layers causally over the
    whole sequence; every layer a mixture of `experts` experts, top `top_k`
    by the router's logits (the router has a bias), softmax over the k
    chosen, the experts' projections with biases; untied head. The experts'
    activation is written as plain SwiGLU: the model clamps gate to at most
    7 and up to [-7, 7] and computes (up + 1) · gate · sigmoid(1.702 · gate)
    (elementwise, no weights); RoPE's YaRN scaling changes values only."""
    g = Graph(name)
    x = token_embedding(g, vocab, d, seq)
    sliding = g.sliding_window_mask(seq, window)
    causal = g.causal_mask(seq)
    rope = g.rotary_tables(seq, head_dim, theta)
    for i in range(layers):
        p = f"layers.{i}"
        x = g.op("Add", [x, g.attention(g.rms_norm(x, p + ".input_layernorm", d),
                                        p + ".self_attn", d, heads, kv_heads, seq,
                                        causal if i % 2 else sliding, True, False,
                                        rope, head_dim, sinks=True)])
        h = g.rms_norm(x, p + ".post_attention_layernorm", d)
        y = moe_ffn(g, h, p + ".mlp", d, expert_ffn, experts, top_k, gating="topk_softmax",
                    router_bias=True, expert_bias=True)
        x = g.op("Add", [x, y])
    return untied_head(g, x, d, vocab, seq)


def ffn_stack(name, layers, d):
    """A feed-forward network of `layers` dense layers of width d (ReLU):
    the model phantom parallelism is defined on (Seal et al., arXiv
    2508.00960)."""
    g = Graph(name)
    x = g.input("x", F16, ["batch", d])
    for i in range(layers):
        x = g.op("Relu", [g.linear(x, f"layers.{i}", d, d)])
    g.output(x, "y", F16, ["batch", d])
    return g.model()


def moe_ffn(g, h, prefix, d, ffn, experts, top_k, gating="softmax", router_bias=False,
            expert_bias=False, shared_ffn=None):
    """Top-k routed SwiGLU experts with capacity factor 1.

    The graph has the shapes and FLOPs of a dropless top-k MoE: tokens are
    gathered into [experts, capacity, d] by the router's choice (Gather),
    each expert runs its FFN as one batched MatMul, the router's weights
    scale each expert's activation before its second MatMul (where
    Megatron-Core's grouped MLP applies the permuted probabilities, in its
    fused weighted SwiGLU: the second MatMul's output is not kept), and the
    k outputs of each token are summed. Which rows go where is data, so the
    reshapes stand for the permutation a real dispatch performs.

    `gating`: "softmax" (Mixtral, Qwen3, DeepSeek-V2): the top k of the
    softmax over all experts; "topk_softmax" (GPT-OSS): the softmax over the
    k chosen logits; "sigmoid_norm" (DeepSeek-V3): sigmoid scores, the k
    chosen by score plus a per-expert balancing bias (a buffer: the
    auxiliary-loss-free balancing), their scores normalised to sum to 1;
    "sigmoid_input" (Llama 4's Llama4TextMoe): the sigmoid of each chosen
    logit scales the token going into its expert, the outputs summed
    unweighted. `router_bias`: the router's bias (GPT-OSS); `expert_bias`:
    [experts, 1, f] biases after each expert MatMul (GPT-OSS); `shared_ffn`:
    a dense SwiGLU of that width on every token, added to the routed output
    (Llama 4's shared expert, DeepSeek's shared experts).
    """
    flat = g.op("Reshape", [h, g.const([-1, d])])
    logits = g.linear(flat, prefix + ".router", d, experts, router_bias)
    if gating == "softmax":
        probs = g.op("Softmax", [logits], axis=-1)
        top_w, top_i = g.op("TopK", [probs, g.const([top_k])], outputs=2, axis=-1)
    elif gating == "sigmoid_norm":
        scores = g.op("Sigmoid", [logits])
        bias = g.weight(prefix + ".router.e_score_correction_bias", [experts], F32)
        choice = g.op("Add", [g.op("Cast", [scores], to=F32), bias])
        _, top_i = g.op("TopK", [choice, g.const([top_k])], outputs=2, axis=-1)
        top_w = g.op("GatherElements", [scores, top_i], axis=-1)
        top_w = g.op("Div", [top_w, g.op("ReduceSum", [top_w, g.const([-1])], keepdims=1)])
    else:
        top_l, top_i = g.op("TopK", [logits, g.const([top_k])], outputs=2, axis=-1)
        top_w = (g.op("Softmax", [top_l], axis=-1) if gating == "topk_softmax"
                 else g.op("Sigmoid", [top_l]))
    slots = g.op("Reshape", [top_i, g.const([experts, -1])])
    xe = g.op("Gather", [flat, slots], axis=0)
    if gating == "sigmoid_input":
        xe = g.op("Mul", [xe, g.op("Reshape", [g.op("Cast", [top_w], to=g.dtype),
                                               g.const([experts, -1, 1])])])
    w1 = g.weight(prefix + ".w1", [experts, d, ffn])
    w3 = g.weight(prefix + ".w3", [experts, d, ffn])
    w2 = g.weight(prefix + ".w2", [experts, ffn, d])
    gate = g.op("MatMul", [xe, w1])
    if expert_bias:
        gate = g.op("Add", [gate, g.weight(prefix + ".b1", [experts, 1, ffn])])
    silu = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
    up = g.op("MatMul", [xe, w3])
    if expert_bias:
        up = g.op("Add", [up, g.weight(prefix + ".b3", [experts, 1, ffn])])
    act = g.op("Mul", [silu, up])
    if gating != "sigmoid_input":
        act = g.op("Mul", [act, g.op("Reshape", [g.op("Cast", [top_w], to=g.dtype),
                                                 g.const([experts, -1, 1])])])
    ye = g.op("MatMul", [act, w2])
    if expert_bias:
        ye = g.op("Add", [ye, g.weight(prefix + ".b2", [experts, 1, d])])
    routed = g.op("Reshape", [ye, g.const([-1, top_k, d])])
    combined = g.op("ReduceSum", [routed, g.const([1])], keepdims=0)
    y = g.op("Reshape", [combined, g.op("Shape", [h])])
    if shared_ffn:
        y = g.op("Add", [y, swiglu(g, h, prefix + ".shared_experts", d, shared_ffn)])
    return y


def mla_attention(g, x, prefix, d, heads, q_lora, kv_lora, nope, rope_dim, v_dim, mask, rope):
    """Multi-head latent attention (DeepSeek-V2/V3), as transformers'
    DeepseekV3Attention writes it: queries through a low-rank bottleneck
    (`q_lora`; none when 0, V2-Lite), keys and values up-projected per head
    from one per-token latent of `kv_lora` (the KV cache an engine keeps),
    each key's last `rope_dim` dims a rotary part computed once per token
    and shared by all heads."""
    if q_lora:
        cq = g.rms_norm(g.linear(x, prefix + ".q_a_proj", d, q_lora, False),
                        prefix + ".q_a_layernorm", q_lora)
        q = g.linear(cq, prefix + ".q_b_proj", q_lora, heads * (nope + rope_dim), False)
    else:
        q = g.linear(x, prefix + ".q_proj", d, heads * (nope + rope_dim), False)
    q = g.heads(q, heads, nope + rope_dim, [0, 2, 1, 3])
    q_pass = g.op("Slice", [q, g.const([0]), g.const([nope]), g.const([-1])])
    q_rot = g.op("Slice", [q, g.const([nope]), g.const([nope + rope_dim]), g.const([-1])])
    ckv = g.linear(x, prefix + ".kv_a_proj_with_mqa", d, kv_lora + rope_dim, False)
    latent = g.op("Slice", [ckv, g.const([0]), g.const([kv_lora]), g.const([-1])])
    k_rot = g.op("Slice", [ckv, g.const([kv_lora]), g.const([kv_lora + rope_dim]), g.const([-1])])
    kv = g.linear(g.rms_norm(latent, prefix + ".kv_a_layernorm", kv_lora),
                  prefix + ".kv_b_proj", kv_lora, heads * (nope + v_dim), False)
    kv = g.heads(kv, heads, nope + v_dim, [0, 2, 1, 3])
    k_pass = g.op("Slice", [kv, g.const([0]), g.const([nope]), g.const([-1])])
    value = g.op("Slice", [kv, g.const([nope]), g.const([nope + v_dim]), g.const([-1])])
    k_rot = g.rotary(g.op("Unsqueeze", [k_rot, g.const([1])]), rope)  # [B, 1, S, rope]
    k_rot = g.op("Expand", [k_rot, g.const([1, heads, 1, 1])])
    q = g.op("Concat", [q_pass, g.rotary(q_rot, rope)], axis=-1)
    k = g.op("Concat", [k_pass, k_rot], axis=-1)
    kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
    scores = g.op("Mul", [g.op("MatMul", [q, kt]),
                          g.const(1.0 / math.sqrt(nope + rope_dim), g.dtype)])
    probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
    out = g.merge_heads(g.op("MatMul", [probs, value]), heads * v_dim)
    return g.linear(out, prefix + ".o_proj", heads * v_dim, d, False)


def swiglu(g, h, prefix, d, ffn):
    gate = g.linear(h, prefix + ".gate_proj", d, ffn, False)
    up = g.linear(h, prefix + ".up_proj", d, ffn, False)
    act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
    return g.linear(act, prefix + ".down_proj", ffn, d, False)


def deepseek(name, layers, dense_layers, d, heads, q_lora, kv_lora, nope, rope_dim, v_dim,
             dense_ffn, experts, top_k, shared, expert_ffn, seq, vocab, sigmoid, mtp=0):
    """DeepSeek-V2/V3: multi-head latent attention in every layer, the
    first `dense_layers` with a dense SwiGLU, the rest DeepSeekMoE; RMSNorm,
    untied head. `mtp` multi-token-prediction modules (V3: one) each join
    the normalised last hidden state with the next token's embedding
    (eh_proj), run one more MoE layer and share the embedding and head."""
    g = Graph(name)
    ids = g.input("input_ids", I64, ["batch", seq])
    embed = g.weight("embed_tokens", [vocab, d])
    x = g.op("Gather", [embed, ids])
    mask = g.causal_mask(seq)
    rope = g.rotary_tables(seq, rope_dim, 10000)

    def block(x, p, moe):
        a = mla_attention(g, g.rms_norm(x, p + ".input_layernorm", d), p + ".self_attn", d,
                          heads, q_lora, kv_lora, nope, rope_dim, v_dim, mask, rope)
        x = g.op("Add", [x, a])
        h = g.rms_norm(x, p + ".post_attention_layernorm", d)
        y = (moe_ffn(g, h, p + ".mlp", d, expert_ffn, experts, top_k,
                     "sigmoid_norm" if sigmoid else "softmax", shared_ffn=shared * expert_ffn)
             if moe else swiglu(g, h, p + ".mlp", d, dense_ffn))
        return g.op("Add", [x, y])

    for i in range(layers):
        x = block(x, f"layers.{i}", i >= dense_layers)
    head = g.weight("lm_head", [vocab, d])
    logits = g.op("MatMul", [g.rms_norm(x, "norm", d), g.op("Transpose", [head], perm=[1, 0])])
    g.output(logits, "logits", F16, ["batch", seq, vocab])
    for j in range(mtp):
        p = f"mtp.{j}"
        # The next token's embedding (the shifted ids; the shift is data).
        e = g.rms_norm(g.op("Gather", [embed, ids]), p + ".enorm", d)
        hx = g.rms_norm(x, p + ".hnorm", d)
        x = g.linear(g.op("Concat", [e, hx], axis=-1), p + ".eh_proj", 2 * d, d, False)
        x = block(x, p + ".block", True)
        mlog = g.op("MatMul", [g.rms_norm(x, p + ".norm", d), g.op("Transpose", [head], perm=[1, 0])])
        g.output(mlog, f"mtp_logits_{j}", F16, ["batch", seq, vocab])
    return g.model()


# Encoders -------------------------------------------------------------------

def bert(name, layers, d, heads, ffn, seq=512, vocab=30522):
    """BERT (Devlin et al.): post-LN encoder, GELU, pooler; no MLM head."""
    g = Graph(name, F32)
    ids = g.input("input_ids", I64, ["batch", seq])
    types = g.input("token_type_ids", I64, ["batch", seq])
    pos = g.op("Range", [g.const(0), g.const(seq), g.const(1)])
    x = g.op("Add", [g.op("Add", [g.op("Gather", [g.weight("word_embeddings", [vocab, d]), ids]),
                                  g.op("Gather", [g.weight("token_type_embeddings", [2, d]), types])]),
                     g.op("Gather", [g.weight("position_embeddings", [512, d]), pos])])
    x = g.dropout(g.layer_norm(x, "embeddings.LayerNorm", d), True)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = g.attention(x, p + ".attention", d, heads, heads, seq, None, True, True)
        x = g.layer_norm(g.op("Add", [x, a]), p + ".attention.LayerNorm", d)
        h = g.op("Gelu", [g.linear(x, p + ".intermediate", d, ffn)])
        x = g.layer_norm(g.op("Add", [x, g.dropout(g.linear(h, p + ".output", ffn, d), True)]),
                         p + ".output.LayerNorm", d)
    first = g.op("Gather", [x, g.const(0)], axis=1)
    pooled = g.op("Tanh", [g.linear(first, "pooler.dense", d, d)])
    g.output(x, "last_hidden_state", F32, ["batch", seq, d])
    g.output(pooled, "pooler_output", F32, ["batch", d])
    return g.model()


def vit(name, layers, d, heads, mlp, patch, image=224, classes=1000):
    """ViT (Dosovitskiy et al.), torchvision layout: class token, pre-LN."""
    g = Graph(name, F32)
    px = g.input("pixel_values", F32, ["batch", 3, image, image])
    n = (image // patch) ** 2
    x = g.op("Conv", [px, g.weight("conv_proj.weight", [d, 3, patch, patch]),
                      g.weight("conv_proj.bias", [d])],
             kernel_shape=[patch, patch], strides=[patch, patch])
    x = g.op("Transpose", [g.op("Reshape", [x, g.const([0, d, n])])], perm=[0, 2, 1])
    batch = g.op("Gather", [g.op("Shape", [px]), g.const([0])], axis=0)
    cls_shape = g.op("Concat", [batch, g.const([1, d])], axis=0)
    cls = g.op("Expand", [g.weight("class_token", [1, 1, d]), cls_shape])
    x = g.op("Add", [g.op("Concat", [cls, x], axis=1),
                     g.weight("encoder.pos_embedding", [1, n + 1, d])])
    for i in range(layers):
        p = f"encoder.layers.{i}"
        x = g.op("Add", [x, g.attention(g.layer_norm(x, p + ".ln_1", d), p + ".self_attention",
                                        d, heads, heads, n + 1, None, True, True)])
        h = g.op("Gelu", [g.linear(g.layer_norm(x, p + ".ln_2", d), p + ".mlp.0", d, mlp)])
        x = g.op("Add", [x, g.dropout(g.linear(h, p + ".mlp.3", mlp, d), True)])
    x = g.layer_norm(x, "encoder.ln", d)
    first = g.op("Gather", [x, g.const(0)], axis=1)
    logits = g.linear(first, "heads.head", d, classes)
    g.output(logits, "logits", F32, ["batch", classes])
    return g.model()


def resnet(name, blocks, classes=1000):
    """ResNet v1.5 with bottlenecks (He et al.; torchvision layout)."""
    g = Graph(name, F32)
    x = g.input("pixel_values", F32, ["batch", 3, 224, 224])

    def conv_bn(x, prefix, cin, cout, k, stride, relu=True):
        y = g.op("Conv", [x, g.weight(prefix + ".conv.weight", [cout, cin, k, k])],
                 kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        y = g.op("BatchNormalization",
                 [y, g.weight(prefix + ".bn.weight", [cout]), g.weight(prefix + ".bn.bias", [cout]),
                  g.weight(prefix + ".bn.running_mean", [cout]),
                  g.weight(prefix + ".bn.running_var", [cout])],
                 outputs=3, training_mode=1)[0]
        return g.op("Relu", [y]) if relu else y

    x = conv_bn(x, "stem", 3, 64, 7, 2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (count, width) in enumerate(zip(blocks, [64, 128, 256, 512])):
        for b in range(count):
            p = f"layer{stage + 1}.{b}"
            stride = 2 if b == 0 and stage > 0 else 1
            y = conv_bn(x, p + ".1", cin, width, 1, 1)
            y = conv_bn(y, p + ".2", width, width, 3, stride)
            y = conv_bn(y, p + ".3", width, width * 4, 1, 1, relu=False)
            if b == 0:
                x = conv_bn(x, p + ".downsample", cin, width * 4, 1, stride, relu=False)
            x = g.op("Relu", [g.op("Add", [x, y])])
            cin = width * 4
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    logits = g.op("Gemm", [x, g.weight("fc.weight", [classes, cin]), g.weight("fc.bias", [classes])],
                  transB=1)
    g.output(logits, "logits", F32, ["batch", classes])
    return g.model()


# The catalog ----------------------------------------------------------------

def deepseek_v3(name, seq=None, mtp=0):
    """DeepSeek-V3's published shape (its HF config), with `mtp` modules."""
    return deepseek(name, 61, 3, 7168, 128, 1536, 512, 128, 64, 128, 18432, 256, 8, 1, 2048,
                    seq or 4096, 129280, True, mtp=mtp)


def gpt_closed_form(layers, d, seq, vocab, ffn=None):
    """Parameters of a GPT with learned positions, biases and a tied head:
    per layer 4d² (attention) + 2·d·ffn (MLP) + 4d + ffn + d (biases: QKV 3d,
    out d, fc ffn, proj d) + 4d (two LayerNorms); plus (V + n_ctx)·d
    embeddings and 2d for the final LayerNorm. With ffn = 4d this is
    Megatron's 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) (SC'21, Sec. 5.1)."""
    ffn = ffn or 4 * d
    per_layer = 4 * d * d + 2 * d * ffn + 3 * d + d + ffn + d + 4 * d
    return layers * per_layer + (vocab + seq) * d + 2 * d


def gpt_entry(name, layers, d, heads, seq, vocab, nominal, source):
    """A GPT whose reference count is the closed form of its published shape;
    the paper's rounded size is named in the source text."""
    return (lambda s=None: gpt(name, layers, d, heads, s or seq, vocab),
            gpt_closed_form(layers, d, seq, vocab),
            f"{source}: {nominal} (rounded); closed form of its shape")


GPT3 = "Brown et al. 2020, GPT-3 paper, Table 2.1"
SC21 = "Narayanan et al. SC'21, Table 1"

MODELS = {
    # GPT-3 family: n_layers, d_model, n_heads, context 2048, vocab 50257.
    # Where Table 2.1's heads x d_head differs from d_model (1.3B: 24 x 128;
    # 13B: d_model 5140), attention width is d_model with d_head 128.
    "gpt3-125m": gpt_entry("gpt3-125m", 12, 768, 12, 2048, 50257, "125M", GPT3),
    "gpt3-350m": gpt_entry("gpt3-350m", 24, 1024, 16, 2048, 50257, "350M", GPT3),
    "gpt3-760m": gpt_entry("gpt3-760m", 24, 1536, 16, 2048, 50257, "760M", GPT3),
    "gpt3-1.3b": gpt_entry("gpt3-1.3b", 24, 2048, 16, 2048, 50257, "1.3B", GPT3),
    "gpt3-2.7b": gpt_entry("gpt3-2.7b", 32, 2560, 32, 2048, 50257, "2.7B", GPT3),
    "gpt3-6.7b": gpt_entry("gpt3-6.7b", 32, 4096, 32, 2048, 50257, "6.7B", GPT3),
    "gpt3-13b": gpt_entry("gpt3-13b", 40, 5120, 40, 2048, 50257, "13B", GPT3),
    "gpt3-175b": gpt_entry("gpt3-175b", 96, 12288, 96, 2048, 50257, "175B", GPT3),
    # Megatron-LM SC'21 Table 1 (as in shared/validation/published_runs.json).
    "megatron-1.7b": gpt_entry("megatron-1.7b", 24, 2304, 24, 2048, 51200, "1.7B", SC21),
    "megatron-3.6b": gpt_entry("megatron-3.6b", 30, 3072, 32, 2048, 51200, "3.6B", SC21),
    "megatron-7.5b": gpt_entry("megatron-7.5b", 36, 4096, 32, 2048, 51200, "7.5B", SC21),
    "megatron-18.4b": gpt_entry("megatron-18.4b", 40, 6144, 48, 2048, 51200, "18.4B", SC21),
    "megatron-39.1b": gpt_entry("megatron-39.1b", 48, 8192, 64, 2048, 51200, "39.1B", SC21),
    "megatron-76.1b": gpt_entry("megatron-76.1b", 60, 10240, 80, 2048, 51200, "76.1B", SC21),
    "megatron-145.6b": gpt_entry("megatron-145.6b", 80, 12288, 96, 2048, 51200, "145.6B", SC21),
    "megatron-310.1b": gpt_entry("megatron-310.1b", 96, 16384, 128, 2048, 51200, "310.1B", SC21),
    "megatron-529.6b": gpt_entry("megatron-529.6b", 105, 20480, 128, 2048, 51200, "529.6B", SC21),
    "megatron-1008b": gpt_entry("megatron-1008b", 128, 25600, 160, 2048, 51200, "1008B", SC21),
    # Llama: layers, d, heads, kv heads, ffn, training sequence, vocab, RoPE theta.
    "llama2-7b": (lambda seq=None: llama("llama2-7b", 32, 4096, 32, 32, 11008, seq or 4096, 32000, 10000),
                  6.738e9, "Touvron et al. 2023 (Llama 2); 6,738,415,616 in the HF config"),
    "llama2-13b": (lambda seq=None: llama("llama2-13b", 40, 5120, 40, 40, 13824, seq or 4096, 32000, 10000),
                   13.016e9, "Touvron et al. 2023 (Llama 2); 13,015,864,320 in the HF config"),
    "llama2-70b": (lambda seq=None: llama("llama2-70b", 80, 8192, 64, 8, 28672, seq or 4096, 32000, 10000),
                   68.977e9, "Touvron et al. 2023 (Llama 2); 68,976,648,192 in the HF config"),
    "llama3-8b": (lambda seq=None: llama("llama3-8b", 32, 4096, 32, 8, 14336, seq or 8192, 128256, 500000),
                  8.030e9, "Meta Llama 3 model card: 8.03B"),
    "llama3-70b": (lambda seq=None: llama("llama3-70b", 80, 8192, 64, 8, 28672, seq or 8192, 128256, 500000),
                   70.554e9, "Meta Llama 3 model card: 70.6B"),
    "llama3-405b": (lambda seq=None: llama("llama3-405b", 126, 16384, 128, 8, 53248, seq or 8192, 128256, 500000),
                    405.85e9, "Llama 3 Herd of Models (Dubey et al. 2024), Table 3: 405B; 405.85B in the HF config"),
    # Mixture of experts: Mixtral 8x7B, 8 experts, top 2.
    "mixtral-8x7b": (lambda seq=None: llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, seq or 4096, 32000, 1e6, moe=(8, 2)),
                     46.70e9, "Jiang et al. 2024 (Mixtral of Experts): 46.7B total parameters"),
    # Mistral 7B (v0.3: no sliding window): Llama's shape with 8 kv heads, vocab 32768.
    "mistral-7b": (lambda seq=None: llama("mistral-7b", 32, 4096, 32, 8, 14336, seq or 8192, 32768, 1e6),
                   7.248e9, "Jiang et al. 2023 (Mistral 7B); 7,248,023,552 in the v0.3 HF config's shapes"),
    # Mistral 7B v0.1: every layer attends over a sliding window of 4,096
    # keys (its KV cache never holds more), vocab 32000.
    "mistral-7b-v0.1": (lambda seq=None: llama("mistral-7b-v0.1", 32, 4096, 32, 8, 14336, seq or 8192, 32000, 1e4,
                                               window=4096),
                        7.2417e9, "Jiang et al. 2023 (Mistral 7B): sliding window 4,096; 7,241,732,096 in the v0.1 "
                        "HF config's shapes"),
    # Mixtral 8x22B: 56 layers, d 6144, 48 heads, 8 kv heads, experts of ffn 16384, top 2.
    "mixtral-8x22b": (lambda seq=None: llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, seq or 4096, 32768, 1e6,
                                             moe=(8, 2)),
                      140.63e9, "Mistral AI, Mixtral 8x22B: 141B total parameters; 140,630,071,296 in "
                      "the HF config's shapes"),
    # Qwen3 30B-A3B: 128 experts of ffn 768, top 8; 32 query heads of 128
    # (4096 wide from a 2048 model), 4 key-value heads, RMSNorm on q and k.
    "qwen3-30b-a3b": (lambda seq=None: llama("qwen3-30b-a3b", 48, 2048, 32, 4, 768, seq or 4096, 151936,
                                             1e6, moe=(128, 8), head_dim=128, qk_norm=True),
                      30.532e9, "Qwen3 technical report (Yang et al. 2025): 30.5B total, 3.3B "
                      "activated; 30,532,122,624 in the HF config's shapes"),
    # Qwen3 235B-A22B: 94 layers, 128 experts of ffn 1536, top 8; 64 query
    # heads of 128 (8192 wide from a 4096 model), 4 key-value heads.
    "qwen3-235b-a22b": (lambda seq=None: llama("qwen3-235b-a22b", 94, 4096, 64, 4, 1536, seq or 4096,
                                               151936, 1e6, moe=(128, 8), head_dim=128, qk_norm=True),
                        235.094e9, "Qwen3 technical report (Yang et al. 2025): 235B total, 22B "
                        "activated; 235,093,634,560 in the HF config's shapes"),
    # DeepSeek-V3 (and R1, its architecture): 61 layers of multi-head latent
    # attention (128 heads; q rank 1536, kv latent 512, 128 + 64 rope dims
    # for q and k, 128 for v), the first 3 dense (ffn 18432), the rest 1
    # shared + 256 routed experts of ffn 2048, top 8 by sigmoid score.
    # 671,026,419,200 here; activated 37.55B with the embedding (36.63B
    # without it: the report's 37B). "deepseek-v3-mtp": with the one
    # multi-token-prediction module the report trains (11.6B more).
    "deepseek-v3": (lambda seq=None: deepseek_v3("deepseek-v3", seq),
                    671.03e9, "DeepSeek-V3 technical report (arXiv 2412.19437): 671B total, 37B "
                    "activated; 671,026,419,200 in the HF config's shapes without the MTP module"),
    "deepseek-v3-mtp": (lambda seq=None: deepseek_v3("deepseek-v3-mtp", seq, mtp=1),
                        682.64e9, "DeepSeek-V3 technical report: 671B main model plus a 14B MTP "
                        "module whose embedding and head are the main model's (HF: 685B with "
                        "their copies); 682,636,487,424 in the HF config's shapes"),
    # DeepSeek-V2-Lite: 27 layers of MLA (16 heads, no q compression), the
    # first dense (ffn 10944), then 2 shared + 64 routed experts of ffn
    # 1408, top 6 by softmax. Activated 2.66B with the embedding (2.45B
    # without: the paper's 2.4B).
    "deepseek-v2-lite": (lambda seq=None: deepseek("deepseek-v2-lite", 27, 1, 2048, 16, 0, 512, 128, 64,
                                                   128, 10944, 64, 6, 2, 1408, seq or 4096, 102400,
                                                   False),
                         15.706e9, "DeepSeek-V2 paper (arXiv 2405.04434), V2-Lite: 15.7B total, 2.4B "
                         "activated; 15,706,484,224 in the HF config's shapes"),
    # Llama 4 (text model, no vision tower): layers, d, heads, kv heads,
    # head_dim, expert ffn (intermediate_size), dense ffn
    # (intermediate_size_mlp), routed experts, MoE every n layers
    # (interleave_moe_layer_step), sequence, vocab, RoPE theta; top 1 plus a
    # shared expert, chunked attention over 8,192 tokens on three layers of
    # four (the default sequence is one chunk: it equals causal there).
    # Scout: every layer MoE, 16 experts. Active 17,172,894,720 with the
    # embedding and the head (16,138,408,960 without the embedding): per
    # layer attention 62,914,560 + norms 10,240 + router 81,920 + one routed
    # expert 125,829,120 + the shared 125,829,120, × 48, + 2 × 1,034,485,760.
    # The published 109B (HF: 108,641,793,536) adds the vision encoder and
    # projector, 871,932,416.
    "llama4-scout": (lambda seq=None: llama4("llama4-scout", 48, 5120, 40, 8, 128, 8192, 16384, 16, 1,
                                             seq or 8192, 202048, 5e5),
                     107.770e9, "Meta Llama 4 model card: Scout 109B total (with the vision "
                     "encoder), 17B active; 107,769,861,120 in the HF text config's shapes"),
    # Maverick: 128 experts on the odd layers, the even ones dense (ffn
    # 16384). Active 17,184,691,200 with the embedding and the head
    # (16,150,205,440 without the embedding): 24 dense layers of 314,583,040
    # and 24 MoE layers of 62,914,560 + 10,240 + 655,360 + 2 × 125,829,120,
    # + 2 × 1,034,485,760. The published 400B (HF: 402B) without the vision
    # encoder's 871,932,416.
    "llama4-maverick": (lambda seq=None: llama4("llama4-maverick", 48, 5120, 40, 8, 128, 8192, 16384,
                                                128, 2, seq or 8192, 202048, 5e5),
                        400.712e9, "Meta Llama 4 model card: Maverick 400B total, 17B active; "
                        "400,711,848,960 in the HF text config's shapes"),
    # GPT-OSS: layers, d, heads, kv heads, head_dim, experts, top k, expert
    # ffn, sequence (4,096: the config's initial_context_length, the context
    # before YaRN's extension to 131,072), vocab. Sliding window of 128 keys
    # on even layers, attention sinks, biases on attention and experts.
    # 120B: active 5,711,982,912 with the embedding and the head: per layer
    # attention 26,550,144 (with biases and sinks) + norms 5,760 + router
    # 368,768 + 4 experts × 24,891,840, × 36, + 2 × 579,133,440; without the
    # embedding 5,132,849,472, the model card's 5.13B.
    "gpt-oss-120b": (lambda seq=None: gpt_oss("gpt-oss-120b", 36, 2880, 64, 8, 64, 128, 4, 2880,
                                              seq or 4096, 201088),
                     116.829e9, "OpenAI gpt-oss model card (2025): 116.83B total, 5.13B active; "
                     "116,829,156,672 in the HF config's shapes"),
    # 20B: 32 experts. Active 4,187,440,704 with the embedding and the head
    # (router 92,192 per layer, × 24); without the embedding 3,608,307,264,
    # the model card's 3.61B.
    "gpt-oss-20b": (lambda seq=None: gpt_oss("gpt-oss-20b", 24, 2880, 64, 8, 64, 32, 4, 2880,
                                             seq or 4096, 201088),
                    20.915e9, "OpenAI gpt-oss model card (2025): 20.91B total, 3.61B active; "
                    "20,914,757,184 in the HF config's shapes"),
    # A tiny GPT for tests: 2 layers, d 64, 4 heads, 32 tokens, vocab 128;
    # closed form 12·L·d² + 13·L·d + (V + n_ctx)·d + 2·d.
    "tiny-gpt": (lambda seq=None: gpt("tiny-gpt", 2, 64, 4, seq or 32, 128), gpt_closed_form(2, 64, 32, 128),
                 "closed form of the GPT parameter count"),
    # Encoders.
    "bert-base": (lambda: bert("bert-base", 12, 768, 12, 3072), 109.48e6,
                  "Devlin et al. 2019; 109,482,240 for HF BertModel (no MLM head)"),
    "bert-large": (lambda: bert("bert-large", 24, 1024, 16, 4096), 335.14e6,
                   "Devlin et al. 2019; 335,141,888 for HF BertModel (no MLM head)"),
    "vit-b16": (lambda: vit("vit-b16", 12, 768, 12, 3072, 16), 86.567656e6,
                "Dosovitskiy et al. 2021; torchvision vit_b_16: 86,567,656"),
    "vit-l16": (lambda: vit("vit-l16", 24, 1024, 16, 4096, 16), 304.326632e6,
                "Dosovitskiy et al. 2021; torchvision vit_l_16: 304,326,632"),
    "vit-h14": (lambda: vit("vit-h14", 32, 1280, 16, 5120, 14), 632.045800e6,
                "Dosovitskiy et al. 2021; torchvision vit_h_14: 632,045,800"),
    "resnet50": (lambda: resnet("resnet50", [3, 4, 6, 3]), 25.557032e6,
                 "He et al. 2016; torchvision resnet50: 25,557,032"),
    "resnet152": (lambda: resnet("resnet152", [3, 8, 36, 3]), 60.192808e6,
                  "He et al. 2016; torchvision resnet152: 60,192,808"),
}


def moe_stack(name, layers, d, ffn, experts, top_k, seq, shared_ffn=None, gating="softmax"):
    """`layers` mixture-of-experts blocks and nothing else (the router, top-k
    routed SwiGLU experts, an optional shared expert; no norm, no residual),
    each feeding the next: Megatron-Core's MoELayer as its own performance
    tests time it alone (tests/functional_tests/test_cases/common/moe_perf)."""
    g = Graph(name)
    x = g.input("x", g.dtype, ["batch", seq, d])
    for i in range(layers):
        x = moe_ffn(g, x, f"layers.{i}.mlp", d, ffn, experts, top_k, gating=gating,
                    shared_ffn=shared_ffn)
    g.output(x, "y", g.dtype, ["batch", seq, d])
    return g.model()


def write(name, path, seq=None):
    build, _, _ = MODELS[name]
    model = build(seq) if seq else build()
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", nargs="?", help="model name (see --list)")
    ap.add_argument("-o", "--output", help="output .onnx path")
    ap.add_argument("--all", metavar="DIR", help="write every model into DIR")
    ap.add_argument("--list", action="store_true",
                    help="list models with their published parameter counts")
    shape = ap.add_argument_group("a GPT of any shape (name 'gpt'; 'ffn': a "
                                  "stack of --layers dense layers of width --hidden; "
                                  "'moe': --layers mixture-of-experts blocks alone)")
    shape.add_argument("--layers", type=int)
    shape.add_argument("--hidden", type=int)
    shape.add_argument("--heads", type=int)
    shape.add_argument("--seq", type=int,
                       help="sequence length (gpt: default 2048; a named GPT or "
                            "Llama model: its own unless given)")
    shape.add_argument("--vocab", type=int, default=51200)
    shape.add_argument("--ffn", type=int)
    shape.add_argument("--kv-heads", type=int,
                       help="gpt: key-value heads (grouped-query attention; default --heads)")
    shape.add_argument("--untied", action="store_true",
                       help="gpt: an output head of its own, not the embedding's")
    shape.add_argument("--experts", type=int, help="moe: routed experts")
    shape.add_argument("--top-k", type=int, help="moe: experts per token")
    shape.add_argument("--shared-ffn", type=int,
                       help="moe: a shared expert of this width beside the routed ones")
    shape.add_argument("--gating", choices=["softmax", "sigmoid_norm", "topk_softmax"],
                       default="softmax", help="moe: the router's scores (default softmax)")
    args = ap.parse_args()
    if args.name == "moe":
        if not (args.layers and args.hidden and args.ffn and args.experts and args.top_k):
            print("generate.py: error: moe needs --layers, --hidden, --ffn, --experts and "
                  "--top-k", file=sys.stderr)
            return 2
        if not 0 < args.top_k <= args.experts:
            print("generate.py: error: --top-k must be 1 to --experts", file=sys.stderr)
            return 2
        model = moe_stack("moe", args.layers, args.hidden, args.ffn, args.experts, args.top_k,
                          args.seq or 4096, args.shared_ffn, args.gating)
        with open(args.output or "moe.onnx", "wb") as f:
            f.write(model.SerializeToString())
        return 0
    if args.name == "ffn":
        if not (args.layers and args.hidden):
            print("generate.py: error: ffn needs --layers and --hidden", file=sys.stderr)
            return 2
        with open(args.output or "ffn.onnx", "wb") as f:
            f.write(ffn_stack("ffn", args.layers, args.hidden).SerializeToString())
        return 0
    if args.name == "gpt":
        if not (args.layers and args.hidden and args.heads):
            print("generate.py: error: gpt needs --layers, --hidden and --heads", file=sys.stderr)
            return 2
        if args.hidden % args.heads:
            print("generate.py: error: --heads must divide --hidden", file=sys.stderr)
            return 2
        if args.kv_heads and args.heads % args.kv_heads:
            print("generate.py: error: --kv-heads must divide --heads", file=sys.stderr)
            return 2
        model = gpt("gpt", args.layers, args.hidden, args.heads, args.seq or 2048, args.vocab,
                    args.ffn, kv_heads=args.kv_heads, untied=args.untied)
        with open(args.output or "gpt.onnx", "wb") as f:
            f.write(model.SerializeToString())
        return 0
    if args.list:
        for name, (_, params, source) in MODELS.items():
            print(f"{name}\t{int(params)}\t{source}")
        return 0
    if args.all:
        os.makedirs(args.all, exist_ok=True)
        for name in MODELS:
            write(name, os.path.join(args.all, name + ".onnx"))
        return 0
    if not args.name or args.name not in MODELS:
        print(f"generate.py: error: unknown model '{args.name}'; see --list", file=sys.stderr)
        return 2
    if args.seq:
        try:
            write(args.name, args.output or args.name + ".onnx", args.seq)
        except TypeError:
            print(f"generate.py: error: {args.name} has a fixed shape; --seq applies to "
                  "the GPT and Llama models", file=sys.stderr)
            return 2
        return 0
    write(args.name, args.output or args.name + ".onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
