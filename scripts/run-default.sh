#!/usr/bin/env bash
# The main job on the built-in default: set up, build, generate GPT-3 175B
# (shape-only ONNX, ~400 KB) and print its statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p build/models
/usr/bin/python3 models/generate.py gpt3-175b -o build/models/gpt3-175b.onnx
build/bin/orrery stats build/models/gpt3-175b.onnx --dim batch=1
