#!/usr/bin/env bash
# The main job on the built-in default: set up, build (which writes the
# built-in models, GPT-3 175B among them), and plan GPT-3 175B on 1,024 A100
# (128 DGX A100 nodes) at a global batch of 1,536, writing plan.json.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/bin/orrery plan gpt3-175b --cluster 128x8xA100-80G --global-batch 1536 --explain \
  -o build/plan.json
echo "plan written to build/plan.json"
