#!/usr/bin/env bash
# Same inputs, same output bytes between a base commit and the working tree:
# builds BASE in a worktree of its own (build-base/, kept between runs, so a
# second comparison rebuilds only what changed), records both builds'
# outputs with scripts/same-output.py and diffs them. Exit 1 when any case
# differs.
#
#   scripts/same-output.sh BASE_REV [--only REGEX]
set -euo pipefail
cd "$(dirname "$0")/.."
base="${1:?usage: scripts/same-output.sh BASE_REV [--only REGEX]}"
shift
src=build-base/src
if [ ! -d "$src" ]; then
  git worktree add --detach "$src" "$base" >/dev/null
else
  git -C "$src" checkout --quiet --detach "$base"
fi
if [ ! -f build-base/build/build.ninja ]; then
  cmake -G Ninja -S "$src" -B build-base/build -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build build-base/build -j "${ORRERY_JOBS:-2}" --target orrery orrery-opt orrery-builtin-models
scripts/build.sh
rm -rf build-base/out-base build-base/out-head
/usr/bin/python3 scripts/same-output.py record --bin build-base/build/bin --out build-base/out-base "$@"
/usr/bin/python3 scripts/same-output.py record --bin build/bin --out build-base/out-head "$@"
/usr/bin/python3 scripts/same-output.py compare build-base/out-base build-base/out-head
