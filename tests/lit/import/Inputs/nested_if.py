"""Writes ONNX text for a chain of N nested Ifs (the then-branch nests)."""
import sys

depth = int(sys.argv[1])
inner = "b0 () => (float[4] o0) { o0 = Relu(x) }"
for k in range(1, depth):
    inner = (f"b{k} () => (float[4] o{k}) {{ o{k} = If(c) <then_branch = {inner}, "
             f"else_branch = e{k} () => (float[4] p{k}) {{ p{k} = Relu(x) }}> }}")
print('<ir_version: 8, opset_import: ["" : 17]>')
print(f"g (float[4] x, bool c) => (float[4] y) {{ y = If(c) <then_branch = {inner}, "
      f"else_branch = e () => (float[4] oe) {{ oe = Relu(x) }}> }}")
