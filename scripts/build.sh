#!/usr/bin/env bash
# Configures and builds Orrery into build/ (Release, Ninja, static MLIR 22).
# Incremental: a second run rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j "${ORRERY_JOBS:-2}"
