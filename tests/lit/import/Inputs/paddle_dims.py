"""Writes a graph whose input dims are as Paddle2ONNX writes dynamic ones:
dim_value -1 and dim_param "?" (paddle_dims.py OUT.onnx)."""
import sys

from onnx import TensorProto, helper, numpy_helper, save
import numpy as np

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])
x.type.tensor_type.shape.dim[0].ClearField("dim_param")
x.type.tensor_type.shape.dim[0].dim_value = -1
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
w = numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "conv_w")
g = helper.make_graph([helper.make_node("Conv", ["x", "conv_w"], ["y"], pads=[1, 1, 1, 1])],
                      "paddle", [x], [y], [w])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), sys.argv[1])
