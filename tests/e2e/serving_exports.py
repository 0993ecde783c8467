#!/usr/bin/python3
"""Serving exports parsed by the engines' own argument parsers (issue #44,
item 6): serving plans with prefix caching on and off, speculative decoding
(EAGLE-3, n-gram, MTP), KV offload and a prefill/decode split, exported with
`orrery export --to vllm|sglang`, and each flag array parsed by vLLM's
EngineArgs (FlexibleArgumentParser, then EngineArgs.from_cli_args) and
SGLang's ServerArgs (add_cli_args, from_cli_args), the releases pinned in
tests/e2e/frameworks/requirements-engines.txt.

    serving_exports.py --orrery build/bin/orrery --python PY --engines DIR
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

# Each: serve arguments (model, cluster, options) and the flags each export
# must carry, for the engines it is exported to.
PLANS = [
    ("eagle3-offload",
     ["llama3-8b", "--cluster", "1xH100-SXM", "--strategy", "tp=1,spec=1",
      "--workload", "isl=2560,osl=128,requests=40,rate=4,prefix=2048",
      "--speculative", "eagle3", "--kv-offload", "64"],
     {"vllm": ["--enable-prefix-caching", "--speculative-config",
               "--kv-offloading-size"],
      "sglang": ["--speculative-algorithm", "--enable-hierarchical-cache"]}),
    ("ngram-nocache",
     ["llama3-8b", "--cluster", "2xH100-SXM", "--strategy", "tp=2,spec=1",
      "--workload", "isl=512,osl=128,requests=20,concurrency=2",
      "--speculative", "ngram,k=4", "--prefix-caching", "off"],
     {"vllm": ["--no-enable-prefix-caching", "--speculative-config"],
      "sglang": ["--disable-radix-cache", "--speculative-algorithm"]}),
    ("mtp",
     ["deepseek-v3", "--cluster", "1xGB200-NVL72", "--precision", "nvfp4",
      "--kv-cache", "fp8", "--strategy", "tp=8,ep=8,adp=0,replicas=1,spec=1",
      "--workload", "isl=1024,osl=128,requests=20,concurrency=4",
      "--speculative", "mtp,k=2"],
     {"vllm": ["--speculative-config"], "sglang": ["--speculative-algorithm"]}),
    # vLLM's CUTLASS MLA, whose decode takes one query a request: the plan
    # names it, only the vLLM export can carry it.
    ("mtp-cutlass-mla",
     ["deepseek-v3", "--cluster", "2xGB300", "--precision", "nvfp4",
      "--kv-cache", "fp8", "--strategy", "tp=2,pp=1,replicas=1,spec=1",
      "--workload", "isl=2048,osl=64,requests=20,concurrency=4",
      "--speculative", "mtp,k=1", "--attention-backend", "cutlass_mla"],
     {"vllm": ["--speculative-config", "--attention-backend", "CUTLASS_MLA"]}),
    ("split",
     ["llama3-8b", "--cluster", os.path.join("bench", "clusters", "h100-l40s.json"),
      "--strategy", "prefill=L40S:2,decode=H100-SXM:2",
      "--workload", "isl=512,osl=64,requests=20,rate=2"],
     {"vllm": ["--kv-transfer-config"], "sglang": ["--disaggregation-mode"]}),
]

CHECK = r'''
import json, os, sys
engine, arrays = sys.argv[1], json.loads(sys.argv[2])
if engine == "vllm":
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    import typing
    from vllm.config.speculative import SpeculativeMethod
    for argv in arrays:
        args = parser.parse_args(["--model", "checkpoint"] + argv)
        engine_args = EngineArgs.from_cli_args(args)
        spec = engine_args.speculative_config
        if spec and spec["method"] not in typing.get_args(SpeculativeMethod):
            sys.exit("speculative method " + spec["method"] + " unknown to vLLM")
else:
    import argparse
    from sglang.srt.server_args import ServerArgs
    # No abbreviations: a flag must be spelled as SGLang names it.
    parser = argparse.ArgumentParser(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    for argv in arrays:
        server = ServerArgs.from_cli_args(
            parser.parse_args(["--model-path", "checkpoint"] + argv))
        if server.speculative_algorithm:
            SpeculativeAlgorithm.from_string(server.speculative_algorithm)
print("parsed", len(arrays))
'''


def arrays_of(text):
    """The flag arrays (NAME=( ... )) of an export, each as argv."""
    out, cur = [], None
    for line in text.splitlines():
        if line.endswith("=(") and not line.startswith("#"):
            cur = []
        elif line == ")" and cur is not None:
            out.append(cur)
            cur = None
        elif cur is not None:
            cur += shlex.split(line)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--engines", required=True,
                    help="the target directory the engines are installed in")
    args = ap.parse_args()
    failures = []
    work = tempfile.mkdtemp(prefix="orrery-serving-exports-")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.engines),
               VLLM_TARGET_DEVICE="cpu")
    for name, serve, needs in PLANS:
        plan = os.path.join(work, name + ".json")
        p = subprocess.run([args.orrery, "serve", *serve, "-o", plan],
                           capture_output=True, text=True)
        if p.returncode:
            failures.append(f"{name}: serve: {p.stderr.strip()}")
            continue
        for engine in needs:
            e = subprocess.run([args.orrery, "export", plan, "--to", engine],
                               capture_output=True, text=True)
            if e.returncode:
                failures.append(f"{name} -> {engine}: {e.stderr.strip()}")
                continue
            arrays = arrays_of(e.stdout)
            flat = [a for argv in arrays for a in argv]
            missing = [f for f in needs[engine] if f not in flat]
            if missing:
                failures.append(f"{name} -> {engine}: missing {missing}")
            c = subprocess.run([args.python, "-c", CHECK, engine, json.dumps(arrays)],
                               capture_output=True, text=True, env=env)
            status = c.stdout.strip().splitlines()[-1] if c.returncode == 0 else "REFUSED"
            print(f"{name:16} {engine:7} {status}")
            if c.returncode:
                tail = (c.stderr.strip().splitlines() or ["failed"])[-1]
                failures.append(f"{name} -> {engine}: the engine's parser: {tail}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
