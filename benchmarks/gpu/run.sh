#!/usr/bin/env bash
# On the GPU machine (the device tool: `run` with carry [".whl"]): install the carried wheels into /tmp/site, then
# run the check, its three result files into $OUT. Extra arguments go to check.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 benchmarks/gpu/check.py --device cuda --out "${OUT:-benchmarks/results/gpu-check}" "$@"
