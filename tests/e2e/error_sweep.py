#!/usr/bin/env python3
"""Every class of bad input, fed to the CLI: exit 1 and exactly one line on
stderr, starting "orrery: error:" and naming the node, field or value;
never a signal, never a hang.

Two parts:
  1. The error classes found so far (docs/fuzzing.md, issue #14), one
     hand-written input each, with the name the message must carry.
  2. A mutation sweep over real inputs written by Orrery itself (a plan, a
     program set) and the bench cluster specs: every leaf of the JSON is
     replaced by values of the wrong type or range, every object gets an
     unknown key, every array is emptied. A mutation may still be valid
     input (exit 0); anything else must be the one-line error above.

ONNX cases without a text form (a node with no outputs, empty operand
names, initializers whose bytes do not match their shape) are written with
protoc from ONNX's own onnx.proto.

usage: error_sweep.py --orrery build/bin/orrery [--orrery-run build/bin/orrery-run]
                      --workdir DIR
"""
import argparse
import copy
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "models", "fixtures")
CLUSTERS = os.path.join(ROOT, "bench", "clusters")
ONNX_PROTO = "/usr/include/onnx/onnx.proto"
# Only to tell a hang from a slow machine: the slowest case takes about a
# second here. No timing is asserted.
HANG_S = 600

ONNX_HEADER = '<ir_version: 8, opset_import: ["" : 17]>\n'

# (label, file name, file text, argv after the file, substring of the error)
ONNX_TEXT_CASES = [
    ("unsqueeze repeated axes", "unsq.onnxtext",
     "g (float[4] x) => (float[1,1,4] y) { a = Constant<value = int64[2] {0, 0}>() y = Unsqueeze(x, a) }",
     "node 'Unsqueeze_y' (Unsqueeze): axis 0 given twice"),
    ("convtranspose short attributes", "convt.onnxtext",
     "g (float[1,2,8,8] x, float[2,3,3,3] w) => (float[1,3,10,10] y) { y = ConvTranspose<pads = [1], output_padding = [1]>(x, w) }",
     "node 'ConvTranspose_y' (ConvTranspose): pads has 1 values, expected 4"),
    ("fold add with one input", "add1.onnxtext",
     "g (float[4] x) => (float[4] y) { c = Constant<value = float[1] {1}>() y = Add(c) }",
     "node 'Add_y' (Add): takes 2 to 2 inputs, has 1"),
    ("concat mismatched constants", "concat.onnxtext",
     "g (float[4] x) => (float[4] y) { a = Constant<value = int64[2] {1, 2}>() b = Constant<value = int64[1,1] {3}>() c = Concat<axis = 0>(a, b) y = Reshape(x, c) }",
     "node 'Concat_c' (Concat): inputs have different ranks"),
    ("axis 0 on scalars (Concat)", "concat0.onnxtext",
     "g (float x, float z) => (float[2] y) { y = Concat<axis = 0>(x, z) }",
     "node 'Concat_y' (Concat): axis 0 out of range for rank 0"),
    ("axis 0 on scalars (Gather)", "gather0.onnxtext",
     "g (float x) => (float y) { i = Constant<value = int64 {0}>() y = Gather<axis = 0>(x, i) }",
     "node 'Gather_y' (Gather): axis 0 out of range for rank 0"),
    ("range of non-constants", "range.onnxtext",
     "g (float x) => (float y) { y = Range(x, x, x) }",
     "node 'Range_y' (Range)"),
    ("int64 overflow in Pad", "pad.onnxtext",
     "g (float[4] x) => (float[4] y) { p = Constant<value = int64[2] {4611686018427387904, 4611686018427387904}>() y = Pad(x, p) }",
     "node 'Pad_y' (Pad): shape arithmetic overflows int64"),
    ("int64 overflow in Conv pads", "convpads.onnxtext",
     "g (float[1,2,8,8] x, float[4,2,3,3] w) => (float[1,4,8,8] y) { y = Conv<pads = [9223372036854775807, 0, 9223372036854775807, 0]>(x, w) }",
     "node 'Conv_y' (Conv): shape arithmetic overflows int64"),
    ("int64 overflow in Conv dilations", "convdil.onnxtext",
     "g (float[1,2,8,8] x, float[4,2,3,3] w) => (float[1,4,8,8] y) { y = Conv<dilations = [4611686018427387904, 1]>(x, w) }",
     "node 'Conv_y' (Conv): shape arithmetic overflows int64"),
    ("Slice step 0", "slice.onnxtext",
     "g (float[4] x) => (float[4] y) { s = Constant<value = int64[1] {0}>() e = Constant<value = int64[1] {4}>() a = Constant<value = int64[1] {0}>() st = Constant<value = int64[1] {0}>() y = Slice(x, s, e, a, st) }",
     "node 'Slice_y' (Slice): step 0"),
    ("FLOP count past int64", "flops.onnxtext",
     "g (float[16777216,16777216] x, float[16777216,16777216] w) => (float[16777216,16777216] y) { y = MatMul(x, w) }",
     "node 'MatMul_y' (orrery.matmul): its FLOPs or bytes for one step exceed 2^63"),
    ("tensor over 2^50 elements", "tile.onnxtext",
     "g (float[1024] x) => (float y) { r = Constant<value = int64[1] {4611686018427387904}>() y = Tile(x, r) }",
     "node 'Tile_y' (Tile): inferred a tensor of more than 2^50 elements"),
    ("negative dimension", "cos.onnxtext",
     "g (float[1024] x) => (float y) { r = Constant<value = int64[1] {-4}>() y = ConstantOfShape(r) }",
     "node 'ConstantOfShape_y' (ConstantOfShape): inferred a negative dimension"),
    ("crash inside ONNX's shape inference", "onnxcrash.onnxtext",
     "g (float[7,6,1,5] a, float b, float[7,2,3,2,1] c, float[1,3,8,8] m, float[4,5] n) => (float[1] o, float[4,3,2,2] e) { d = MaxRoiPool<pooled_shape = [2, 2]>(m, n) e = Relu(d) o = Conv<auto_pad = \"NOTSET\", group = 1>(a, b, c) }",
     "node 'MaxRoiPool_d' (MaxRoiPool): cannot infer the shape of output 'd'"),
    ("unknown op", "unknown.onnxtext",
     "g (float[4] x) => (float[4] y) { y = NoSuchOp(x) }",
     "node 'NoSuchOp_y' (NoSuchOp): unsupported op: ONNX opset 17 defines no 'NoSuchOp'"),
    ("undefined value", "undef.onnxtext",
     "g (float[4] x) => (float[4] y) { y = Relu(nowhere) }",
     "uses undefined value 'nowhere'"),
]

# Binary models: (label, file name, textproto of the graph, substring).
def _vi(kind, name, dims, elem=1):
    shape = " ".join(f"dim {{ dim_value: {d} }}" for d in dims)
    return f'{kind} {{ name: "{name}" type {{ tensor_type {{ elem_type: {elem} shape {{ {shape} }} }} }} }}'


ONNX_PROTO_CASES = [
    ("node without outputs", "nooutputs.onnx",
     'node { input: "x" op_type: "Relu" name: "r" } node { input: "x" output: "y" op_type: "Relu" } '
     + _vi("input", "x", [4]) + " " + _vi("output", "y", [4]),
     "node 'r' (Relu): has no outputs"),
    ("Range with empty inputs", "range_empty.onnx",
     'node { input: "" input: "" input: "" output: "y" op_type: "Range" name: "rg" } '
     + _vi("input", "x", [4]) + " " + _vi("output", "y", [4]),
     "node 'rg' (Range)"),
    ("initializer with too few bytes", "short_init.onnx",
     'node { input: "x" input: "w" output: "y" op_type: "MatMul" } '
     'initializer { name: "w" dims: 4 dims: 4 data_type: 1 raw_data: "\\000\\000\\000\\000" } '
     + _vi("input", "x", [2, 4]) + " " + _vi("output", "y", [2, 4]),
     "'w'"),
    ("negative value_info dims", "neg_vi.onnx",
     'node { input: "x" output: "y" op_type: "HannWindow" name: "hann" } '
     + _vi("input", "x", [], 7) + " " + _vi("output", "y", [-5]) + " " + _vi("value_info", "y", [-5]),
     "node 'hann' (HannWindow)"),
]

# (label, argv, expected substring); FIX is the fixtures folder, T the workdir.
CLI_CASES = [
    ("strategy value past int32", ["simulate", "gpt3-125m", "--cluster", "1x8xA100-80G", "--strategy", "tp=4294967296"],
     "tp must be an integer from 1 to 4194304"),
    ("strategy 300-digit number", ["simulate", "gpt3-125m", "--cluster", "1x8xA100-80G", "--strategy", "tp=" + "9" * 300],
     "(300 digits)"),
    ("strategy zero", ["simulate", "gpt3-125m", "--cluster", "1x8xA100-80G", "--strategy", "tp=0"], "tp"),
    ("strategy unknown field", ["simulate", "gpt3-125m", "--cluster", "1x8xA100-80G", "--strategy", "tq=2"], "tq"),
    ("cluster of 10^12 devices", ["simulate", "gpt3-125m", "--cluster", "1000000x1000000xA100-80G", "--strategy", "tp=1"],
     "1000000x1000000xA100-80G"),
    ("huge global batch", ["plan", "gpt3-125m", "--cluster", "1x8xA100-80G", "--global-batch", "1000000000"], "batch"),
    ("not a regular file", ["stats", "/dev/zero"], "/dev/zero: is not a regular file"),
    ("plan from /dev/zero", ["check", "/dev/zero"], "/dev/zero: is not a regular file"),
]

# Cluster files: (label, file name, text, substring).
CLUSTER_CASES = [
    ("cluster nested too deep", "deep.json", '{"a":' * 70 + "1" + "}" * 70, "nested deeper than 64"),
    ("cluster duplicate key", "dup.json",
     '{"sites": [{"name": "dc", "nodes": [{"count": 1, "device": "A100-80G", "devices_per_node": 8}]}], "sites": []}',
     "duplicate key 'sites'"),
    ("cluster misspelt inline-device field", "misspelt.json",
     '{"sites": [{"name": "dc", "nodes": [{"count": 1, "devices_per_node": 8, "device": '
     '{"name": "X", "peak_tflops_bf16": 100, "hbm_gib": 80, "hbm_bandwdth_gbps": 2000}}]}]}',
     "hbm_bandwdth_gbps"),
    ("cluster infinite number", "inf.json",
     '{"sites": [{"name": "dc", "nodes": [{"count": 1, "device": "A100-80G", "devices_per_node": 8, '
     '"price_usd_per_device_hour": 1e999}]}]}',
     "not valid JSON: a number past a double's range"),
    ("cluster control characters", "control.json",
     '{"sites": [{"name": "dc", "nodes": [{"count": 1, "device": "A100\\u001b[31m\\nred", "devices_per_node": 8}]}]}',
     "\\x1b[31m\\nred"),
    ("cluster 10^12 devices", "huge.json",
     '{"sites": [{"name": "dc", "nodes": [{"count": 1000000000000, "device": "A100-80G", "devices_per_node": 8}]}]}',
     "count"),
    ("cluster wrong type", "type.json",
     '{"sites": [{"name": "dc", "nodes": [{"count": 1, "device": "A100-80G", "devices_per_node": 8, "nic": 3}]}]}',
     "sites[0].nodes[0].nic: must be a link name or an object"),
]

MUTATIONS = ["x", None, -1, 0, 2 ** 63, 1e308, [], {}]


class Sweep:
    def __init__(self, orrery, orrery_run, workdir):
        self.orrery, self.orrery_run, self.workdir = orrery, orrery_run, workdir
        self.failures, self.cases, self.errors = [], 0, 0

    def run(self, label, argv, expect=None, binary=None):
        """expect: substring the error must carry; None: a valid input may
        also pass (exit 0)."""
        self.cases += 1
        try:
            p = subprocess.run([binary or self.orrery] + argv, capture_output=True,
                               text=True, errors="replace", timeout=HANG_S)
        except subprocess.TimeoutExpired:
            self.failures.append(f"{label}: no answer in {HANG_S} s (a hang)")
            return
        lines = p.stderr.splitlines()
        if p.returncode < 0:
            self.failures.append(f"{label}: killed by signal {-p.returncode}")
            return
        if p.returncode == 0 and expect is None:
            return
        if p.returncode != 1:
            self.failures.append(f"{label}: exit {p.returncode}, expected 1: {p.stderr.strip()[:300]}")
            return
        self.errors += 1
        if len(lines) != 1 or not lines[0].startswith("orrery: error: "):
            self.failures.append(f"{label}: stderr is not one 'orrery: error:' line: {lines[:3]}")
            return
        if expect is not None and expect not in lines[0]:
            self.failures.append(f"{label}: error does not name {expect!r}: {lines[0][:300]}")

    def write(self, name, text, mode="w"):
        path = os.path.join(self.workdir, name)
        with open(path, mode) as f:
            f.write(text)
        return path


def leaves(node, path=()):
    """Every position in a JSON document: (path, value)."""
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))


def replaced(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    node = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return doc


def mutants(doc, budget):
    """Mutated copies of `doc`, spread over all its positions: (label, doc)."""
    out = []
    for path, value in leaves(doc):
        where = ".".join(map(str, path)) or "(root)"
        if isinstance(value, dict):
            bad = copy.deepcopy(value)
            bad["no_such_field"] = 1
            out.append((f"{where} +unknown key", replaced(doc, path, bad)))
        elif isinstance(value, list):
            out.append((f"{where} emptied", replaced(doc, path, [])))
        for m in MUTATIONS:
            if m != value:
                out.append((f"{where} = {json.dumps(m)}", replaced(doc, path, m)))
    if len(out) > budget:  # an even spread, the same every run
        step = len(out) / budget
        out = [out[int(i * step)] for i in range(budget)]
    return out


def sweep_json(s, label, doc, argv_for, budget, binary=None):
    for i, (what, bad) in enumerate(mutants(doc, budget)):
        path = s.write(f"{label}-{i}.json", json.dumps(bad))
        s.run(f"{label} {what}", argv_for(path), binary=binary)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--orrery-run")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--budget", type=int, default=60,
                    help="mutants per JSON document")
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    s = Sweep(args.orrery, args.orrery_run, args.workdir)

    for label, name, text, expect in ONNX_TEXT_CASES:
        s.run(label, ["stats", s.write(name, ONNX_HEADER + text)], expect)
    protoc = shutil.which("protoc")
    if not protoc or not os.path.exists(ONNX_PROTO):
        s.failures.append("protoc or onnx.proto missing (scripts/setup.sh installs them)")
    else:
        for label, name, graph, expect in ONNX_PROTO_CASES:
            text = f'ir_version: 8 opset_import {{ version: 17 }} graph {{ name: "g" {graph} }}'
            path = os.path.join(args.workdir, name)
            with open(path, "wb") as f:
                subprocess.run([protoc, "--encode=onnx.ModelProto", "-I" + os.path.dirname(ONNX_PROTO),
                                ONNX_PROTO], input=text.encode(), stdout=f, check=True)
            s.run(label, ["stats", path], expect)
    for label, argv, expect in CLI_CASES:
        s.run(label, argv, expect)
    for label, name, text, expect in CLUSTER_CASES:
        path = s.write(name, text)
        s.run(label, ["simulate", "gpt3-125m", "--cluster", path, "--strategy", "tp=1"], expect)

    # Mutation sweep: documents Orrery wrote itself and the bench clusters.
    tiny = [os.path.join(FIXTURES, "tiny-gpt.onnx"), "--dim", "batch=8", "--global-batch", "8", "--quiet"]
    plan = os.path.join(args.workdir, "plan.json")
    subprocess.run([args.orrery, "plan"] + tiny + ["--cluster", "1x4xA100-80G", "-o", plan],
                   check=True, capture_output=True)
    hetero = os.path.join(args.workdir, "hetero.json")
    subprocess.run([args.orrery, "plan"] + tiny + ["--cluster", os.path.join(CLUSTERS, "two-cpu-pools.json"),
                    "-o", hetero], check=True, capture_output=True)
    for name, path in (("plan", plan), ("hetero-plan", hetero)):
        with open(path) as f:
            doc = json.load(f)
        sweep_json(s, name + " check", doc, lambda p: ["check", p], args.budget)
        sweep_json(s, name + " export", doc, lambda p: ["export", p, "--to", "megatron"], args.budget // 3)
        sweep_json(s, name + " lower", doc, lambda p: ["lower", p, "--summary"], args.budget // 3)
    for name in sorted(os.listdir(CLUSTERS)):
        with open(os.path.join(CLUSTERS, name)) as f:
            doc = json.load(f)
        sweep_json(s, "cluster " + name, doc,
                   lambda p: ["simulate", "gpt3-125m", "--cluster", p, "--strategy", "tp=1"],
                   args.budget // 4)
    if args.orrery_run:
        programs = os.path.join(args.workdir, "programs.json")
        subprocess.run([args.orrery, "lower", plan, "--json", "-o", programs], check=True, capture_output=True)
        with open(programs) as f:
            doc = json.load(f)
        sweep_json(s, "programs", doc, lambda p: ["run", p], args.budget, binary=args.orrery_run)

    for f in s.failures:
        print("FAIL", f)
    print(f"{s.cases} cases, {s.errors} one-line errors, {len(s.failures)} failed")
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
