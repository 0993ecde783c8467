#!/usr/bin/python3
"""orrery serve's choices (issue #15's must-shows), on the built-in models.

1. Llama-3 70B on 8 H100 under the same TTFT/TPOT targets: a chat workload
   (1K in, 256 out) and a reasoning workload (1K in, 16K out) choose
   different configurations, and each plan says why.
2. On a cluster of 8 H100 and 32 L40S the plan splits the phases by type
   (prefill on the L40S, decode on the H100) and its goodput beats every
   configuration of either type alone under the same targets.
"""
import argparse
import json
import subprocess
import sys


def serve(orrery, *args):
    p = subprocess.run([orrery, "serve", *args, "--json"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        sys.exit(f"orrery serve {' '.join(args)}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def shape(c):
    if c.get("disaggregated"):
        return ("prefill", shape(c["prefill"]), "decode", shape(c["decode"]))
    return (c["device"], c["tp"], c["pp"], c["replicas"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--cluster", required=True, help="the H100 + L40S cluster")
    args = ap.parse_args()
    failures = []
    slo = ["--slo", "ttft_ms=2000,tpot_ms=50"]
    chat = serve(args.orrery, "llama3-70b", "--cluster", "8xH100-SXM",
                 "--workload", "chat", *slo)
    reasoning = serve(args.orrery, "llama3-70b", "--cluster", "8xH100-SXM",
                      "--workload", "reasoning,requests=500", *slo)
    print("chat     ", shape(chat["chosen"]), "-", chat["why"])
    print("reasoning", shape(reasoning["chosen"]), "-", reasoning["why"])
    if shape(chat["chosen"]) == shape(reasoning["chosen"]):
        failures.append("chat and reasoning chose the same configuration")
    for plan in (chat, reasoning):
        if not plan["why"] or "runner-up" not in plan["why"]:
            failures.append("a plan does not say why: " + plan["why"])
        if not plan["chosen"]["meets_slo"]:
            failures.append("the chosen configuration misses the targets")

    mixed = serve(args.orrery, "llama3-70b", "--cluster", args.cluster,
                  "--precision", "fp8", "--workload", "chat", *slo)
    chosen = mixed["chosen"]
    print("mixed    ", shape(chosen), "-", mixed["why"])
    if not chosen.get("disaggregated"):
        failures.append("the mixed cluster's plan does not split the phases")
    else:
        if chosen["prefill"]["device"] != "L40S" or chosen["decode"]["device"] != "H100-SXM":
            failures.append("phases not assigned by type: " + str(shape(chosen)))
    best = chosen["metrics"]["goodput_req_per_s"]
    for device in ("H100-SXM", "L40S"):
        alone = [c["metrics"]["goodput_req_per_s"] for c in mixed["candidates"]
                 if not c.get("disaggregated") and c["device"] == device]
        top = max(alone) if alone else 0
        print(f"  {device} alone: best goodput {top:.3g} req/s; split: {best:.3g}")
        if not alone or top >= best:
            failures.append(f"the split does not beat {device} alone")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
