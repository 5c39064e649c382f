#!/usr/bin/env bash
# Create a virtual environment inside the checkout (.venv, or $VENV) with everything the demo and
# the tests need, for python3 (or $PYTHON), with torch 2.13.0 (or $TORCH).
# torch is pinned here (2.13.0 is a CPU wheel on this project's machines' disk for Python 3.11; an
# unpinned torch downloads a multi-GB CUDA build); the package itself only asks for torch>=2.6.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH=${TORCH:-2.13.0}
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
stamp=$VENV/.optimus_egg-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$TORCH"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]"
    touch "$stamp"
fi
