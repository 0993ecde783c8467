#!/usr/bin/env bash
# The Python package: builds the wheel with scikit-build-core from build/
# (the tree scripts/build.sh builds: only the extension and what it links
# are built), installs it into a fresh virtual environment and runs pytest
# on it, comparing with the `orrery` command of the same build. PyTorch
# comes from Debian (python3-torch, seen through --system-site-packages);
# transformers from PyPI, pinned to a release that runs on it.
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
tools=build/python-tools
[ -x "$tools/bin/python" ] || "$py" -m venv "$tools"
"$tools/bin/pip" install -q --disable-pip-version-check \
  "scikit-build-core==1.1.2" "nanobind==3.1.0"
rm -rf build/wheels
"$tools/bin/pip" wheel . -q --disable-pip-version-check --no-build-isolation \
  --no-deps -w build/wheels
wheel=$(ls build/wheels/orrery-*.whl)
echo "python-test: built $wheel ($(du -h "$wheel" | cut -f1))"

venv=build/python-test
rm -rf "$venv"
"$py" -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "pytest==9.2.0" \
  "transformers==4.40.2"
"$venv/bin/pip" install -q --disable-pip-version-check "$wheel"
shared="$(cd .. && pwd)/shared"
ORRERY_CLI="$PWD/build/bin/orrery" ORRERY_SHARED="$shared" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
# A user's `pip install .` must leave build/ working after its environment
# is gone: configure the tree again without the interpreter the wheel's
# build cached there (python/CMakeLists.txt finds Python again).
mv "$tools" "$tools.removed"
trap 'mv "$tools.removed" "$tools"' EXIT
cmake -S . -B build > build/python-test-reconfigure.log 2>&1 ||
  { cat build/python-test-reconfigure.log; echo "python-test: build/ no longer configures once the wheel's interpreter is removed"; exit 1; }
echo "python-test: build/ configures again with the wheel's interpreter removed"
