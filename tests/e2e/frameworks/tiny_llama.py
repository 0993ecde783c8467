"""A small Llama in torchtitan's layout, for training exported plans on CPU.

The names are torchtitan's (tok_embeddings, layers["i"].attention.wq ...,
feed_forward.w1/w2/w3, attention_norm, ffn_norm, norm, output), the blocks
held in a ModuleDict keyed by their index as torchtitan keeps them so that
pipeline stages can delete the blocks they do not run; a stage without the
embedding or the head has None there and forward skips it. The attention
reads its head count from the projection's width (view(..., -1, head_dim)),
so a tensor-parallel rank runs its own heads. `python3 tiny_llama.py
OUT.onnx` writes the model with torch.onnx (the file Orrery plans).
"""
import sys

import torch
import torch.nn.functional as F
from torch import nn

DIM, HEADS, LAYERS, VOCAB, SEQ, HIDDEN = 64, 4, 4, 256, 32, 128


class RMSNorm(nn.Module):
    """torchtitan's own RMSNorm before nn.RMSNorm (which torch.onnx cannot
    write at opset 17)."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class TinyLlama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(LAYERS)})
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for block in self.layers.values():
            h = block(h)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def build(seed=0):
    torch.manual_seed(seed)
    return TinyLlama()


def batches(steps, batch, seed=1):
    """The same token and label batches on every process."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (batch, SEQ + 1), generator=g)
        yield tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


if __name__ == "__main__":
    model = build()
    torch.onnx.export(model, (torch.zeros(1, SEQ, dtype=torch.long),), sys.argv[1],
                      input_names=["tokens"], output_names=["logits"],
                      dynamic_axes={"tokens": {0: "batch"}}, opset_version=17,
                      dynamo=False)
