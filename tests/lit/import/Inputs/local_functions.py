"""Writes an ONNX model whose graph calls model-local functions, as torch's
dynamo exporter writes modules: Block calls LinearAct twice; LinearAct's
LeakyRelu takes `alpha` by reference. The graph calls Block twice, once with
alpha = 0.5 and once without, so the second call takes the function's
default (attribute_proto, an IR 9 field ONNX 1.12's onnx.proto lacks: its
bytes are appended to the encoded function by hand). `recursive` makes
LinearAct call itself instead.

usage: local_functions.py OUT.onnx [recursive]"""
import subprocess
import sys

PROTO = "/usr/include/onnx/onnx.proto"


def encode(message, text):
    return subprocess.run(["protoc", f"--encode=onnx.{message}", "-I/usr/include/onnx", PROTO],
                          input=text.encode(), capture_output=True, check=True).stdout


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def vi(kind, name, dims):
    shape = " ".join(f"dim {{ dim_value: {d} }}" for d in dims)
    return f'{kind} {{ name: "{name}" type {{ tensor_type {{ elem_type: 1 shape {{ {shape} }} }} }} }}'


recursive = len(sys.argv) > 2 and sys.argv[2] == "recursive"
alpha_ref = 'attribute { name: "alpha" ref_attr_name: "alpha" type: FLOAT }'
linear_body = ('node { input: "x" input: "w" output: "m" op_type: "MatMul" name: "mm" } '
               f'node {{ input: "m" output: "y" op_type: "LeakyRelu" name: "act" {alpha_ref} }}')
if recursive:
    linear_body = f'node {{ input: "x" input: "w" output: "y" op_type: "LinearAct" domain: "pkg.test" name: "self" }}'
linear = encode("FunctionProto",
                f'name: "LinearAct" domain: "pkg.test" input: "x" input: "w" output: "y" attribute: "alpha" '
                f'opset_import {{ version: 17 }} {linear_body}')
linear += field(11, encode("AttributeProto", 'name: "alpha" type: FLOAT f: 0.125'))
block = encode("FunctionProto",
               'name: "Block" domain: "pkg.test" input: "x" input: "w1" input: "w2" output: "y" attribute: "alpha" '
               'opset_import { version: 17 } opset_import { domain: "pkg.test" version: 1 } '
               f'node {{ input: "x" input: "w1" output: "h" op_type: "LinearAct" domain: "pkg.test" name: "first" {alpha_ref} }} '
               f'node {{ input: "h" input: "w2" output: "y" op_type: "LinearAct" domain: "pkg.test" name: "second" {alpha_ref} }}')
weights = " ".join(f'initializer {{ name: "w{i}" dims: 8 dims: 8 data_type: 1 raw_data: "' +
                   "\\000" * 256 + '" }' for i in range(4))
graph = ('node { input: "x" input: "w0" input: "w1" output: "a" op_type: "Block" domain: "pkg.test" name: "b0" '
         'attribute { name: "alpha" type: FLOAT f: 0.5 } } '
         'node { input: "a" input: "w2" input: "w3" output: "y" op_type: "Block" domain: "pkg.test" name: "b1" } '
         + weights + " " + vi("input", "x", [4, 8]) + " " + vi("output", "y", [4, 8]))
model = encode("ModelProto", f'ir_version: 8 opset_import {{ version: 17 }} '
                             f'opset_import {{ domain: "pkg.test" version: 1 }} graph {{ name: "g" {graph} }}')
model += field(25, linear) + field(25, block)
with open(sys.argv[1], "wb") as f:
    f.write(model)
