#!/usr/bin/env bash
# The benchmark suite on one CUDA GPU, in one go: `bash bench/gpu.sh [bench options]`.
#
# Meant for a bare GPU machine with python3, torch and triton but no egglog (this project's H200:
# Python 3.12, torch 2.11, triton 3.6). Wheels it lacks travel in `.whl/` at the repo root and are
# installed first; fetch them on a machine with pip access, e.g.
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .whl \
#       egglog==14.0.0 black graphviz opentelemetry-api platformdirs pytokens pathspec
# (what `import egglog` needs that the H200 image lacks; with egglog 13.2.0 it ran there on
# 2026-11-29 in 5 minutes; 14.0.0 is what pip takes for Python 3.12, where the suite passes on CPU).
# The package is put on the path from the checkout (no build step), and the `optimus_egg`
# backend is registered by the harness when no installed entry point provides it.
#
# Writes under $OUT (default ./bench-out/gpu): bench/results.json, bench/results.md,
# bench/kernels.png, bench/step_time.png (JSON and Markdown are rewritten after every model, so a
# run cut short still leaves its rows), bench.log and env.txt. Default options: --quick --reps 30
# (sized to finish in under 8 minutes on one H200); any arguments replace them.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench-out/gpu}
mkdir -p "$OUT/bench"

if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

# The copy below has no git: the report names the revision from here (or from the caller's
# OPTIMUS_EGG_REVISION where this checkout is itself a copy).
OPTIMUS_EGG_REVISION=${OPTIMUS_EGG_REVISION:-$(git describe --always --dirty 2>/dev/null || true)}
export OPTIMUS_EGG_REVISION

# The installed layout (pyproject's package-dir): rewrites/, extract/, bench/ live inside the package.
pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
cp -r optimus_egg "$pkg/optimus_egg"
for sub in rewrites extract bench; do
    cp -r "$sub" "$pkg/optimus_egg/$sub"
done
export PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}

{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
                "cuda", torch.version.cuda, "device", torch.cuda.get_device_name())' 2>&1 || true
    python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 || true
    python3 -c 'from importlib.metadata import version; print("egglog", version("egglog"))' 2>&1 || true
    (cd "$pkg" && python3 -c 'import optimus_egg.bench.harness as h; print("optimus_egg from", h.__file__)') 2>&1 || true
} > "$OUT/env.txt"
cat "$OUT/env.txt"

args=("$@")
if [ ${#args[@]} -eq 0 ]; then
    args=(--quick --reps 30)
fi
export PYTHONUNBUFFERED=1
# Run from the assembled package's folder: `python3 -m` puts the working directory first on the
# path, and the checkout's own optimus_egg/ lacks the rewrites/extract/bench subpackages.
OUT=$(cd "$OUT" && pwd)
cd "$pkg"
python3 -m optimus_egg.cli bench --device cuda --out "$OUT/bench" "${args[@]}" 2>&1 | tee "$OUT/bench.log"
