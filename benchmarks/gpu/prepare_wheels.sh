#!/usr/bin/env bash
# Here (a machine with PyPI): download the wheels the GPU machine lacks into .whl/ (git-ignored; ~2 MB), for its
# Python 3.12. The device has torch 2.11 (CUDA), transformers 5.17, accelerate 1.15, peft, pyarrow, pandas, xxhash,
# fsspec, huggingface_hub, rich, matplotlib, scipy and pytest; it lacks trl, datasets and two small needs of datasets.
# --no-deps: each missing need is named here (see benchmarks/gpu/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
ls -l .whl
