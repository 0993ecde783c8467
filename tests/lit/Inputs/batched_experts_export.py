"""A two-layer decoder whose feed-forward is a mixture of experts written
as transformers writes them, exported by torch.onnx (TorchScript) with
random weights. The router's top-k softmax is renormalised and the routing
weight applied after the down projection in each form:

- default: its `batched_mm` experts backend (the form its export path takes
  for Mixtral, Qwen3-MoE, DeepSeek-V3, GPT-OSS, Llama 4): experts stored
  stacked ([E, 2f, d] gate_up_proj and [E, d, f] down_proj, or transposed
  with --transposed as GPT-OSS stores them), each routed token's expert
  matrices selected by index (`w[expert_ids]`) and multiplied by that
  token with bmm, each token's k rows summed back;
- --loop: the eager loop of transformers 4.x (Mixtral, Qwen2-MoE): an
  nn.Linear per expert, `torch.where(one_hot(ids)[e])` for its rows,
  `index_add_` back;
- --loop-stacked: the eager loop of later releases over the experts hit
  (`greater(mask.sum(...), 0).nonzero()`), reading each expert's slice of
  the stacked weights (`gate_up_proj[e]`).

    batched_experts_export.py OUT.onnx [--transposed | --loop | --loop-stacked]
                              [--experts E] [--top-k K]

Prints the module's parameter count.
"""
import argparse
import torch

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--transposed", action="store_true")
ap.add_argument("--loop", action="store_true")
ap.add_argument("--loop-stacked", action="store_true")
ap.add_argument("--experts", type=int, default=8)
ap.add_argument("--top-k", type=int, default=2)
args = ap.parse_args()
torch.manual_seed(0)
H, HEADS, FFN, VOCAB, E, K = 64, 4, 96, 128, args.experts, args.top_k


class Expert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(H, FFN, bias=False)
        self.w3 = torch.nn.Linear(H, FFN, bias=False)
        self.w2 = torch.nn.Linear(FFN, H, bias=False)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class LoopExperts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = torch.nn.ModuleList([Expert() for _ in range(E)])

    def forward(self, x, top_i, top_w):
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(top_i, num_classes=E).permute(2, 1, 0)
        for e in range(E):
            k, rows = torch.where(mask[e])
            y = self.experts[e](x[None, rows].reshape(-1, H)) * top_w[rows, k, None]
            out.index_add_(0, rows, y)
        return out


class Experts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        up, down = ([E, H, 2 * FFN], [E, FFN, H]) if args.transposed else ([E, 2 * FFN, H], [E, H, FFN])
        self.gate_up_proj = torch.nn.Parameter(torch.randn(up) * 0.02)
        self.down_proj = torch.nn.Parameter(torch.randn(down) * 0.02)

    def forward(self, x, top_i, top_w):
        if args.loop_stacked:
            return self.loop(x, top_i, top_w)
        return self.batched(x, top_i, top_w)

    def loop(self, x, top_i, top_w):
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(top_i, num_classes=E).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            e = e[0]
            k, rows = torch.where(mask[e])
            gate, up = torch.nn.functional.linear(x[rows], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, self.down_proj[e])
            out.index_add_(0, rows, y * top_w[rows, k, None])
        return out

    def batched(self, x, top_i, top_w):
        tokens = x.shape[0]
        ids = top_i.reshape(-1)
        token_idx = torch.arange(tokens).unsqueeze(1).expand(-1, K).reshape(-1)
        rows = x[token_idx]
        if args.transposed:
            h = torch.bmm(rows.unsqueeze(1), self.gate_up_proj[ids]).squeeze(1)
        else:
            h = torch.bmm(self.gate_up_proj[ids], rows.unsqueeze(-1)).squeeze(-1)
        gate, up = h.chunk(2, dim=-1)
        a = torch.nn.functional.silu(gate) * up
        if args.transposed:
            y = torch.bmm(a.unsqueeze(1), self.down_proj[ids]).squeeze(1)
        else:
            y = torch.bmm(self.down_proj[ids], a.unsqueeze(-1)).squeeze(-1)
        y = y * top_w.reshape(-1).unsqueeze(-1)
        # index_add_(0, token_idx, y) over each token's k rows: the sum that
        # torch.export writes for it (TorchScript cannot export index_add
        # with repeated indices).
        return y.reshape(tokens, K, H).sum(dim=1)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(H, 3 * H, bias=False)
        self.o = torch.nn.Linear(H, H, bias=False)
        self.n1 = torch.nn.LayerNorm(H)
        self.n2 = torch.nn.LayerNorm(H)
        self.router = torch.nn.Linear(H, E, bias=False)
        self.experts = LoopExperts() if args.loop else Experts()

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, HEADS, H // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-1, -2) * (H // HEADS) ** -0.5
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        a = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, s, H))
        h = self.n2(x).reshape(-1, H)
        probs = torch.softmax(self.router(h), dim=-1)
        top_w, top_i = torch.topk(probs, K, dim=-1)
        top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        return x + self.experts(h, top_i, top_w).reshape(b, s, H)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, H)
        self.layers = torch.nn.ModuleList([Layer(), Layer()])
        self.head = torch.nn.Linear(H, VOCAB, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


model = Model().eval()
torch.onnx.export(model, (torch.randint(0, VOCAB, (1, 64)),), args.out, input_names=["ids"],
                  opset_version=17)
print(sum(p.numel() for p in model.parameters()))
