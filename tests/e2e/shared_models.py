#!/usr/bin/python3
"""End-to-end: every model in shared/models and shared/models/hf (written by
tools outside this project) imports, outlines and reports its parameter count.

Expected counts come from shared/models/MANIFEST.md: exact counts must agree
within 1%; "about N M" counts (two significant digits) within 5%. Counts the
manifest gives "incl. BN statistics" / "incl. small constants" compare with
parameters + buffers. Transformer models must outline their repeated layers.

Each model also plans on a 64-GPU preset (8 nodes of 8 A100) with its
shardings written in MLIR's shard dialect (`--emit-mlir`, which verifies the
module before writing it). The transformers' tp=2 plans go through
`export --to mlir`: BERT's and GPT-2's must partition with stock
mlir-opt-22, the others (convolutions) be refused in one line.

shared/models/hf/MANIFEST.md (real exports of current architectures) gives
each file's trainable parameters (within 1%), the counts of its repeated
layer kinds (any order; "or" separates acceptable outlinings) and the dims
to bind.

Skips (exit 0 with a message) when shared/ is absent, as on a user's machine.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import Tally  # noqa: E402
from model_dims import bindable  # noqa: E402

# Dims the real exports leave symbolic.
DIMS = ["batch=1", "sequence=512", "p2o.DynamicDimension.0=1",
        "p2o.DynamicDimension.1=640", "p2o.DynamicDimension.2=640"]

# Repeated layers each transformer export must show: (kind count) runs.
LAYERS = {
    "bert_base_torchnn.onnx": [12],
    "gpt2_small_torchnn.onnx": [12],
    "vit_b_16.onnx": [12],
    "whisper_base_like_torchnn.onnx": [6, 6],
}

# The manifest says "about 62 M" for ZFNet-512, but the file's own weight
# placeholders (ConstantOfShape of each *_SHAPE initializer) sum to
# 87,250,536, counted independently of Orrery by summing those shapes with
# python3-onnx; the ONNX model zoo's ZFNet-512 (349 MB of fp32) agrees.
MANIFEST_ERRATA = {"light_zfnet512.onnx": 87_250_536}


# Transformer exports whose layers have an upstream MLIR form: `export --to
# mlir` of a tp=2 plan must parse, propagate and partition with stock
# mlir-opt-22 (docs/export.md); the others' convolutions are refused in one
# line.
UPSTREAM_MLIR = {"bert_base_torchnn.onnx", "gpt2_small_torchnn.onnx"}
MLIR_OPT = shutil.which("mlir-opt-22")


def upstream_problems(orrery, model, dims, workdir):
    """A tp=2 plan of `model` exported --to mlir and partitioned upstream."""
    stem = os.path.join(workdir, os.path.basename(model) + ".tp")
    cmd = [orrery, "plan", model, "--cluster", "8x8xA100-80G", "--quiet", "-o",
           stem + ".json", "--strategy", "tp=2,pp=1,dp=32,mbs=2,gbs=512"]
    for d in dims:
        cmd += ["--dim", d]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        return [f"plan tp=2: {p.stderr.strip()}"]
    e = subprocess.run([orrery, "export", stem + ".json", "--to", "mlir", "-o",
                        stem + ".mlir"], capture_output=True, text=True)
    if os.path.basename(model) not in UPSTREAM_MLIR:
        ok = e.returncode != 0 and e.stderr.count("\n") == 1 and "no upstream MLIR form" in e.stderr
        return [] if ok else [f"export --to mlir: expected a one-line refusal, got "
                              f"{e.stderr.strip() or 'an export'}"]
    if e.returncode:
        return [f"export --to mlir: {e.stderr.strip()}"]
    if MLIR_OPT is None:
        return []
    m = subprocess.run([MLIR_OPT, stem + ".mlir", "--pass-pipeline=builtin.module(inline,"
                        "symbol-dce,func.func(sharding-propagation,cse),"
                        "func.func(shard-partition,canonicalize,cse))", "-o", stem + ".part.mlir"],
                       capture_output=True, text=True)
    if m.returncode:
        return [f"mlir-opt-22 partitioning: {m.stderr.strip()[:300]}"]
    if "shard.all_reduce" not in open(stem + ".part.mlir").read():
        return ["mlir-opt-22 partitioned a tp=2 plan without an all-reduce"]
    return []


def plan_problems(orrery, model, dims, workdir):
    """Plans `model` on 64 A100 and checks the plan and its MLIR."""
    out = os.path.join(workdir, os.path.basename(model) + ".sharded.mlir")
    cmd = [orrery, "plan", model, "--cluster", "8x8xA100-80G", "--global-batch", "512",
           "--quiet", "--json", "--emit-mlir", out]
    for d in dims:
        cmd += ["--dim", d]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"plan: exit {proc.returncode}: {proc.stderr.strip()}"]
    plan = json.loads(proc.stdout)
    s = plan["strategy"]
    problems = []
    if s["tp"] * s["pp"] * s["dp"] * s["cp"] != 64:
        problems.append(f"plan uses {s['tp'] * s['pp'] * s['dp'] * s['cp']} devices, not 64")
    if "shard.grid @orrery_grid" not in open(out).read():
        problems.append("--emit-mlir wrote no shard.grid")
    return problems


def manifest_rows(path, columns):
    """The cells of each table row of a MANIFEST.md that names an .onnx file."""
    for line in open(path):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= columns and cells[1].endswith(".onnx"):
            yield cells


def run_stats(orrery, path, dims):
    cmd = [orrery, "stats", path, "--json"]
    for d in dims:
        cmd += ["--dim", d]
    return subprocess.run(cmd, capture_output=True, text=True)


def manifest_counts(path):
    counts = {}
    for cells in manifest_rows(path, 5):
        text = cells[4]
        m = re.match(r"^about ([\d.]+) M$", text)
        if m:
            counts[cells[1]] = (float(m.group(1)) * 1e6, 0.05, False)
            continue
        m = re.match(r"^([\d,]+)( incl\..*)?$", text)
        if m:
            counts[cells[1]] = (float(m.group(1).replace(",", "")), 0.01, bool(m.group(2)))
    return counts


# Known failures, each with what is missing; an entry that passes fails the
# test (as lit's XPASS), so the list shrinks as the importer learns.
HF_XFAIL = {}


def repeated_layers(stats):
    """Counts of the repeated layer kinds, in model order. A kind that is a
    precision variant of another (Pythia's fp16 layer 0 before eleven fp32
    layers: "variant_of") counts with that kind's layers."""
    totals = {}
    for layer in stats.get("layers", []):
        family = layer.get("variant_of", layer["kind"])
        totals[family] = totals.get(family, 0) + layer["count"]
    return [n for n in totals.values() if n > 1]


def hf_manifest(path):
    """file -> (parameters, [acceptable sorted repeat lists], [dims])."""
    rows = {}
    for cells in manifest_rows(path, 9):
        params = float(cells[6].replace(",", ""))
        layers = [sorted(int(x) for x in re.findall(r"\d+", alt))
                  for alt in cells[7].split(" or ")] if cells[7] else [[]]
        dims = re.findall(r"`([^`]+)`", cells[8])
        rows[cells[1]] = (params, layers, dims)
    return rows


def check_hf(orrery, folder, workdir, tally):
    manifest = os.path.join(folder, "MANIFEST.md")
    if not os.path.exists(manifest):
        return
    for name, (want, layers, dims) in sorted(hf_manifest(manifest).items()):
        path = os.path.join(folder, name)
        proc = run_stats(orrery, path, dims)
        problems = []
        if proc.returncode != 0:
            problems.append(f"exit {proc.returncode}: {proc.stderr.strip()}")
            tally.record("hf/" + name, problems, "")
            continue
        stats = json.loads(proc.stdout)
        got = stats["parameters"]
        err = abs(got - want) / want
        if err > 0.01:
            problems.append(f"parameters {got:,} vs manifest {want:,.0f} ({err:.1%} > 1%)")
        repeats = sorted(repeated_layers(stats))
        if repeats not in layers:
            problems.append(f"repeated layers {repeats}, expected {' or '.join(map(str, layers))}")
        problems += plan_problems(orrery, path, dims, workdir)
        detail = f"{got:,} params ({err:.2%}), layers " + \
            " ".join(f"{l['kind']}x{l['count']}" for l in stats["layers"])
        if name in HF_XFAIL:
            known = HF_XFAIL[name]
            if problems == [known]:
                print(f"xfail hf/{name}: {known}")
                continue
            problems = problems or [f"XPASS: expected to fail with: {known}"]
        tally.record("hf/" + name, problems, detail)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--workdir", default="/tmp")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    models = os.path.join(args.shared, "models")
    manifest = os.path.join(models, "MANIFEST.md")
    if not os.path.exists(manifest):
        print(f"skipped: {manifest} not found (shared/ corpus absent)")
        return 0
    expected = manifest_counts(manifest)
    tally = Tally()
    for name in sorted(f for f in os.listdir(models) if f.endswith(".onnx")):
        dims = bindable(args.orrery, os.path.join(models, name), DIMS)
        proc = run_stats(args.orrery, os.path.join(models, name), dims)
        problems = []
        if proc.returncode != 0:
            problems.append(f"exit {proc.returncode}: {proc.stderr.strip()}")
        else:
            stats = json.loads(proc.stdout)
            if name not in expected:
                problems.append("no count in MANIFEST.md")
            else:
                want, tol, with_buffers = expected[name]
                if name in MANIFEST_ERRATA:
                    want, tol = MANIFEST_ERRATA[name], 0.01
                got = stats["parameters"] + (stats["buffers"] if with_buffers else 0)
                err = abs(got - want) / want
                if err > tol:
                    problems.append(f"parameters {got:,} vs manifest {want:,.0f} ({err:.1%} > {tol:.0%})")
            repeats = repeated_layers(stats)
            if name in LAYERS and repeats != LAYERS[name]:
                problems.append(f"repeated layers {repeats}, expected {LAYERS[name]}")
            problems += plan_problems(args.orrery, os.path.join(models, name), dims, args.workdir)
            if name in LAYERS:
                problems += upstream_problems(args.orrery, os.path.join(models, name), dims,
                                              args.workdir)
        detail = "" if problems else \
            f"{stats['parameters']:,} params, layers " + \
            " ".join(f"{l['kind']}x{l['count']}" for l in stats["layers"])
        tally.record(name, problems, detail)
    check_hf(args.orrery, os.path.join(models, "hf"), args.workdir, tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
