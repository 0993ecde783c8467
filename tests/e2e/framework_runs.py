#!/usr/bin/python3
"""Exports checked by the frameworks' own code: Orrery plans a small Llama
(tests/e2e/frameworks/tiny_llama.py, written to ONNX by torch.onnx) on 2 and
4 CPU processes for a matrix of strategies, exports each plan --to pytorch,
and trains it under torchrun (Gloo) for a few steps with the exported
script's own build(), optimizer() and train_step(); the mean loss of every
step must match one process training the whole batch to 1e-4 relative, and
the compute must run in the plan's precision (bf16 runs within 1e-2). The
same for DeepSpeed's exports with DeepSpeed's engine, and for JAX's mesh
and PartitionSpecs on N CPU devices against JAX on one; torchtitan's job
TOMLs (a GPU trains them) are read by torchtitan's ConfigManager and
ParallelDims, every key kept. Strategies the target cannot
run as priced must be refused in one line.

    framework_runs.py --orrery BIN --python VENV_PYTHON --workdir DIR

VENV_PYTHON has the pinned releases of tests/e2e/frameworks/requirements.txt
(scripts/frameworks-test.sh makes it). Prints, per target, plans accepted /
tried and runs whose loss matched / run.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FRAMEWORKS = os.path.join(HERE, "frameworks")
STEPS = 3
GLOBAL_BATCH = 8
# Relative to one process: fp32 sums in another order agree to 1e-4; bf16
# runs round each GEMM's inputs, so they agree to 1e-2 and the compute type
# is checked instead.
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}

# (name, processes, strategy, precision); fp32 unless named, so that the
# losses compare at 1e-4 whatever the order of the sums.
RUNS = [
    ("tp", 2, "tp=2,sp=0,mbs=4,overlap=none", "fp32"),
    ("tp+sp", 2, "tp=2,sp=1,mbs=4,overlap=none", "fp32"),
    ("dp", 2, "dp=2,mbs=2,overlap=grad", "fp32"),
    ("dp+zero1", 2, "dp=2,zero=1,mbs=2,overlap=grad", "fp32"),
    ("zero3", 2, "dp=2,zero=3,mbs=2,overlap=grad+param", "fp32"),
    ("zero3 bf16", 2, "dp=2,zero=3,mbs=2,overlap=grad+param", "bf16"),
    ("dp bf16", 2, "dp=2,mbs=2,overlap=grad", "bf16"),
    ("dp+recompute", 2, "dp=2,mbs=2,recompute=full,overlap=grad", "fp32"),
    ("pp 1f1b", 2, "pp=2,mbs=2,schedule=1f1b,overlap=none", "fp32"),
    ("pp gpipe", 2, "pp=2,mbs=2,schedule=gpipe,overlap=none", "fp32"),
    ("pp interleaved", 2, "pp=2,vpp=2,mbs=2,schedule=interleaved,overlap=none", "fp32"),
    ("pp zb-v", 2, "pp=2,mbs=2,schedule=zb-v,overlap=none", "fp32"),
    ("tp+dp+sp", 4, "tp=2,dp=2,sp=1,mbs=2,overlap=none", "fp32"),
    ("tp+zero3", 4, "tp=2,dp=2,sp=1,zero=3,mbs=2,overlap=grad+param", "fp32"),
    ("pp+tp", 4, "pp=2,tp=2,sp=1,mbs=2,overlap=none", "fp32"),
    ("pp+dp+zero1", 4, "pp=2,dp=2,zero=1,mbs=2,overlap=none", "fp32"),
]

# DeepSpeed's engine from the exported ds_config (its pipeline engine with
# a pipeline section, AutoTP with tensor_parallel.autotp_size).
DEEPSPEED_RUNS = [
    ("dp", 2, "dp=2,mbs=2,overlap=none", "fp32"),
    ("dp+zero1", 2, "dp=2,zero=1,mbs=2,overlap=grad", "fp32"),
    ("zero3", 2, "dp=2,zero=3,mbs=2,overlap=grad+param", "fp32"),
    ("pipeline", 2, "pp=2,mbs=2,overlap=none", "fp32"),
    ("tp", 2, "tp=2,sp=0,mbs=4,overlap=none", "fp32"),
    ("pipeline+dp", 4, "pp=2,dp=2,mbs=2,overlap=none", "fp32"),
    ("tp+dp", 4, "tp=2,dp=2,sp=0,mbs=2,overlap=none", "fp32"),
]

# JAX: the export's mesh and PartitionSpecs on N CPU devices of one
# process (XLA's host platform split), XLA's partitioner placing the
# collectives; its own one-device run is the reference.
JAX_RUNS = [
    ("dp", 2, "dp=2,mbs=2,overlap=none", "fp32"),
    ("tp", 2, "tp=2,mbs=4,overlap=none", "fp32"),
    ("cp", 2, "cp=2,mbs=4,overlap=none", "fp32"),
    ("zero3", 2, "dp=2,zero=3,mbs=2,overlap=none", "fp32"),
    ("tp+dp+sp", 4, "tp=2,dp=2,sp=1,mbs=2,overlap=none", "fp32"),
    ("cp+tp", 4, "cp=2,tp=2,sp=1,mbs=4,overlap=none", "fp32"),
]

# torchtitan's job TOML read by torchtitan 0.1.0's ConfigManager and
# ParallelDims (a GPU trains it; the config is checked here): (name,
# model, cluster, strategy).
GPT = os.path.join(HERE, "..", "..", "models", "fixtures", "gpt3-125m.onnx")
TORCHTITAN_CONFIGS = [
    ("fsdp", GPT, "8xA100-80G", "dp=8,zero=3,mbs=2,gbs=64"),
    ("ddp", GPT, "8xA100-80G", "dp=8,zero=0,mbs=2,gbs=64,overlap=grad"),
    ("tp+fsdp", GPT, "8xA100-80G", "tp=2,dp=4,sp=1,zero=3,mbs=2,gbs=64"),
    ("async tp", GPT, "8xA100-80G", "tp=2,dp=4,sp=1,zero=3,mbs=2,gbs=64,overlap=grad+param+tp"),
    ("pp 1f1b", GPT, "16xA100-80G", "tp=2,pp=2,dp=4,zero=3,mbs=2,gbs=64,recompute=op,layers=8:6"),
    ("interleaved", GPT, "16xA100-80G", "tp=2,pp=2,dp=4,vpp=2,zero=3,mbs=2,gbs=64"),
    ("cp ring", "llama2-7b", "16xH100-SXM", "tp=2,cp=2,dp=4,sp=1,zero=3,mbs=1,gbs=16"),
    ("recompute full", GPT, "8xA100-80G", "dp=8,zero=3,mbs=2,gbs=64,recompute=full"),
    ("cpu offload", GPT, "8xA100-80G", "dp=8,zero=3,mbs=2,gbs=64,offload=optimizer"),
    ("fp8", "llama2-7b", "8xH100-SXM", "tp=2,dp=4,sp=1,zero=3,mbs=1,gbs=16,precision=fp8,fp8_recipe=tensorwise"),
]

# Heterogeneous plans (replica groups of stages on two CPU pools standing in
# for two device types): the planner's own plans, and two with stages set to
# tp=2 by hand (the planner gives this tiny model tp=1; `orrery check` would
# re-price such an edit): (name, cluster, global batch, edit).
DATA = os.path.join(HERE, "data")


def _tp2_stages(plan):
    """One replica of the two-stage pipeline, each stage tp=2."""
    g = plan["strategy"]["replica_groups"][0]
    g.update(replicas=1, micro_batches_per_replica=[4], samples_per_replica=[8],
             gradient_weight_per_replica=[1.0])
    for st in g["stages"] + plan["stages"]:
        st["tp"] = 2
    plan["strategy"]["summary"] = "[a/CPU tp2 (3 layers) | b/CPU tp2 (3 layers)] x1 mbs2 m4 (by hand)"


def _tp2_second_group(plan):
    """The second group's two replicas as one of tp=2 (the groups' stages
    then split the weights differently: the cross-group reduction takes
    whole gradients)."""
    g = plan["strategy"]["replica_groups"][1]
    g.update(replicas=1, micro_batches_per_replica=[2], samples_per_replica=[8],
             gradient_weight_per_replica=[8 / 12])
    g["stages"][0]["tp"] = 2
    for st in plan["stages"]:
        if st["replica_group"] == 1:
            st["tp"] = 2
    plan["strategy"]["summary"] = plan["strategy"]["summary"].replace(
        "[b/CPU tp1 pp1 (6 layers)] x2 mbs4 m1", "[b/CPU tp2 pp1 (6 layers)] x1 mbs4 m2 (by hand)")


HETERO_RUNS = [
    ("pipeline across pools", "cpu-pools-2-2.json", 8, None),
    ("two groups", "cpu-pools-2-1.json", 12, None),
    ("groups split apart", "cpu-pools-2-2.json", 12, None),
    ("stages tp=2", "cpu-pools-2-2.json", 8, _tp2_stages),
    ("groups tp=1 and 2", "cpu-pools-2-2.json", 12, _tp2_second_group),
]

# Strategies the PyTorch export does not run as priced: each a one-line
# refusal naming what it lacks.
REFUSED = [
    ("cp", 2, "cp=2,mbs=4,overlap=none", "fp32", "context parallelism"),
    ("fp16", 2, "dp=2,mbs=2,overlap=grad", "fp16", "fp16 needs loss scaling"),
    ("tp+zero1", 4, "tp=2,dp=2,zero=1,mbs=2,overlap=none", "fp32", "ZeroRedundancyOptimizer"),
    ("pp+dp overlapped", 4, "pp=2,dp=2,mbs=2,overlap=grad", "fp32", "after the backward"),
]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


def hetero_runs(args, onnx_path, torchrun, failures):
    """Plans tiny_llama on two CPU pools, exports --to pytorch and trains
    each under torchrun; returns (accepted, tried, matched)."""
    accepted = matched = 0
    references = {}
    for name, cluster, batch, edit in HETERO_RUNS:
        stem = os.path.join(args.workdir, "hetero_" + name.replace(" ", "_").replace("=", ""))
        p = run([args.orrery, "plan", onnx_path, "--cluster", os.path.join(DATA, cluster),
                 "--dim", f"batch={batch}", "--global-batch", str(batch), "--precision",
                 "fp32", "--quiet", "-o", stem + ".json"])
        if p.returncode:
            failures.append(f"pytorch heterogeneous {name}: orrery plan: {p.stderr.strip()}")
            continue
        plan = json.load(open(stem + ".json"))
        if plan["strategy"].get("kind") != "heterogeneous":
            failures.append(f"pytorch heterogeneous {name}: the planner chose a "
                            f"homogeneous plan: {plan['strategy'].get('summary')}")
            continue
        if edit:
            edit(plan)
            json.dump(plan, open(stem + ".json", "w"), indent=1)
        e = run([args.orrery, "export", stem + ".json", "--to", "pytorch", "-o", stem + ".py"])
        if e.returncode:
            failures.append(f"pytorch heterogeneous {name}: refused: {e.stderr.strip()}")
            continue
        accepted += 1
        if batch not in references:
            ref = os.path.join(args.workdir, f"reference_{batch}.json")
            r = run([args.python, os.path.join(FRAMEWORKS, "pytorch_train.py"), "--reference",
                     "--global-batch", str(batch), "--steps", str(STEPS), "--out", ref])
            if r.returncode:
                sys.exit("framework_runs: the one-process reference failed: " + r.stderr[-2000:])
            references[batch] = json.load(open(ref))["losses"]
        procs = plan["cluster"]["devices_used"]
        t = run([torchrun, "--standalone", "--nproc-per-node", str(procs),
                 os.path.join(FRAMEWORKS, "pytorch_train.py"), "--plan", stem + ".py",
                 "--steps", str(STEPS), "--out", stem + ".out.json"],
                env=dict(os.environ, OMP_NUM_THREADS="1"))
        if t.returncode:
            failures.append(f"pytorch heterogeneous {name}: torchrun failed:\n{t.stderr[-3000:]}")
            continue
        losses = json.load(open(stem + ".out.json"))["losses"]
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, references[batch]))
        ok = worst <= TOLERANCE["fp32"]
        matched += ok
        print(f"  pytorch heterogeneous {name:22} {procs} processes  "
              f"{plan['strategy']['summary'].split(', gbs')[0]}  losses "
              f"{', '.join(f'{x:.6f}' for x in losses)}  worst {worst:.1e}  "
              f"{'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(f"pytorch heterogeneous {name}: losses {losses} vs one process "
                            f"{references[batch]} (worst {worst:.2e})")
    return accepted, len(HETERO_RUNS), matched


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--only", help="run only the cases whose name contains this")
    args = ap.parse_args()
    if args.only:
        for table in (RUNS, DEEPSPEED_RUNS, JAX_RUNS, REFUSED, TORCHTITAN_CONFIGS, HETERO_RUNS):
            table[:] = [r for r in table if args.only in r[0]]
    os.makedirs(args.workdir, exist_ok=True)
    onnx_path = os.path.join(args.workdir, "tiny_llama.onnx")
    failures = []

    p = run([args.python, os.path.join(FRAMEWORKS, "tiny_llama.py"), onnx_path])
    if p.returncode:
        sys.exit("framework_runs: torch.onnx.export failed: " + p.stderr[-2000:])
    trainer = os.path.join(FRAMEWORKS, "pytorch_train.py")
    ref_path = os.path.join(args.workdir, "reference.json")
    p = run([args.python, trainer, "--reference", "--global-batch", str(GLOBAL_BATCH),
             "--steps", str(STEPS), "--out", ref_path])
    if p.returncode:
        sys.exit("framework_runs: the one-process reference failed: " + p.stderr[-2000:])
    references = {"pytorch": json.load(open(ref_path))["losses"]}
    references["deepspeed"] = references["pytorch"]
    full = json.load(open(ref_path))["local_parameters"]
    jax_ref = os.path.join(args.workdir, "reference_jax.json")
    p = run([args.python, os.path.join(FRAMEWORKS, "jax_train.py"), "--reference",
             "--global-batch", str(GLOBAL_BATCH), "--steps", str(STEPS), "--out", jax_ref])
    if p.returncode:
        sys.exit("framework_runs: JAX's one-device reference failed: " + p.stderr[-2000:])
    references["jax"] = json.load(open(jax_ref))["losses"]

    def export(name, procs, strategy, precision, target="pytorch"):
        stem = os.path.join(args.workdir, target + "_" + name.replace(" ", "_").replace("+", "_"))
        plan = run([args.orrery, "plan", onnx_path, "--cluster", f"{procs}xCPU",
                    "--dim", f"batch={GLOBAL_BATCH}", "--quiet", "-o", stem + ".json",
                    "--strategy", f"{strategy},gbs={GLOBAL_BATCH},precision={precision}"])
        if plan.returncode:
            return None, f"orrery plan: {plan.stderr.strip()}"
        out = run([args.orrery, "export", stem + ".json", "--to", target, "-o",
                   stem + (".ds.json" if target == "deepspeed" else ".py")])
        return (stem if out.returncode == 0 else None), out.stderr.strip()

    torchrun = os.path.join(os.path.dirname(args.python), "torchrun")
    counts = {}
    for target, runs, trainer_py in (("pytorch", RUNS, "pytorch_train.py"),
                                     ("deepspeed", DEEPSPEED_RUNS, "deepspeed_train.py"),
                                     ("jax", JAX_RUNS, "jax_train.py")):
        reference = references[target]
        accepted = matched = 0
        for name, procs, strategy, precision in runs:
            stem, error = export(name, procs, strategy, precision, target)
            if stem is None:
                failures.append(f"{target} {name}: refused: {error}")
                continue
            accepted += 1
            inputs = (["--plan", stem + ".py"] if target == "pytorch" else
                      ["--config", stem + ".ds.json", "--plan", stem + ".json"]
                      if target == "deepspeed" else ["--plan", stem + ".py", "--devices", str(procs)])
            launch = ([args.python] if target == "jax" else
                      [torchrun, "--standalone", "--nproc-per-node", str(procs)])
            p = run([*launch, os.path.join(FRAMEWORKS, trainer_py), *inputs,
                     "--steps", str(STEPS), "--out", stem + ".out.json"],
                    env=dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu"))
            if p.returncode:
                failures.append(f"{target} {name}: torchrun failed:\n{p.stderr[-3000:]}")
                continue
            result = json.load(open(stem + ".out.json"))
            want = "torch.bfloat16" if precision == "bf16" else "torch.float32"
            worst = max(abs(a - b) / abs(b) for a, b in zip(result["losses"], reference))
            # A plan that splits or shards the weights leaves this rank fewer.
            split = any(f"{k}=2" in strategy for k in ("tp", "pp")) or "zero=3" in strategy
            held = result["local_parameters"]
            same_type = result["compute_dtype"].split(".")[-1] == want.split(".")[-1]
            ok = (worst <= TOLERANCE[precision] and same_type and
                  (held < full if split else held == full))
            matched += ok
            print(f"  {target} {name:16} {procs} {'devices' if target == 'jax' else 'processes'}  losses "
                  f"{', '.join(f'{x:.6f}' for x in result['losses'])}  worst {worst:.1e}  "
                  f"compute {result['compute_dtype']}  weights here {held:,} of {full:,}  "
                  f"{'ok' if ok else 'MISMATCH'}")
            if not ok:
                failures.append(f"{target} {name}: losses {result['losses']} vs one process "
                                f"{reference} (worst {worst:.2e}), compute "
                                f"{result['compute_dtype']}, want {want}; {held} of {full} "
                                f"weights here ({'split' if split else 'whole'} expected)")
        counts[target] = (accepted, len(runs), matched)
    read = 0
    for name, model, cluster, strategy in TORCHTITAN_CONFIGS:
        stem = os.path.join(args.workdir, "torchtitan_" + name.replace(" ", "_").replace("+", "_"))
        p = run([args.orrery, "plan", model, "--cluster", cluster, "--quiet", "-o",
                 stem + ".json", "--strategy", strategy, "--kernels", "compiled"])
        e = p if p.returncode else run([args.orrery, "export", stem + ".json", "--to",
                                        "torchtitan", "-o", stem + ".toml"])
        if e.returncode:
            failures.append(f"torchtitan {name}: {e.stderr.strip()}")
            continue
        world = json.load(open(stem + ".json"))["cluster"]["devices"]
        c = run([args.python, os.path.join(FRAMEWORKS, "torchtitan_config.py"),
                 stem + ".toml", str(world)])
        verdict = c.stdout.strip().splitlines()[-1] if c.stdout.strip() else c.stderr[-500:]
        read += c.returncode == 0
        print(f"  torchtitan {name:16} {world} devices  {verdict}")
        if c.returncode:
            failures.append(f"torchtitan {name}: {verdict}")
    counts["torchtitan"] = (len(TORCHTITAN_CONFIGS), len(TORCHTITAN_CONFIGS), read)
    counts["pytorch heterogeneous"] = hetero_runs(args, onnx_path, torchrun, failures)

    refused = 0
    for name, procs, strategy, precision, why in REFUSED:
        stem, error = export(name, procs, strategy, precision)
        one_line = stem is None and error.count("\n") == 0 and why in error
        refused += one_line
        if not one_line:
            failures.append(f"{name}: expected a one-line refusal naming '{why}', got "
                            f"{'an export' if stem else repr(error)}")
    for target, (accepted, tried, matched) in counts.items():
        if target == "pytorch heterogeneous":
            print(f"pytorch heterogeneous: plans accepted {accepted}/{tried}, runs whose loss "
                  f"matched one process {matched}/{accepted}")
            continue
        if target == "torchtitan":
            print(f"torchtitan: job configs read by torchtitan 0.1.0's ConfigManager and "
                  f"ParallelDims, every key kept {matched}/{tried}")
            continue
        print(f"{target}: plans accepted {accepted}/{tried}, runs whose loss matched one "
              f"process {matched}/{accepted}" +
              (f"; refused in one line {refused}/{len(REFUSED)}" if target == "pytorch" else ""))
    for target in ("pytorch", "jax"):
        print(f"one-process losses ({target}) "
              f"{', '.join(f'{x:.6f}' for x in references[target])}")
    if failures:
        print("\n".join("FAIL " + f for f in failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
