"""A two-layer decoder whose feed-forward is a mixture of experts written
the way transformers' `batched_mm` experts backend writes it (the form its
export path takes for Mixtral, Qwen3-MoE, DeepSeek-V3, GPT-OSS, Llama 4):
experts stored stacked ([E, 2f, d] gate_up_proj and [E, d, f] down_proj, or
transposed with --transposed as GPT-OSS stores them), the router's top-k
softmax renormalised, each routed token's expert matrices selected by index
(`w[expert_ids]`) and multiplied by that token with bmm, the routing weight
applied after the down projection and each token's k rows summed back.
Exported by torch.onnx (TorchScript) with random weights.

    batched_experts_export.py OUT.onnx [--transposed] [--experts E] [--top-k K]

Prints the module's parameter count.
"""
import argparse
import torch

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--transposed", action="store_true")
ap.add_argument("--experts", type=int, default=8)
ap.add_argument("--top-k", type=int, default=2)
args = ap.parse_args()
torch.manual_seed(0)
H, HEADS, FFN, VOCAB, E, K = 64, 4, 96, 128, args.experts, args.top_k


class Experts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        up, down = ([E, H, 2 * FFN], [E, FFN, H]) if args.transposed else ([E, 2 * FFN, H], [E, H, FFN])
        self.gate_up_proj = torch.nn.Parameter(torch.randn(up) * 0.02)
        self.down_proj = torch.nn.Parameter(torch.randn(down) * 0.02)

    def forward(self, x, top_i, top_w):
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
        self.experts = Experts()

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
torch.onnx.export(model, (torch.zeros(1, 64, dtype=torch.long),), args.out, input_names=["ids"],
                  opset_version=17)
print(sum(p.numel() for p in model.parameters()))
