#!/usr/bin/python3
"""`orrery report` pages render in headless Chromium (Debian's package):
for a plan on one device type and for a plan of 3 stages over three device
types, the page must load with no console message (the page has no script,
so any message is an error or a blocked fetch), reference nothing outside
itself, and paint a non-empty PNG. The PNGs stay in WORKDIR.

    report_render.py --orrery BIN --model ONNX --workdir DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from PIL import Image


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"FAIL {' '.join(cmd)}: {p.stderr.strip()}")
    return p.stdout


def render(browser, html, png):
    with tempfile.TemporaryDirectory() as profile:
        p = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-dev-shm-usage", "--hide-scrollbars",
                            f"--user-data-dir={profile}", "--window-size=1280,1400",
                            "--enable-logging=stderr", "--v=0", f"--screenshot={png}",
                            "file://" + os.path.abspath(html)],
                           capture_output=True, text=True, timeout=600)
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    return p.returncode, console


def painted(png):
    img = Image.open(png).convert("RGB")
    small = img.resize((img.width // 4, img.height // 4))
    pixels = list(small.getdata())
    ink = sum(1 for r, g, b in pixels if r + g + b < 700) / len(pixels)
    colors = len(set(pixels))
    return ink, colors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--orrery", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("0 passed, 1 failed")
        print("FAIL no chromium on PATH (scripts/setup.sh installs Debian's chromium)")
        return 1
    os.makedirs(args.workdir, exist_ok=True)
    three = os.path.join(args.workdir, "three-types.json")
    with open(three, "w") as f:
        f.write('{"name": "3 nodes: 8 H100-SXM, 8 A100-80G, 8 V100-32G", "sites": [{"name": "dc", '
                '"nodes": [{"count": 1, "device": "H100-SXM"}, {"count": 1, "device": "A100-80G"},'
                ' {"count": 1, "device": "V100-32G"}]}]}')
    cases = [("one-type", args.model, "2x8xA100-80G", ["--global-batch", "64"]),
             # A plan over the three types is what this case renders: at this
             # batch, with the attention scores in memory (Megatron-LM before
             # flash attention) and in fp16, which the V100s have tensor cores
             # for (bf16 they run at their fp32 rate), every type gets work.
             ("three-types", args.model, three,
              ["--global-batch", "256", "--kernels", "unfused-attention",
               "--precision", "fp16"])]
    passed, failed = 0, []
    for name, model, cluster, extra in cases:
        plan = os.path.join(args.workdir, name + ".plan.json")
        html = os.path.join(args.workdir, name + ".html")
        png = os.path.join(args.workdir, name + ".png")
        run([args.orrery, "plan", model, "--cluster", cluster, "--quiet", "-o", plan] + extra)
        run([args.orrery, "report", plan, "-o", html])
        text = open(html).read()
        outside = [m for m in re.findall(r'(?:src|href)\s*=\s*"([^"]*)"|url\(([^)]*)\)', text)
                   if any(m)]
        if outside or "<script" in text:
            failed.append(f"{name}: the page refers outside itself or has a script: {outside[:3]}")
            continue
        if name == "three-types":
            stages = len(re.findall(r'class="lbl">group \d+ stage \d', text)) // 2
            types = {t for t in ("H100-SXM", "A100-80G", "V100-32G") if f"dc/{t}" in text}
            if stages < 3 or len(types) < 2:
                failed.append(f"{name}: expected a plan over several types, got {stages} "
                              f"stages on {sorted(types)}")
                continue
        rc, console = render(browser, html, png)
        if rc or not os.path.exists(png):
            failed.append(f"{name}: chromium exited {rc} without a screenshot")
            continue
        if console:
            failed.append(f"{name}: console messages: {console[:3]}")
            continue
        ink, colors = painted(png)
        if ink < 0.02 or colors < 8:
            failed.append(f"{name}: the page looks empty ({ink:.1%} ink, {colors} colours)")
            continue
        passed += 1
        print(f"{name}: {png} ({ink:.1%} ink, {colors} colours)")
    print(f"{passed} passed, {len(failed)} failed")
    for f in failed:
        print("FAIL " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
