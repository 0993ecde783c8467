"""Writes tiny random-weight mixtures of experts of today's architectures
with transformers, exported as a user exports them: torch.onnx's dynamo
exporter, the batched experts backend (`experts_implementation=
"batched_mm"`; transformers' default grouped_mm calls a custom op the
exporter cannot translate, and the eager loop's data-dependent branches do
not trace), eager attention, a dynamic batch and sequence. Every parameter
is drawn at random so that no two initializers are equal (the exporter
merges equal ones: zero biases would be one tensor).

    moe_export.py OUT_DIR

Writes OUT_DIR/NAME.onnx and OUT_DIR/manifest.json: per file the
architecture, the module's parameter count and its number of experts.
Llama 4 is left out: its complex-valued RoPE (torch.polar) has no ONNX
translation in torch.onnx.
"""
import json
import os
import sys
import warnings

import torch
import transformers as T

warnings.simplefilter("ignore")
COMMON = dict(vocab_size=1000, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256)


def models():
    yield "mixtral", 8, T.MixtralForCausalLM(T.MixtralConfig(
        **COMMON, num_hidden_layers=2, intermediate_size=256, num_local_experts=8, num_experts_per_tok=2))
    yield "qwen3_moe", 8, T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
        **COMMON, num_hidden_layers=2, intermediate_size=256, moe_intermediate_size=64, head_dim=32,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True))
    # Multi-head latent attention, a dense first layer, sigmoid routing
    # over groups, a shared expert.
    yield "deepseek_v3", 8, T.DeepseekV3ForCausalLM(T.DeepseekV3Config(
        **dict(COMMON, num_key_value_heads=4), num_hidden_layers=3, intermediate_size=256,
        moe_intermediate_size=64, first_k_dense_replace=1, n_routed_experts=8, n_shared_experts=1,
        num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=64, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16))
    # Sliding and full attention in turn (two kinds of layer: 4 layers),
    # sinks, biases, experts stored transposed.
    yield "gpt_oss", 8, T.GptOssForCausalLM(T.GptOssConfig(
        **COMMON, num_hidden_layers=4, intermediate_size=64, head_dim=32, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=32))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    manifest = {}
    for name, experts, model in models():
        model.config._attn_implementation = "eager"
        model.config._experts_implementation = "batched_mm"
        model.eval()
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0, 0.02)

        class Logits(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, use_cache=False, return_dict=False)[0]

        ids = torch.randint(0, COMMON["vocab_size"], (1, 64))
        torch.onnx.export(Logits(), (ids,), os.path.join(out, name + ".onnx"), input_names=["input_ids"],
                          opset_version=18, dynamo=True,
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
        manifest[name] = {"file": name + ".onnx", "experts": experts,
                          "source": f"transformers {T.__version__} {type(model).__name__}, "
                                    f"torch.onnx dynamo, torch {torch.__version__}",
                          "reference_parameters": sum(p.numel() for p in model.parameters())}
    json.dump(manifest, open(os.path.join(out, "manifest.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
