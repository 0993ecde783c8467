"""Writes the graphs torch's exporter writes for shared and for merged
weights: merged_parameters.py OUT_DIR.

merged.onnx: an eval-mode export of three Linear layers whose weights are
equal (torch 1.13's initializer deduplication keeps a.weight and writes
`b.weight = Identity(a.weight)`, `c.weight = Identity(a.weight)`): three
parameters. shared.onnx: one weight read by two layers through Identities
the exporter names onnx::MatMul_N (ALBERT's shared layers): one parameter.
"""
import os
import sys

from onnx import TensorProto, helper, save

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def weight(name, dims):
    size = 1
    for d in dims:
        size *= d
    return helper.make_tensor(name, TensorProto.FLOAT, dims, [0.5] * size)


x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])
merged = helper.make_graph(
    [helper.make_node("Identity", ["a.bias"], ["c.bias"]),
     helper.make_node("Identity", ["a.weight"], ["c.weight"]),
     helper.make_node("Identity", ["a.bias"], ["b.bias"]),
     helper.make_node("Identity", ["a.weight"], ["b.weight"]),
     helper.make_node("Gemm", ["x", "a.weight", "a.bias"], ["/a/Gemm_output_0"], transB=1),
     helper.make_node("Gemm", ["/a/Gemm_output_0", "b.weight", "b.bias"], ["/b/Gemm_output_0"], transB=1),
     helper.make_node("Gemm", ["/b/Gemm_output_0", "c.weight", "c.bias"], ["y"], transB=1)],
    "merged", [x], [y], [weight("a.weight", [16, 16]), weight("a.bias", [16])])
save(helper.make_model(merged, opset_imports=[helper.make_opsetid("", 17)]),
     os.path.join(out, "merged.onnx"))
shared = helper.make_graph(
    [helper.make_node("Identity", ["onnx::MatMul_7"], ["onnx::MatMul_9"]),
     helper.make_node("Identity", ["onnx::MatMul_7"], ["onnx::MatMul_10"]),
     helper.make_node("MatMul", ["x", "onnx::MatMul_9"], ["/l0/MatMul_output_0"]),
     helper.make_node("MatMul", ["/l0/MatMul_output_0", "onnx::MatMul_10"], ["y"])],
    "shared", [x], [y], [weight("onnx::MatMul_7", [16, 16])])
save(helper.make_model(shared, opset_imports=[helper.make_opsetid("", 17)]),
     os.path.join(out, "shared.onnx"))
