#!/usr/bin/env bash
# One prepared check on a machine with a GPU (under 10 minutes): profile the
# GPU with the CUDA backend, run a one-GPU plan of GPT-3 1.3B on it, print
# measured against predicted step and memory. Prepare here with
# scripts/device-bundle.sh, then run it there with build/device carried:
#   run(command="bash bench/gpu/run-device.sh", carry=["build/device"])
# Results land in $OUT (or ./device-out).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/device
OUT=${OUT:-device-out}
mkdir -p "$OUT"
[ -x "$B/bin/orrery-run" ] || { echo "run-device: $B missing: run scripts/device-bundle.sh first" >&2; exit 1; }
# CUDA's libraries where that machine keeps them (the toolkit, or the
# nvidia-* Python wheels beside PyTorch).
cuda_dirs=""
for lib in libcudart.so.13 libcublasLt.so.13 libnccl.so.2; do
  found=$(find /usr/local/cuda*/ /usr/lib /opt /usr/local/lib -name "$lib*" -not -path '*/stubs/*' 2>/dev/null | head -1 || true)
  [ -n "$found" ] && cuda_dirs="$cuda_dirs:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$B/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== profile (cuBLASLt GEMMs, streaming kernel)"
timeout 240 "$B/bin/orrery-run" profile --backend cuda -o "$OUT/profile.json" | tee "$OUT/profile.txt"
echo "== the plan"
cat "$B/programs/gpt3-1.3b-h200-plan.txt" | sed -n 1,12p
echo "== run: GPT-3 1.3B on one GPU, 5 steps after 2 warm-up"
timeout 300 "$B/bin/orrery-run" run "$B/programs/gpt3-1.3b-h200.json" --steps 5 --warmup 2 \
  --trace "$OUT/trace.json" | tee "$OUT/run.txt"
timeout 300 "$B/bin/orrery-run" run "$B/programs/gpt3-1.3b-h200.json" --steps 5 --warmup 1 \
  --json > "$OUT/run.json"
python3 - "$OUT/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["measured"]["step_time_s"]["median"]; p = r["predicted"]["step_time_s"]
x = r["per_rank"][0]
print(f"step: measured {m*1e3:.1f} ms, predicted {p*1e3:.1f} ms, error {100*(p-m)/m:+.1f}%")
print(f"memory: measured {x['peak_memory_bytes']/2**30:.2f} GiB, predicted {x['predicted_peak_memory_bytes']/2**30:.2f} GiB")
print("per instruction kind (s per step):", {k: round(v, 4) for k, v in x["instruction_s"].items()})
PY
