#!/usr/bin/env bash
# Builds the given targets in build-fuzz: one clang tree where every object
# carries AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's
# coverage (-DORRERY_FUZZERS=ON). The fuzzers (scripts/fuzz.sh) and the
# sanitizer pass of the test suite (scripts/test.sh) share it, so each
# object is compiled once with the sanitizers, not once for each.
#   scripts/sanitized-build.sh orrery orrery-unit-tests
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -G Ninja -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DORRERY_FUZZERS=ON -DORRERY_WITH_CUDA=OFF >/dev/null
fi
cmake --build build-fuzz -j "${ORRERY_JOBS:-2}" --target "$@"
