"""Writes ONNX seeds for the ONNX fuzzer from the onnxtext cases of
tests/lit/import/contrib_ops.test (onnxruntime's contrib and quantized ops),
so the fuzzer starts from graphs that reach ContribOps.cpp:
contrib_seeds.py TEST_FILE OUT_DIR."""
import os
import sys

import onnx.parser

text = open(sys.argv[1]).read()
for part in text.split("#--- ")[1:]:
    name, body = part.split("\n", 1)
    model = onnx.parser.parse_model(body)
    with open(os.path.join(sys.argv[2], name.replace(".onnxtext", ".onnx")), "wb") as f:
        f.write(model.SerializeToString())
