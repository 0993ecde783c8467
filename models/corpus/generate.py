#!/usr/bin/env python3
"""Writes a corpus of real exports of the kinds people ship: PyTorch's
TorchScript exporter on Hugging Face transformers and torchvision models
(random weights, small published-architecture configs), then onnxruntime's
own tools on them -- the transformer optimizer (com.microsoft Attention,
MultiHeadAttention, EmbedLayerNormalization, SkipLayerNormalization, the
fused GELUs), dynamic quantization (DynamicQuantizeLinear + MatMulInteger,
QAttention, QEmbedLayerNormalization, DynamicQuantizeLSTM), static
quantization in both formats (QOperator: QLinearConv, QGemm, QLinearAdd,
QLinearGlobalAveragePool, QLinearConcat; QDQ: QuantizeLinear and
DequantizeLinear around float ops) and 4-bit weight quantization
(MatMulNBits).

    generate.py OUT_DIR

runs two processes (PyTorch, then onnxruntime: their ONNX bindings do not
share one interpreter) and writes OUT_DIR/manifest.json: per file its source,
the tool and version that wrote it, the licence of the architecture's code,
and the reference parameter count -- what PyTorch counts for the module
(sum of p.numel() over its parameters), which every derived file keeps: a
quantizer stores each weight element once at its narrower width. Files the
tools write with a weight stored twice say so in `reference_note`.
The pinned versions are in models/corpus/requirements.txt.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def torch_phase(out):
    import warnings
    warnings.simplefilter("ignore")
    import torch
    import torchvision
    import transformers
    from transformers import (BertConfig, BertModel, GPT2Config, GPT2LMHeadModel,
                              ViTConfig, ViTModel, DistilBertConfig, DistilBertModel)
    torch.manual_seed(0)
    made = {}

    def export(name, module, args, names, axes, opset, source, licence, dims, experts=0):
        module.eval()
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(module, args, path, input_names=names, dynamic_axes=axes,
                          opset_version=opset, do_constant_folding=False)
        made[name] = {"file": name + ".onnx", "source": source, "licence": licence,
                      "tool": f"torch.onnx.export (TorchScript) torch {torch.__version__}",
                      "opset": opset, "dims": dims,
                      "reference_parameters": sum(p.numel() for p in module.parameters())}
        if experts:
            made[name]["experts"] = experts

    hf = f"transformers {transformers.__version__}"
    ids = torch.ones(1, 32, dtype=torch.long)
    seq = {0: "batch", 1: "seq"}
    export("bert_small", BertModel(BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                              intermediate_size=1024, vocab_size=8000)),
           (ids, ids, ids), ["input_ids", "attention_mask", "token_type_ids"],
           {k: seq for k in ["input_ids", "attention_mask", "token_type_ids"]}, 14,
           f"{hf} BertModel, BERT topology shrunk (4 layers, hidden 256)", "Apache-2.0", {"seq": 128})
    export("distilbert_small", DistilBertModel(DistilBertConfig(dim=256, n_layers=3, n_heads=4, hidden_dim=1024,
                                                               vocab_size=8000)),
           (ids, ids), ["input_ids", "attention_mask"], {k: seq for k in ["input_ids", "attention_mask"]}, 14,
           f"{hf} DistilBertModel shrunk (3 layers, dim 256)", "Apache-2.0", {"seq": 128})
    gpt = GPT2LMHeadModel(GPT2Config(n_embd=256, n_layer=4, n_head=4, vocab_size=8000, n_positions=256))
    gpt.config.use_cache = False
    export("gpt2_small", gpt, (ids,), ["input_ids"], {"input_ids": seq}, 14,
           f"{hf} GPT2LMHeadModel shrunk (4 layers, 256 wide), tied head", "Apache-2.0", {"seq": 128})
    # Mixtures of experts as transformers' eager MoE blocks write them: a
    # loop over the experts (NonZero of the one-hot router mask, each
    # expert's rows gathered, scattered back with index_add).
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM
    mixtral = MixtralForCausalLM(MixtralConfig(
        vocab_size=8000, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=256))
    mixtral.config.use_cache = False
    export("mixtral_small", mixtral, (ids,), ["input_ids"], {"input_ids": seq}, 17,
           f"{hf} MixtralForCausalLM shrunk (2 layers, 256 wide, 8 experts top 2)", "Apache-2.0",
           {"seq": 128}, experts=8)
    qwen = Qwen2MoeForCausalLM(Qwen2MoeConfig(
        vocab_size=8000, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
        shared_expert_intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_experts=16, num_experts_per_tok=4, max_position_embeddings=256))
    qwen.config.use_cache = False
    export("qwen2_moe_small", qwen, (ids,), ["input_ids"], {"input_ids": seq}, 17,
           f"{hf} Qwen2MoeForCausalLM shrunk (2 layers, 256 wide, 16 experts top 4, a shared expert)",
           "Apache-2.0", {"seq": 128}, experts=16)
    export("vit_small", ViTModel(ViTConfig(hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                                           intermediate_size=768, image_size=96, patch_size=16)),
           (torch.zeros(1, 3, 96, 96),), ["pixel_values"], {"pixel_values": {0: "batch"}}, 14,
           f"{hf} ViTModel, DeiT-Tiny widths, 4 layers, 96 px", "Apache-2.0", {})

    class Tagger(torch.nn.Module):
        """A two-layer LSTM tagger, as speech and text models ship them."""
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(80, 256, num_layers=2)
            self.out = torch.nn.Linear(256, 32)

        def forward(self, x):
            return self.out(self.lstm(x)[0])

    export("lstm_tagger", Tagger(), (torch.zeros(50, 1, 80),), ["features"],
           {"features": {0: "frames", 1: "batch"}}, 14, "torch.nn.LSTM tagger (2 x 256)", "BSD-3-Clause",
           {"frames": 100})
    tv = f"torchvision {torchvision.__version__}"
    image = (torch.zeros(1, 3, 224, 224),)
    for name, ctor in [("resnet18", torchvision.models.resnet18),
                       ("mobilenet_v2", torchvision.models.mobilenet_v2)]:
        export(name, ctor(weights=None), image, ["images"], {"images": {0: "batch"}}, 13,
               f"{tv} {name}(weights=None)", "BSD-3-Clause", {})

    class Neck(torch.nn.Module):
        """A YOLOX/YOLOv8-style FPN neck: strided convs, nearest upsampling
        (Resize) and concatenation across scales."""
        def __init__(self):
            super().__init__()
            c = lambda i, o, s: torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, s, 1), torch.nn.BatchNorm2d(o),
                                                    torch.nn.SiLU())
            self.s1, self.s2, self.s3 = c(3, 32, 2), c(32, 64, 2), c(64, 128, 2)
            self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")
            self.m2, self.m1 = c(192, 64, 1), c(96, 32, 1)
            self.head = torch.nn.Conv2d(32, 85, 1)

        def forward(self, x):
            a = self.s1(x)
            b = self.s2(a)
            c3 = self.s3(b)
            p2 = self.m2(torch.cat([self.up(c3), b], 1))
            return self.head(self.m1(torch.cat([self.up(p2), a], 1)))

    export("fpn_detector", Neck(), (torch.zeros(1, 3, 320, 320),), ["images"],
           {"images": {0: "batch", 2: "height", 3: "width"}}, 13, "YOLOX/YOLOv8-style FPN neck (BSD-3 torch.nn)",
           "BSD-3-Clause", {"height": 320, "width": 320})
    json.dump(made, open(os.path.join(out, "torch.json"), "w"), indent=1)


def ort_phase(out):
    import numpy as np
    import onnx
    import onnxruntime
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)
    from onnxruntime.quantization.matmul_4bits_quantizer import MatMul4BitsQuantizer
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    base = json.load(open(os.path.join(out, "torch.json")))
    ort = f"onnxruntime {onnxruntime.__version__}"
    made = dict(base)
    path = lambda n: os.path.join(out, n + ".onnx")

    def derive(name, parent, tool, note=None):
        made[name] = dict(made[parent], file=name + ".onnx", tool=f"{tool} ({ort}) on {parent}.onnx")
        made[name].pop("reference_note", None)
        if note:
            made[name]["reference_note"] = note

    def optimize(name, parent, kind, heads, hidden, mha=False):
        options = FusionOptions(kind)
        options.use_multi_head_attention = mha
        o = optimize_model(path(parent), model_type=kind, num_heads=heads, hidden_size=hidden,
                           optimization_options=options, opt_level=1)
        o.save_model_to_file(path(name))
        derive(name, parent, f"onnxruntime.transformers optimize_model(model_type={kind!r}"
                             f"{', use_multi_head_attention' if mha else ''})")

    optimize("bert_small_ortopt", "bert_small", "bert", 4, 256)
    optimize("bert_small_ortopt_mha", "bert_small", "bert", 4, 256, mha=True)
    optimize("distilbert_small_ortopt", "distilbert_small", "bert", 4, 256)
    optimize("gpt2_small_ortopt", "gpt2_small", "gpt2", 4, 256)
    optimize("vit_small_ortopt", "vit_small", "vit", 3, 192)
    o = optimize_model(path("bert_small"), model_type="bert", num_heads=4, hidden_size=256, opt_level=1)
    o.convert_float_to_float16(keep_io_types=True)
    o.save_model_to_file(path("bert_small_ortopt_fp16"))
    derive("bert_small_ortopt_fp16", "bert_small",
           "onnxruntime.transformers optimize_model(model_type='bert') + convert_float_to_float16")
    float_type = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    for parent in ["bert_small", "bert_small_ortopt", "gpt2_small", "lstm_tagger", "vit_small_ortopt"]:
        name = parent + "_qdyn"
        quantize_dynamic(path(parent), path(name), weight_type=QuantType.QInt8, extra_options=float_type)
        derive(name, parent, "onnxruntime.quantization quantize_dynamic(QInt8)")

    class Images(CalibrationDataReader):
        def __init__(self, shape):
            self.left, self.shape = 2, shape

        def get_next(self):
            if not self.left:
                return None
            self.left -= 1
            return {"images": np.random.default_rng(self.left).random(self.shape, dtype=np.float32)}

    for parent, shape in [("resnet18", (1, 3, 224, 224)), ("mobilenet_v2", (1, 3, 224, 224)),
                          ("fpn_detector", (1, 3, 320, 320))]:
        pre = os.path.join(out, parent + ".pre.onnx")
        quant_pre_process(path(parent), pre, skip_symbolic_shape=True)
        for fmt, tag in [(QuantFormat.QOperator, "qop"), (QuantFormat.QDQ, "qdq")]:
            name = f"{parent}_{tag}"
            quantize_static(pre, path(name), Images(shape), quant_format=fmt)
            derive(name, parent, f"onnxruntime.quantization quantize_static({fmt.name}) after quant_pre_process")
        os.remove(pre)
    for parent in ["gpt2_small", "bert_small"]:
        name = parent + "_int4"
        q = MatMul4BitsQuantizer(onnx.load(path(parent)), block_size=32, is_symmetric=True)
        q.process()
        q.model.save_model_to_file(path(name))
        derive(name, parent, "onnxruntime.quantization MatMul4BitsQuantizer(block_size=32)")
    for name, entry in made.items():
        m = onnx.load(path(name), load_external_data=False)
        entry["ops"] = sorted({(n.domain + "::" if n.domain else "") + n.op_type for n in m.graph.node})
    json.dump(made, open(os.path.join(out, "manifest.json"), "w"), indent=1, sort_keys=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--torch", "--ort"):
        (torch_phase if sys.argv[1] == "--torch" else ort_phase)(sys.argv[2])
        sys.exit(0)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for phase in ("--torch", "--ort"):
        subprocess.run([sys.executable, os.path.abspath(__file__), phase, out], check=True)
