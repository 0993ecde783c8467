#!/usr/bin/env bash
# The whole test suite: set up, build, run every test (lit, GoogleTest, the
# end-to-end model checks, the Python package's pytest), then rebuild with
# AddressSanitizer and UndefinedBehaviorSanitizer in the fuzzers' clang tree,
# run the front end and cost model tests under them, and fuzz every reader.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's wall time, printed as it ends and summed at the end (the
# clean-clone run is to stay under 60 minutes).
stage_start=$SECONDS
stage_times=""
stage() {
  local took=$((SECONDS - stage_start))
  stage_times+="  $1: $((took / 60)) min $((took % 60)) s"$'\n'
  echo "test.sh: stage $1 took $took s"
  stage_start=$SECONDS
}
trap 'printf "test.sh: stage times\n%s  total: %d min %d s\n" "$stage_times" $((SECONDS / 60)) $((SECONDS % 60))' EXIT

scripts/setup.sh
stage setup
scripts/build.sh
stage build
ctest --test-dir build -j "${ORRERY_JOBS:-2}" --output-on-failure
stage tests

# The Python package: the wheel from the same build, installed into a fresh
# virtual environment, its tests against the CLI.
scripts/python-test.sh
stage python

# Real exports of the kinds people ship (onnxruntime's contrib and quantized
# ops, 4-bit weights, computed Resize scales), written from random weights by
# the tools themselves, each imported with its parameters checked.
scripts/corpus-test.sh
stage corpus

# Exports checked by the frameworks' own code: PyTorch's, trained on CPU
# processes under torchrun for a matrix of plans, each step's loss against
# one process training the whole batch.
scripts/frameworks-test.sh
stage frameworks

# Sanitizers: the front end (ONNX island, importer, outlining) on every bad
# input the lit suite and the loader unit tests feed it, and the cluster,
# strategy and collective code on the unit tests' specs and topologies. The
# tree is the fuzzers' (clang, ASan, UBSan and libFuzzer's coverage in
# build-fuzz), so each object is compiled with the sanitizers once.
if [ "${ORRERY_SKIP_SANITIZERS:-0}" != 1 ]; then
  scripts/sanitized-build.sh orrery orrery-run orrery-opt orrery-unit-tests orrery-builtin-models
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-fuzz -j "${ORRERY_JOBS:-2}" --output-on-failure -R "^(lit|e2e-shared-models|e2e-error-sweep|Loader\.|Outline\.|CostTest\.|Collective\.|Cluster\.|Strategy\.|Hetero\.|HeteroPlanner\.|Parallelism\.|Workload\.|Catalog\.|Simulator\.|Fusion\.|Overlap\.|ContextParallel\.|Precision\.|ExpertParallel\.|Lowering\.|Launch\.|Serving\.|ServingStep\.|ServingSim\.|ServingSearch\.|AssumptionFields\.)"
  stage sanitizers
fi

# Fuzzers: every reader of untrusted input (ONNX, cluster spec, strategy,
# plan, program set) under libFuzzer with ASan/UBSan, briefly: a fixed
# number of inputs from a fixed seed, so every run feeds the same ones; any
# finding fails the suite. `ORRERY_FUZZ_SECONDS=600 scripts/fuzz.sh` runs
# them long.
if [ "${ORRERY_SKIP_FUZZERS:-0}" != 1 ]; then
  ORRERY_FUZZ_RUNS="${ORRERY_FUZZ_RUNS:-30000}" ORRERY_FUZZ_SECONDS=120 scripts/fuzz.sh
  stage fuzzers
fi
