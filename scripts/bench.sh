#!/usr/bin/env bash
# Benchmarks (figures, not tests):
#  1. front-end time on Llama-3 405B (load, shape inference, import, outlining);
#  2. simulation time of one Llama-3 405B step on 16,384 H100;
#  3. mixed clusters and two sites: the planner against the fastest type
#     alone and against using every device alike, and its search time
#     (3 types x 256 devices);
#  4. the simulator against training steps measured on an H200
#     (bench/measured/, with and without the device's measured kernel profile);
#  5. the simulator against published training runs and NCCL measurements
#     (needs ../shared/validation);
#  6. the runtime's CPU backend: profile this machine, plan a small GPT on
#     2 CPU ranks, run 7 plans, predicted against measured.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
mkdir -p build/models
/usr/bin/python3 models/generate.py llama3-405b -o build/models/llama3-405b.onnx
build/bin/orrery-bench-frontend build/models/llama3-405b.onnx --dim batch=1 --repeat 5
echo
build/bin/orrery-bench-simulate build/models/llama3-405b.onnx 2048x8xH100-SXM \
  "tp=8,pp=16,dp=128,mbs=1,gbs=2048,recompute=selective,sp=1,zero=1" --repeat 20
echo
for m in gpt3-13b gpt3-175b; do
  /usr/bin/python3 models/generate.py $m -o build/models/$m.onnx
done
for c in a100-v100-h100 h100-a100-40g h100-l40s-a10g two-sites-wan; do
  build/bin/orrery-bench-hetero build/models/gpt3-13b.onnx bench/clusters/$c.json \
    --global-batch 1024 --repeat 3
done
build/bin/orrery-bench-hetero build/models/gpt3-175b.onnx bench/clusters/3x256.json \
  --global-batch 1536 --repeat 3
echo
/usr/bin/python3 bench/gpu/compare.py bench/measured/h200-sxm-pytorch.json --build build
echo
/usr/bin/python3 bench/runtime_cpu.py --orrery build/bin/orrery
if [ -f ../shared/validation/published_runs.json ]; then
  echo
  /usr/bin/python3 bench/validate.py --build build --shared ../shared
  echo
  /usr/bin/python3 bench/planner.py --build build --shared ../shared
fi
if [ -f ../shared/validation/inference_runs.json ]; then
  echo
  /usr/bin/python3 bench/validate_serving.py --build build --shared ../shared
fi
echo
/usr/bin/python3 bench/serving_speed.py --build build
echo
/usr/bin/python3 bench/goodput.py --build build
if [ -x build/python-test/bin/python ]; then # scripts/python-test.sh made it
  echo
  build/python-test/bin/python bench/python_overhead.py --build build
fi
