#!/usr/bin/python3
"""Every plan `orrery plan --framework X` writes exports to X without a
refusal (Megatron-LM and torchtitan refuse the convolutional and recurrent
models in one line: they build transformers), for X in megatron, deepspeed, torchtitan, pytorch and jax, on:
the 16 SC'21 configurations (Narayanan et al. 2021, Table 1 and Table 2's
PTD-P runs: their model, cluster and global batch, the search free), GPT-3
175B on 1,024 A100, Llama-3 405B on 16,384 H100, and the 19 models of
shared/models on 64 A100. The plan also lists X among the frameworks that
run it, and `--strategy` with a refused configuration is a one-line error.

The SC'21 and shared-model problems are skipped (with a message) when
shared/ is absent, as on a user's machine; the two built-in models always
run.

    framework_plans.py --orrery BIN --workdir DIR [--shared DIR]
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
sys.path.insert(0, HERE)
from validate import gpt_model, cluster_for  # noqa: E402
from shared_models import DIMS  # noqa: E402
from model_dims import bindable  # noqa: E402

FRAMEWORKS = ["megatron", "deepspeed", "torchtitan", "pytorch", "jax"]
# Models whose repeated layers are no transformer blocks (convolutional and
# recurrent networks of shared/models, by name): Megatron-LM and torchtitan
# build transformers only, so for those a one-line refusal is the answer.
NOT_TRANSFORMERS = ("convnext", "efficientnet", "light_bvlc_alexnet", "light_densenet",
                    "light_inception", "light_resnet", "light_shufflenet",
                    "light_squeezenet", "light_vgg", "light_zfnet", "mobilenet",
                    "ppocrv4_det", "resnet", "silero_vad")
TRANSFORMER_ONLY = ("megatron", "torchtitan")


def problems(args):
    """(name, model, cluster, global batch, extra flags) of every problem."""
    out = [("gpt3-175b/1024xA100", "gpt3-175b", "128x8xA100-80G", 1536, []),
           ("llama3-405b/16384xH100", "llama3-405b", "2048x8xH100-SXM", 2048, [])]
    runs = os.path.join(args.shared, "validation", "published_runs.json") if args.shared else ""
    if runs and os.path.exists(runs):
        for case in json.load(open(runs))["cases"]:
            if case["group"] == "SC21_Table1_weak_scaling" or (
                    case["group"] == "SC21_Table2_PTD_vs_ZeRO3" and "_PTD_" in case["id"]):
                out.append((case["id"], gpt_model(args.workdir, case["model"]),
                            cluster_for(args.workdir, case), case["training"]["global_batch"], []))
    else:
        print("skipped the SC'21 configurations: shared/validation absent")
    folder = os.path.join(args.shared, "models") if args.shared else ""
    if folder and os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".onnx"):
                path = os.path.join(folder, name)
                dims = [f for d in bindable(args.orrery, path, DIMS) for f in ("--dim", d)]
                out.append((name, path, "8x8xA100-80G", 512, dims))
    else:
        print("skipped the shared models: shared/models absent")
    return out


def check(orrery, workdir, problem, framework):
    """The failures of one plan and its export (empty when it passes)."""
    name, model, cluster, gbs, extra = problem
    plan = os.path.join(workdir, f"{name.replace('/', '_')}.{framework}.json")
    cmd = [orrery, "plan", model, "--cluster", cluster, "--global-batch", str(gbs),
           "--framework", framework, "--top", "1", "--quiet", "-o", plan] + extra
    run = subprocess.run(cmd, capture_output=True, text=True)
    if framework in TRANSFORMER_ONLY and name.startswith(NOT_TRANSFORMERS):
        lines = run.stderr.strip().splitlines()
        if run.returncode and len(lines) == 1 and "not transformer blocks" in lines[0]:
            return [None, f"{name:34} {framework:10} refused: not transformer blocks"]
        return [f"{name} --framework {framework}: expected a one-line refusal of a model "
                f"without transformer blocks, got exit {run.returncode}: {run.stderr.strip()!r}"]
    if run.returncode:
        return [f"{name} --framework {framework}: plan failed: {run.stderr.strip()}"]
    doc = json.load(open(plan))
    fails = []
    if framework not in doc.get("frameworks", []):
        fails.append(f"{name} --framework {framework}: the plan lists "
                     f"{doc.get('frameworks')} as the frameworks that run it")
    if doc.get("search", {}).get("framework") != framework:
        fails.append(f"{name} --framework {framework}: search.framework is "
                     f"{doc.get('search', {}).get('framework')!r}")
    out = subprocess.run([orrery, "export", plan, "--to", framework],
                         capture_output=True, text=True)
    if out.returncode:
        fails.append(f"{name} --framework {framework}: export refused: {out.stderr.strip()}")
    return fails or [None, f"{name:34} {framework:10} {doc['strategy']['cli']}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--shared", default="")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    todo = [(p, f) for p in problems(args) for f in FRAMEWORKS]
    failures, passed = [], 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for result in pool.map(lambda pf: check(args.orrery, args.workdir, *pf), todo):
            if result[0] is None:
                passed += 1
                print(result[1])
            else:
                failures += result
    # A configuration the framework cannot run, given with --strategy, is
    # refused in one line naming the framework.
    refused = subprocess.run(
        [args.orrery, "plan", "gpt3-175b", "--cluster", "128x8xA100-80G", "--strategy",
         "tp=8,pp=8,dp=16,mbs=1,gbs=1536,vpp=2,recompute=full", "--framework", "deepspeed", "--quiet"],
        capture_output=True, text=True)
    lines = refused.stderr.strip().splitlines()
    if refused.returncode == 0 or len(lines) != 1 or "--framework deepspeed" not in lines[0]:
        failures.append(f"--strategy refused by --framework: exit {refused.returncode}, "
                        f"stderr {refused.stderr.strip()!r}")
    print(f"{passed} of {len(todo)} plans export to their framework; {len(failures)} failures")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
