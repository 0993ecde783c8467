"""Writes a model whose rotary-style cache is a Constant node read only by
a Slice, beside a Gemm weight initializer."""
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

cache = numpy_helper.from_array(np.full((640, 64), 0.5, np.float32))
nodes = [
    helper.make_node("Constant", [], ["cache"], value=cache),
    helper.make_node("Constant", [], ["starts"], value=numpy_helper.from_array(np.array([0], np.int64))),
    helper.make_node("Constant", [], ["ends"], value=numpy_helper.from_array(np.array([16], np.int64))),
    helper.make_node("Slice", ["cache", "starts", "ends"], ["cos"]),
    helper.make_node("Gemm", ["x", "w"], ["proj"]),
    helper.make_node("Mul", ["proj", "cos"], ["y"]),
]
graph = helper.make_graph(
    nodes, "rope", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 64])],
    [numpy_helper.from_array(np.full((64, 64), 0.25, np.float32), "w")])
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
