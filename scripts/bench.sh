#!/usr/bin/env bash
# Benchmarks (figures, not tests): front-end time on Llama-3 405B.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
mkdir -p build/models
/usr/bin/python3 models/generate.py llama3-405b -o build/models/llama3-405b.onnx
build/bin/orrery-bench-frontend build/models/llama3-405b.onnx --dim batch=1 --repeat 5
