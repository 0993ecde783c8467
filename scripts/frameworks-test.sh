#!/usr/bin/env bash
# Exports checked by the frameworks' own code: the pinned releases of
# tests/e2e/frameworks/requirements.txt in build/frameworks-venv (kept
# between runs), then tests/e2e/framework_runs.py trains the PyTorch,
# DeepSpeed and JAX exports of a matrix of plans on CPU processes (JAX: CPU
# devices) and compares the losses with one, and reads torchtitan's with
# torchtitan's own config manager; then transformers' mixtures of experts
# (Mixtral, Qwen3-MoE, DeepSeek-V3, GPT-OSS) exported by torch.onnx are
# imported, read as experts and split by expert parallelism; then the
# serving exports are parsed by vLLM's and SGLang's own argument parsers
# (tests/e2e/frameworks/requirements-engines.txt in build/engine-parsers,
# reinstalled when that file changes).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/frameworks-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r tests/e2e/frameworks/requirements.txt
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
  -r tests/e2e/frameworks/requirements-deepspeed.txt
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps \
  -r tests/e2e/frameworks/requirements-nodeps.txt
/usr/bin/python3 tests/e2e/framework_runs.py --orrery build/bin/orrery \
  --python "$venv/bin/python" --workdir build/frameworks
/usr/bin/python3 tests/e2e/moe_model_exports.py --orrery build/bin/orrery \
  --python "$venv/bin/python" --workdir build/moe-exports
engines=build/engine-parsers
stamp="$engines/.requirements"
if ! cmp -s tests/e2e/frameworks/requirements-engines.txt "$stamp"; then
  rm -rf "$engines"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps \
    --target "$engines" -r tests/e2e/frameworks/requirements-engines.txt
  cp tests/e2e/frameworks/requirements-engines.txt "$stamp"
fi
/usr/bin/python3 tests/e2e/serving_exports.py --orrery build/bin/orrery \
  --python "$venv/bin/python" --engines "$engines"
