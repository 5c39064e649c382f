#!/usr/bin/env bash
# The main job: optimize the shipped recommendation model and compare with Inductor.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/optimus-egg demo "$@"
