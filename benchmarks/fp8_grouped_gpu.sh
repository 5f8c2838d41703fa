#!/usr/bin/env bash
# FP8 grouped GEMM on a Hopper GPU, one round: the GPU tests, one deliberate break of the
# kernel (the group's scale row off by one: the tests must fail), the benchmark against
# torch._scaled_grouped_mm. Logs under $OUT; a short summary last.
#   TEST_S=140 MUT_S=60 BENCH_S=120 FAST=0 TOKENS="512 4096" REPS=100
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'has _scaled_grouped_mm', hasattr(torch, '_scaled_grouped_mm'))"
  date -u; } > "$OUT/env.txt" 2>&1
timeout "${TEST_S:-140}" python -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_fp8_grouped_gpu.py \
  > "$OUT/tests.log" 2>&1; echo "tests rc=$?" >> "$OUT/summary.txt"
# the break: scale_b's row of group g read from group g-1 (clamped: every read stays in bounds)
F=src/pingpong/hopper/kernels/fp8_grouped.py
cp "$F" "$OUT/.orig.py"
sed -i 's/self.sb + g \* self.sb_g/self.sb + gl.maximum(g - 1, 0) * self.sb_g/' "$F"
if cmp -s "$F" "$OUT/.orig.py"; then echo "mutation: text not found" >> "$OUT/summary.txt"; else
  timeout "${MUT_S:-60}" python -m pytest -q -m gpu -p no:cacheprovider -n 4 -rfE tests/test_fp8_grouped_gpu.py \
    -k "test_ragged_groups_every_tile and pingpong_64x128 or test_many_groups" > "$OUT/mutation.log" 2>&1
  echo "mutation (scale group off by one): pytest rc=$? (non-zero expected: killed)" >> "$OUT/summary.txt"
fi
cp "$OUT/.orig.py" "$F"; rm -f "$OUT/.orig.py"
for FAST_FLAG in "" $([ "${FAST:-0}" != 0 ] && echo --fast-accum); do
  timeout "${BENCH_S:-120}" python -m pingpong bench --op grouped --dtype fp8 $FAST_FLAG --tokens ${TOKENS:-512 4096} \
    --reps ${REPS:-100} --json "$OUT/bench${FAST_FLAG:+-fast}.json" >> "$OUT/bench.log" 2>> "$OUT/bench.err"
done; echo "bench rc=$?" >> "$OUT/summary.txt"
cat "$OUT/env.txt"; tail -4 "$OUT/tests.log"; grep -E "passed|failed" "$OUT/mutation.log" | tail -2
tail -5 "$OUT/bench.err"; cat "$OUT/bench.log"; cat "$OUT/summary.txt"
