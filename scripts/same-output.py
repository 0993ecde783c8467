#!/usr/bin/python3
"""Same inputs, same output bytes: records what one build of Orrery prints
and writes for every lit test's commands and for a matrix of the CLI's
subcommands (simulate, plan, lower, serve, stats --json and every exporter)
over the built-in models, the bench clusters and the lit inputs, and
compares two such records. For refactors: record the base commit's build,
then HEAD's, and the diff must be empty.

    same-output.py record --bin BUILD/bin --out DIR [--only REGEX] [--jobs N]
    same-output.py compare DIR_A DIR_B
    scripts/same-output.sh BASE_REV      # both records and the comparison

A lit test is run as its RUN lines say, in a fixed work directory (so that
paths in messages are the same in both records), with FileCheck replaced
by `cat` (the output it would check is recorded instead) and every file
the test writes under %t recorded too. Wall-clock figures (a search's
seconds, a profile's timings) are masked: they are not outputs.
"""
import argparse
import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = "/tmp/orrery-same-output-work"

# Printed figures that measure the machine, not the plan.
WALL_CLOCK = [
    (re.compile(rb"(searched|planned|priced|took|in) [0-9.]+ ?(ms|s|\xc2\xb5s)\b"), rb"\1 <wall>"),
    (re.compile(rb"\([0-9.]+ per second\)"), rb"(<rate>)"),
    (re.compile(rb'"(search|wall|elapsed|planning)_(time_)?(s|seconds|ms)": [0-9.e+-]+'), rb'"\1_\2\3": <wall>'),
]


def mask(data):
    for pattern, repl in WALL_CLOCK:
        data = pattern.sub(repl, data)
    return data


def lit_tests(only):
    out = []
    for d, _, files in os.walk(os.path.join(ROOT, "tests", "lit")):
        if "Inputs" in d.split(os.sep):
            continue
        for f in sorted(files):
            if f.endswith((".test", ".mlir", ".onnxtext")):
                rel = os.path.relpath(os.path.join(d, f), ROOT)
                if not only or re.search(only, rel):
                    out.append(rel)
    return sorted(out)


def run_lines(path):
    lines, cont = [], ""
    for raw in open(path, encoding="utf-8"):
        m = re.search(r"RUN:(.*)$", raw.rstrip("\n"))
        if not m:
            continue
        text = m.group(1).strip()
        if text.endswith("\\"):
            cont += text[:-1] + " "
            continue
        lines.append(cont + text)
        cont = ""
    return lines


def substitute(line, test, tmp, shared):
    src = os.path.join(ROOT, test)
    py = sys.executable
    subs = [("%shared", shared), ("%inputs", os.path.join(ROOT, "tests", "lit", "Inputs")),
            ("%generate", py + " " + os.path.join(ROOT, "models", "generate.py")),
            ("%python", py), ("%S", os.path.dirname(src)), ("%s", src), ("%t", tmp)]
    out, i = [], 0
    while i < len(line):
        if line.startswith("%%", i):
            out.append("%")
            i += 2
            continue
        for key, value in subs:
            if line.startswith(key, i):
                out.append(value)
                i += len(key)
                break
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


PRELUDE = r"""
FileCheck() { local f=; while [ $# -gt 0 ]; do case "$1" in --input-file=*) f="${1#*=}";; --input-file) f="$2"; shift;; esac; shift; done; if [ -n "$f" ]; then cat "$f"; else cat; fi; }
not() { "$@"; local rc=$?; [ $rc -ne 0 ]; }
count() { wc -l | tr -d ' '; }
"""


def record_lit(test, bindir, shared):
    """The test's commands' output, exit codes and written files, as bytes."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", test)
    work = os.path.join(WORK, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tmp = os.path.join(work, "t")
    env = dict(os.environ)
    llvm = "/usr/lib/llvm-22/bin"
    env["PATH"] = os.pathsep.join([bindir, llvm, env.get("PATH", "")])
    parts = []
    for n, line in enumerate(run_lines(os.path.join(ROOT, test))):
        cmd = substitute(line, test, tmp, shared)
        p = subprocess.run(["bash", "-c", PRELUDE + cmd], cwd=work, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=1800)
        parts.append(b"== RUN %d: %s\n" % (n, line.encode()))
        parts.append(mask(p.stdout))
        parts.append(b"== rc %d\n" % p.returncode)
    for root, _, files in os.walk(work):
        for f in sorted(files):
            if f.endswith(".pyc"):
                continue
            full = os.path.join(root, f)
            data = open(full, "rb").read()
            parts.append(b"== file %s sha256 %s\n" % (
                os.path.relpath(full, work).encode(),
                hashlib.sha256(mask(data)).hexdigest().encode()))
    shutil.rmtree(work, ignore_errors=True)
    return b"".join(parts)


# The matrix: models x clusters x subcommands beyond what lit runs.
FIXTURES = os.path.join(ROOT, "models", "fixtures")
MATRIX_MODELS = ["gpt3-1.3b", "llama3-8b", "mixtral-8x7b", "gpt3-175b"]
MATRIX_CLUSTERS = ["8xA100-80G", "2x8xH100-SXM", "16xH200", "4x8xGaudi3"]
# (tp, pp, the rest): dp fills the cluster.
STRATEGIES = [(2, 1, "mbs=1,gbs=64"), (4, 2, "mbs=1,gbs=64,sp=1"),
              (1, 4, "vpp=2,mbs=1,gbs=64,zero=1"),
              (1, 1, "zero=3,mbs=1,gbs=64,recompute=full"),
              (2, 2, "mbs=1,gbs=64,schedule=zb-v,offload=activations")]
EXPORTS = ["megatron", "deepspeed", "torchtitan", "pytorch", "jax", "mlir"]
SERVING_EXPORTS = ["vllm", "sglang", "trtllm"]


def matrix_cases(only):
    cases = []
    for model in MATRIX_MODELS:
        cases.append(("stats", ["stats", model, "--dim", "batch=1", "--json"]))
        for cluster in MATRIX_CLUSTERS:
            n = 1
            for part in cluster.split("x")[:-1]:
                n *= int(part)
            for tp, pp, rest in STRATEGIES:
                s = "tp=%d,pp=%d,dp=%d,%s" % (tp, pp, max(1, n // (tp * pp)), rest)
                cases.append(("simulate", ["simulate", model, "--cluster", cluster,
                                           "--strategy", s, "--json"]))
            cases.append(("plan", ["plan", model, "--cluster", cluster, "--global-batch", "64",
                                   "--json"]))
            cases.append(("serve", ["serve", model, "--cluster", cluster, "--workload",
                                    "isl=1024,osl=256,requests=100", "--json"]))
    for cluster in sorted(os.listdir(os.path.join(ROOT, "bench", "clusters"))):
        path = os.path.join(ROOT, "bench", "clusters", cluster)
        for model in ["gpt3-1.3b", "llama3-8b"]:
            cases.append(("plan-hetero", ["plan", model, "--cluster", path,
                                          "--global-batch", "64", "--json"]))
    for f in sorted(os.listdir(FIXTURES)) if os.path.isdir(FIXTURES) else []:
        if f.endswith(".onnx"):
            cases.append(("stats-fixture", ["stats", os.path.join(FIXTURES, f), "--dim", "batch=1",
                                            "--json"]))
    # bench/planner.py's large problem (not lowered: 16,384 ranks' programs
    # take some 14 GiB).
    cases.append(("plan-large", ["plan", "llama3-405b", "--cluster", "2048x8xH100-SXM",
                           "--global-batch", "2048", "--json"]))
    return [c for c in cases if not only or re.search(only, " ".join(c[1]))]


def record_matrix_case(case, bindir):
    kind, args = case
    orrery = os.path.join(bindir, "orrery")
    name = hashlib.sha256(" ".join(args).encode()).hexdigest()[:16]
    work = os.path.join(WORK, "m-" + name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    parts = []

    def run(argv):
        p = subprocess.run([orrery] + argv, cwd=work, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=1800)
        parts.append(b"== %s\n" % " ".join(argv).encode())
        parts.append(mask(p.stdout))
        parts.append(b"== rc %d\n" % p.returncode)
        return p.returncode

    if kind == "serve":
        out = os.path.join(work, "serve.json")
        if run(args + ["-o", out]) == 0:
            for target in SERVING_EXPORTS:
                run(["export", out, "--to", target])
    elif kind in ("plan", "plan-large", "plan-hetero", "simulate") and "--json" in args:
        out = os.path.join(work, "plan.json")
        rc = run(args + (["-o", out] if kind != "simulate" else []))
        if rc == 0 and kind != "simulate":
            run(["check", out])
            if kind != "plan-large":
                run(["lower", out, "--json"])
            for target in EXPORTS:
                run(["export", out, "--to", target])
    else:
        run(args)
    shutil.rmtree(work, ignore_errors=True)
    return b"".join(parts)


def record_bench(script, bindir, shared):
    """A validation bench's printed figures, run against this build."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), "--build",
                        os.path.dirname(bindir), "--shared", shared], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=3600)
    return mask(p.stdout) + b"== rc %d\n" % p.returncode


BENCHES = ["validate.py", "validate_serving.py"]


def record(args):
    bindir = os.path.abspath(args.bin)
    shared = os.path.abspath(args.shared)
    os.makedirs(args.out, exist_ok=True)
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for test in lit_tests(args.only):
            jobs.append((test, pool.submit(record_lit, test, bindir, shared)))
        for case in matrix_cases(args.only):
            key = "matrix/" + case[0] + "/" + hashlib.sha256(
                " ".join(case[1]).encode()).hexdigest()[:16]
            jobs.append((key, pool.submit(record_matrix_case, case, bindir)))
        for script in BENCHES:
            if not args.only or re.search(args.only, script):
                jobs.append(("bench/" + script,
                             pool.submit(record_bench, script, bindir, shared)))
        for key, job in jobs:
            path = os.path.join(args.out, key.replace("/", "__") + ".out")
            with open(path, "wb") as f:
                f.write(job.result())
    print("same-output: recorded %d cases of %s in %s" % (len(jobs), bindir, args.out))


def compare(args):
    a, b = set(os.listdir(args.a)), set(os.listdir(args.b))
    differ = 0
    for name in sorted(a | b):
        if name not in a or name not in b:
            print("only in %s: %s" % (args.a if name in a else args.b, name))
            differ += 1
            continue
        x = open(os.path.join(args.a, name), "rb").read()
        y = open(os.path.join(args.b, name), "rb").read()
        if x != y:
            differ += 1
            print("differs: %s" % name)
            p = subprocess.run(["diff", os.path.join(args.a, name), os.path.join(args.b, name)],
                               stdout=subprocess.PIPE)
            sys.stdout.write(p.stdout.decode(errors="replace")[:4000])
    print("same-output: %d of %d cases differ" % (differ, len(a | b)))
    return 1 if differ else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--bin", required=True,
                   help="the build's bin directory (the benches take its parent as --build)")
    r.add_argument("--out", required=True)
    r.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    r.add_argument("--only", default="", help="a regular expression over case names")
    r.add_argument("--jobs", type=int, default=int(os.environ.get("ORRERY_JOBS", "2")))
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "record":
        record(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
