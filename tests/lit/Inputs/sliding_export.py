"""A two-layer decoder written as newer transformers builds its masks
(`sliding_window_overlay`: `kv_idx > q_idx - window`, beside the causal
`kv_idx <= q_idx`, both from arange), exported by torch.onnx with a dynamic
sequence so the comparisons stay in the graph. Random weights.

    sliding_export.py OUT.onnx WINDOW
"""
import sys
import torch

out, window = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
H, HEADS, VOCAB = 64, 4, 128


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(H, 3 * H, bias=False)
        self.o = torch.nn.Linear(H, H, bias=False)
        self.up = torch.nn.Linear(H, 4 * H, bias=False)
        self.down = torch.nn.Linear(4 * H, H, bias=False)
        self.n1 = torch.nn.LayerNorm(H)
        self.n2 = torch.nn.LayerNorm(H)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, HEADS, H // HEADS).permute(2, 0, 3, 1, 4)
        q_idx = torch.arange(s, device=x.device)[:, None]
        kv_idx = torch.arange(s, device=x.device)[None, :]
        keep = (kv_idx <= q_idx) & (kv_idx > q_idx - window)
        scores = q @ k.transpose(-1, -2) * (H // HEADS) ** -0.5
        scores = torch.where(keep, scores, torch.tensor(-1e4, dtype=scores.dtype))
        a = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, s, H))
        return x + self.down(torch.nn.functional.gelu(self.up(self.n2(x))))


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


ids = torch.randint(0, VOCAB, (1, 256))
torch.onnx.export(Model().eval(), (ids,), out, input_names=["input_ids"], output_names=["logits"],
                  dynamic_axes={"input_ids": {0: "batch", 1: "seq"}}, opset_version=17)
