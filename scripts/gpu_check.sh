#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA device whose Python already has a
# CUDA build of torch (and PyG) but maybe not gnnrun's other packages, and no registry:
#   1. installs the wheels in ./.whl (hydra-core, omegaconf, antlr4-python3-runtime,
#      pymetis, ogb and what they need; `pip download` them on a machine with a registry)
#      into a folder of their own, without touching the system's packages;
#   2. runs the GPU tests (marker gpu: every GPU algorithm's losses against the CPU's,
#      bf16, predict) from this working tree;
#   3. runs scripts/bench_gpu.py (gnnrun beside PyG on the GPU, and gnnrun's CPU epoch);
#   4. runs scripts/bench_pipeline.py --device cuda (DistDGLv2's pipeline against
#      minibatch on the GPU, with a GPU feature cache, and against the CPU's best):
#      GNNRUN_PIPELINE_GRAPH (default synthetic-medium), GNNRUN_PIPELINE_ARGS (default
#      "--models sage --cpu-ranks 4 --epochs 2"; the issue's full set is
#      "--models sage gat --cpu-ranks 1 2 4 8 --epochs 3" on synthetic-large).
# Everything it prints also goes to OUTDIR (default ./gpu-results): tests.log, bench.log,
# bench.json, pipeline.log, pipeline.json.
#
# MODE pipeline runs only the pipeline's measurements, on one H100/H200 with 16 cores
# (docs/algorithms/pipeline.md#on-a-gpu): the pipeline's GPU tests and GAT attention's
# (tests/ops/test_attention.py), scripts/bench_gat.py --device cuda (GAT's attention as
# sparse products against plain PyTorch operations, seconds; gat.log), then bench_pipeline.py
# --device cuda on synthetic-large with 2% of its vertices for training (50 steps of 1000
# per epoch), SAGE 3 x 256 and GAT 3 x 128 x 4 heads:
# minibatch and pipeline on the GPU, the pipeline with one sample worker (its default is
# up to 4), with a GPU feature cache of 10% of the vertices and of all of them, and the CPU's
# minibatch and pipeline on one rank of 16 threads, with the goals' table at the end.
# On an H200 the tests took 150 s and the first 11 runs 6 minutes; the last three (GAT with
# every row cached, GAT's two CPU runs) need a second call: GNNRUN_PIPELINE_TESTS=0 skips
# the tests, GNNRUN_PIPELINE_MODELS (default "sage gat") names the models measured, and
# GNNRUN_PIPELINE_VARIANTS (default "--sample-workers 1 --cache-rows 250000 2500000") the
# pipeline's variants beside its default.
# GNNRUN_PIPELINE_TIMEOUT (default 400 s) stops the benchmark; the runs done by then are
# in pipeline.json.
#
# MODE published runs Platonov et al.'s Tolokers recipes (docs/models.md#published-recipes)
# on the GPU: the GPU tests of their residual block, then scripts/bench_published.py
# --recipe $GNNRUN_PUBLISHED_RECIPES (default "tolokers-gcn tolokers-sage tolokers-gat")
# --runs 10 (1000 full-batch steps each,
# evaluated at every step), GNNRUN_PUBLISHED_PARALLEL (default 6) runs at once on the one
# GPU, stopped after GNNRUN_PUBLISHED_TIMEOUT (default 480) s. The runs finished by then
# are in OUTDIR/published, each with its summary.json and log.
# It reads data/raw/tolokers/tolokers.npz (scripts/gpu_wheels.sh copies it there from
# $GNNRUN_RAW_ROOT; carry data/raw/tolokers with .whl).
#
#   bash scripts/gpu_wheels.sh                 # first, where pip reaches PyPI
#   bash scripts/gpu_check.sh [OUTDIR] [all|pipeline|published]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-results}"
mode="${2:-all}"
case "$mode" in
    all | pipeline | published) ;;
    *) echo "gpu_check.sh: mode '$mode': give all, pipeline or published" >&2; exit 2 ;;
esac
mkdir -p "$out"
site=/tmp/gnnrun-site
if ! python3 -c "import torch" 2>/dev/null; then
    echo "gpu_check.sh: python3 ($(command -v python3)) has no torch: run it with the Python of a CUDA build of torch first on PATH" >&2
    exit 1
fi
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" .whl/*.whl || exit 1
fi
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee "$out/gpu.txt"
if ! python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "no CUDA device here: the GPU tests skip, and the benchmark is not run" | tee -a "$out/gpu.txt"
    python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/tests.log"
    exit "${PIPESTATUS[0]}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$out/gpu.txt"
echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/gpu.txt"
if [ "$mode" = pipeline ]; then
    start=$SECONDS
    tests=0
    if [ "${GNNRUN_PIPELINE_TESTS:-1}" != 0 ]; then
        python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/ops/test_attention.py \
            tests/algorithms/test_devices.py -k "pipeline or sparse" 2>&1 | tee "$out/tests.log"
        tests=${PIPESTATUS[0]}
        echo "pipeline GPU tests: exit $tests in $((SECONDS - start)) s" | tee -a "$out/gpu.txt"
    fi
    python3 scripts/bench_gat.py --device cuda 2>&1 | tee "$out/gat.log"
    gat=${PIPESTATUS[0]}
    # shellcheck disable=SC2086  # the models and variants are words
    timeout "${GNNRUN_PIPELINE_TIMEOUT:-400}" python3 scripts/bench_pipeline.py --device cuda \
        --dataset synthetic-large --train-fraction 0.02 --models ${GNNRUN_PIPELINE_MODELS:-sage gat} --cpu-ranks 1 \
        --epochs 3 --cpu-epochs 2 ${GNNRUN_PIPELINE_VARIANTS:---sample-workers 1 --cache-rows 250000 2500000} \
        --json "$out/pipeline.json" 2>&1 | tee "$out/pipeline.log"
    pipeline=${PIPESTATUS[0]}
    echo "tests: exit $tests; bench_gat: exit $gat; pipeline: exit $pipeline (124: stopped by its timeout); $((SECONDS - start)) s" \
        | tee -a "$out/gpu.txt"
    exit $(( tests || gat || pipeline ))
fi
if [ "$mode" = published ]; then
    start=$SECONDS
    export GNNRUN_RAW_ROOT="${GNNRUN_RAW_ROOT:-$PWD/data/raw}"
    if [ ! -f "$GNNRUN_RAW_ROOT/tolokers/tolokers.npz" ]; then
        echo "gpu_check.sh: no $GNNRUN_RAW_ROOT/tolokers/tolokers.npz: run GNNRUN_RAW_ROOT=<the folder that holds tolokers/tolokers.npz> scripts/gpu_wheels.sh, and carry data/raw/tolokers" | tee -a "$out/gpu.txt" >&2
        exit 1
    fi
    python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/algorithms/test_devices.py \
        -k pre_norm 2>&1 | tee "$out/tests.log"
    tests=${PIPESTATUS[0]}
    echo "residual block GPU tests: exit $tests in $((SECONDS - start)) s" | tee -a "$out/gpu.txt"
    # shellcheck disable=SC2086  # the recipes are words
    timeout "${GNNRUN_PUBLISHED_TIMEOUT:-480}" python3 scripts/bench_published.py \
        --recipe ${GNNRUN_PUBLISHED_RECIPES:-tolokers-gcn tolokers-sage tolokers-gat} --runs 10 \
        --parallel "${GNNRUN_PUBLISHED_PARALLEL:-6}" --out "$out/published" \
        --override cluster.device=cuda cluster.threads_per_rank=2 2>&1 | tee "$out/published.log"
    published=${PIPESTATUS[0]}
    echo "tests: exit $tests; published: exit $published (124: stopped by its timeout); $((SECONDS - start)) s" \
        | tee -a "$out/gpu.txt"
    exit $(( tests || published ))
fi
# The tests run gnnrun through `python -m gnnrun.cli` and in-process; ranks re-import it.
python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests 2>&1 | tee "$out/tests.log"
tests=${PIPESTATUS[0]}
python3 scripts/bench_gpu.py --device cuda --graphs "${GNNRUN_BENCH_GRAPHS:-synthetic-medium,synthetic-large}" \
    --cpu-baseline --json "$out/bench.json" 2>&1 | tee "$out/bench.log"
bench=${PIPESTATUS[0]}
# shellcheck disable=SC2086  # the arguments are words
python3 scripts/bench_pipeline.py --device cuda --dataset "${GNNRUN_PIPELINE_GRAPH:-synthetic-medium}" \
    ${GNNRUN_PIPELINE_ARGS:---models sage --cpu-ranks 4 --epochs 2} --json "$out/pipeline.json" \
    2>&1 | tee "$out/pipeline.log"
pipeline=${PIPESTATUS[0]}
echo "tests: exit $tests; benchmark: exit $bench; pipeline: exit $pipeline" | tee -a "$out/gpu.txt"
exit $(( tests || bench || pipeline ))
