#!/usr/bin/env bash
# Create .venv inside the checkout with everything the demo and the tests need.
# torch is pinned here (2.13.0 is a CPU wheel on this project's machines' disk; an unpinned torch
# downloads a multi-GB CUDA build); the package itself only asks for torch>=2.6.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.optimus_egg-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
    touch "$stamp"
fi
