#!/usr/bin/env bash
# The GPU checks of the graphs engine and the update phase (issue 43), as one script for one H100 or H200, about
# 8 minutes. Two steps:
#
#   here, once, in the repository's root (a machine with pip and the internet):
#       echo /.whl/ >> .git/info/exclude && bash benchmarks/gpu_checks_43.sh wheels
#   there (the device machine: torch and CUDA installed, nothing to download), carrying .whl:
#       bash benchmarks/gpu_checks_43.sh
#
# What must be carried (.whl, about 20 MB): the machine's image has torch 2.11 with CUDA but transformers 5.17 and no
# pydantic, datasets or math-verify, so the wheels of what mrl and its GPU tests import at this repository's pinned
# versions (pyproject.toml, and the venv's for the unpinned): transformers 5.23.0 and tokenizers 0.23.3 (the graphs
# engine reads transformers' cache classes), huggingface_hub with httpx2 and httpcore2, pydantic with its core, datasets
# (the GSM8K- and MATH-schema files of gpu_first_run) with dill and multiprocess, math-verify. pyarrow (datasets wants
# 24 or later) is the image's; if `import datasets` fails there on it, carry pyarrow too (about 40 MB).
#
# What runs, each stage only while the budget (CHECKS_BUDGET seconds, 480 by default) has room for it, everything
# logged to $OUT/checks.log (the files that come back: at most 8):
#   1. the GPU tests: pytest tests/test_graphs_engine.py -k "cuda or captured" (greedy equality with transformers on
#      the three architectures in bf16, the captured step equal to the eager one, seeded draws' chi-square, every stop
#      id, the mismatch statistic) and tests/test_token_logprobs.py -k cuda (the chunked log-probs on the GPU);
#   2. benchmarks/bench_gpu_rollout.py at 512x512 and 64x8, generate against graphs (ROLLOUT_ENGINES to add
#      graphs-eager or hf): $OUT/bench_gpu_rollout.{json,md};
#   3. benchmarks/bench_gpu_update.py at 64x8, chunked against full log-probs: $OUT/bench_gpu_update.{json,md};
#   4. benchmarks/gpu_first_run.py, the three-policy run with --engine graphs, the engines alone generate against
#      graphs: $OUT/gpu_first_run_graphs.{json,md};
#   5. the same run with --engine generate on the same GPU, the rollout's baseline: $OUT/gpu_first_run_generate.json
#      (its table: python benchmarks/gpu_first_run.py --render <that json>).
# The tables go under docs/measurements/ once they are back (each names its GPU, torch and transformers).
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=(transformers==5.23.0 tokenizers==0.23.3 huggingface_hub==2.4.0 httpx2==2.16.2 httpcore2==2.16.2
        hf-xet==1.8.0 click==8.5.1 pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0
        typing-inspection==0.4.5 typing_extensions==4.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
        math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2)

if [ "${1:-}" = wheels ]; then
    mkdir -p .whl
    for wheel in "${WHEELS[@]}"; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "$wheel" \
            || { echo "no wheel for $wheel"; exit 1; }
    done
    du -sh .whl
    exit 0
fi

OUT=${OUT:-results/gpu_checks_43}
mkdir -p "$OUT"
BUDGET=${CHECKS_BUDGET:-480}
LOG="$OUT/checks.log"
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MRL_NUMERICS=native

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
python3 -c "import torch, transformers, pydantic, datasets; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'GPU', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)" || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true

stage() {   # stage NAME SECONDS_NEEDED COMMAND...: runs COMMAND when SECONDS_NEEDED fit in what is left of the budget
    local name=$1 needed=$2
    shift 2
    local left=$((BUDGET - SECONDS))
    if [ "$left" -lt "$needed" ]; then
        echo "== $name: skipped ($left s of the budget left, about $needed s needed)"
        return 0
    fi
    echo "== $name (at $SECONDS s)"
    timeout "$left" "$@"
    echo "== $name: exit $? (at $SECONDS s)"
}

stage "GPU tests" 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_graphs_engine.py \
    tests/test_token_logprobs.py -k "cuda or captured"
stage "rollout benchmark" 150 python3 benchmarks/bench_gpu_rollout.py --settings 512x512,64x8 \
    --engines "${ROLLOUT_ENGINES:-generate,graphs}" --out "$OUT"
stage "update benchmark" 90 python3 benchmarks/bench_gpu_update.py --settings 64x8 --paths chunked,full --out "$OUT"
stage "three policies, engine graphs" 150 python3 benchmarks/gpu_first_run.py --out /tmp/gfr_graphs --engine graphs \
    --engines generate,graphs
cp /tmp/gfr_graphs/report.json "$OUT/gpu_first_run_graphs.json" 2>/dev/null
cp /tmp/gfr_graphs/report.md "$OUT/gpu_first_run_graphs.md" 2>/dev/null
stage "three policies, engine generate" 120 python3 benchmarks/gpu_first_run.py --out /tmp/gfr_generate \
    --engine generate --skip-engines
cp /tmp/gfr_generate/report.json "$OUT/gpu_first_run_generate.json" 2>/dev/null
echo "== done at $SECONDS s"
ls -la "$OUT"
