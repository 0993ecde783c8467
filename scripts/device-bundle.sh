#!/usr/bin/env bash
# Builds build/device/: what bench/gpu/run-device.sh needs on a machine with
# a GPU and no LLVM or Debian packages (the device machines): orrery-run
# (no MLIR), the shared libraries it needs that such a machine lacks (Gloo,
# OpenBLAS and theirs; CUDA's are found there), and the programs of a
# one-GPU GPT-3 1.3B plan on an H200, lowered here. Carry build/device.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/bin/orrery-run ] || scripts/build.sh
out=build/device
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib" "$out/programs"
cp build/bin/orrery-run "$out/bin/"
strip "$out/bin/orrery-run"
# Every library outside glibc and CUDA's own.
ldd build/bin/orrery-run | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
    libcudart*|libcublas*|libnccl*|libcuda.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
model=gpt3-1.3b
build/bin/orrery plan "$model" --cluster 1xH200 --global-batch 16 --quiet \
  -o "$out/programs/$model-h200-plan.json" > "$out/programs/$model-h200-plan.txt"
build/bin/orrery lower "$out/programs/$model-h200-plan.json" --json \
  -o "$out/programs/$model-h200.json"
du -sh "$out"
