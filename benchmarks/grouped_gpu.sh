#!/usr/bin/env bash
# Grouped GEMM on a Hopper GPU: the GPU tests, `pingpong bench --op grouped` (MoE suites vs
# torch._grouped_mm), the MoE block against transformers' per-expert loop. Logs under $OUT.
#   TESTS=0 ...            no tests;  BENCH=0 ...  no suite;  BLOCK=0 ...  no MoE block
#   MODELS="mixtral-8x7b" TOKENS="512 4096" REPS=100 ROUNDS=3 ...
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
date -u | tee -a "$OUT/gpu.txt"
if [ "${TESTS:-1}" != 0 ]; then
  python -m pytest -q -m gpu -p no:cacheprovider -n 8 ${TEST_FILES:-tests/test_grouped_gpu.py tests/test_moe_gpu.py} -rs \
    > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -25 "$OUT/tests.log"
fi
if [ "${BLOCK:-1}" != 0 ]; then
  python -c "
from pingpong.tools.bench_grouped import moe_block
for t in (4096,):
    print(moe_block(t))" 2>&1 | tee "$OUT/moe_block.log" | tail -3
fi
if [ "${BENCH:-1}" != 0 ]; then
  python -m pingpong bench --op grouped ${MODELS:+--models $MODELS} ${TOKENS:+--tokens $TOKENS} \
    --reps ${REPS:-100} --rounds ${ROUNDS:-3} --json "$OUT/grouped.json" > "$OUT/bench.log" 2> "$OUT/bench.err"
  echo "bench rc=$?"; tail -${TAIL:-60} "$OUT/bench.log"; tail -3 "$OUT/bench.err"
fi
