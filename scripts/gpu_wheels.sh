#!/usr/bin/env bash
# gnnrun's pure-Python dependencies that a GPU machine's image lacks, as wheels in ./.whl,
# for scripts/gpu_check.sh to install there (the machine reaches no package registry).
# Run it here, where pip reaches PyPI; the wheels are for CPython 3.12 on x86-64 Linux
# (the GPU image's python3). The image already has torch, numpy, scipy, pandas, rich,
# matplotlib, pyyaml and torch-geometric.
#
# It also copies the Tolokers file that `gpu_check.sh OUT published` trains on from
# $GNNRUN_RAW_ROOT/tolokers/tolokers.npz, where GNNRUN_RAW_ROOT is set, to
# data/raw/tolokers (carry it too).
#
#   GNNRUN_RAW_ROOT=/path/to/raw bash scripts/gpu_wheels.sh   # then carry .whl and data/raw/tolokers
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    hydra-core==1.3.8 omegaconf==2.3.1 pymetis==2025.2.2
# antlr4-python3-runtime 4.9.3 (omegaconf's pin) is published as a source archive only:
# it is pure Python, so a wheel built here runs anywhere.
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
tolokers="${GNNRUN_RAW_ROOT:-}/tolokers/tolokers.npz"
if [ -n "${GNNRUN_RAW_ROOT:-}" ] && [ -f "$tolokers" ] && [ "$(realpath "$tolokers")" != "$(realpath -m data/raw/tolokers/tolokers.npz)" ]; then
    # (writable: the source may be read-only, and a second run replaces this copy)
    install -D -m 0644 "$tolokers" data/raw/tolokers/tolokers.npz
fi
[ -f data/raw/tolokers/tolokers.npz ] || echo "gpu_wheels.sh: no data/raw/tolokers/tolokers.npz (gpu_check.sh's published mode needs it): set GNNRUN_RAW_ROOT to the folder that holds tolokers/tolokers.npz" >&2
ls -l .whl
