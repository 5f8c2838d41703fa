#!/usr/bin/env bash
# The ragged-K (weight gradient) kernel on a Hopper GPU: its GPU tests, the wgrad suite of
# `pingpong bench --op grouped` against torch._grouped_mm, the tile sweep; logs under $OUT.
#   TESTS=0 / BENCH=0 / SWEEP=0 / MUTANT=1 (an off-by-one at the K edge must fail the tests)
#   TOKENS="128 2048 8192 16384" REPS=30 ROUNDS=2 SWEEP_CASES="deepseek-v3:2048:balanced:wgrad ..."
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader; hostname; date -u
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$OUT/env.txt" 2>&1
if [ "${TESTS:-1}" != 0 ]; then
  timeout ${TESTS_S:-120} python -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_grouped_k_gpu.py \
    tests/test_grouped_gpu.py > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -4 "$OUT/tests.log"
fi
if [ "${MUTANT:-0}" != 0 ]; then  # the kernel reads one row past each group's end
  rm -rf /tmp/mutant && mkdir -p /tmp/mutant && cp -r src tests pyproject.toml /tmp/mutant/
  sed -i 's/return RAGGED_ROWS, start + rows, RAGGED_ROWS - rows + k/return RAGGED_ROWS, start + rows + 1, RAGGED_ROWS - rows - 1 + k/' \
    /tmp/mutant/src/pingpong/hopper/grouped_k.py
  (cd /tmp/mutant && PYTHONPATH=/tmp/mutant/src:$PYTHONPATH timeout ${MUTANT_S:-60} python -m pytest -q -m gpu \
    -p no:cacheprovider -n 8 tests/test_grouped_k_gpu.py -k "cooperative_128x256 or pingpong_128x128 or graph" \
    > "$OUT/mutant.log" 2>&1; echo "mutant tests rc=$? (must fail)"; tail -2 "$OUT/mutant.log")
fi
if [ "${BENCH:-1}" != 0 ]; then
  timeout ${BENCH_S:-110} python -m pingpong bench --op grouped --products wgrad --tokens ${TOKENS:-128 2048 8192 16384} \
    --reps ${REPS:-30} --rounds ${ROUNDS:-2} --json "$OUT/wgrad.json" > "$OUT/bench.log" 2> "$OUT/bench.err"
  echo "bench rc=$?"; cat "$OUT/bench.log"; tail -2 "$OUT/bench.err"
fi
if [ "${SWEEP:-1}" != 0 ]; then
  WGRAD_CASES=$(for m in mixtral-8x7b qwen3-30b-a3b deepseek-v3; do for t in 2048:balanced 16384:balanced 16384:zipf; do
    echo "$m:$t:wgrad"; done; done)
  timeout ${SWEEP_S:-80} python benchmarks/grouped_configs.py --reps ${SWEEP_REPS:-20} ${SWEEP_CASES:-$WGRAD_CASES} \
    > "$OUT/sweep.log" 2>&1
  echo "sweep rc=$?"; cat "$OUT/sweep.log" | cut -c1-400
fi
