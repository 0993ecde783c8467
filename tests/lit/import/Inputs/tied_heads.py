"""Writes an embedding table and an output head the way TorchScript writes a
head: its own anonymous initializer (onnx::MatMul_N) of the table's shape
transposed. tied_heads.py OUT_DIR.

tied.onnx: the head's values are the table's, transposed (a tied head, as
GPT-2's): one table. untied.onnx: other values (an untied head of the
same shape, as a Llama's output): two weights. stripped.onnx: the head's
data not in the file: tied by the structure alone, as before.
"""
import os
import sys

from onnx import TensorProto, helper, save

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
VOCAB, DIM = 32, 8
table = [float(i % 7) - 3.0 + 0.25 * (i // 7) for i in range(VOCAB * DIM)]
transposed = [table[v * DIM + d] for d in range(DIM) for v in range(VOCAB)]
other = [0.5 * x + 1.0 for x in transposed]


def model(head):
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4, VOCAB])
    graph = helper.make_graph(
        [helper.make_node("Gather", ["emb.weight", "ids"], ["h"]),
         helper.make_node("MatMul", ["h", "onnx::MatMul_5"], ["logits"])],
        "lm", [ids], [logits],
        [helper.make_tensor("emb.weight", TensorProto.FLOAT, [VOCAB, DIM], table),
         head])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def head(values):
    return helper.make_tensor("onnx::MatMul_5", TensorProto.FLOAT, [DIM, VOCAB], values)


save(model(head(transposed)), os.path.join(out, "tied.onnx"))
save(model(head(other)), os.path.join(out, "untied.onnx"))
stripped = TensorProto(name="onnx::MatMul_5", data_type=TensorProto.FLOAT, dims=[DIM, VOCAB])
save(model(stripped), os.path.join(out, "stripped.onnx"))
