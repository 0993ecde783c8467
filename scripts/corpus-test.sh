#!/usr/bin/env bash
# The real-exports corpus (models/corpus/generate.py): the exporters and
# onnxruntime's optimizer and quantizers, pinned in
# models/corpus/requirements.txt, write it into build/corpus from random
# weights; tests/e2e/real_exports.py imports every file and checks its
# parameters against the source module's (within 1 %).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/corpus-venv
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r models/corpus/requirements.txt
rm -rf build/corpus
"$venv/bin/python" models/corpus/generate.py build/corpus > build/corpus-generate.log 2>&1 ||
  { tail -30 build/corpus-generate.log; exit 1; }
/usr/bin/python3 tests/e2e/real_exports.py --orrery build/bin/orrery --corpus build/corpus
