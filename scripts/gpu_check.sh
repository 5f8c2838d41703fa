#!/usr/bin/env bash
# One command on a Hopper (H100/H200) machine: GPU tests, schedule comparison, benchmark.
# Prints the short tables last; full logs go to $OUT (default ./out).
#   bash scripts/gpu_check.sh                 # the full tier: every GPU test (~5 min on an H100 with JOBS=8)
#   TIER=quick bash scripts/gpu_check.sh      # the quick tier (< 5 min in all): every kernel family once
#                     (QUICK_TESTS below), two benchmark shapes, 64³ host cost
#   TESTS="tests/test_gemm_gpu.py" BENCH_SHAPES="8192,8192,8192" bash scripts/gpu_check.sh
#   SUITE=all ...     also `pingpong bench --suite all` (llm, squares, largek; $OUT/suite.*)
#   TUNE=llm ...      also `pingpong tune --suite llm --quick`, table written under $OUT/cache
#   JOBS=8 ...        pytest-xdist workers for the GPU tests (default 8 where xdist is installed:
#                     the tests are compile-bound, one GPU takes them all; JOBS=0 runs serially)
#   SKIP_TESTS=1 ...  no GPU tests (a benchmark-only run)
#   RACECHECK=1 ...   also compute-sanitizer racecheck on a small problem; the report and the
#                     SASS of every Triton kernel it ran ($OUT/sass/) locate a hazard's PCs
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1  # keeps a Triton put on the path before
OUT=${OUT:-out}
# one selection per kernel family: Hopper schedules x layouts x dtypes, alpha/beta, bitwise
# repeatability; split-K and swap-AB; batched; fused epilogue; portable kernel; ops/autograd/
# compile; plan cache and CUDA graphs; streaming; a transformers model; the benchmark timer; the
# mid-row selection's whole tiles (two-piece and swap-AB widths)
QUICK_TESTS="tests/test_gemm_gpu.py::test_layouts_and_dtypes tests/test_gemm_gpu.py::test_alpha_beta
tests/test_gemm_gpu.py::test_repeatable_bitwise tests/test_gemm_gpu.py::test_empty_and_k_zero
tests/test_splitk_gpu.py::test_alpha_beta_and_poisoned_workspace
tests/test_splitk_gpu.py::test_arrival_counters_per_stream_and_under_graph_capture
tests/test_batched_gpu.py::test_batched_fused_epilogue tests/test_batched_gpu.py::test_portable_kernel_batched_on_gpu
tests/test_epilogue_gpu.py::test_layouts tests/test_epilogue_gpu.py::test_portable_kernel_on_gpu
tests/test_ops_gpu.py tests/test_plan_gpu.py tests/test_streaming_gpu.py::test_every_config
tests/test_streaming_gpu.py::test_cuda_graph_capture tests/test_transformers_gpu.py::test_logits_match_the_torch_model
tests/test_bench.py::test_timer_leaves_out_host_lag tests/test_pieces_gpu.py::test_the_selections_whole_tiles_fused
$(ls tests/test_fp8_gpu.py tests/test_fp8_splitk_gpu.py tests/test_fp8_swap_gpu.py tests/test_fp8_cluster_gpu.py tests/test_grouped_gpu.py tests/test_grouped_k_gpu.py tests/test_fp8_grouped_gpu.py 2>/dev/null)"
if [ "${TIER:-full}" = quick ]; then
    TESTS=${TESTS:-$QUICK_TESTS}
    BENCH_SHAPES=${BENCH_SHAPES:-4096,4096,4096 8192,8192,8192}
    OVERHEAD_SIZES=${OVERHEAD_SIZES:-64}
fi
TESTS=${TESTS:-tests}
BENCH_SHAPES=${BENCH_SHAPES:-2048,2048,2048 4096,4096,4096 8192,8192,8192 16384,16384,16384}
CONFIGS=${CONFIGS:-persistent:128x256x64 cooperative:128x256x64 pingpong:128x128x64}
SWEEP_SHAPES=${SWEEP_SHAPES:-8192,8192,8192}

if ! python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    echo "gpu_check.sh: no CUDA GPU here (torch.cuda.is_available() is False): it runs on a Hopper machine;" \
         "without one, python -m pytest -q runs the CPU suite" >&2
    exit 1
fi
mkdir -p "$OUT"  # after the GPU check: a machine without one gets no empty log directory
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
(lscpu | grep -m1 "Model name" || true) | tee -a "$OUT/gpu.txt"

JOBS=${JOBS:-8}
xdist=""
if [ "$JOBS" != 0 ] && python -c "import xdist" 2>/dev/null; then xdist="-n $JOBS"; fi
tests_rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    echo "== GPU tests ($TESTS $xdist)"
    python -m pytest -q -m gpu -p no:cacheprovider --durations=15 $xdist $TESTS 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 45
    tests_rc=${PIPESTATUS[0]}
fi

echo "== schedules"
python benchmarks/schedules.py --shapes $SWEEP_SHAPES --configs $CONFIGS 2>"$OUT/schedules.err" | tee "$OUT/schedules.txt"

echo "== pingpong bench"
python -m pingpong bench --shapes $BENCH_SHAPES --csv "$OUT/bench.csv" --json "$OUT/bench.json" \
    2>"$OUT/bench.err" | tee "$OUT/bench.txt"

echo "== host cost (back-to-back calls)"
python -m pingpong.tools.overhead --sizes ${OVERHEAD_SIZES:-64 1024 2048} 2>"$OUT/overhead.err" | tee "$OUT/overhead.txt"

echo "== PyTorch layers (pingpong.nn.Linear forward/backward, batched matmul)"
python benchmarks/linear_bench.py 2>"$OUT/linear_bench.err" | tee "$OUT/linear_bench.txt"

if [ -n "${TUNE:-}" ]; then
    echo "== pingpong tune --suite $TUNE --quick"
    PINGPONG_CACHE_DIR="$OUT/cache" python -m pingpong tune --suite "$TUNE" --quick 2>"$OUT/tune.err" | tee "$OUT/tune.txt"
    PINGPONG_CACHE_DIR="$OUT/cache" python -m pingpong tune --show | tee -a "$OUT/tune.txt"
fi

if [ -n "${SUITE:-}" ]; then
    echo "== pingpong bench --suite $SUITE"
    PINGPONG_CACHE_DIR="$OUT/cache" python -m pingpong bench --suite "$SUITE" --csv "$OUT/suite.csv" \
        --json "$OUT/suite.json" 2>"$OUT/suite.err" | tee "$OUT/suite.txt"
fi

if [ "${RACECHECK:-0}" = 1 ]; then
    echo "== racecheck (small problem, every schedule)"
    cache=$(mktemp -d)
    TRITON_CACHE_DIR=$cache compute-sanitizer --tool racecheck --racecheck-report all \
        python benchmarks/sanitize_small.py >"$OUT/racecheck.log" 2>&1
    grep -E "RACECHECK SUMMARY|ERROR SUMMARY|rel err" "$OUT/racecheck.log" | tee "$OUT/racecheck.txt"
    mkdir -p "$OUT/sass"
    for f in $(find "$cache" -name "*.cubin"); do
        cuobjdump -sass "$f" >"$OUT/sass/$(basename "$(dirname "$f")" | cut -c1-12)_$(basename "$f" .cubin).sass"
    done
fi

echo
echo "== summary"
[ -f "$OUT/gpu_tests.log" ] && grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -n 1
cat "$OUT/schedules.txt"
cat "$OUT/bench.txt"
cat "$OUT/overhead.txt"
cat "$OUT/linear_bench.txt"
[ -f "$OUT/tune.txt" ] && cat "$OUT/tune.txt"
[ -f "$OUT/suite.txt" ] && cat "$OUT/suite.txt"
[ -f "$OUT/racecheck.txt" ] && cat "$OUT/racecheck.txt"
exit $tests_rc
