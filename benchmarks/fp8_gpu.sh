#!/bin/bash
# FP8 GPU check and benchmarks (RESULTS.md runs 130-139): tests, then scaled_mm vs torch._scaled_mm
# per scaling mode on the issue's shapes, then quantize_fp8's bandwidth. Logs under $1.
# Environment: TEST_TIMEOUT, SCALINGS ("tensor row block"), BENCH_ARGS (extra bench options),
# FAST ("1": also tensor/row with --fast-accum), SKIP_TESTS, SKIP_QUANT.
OUT=${1:-/tmp/fp8}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; hostname
  python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)"; } > "$OUT/device.txt" 2>&1
if [ -z "$SKIP_TESTS" ]; then
  timeout ${TEST_TIMEOUT:-150} python -m pytest -q -m gpu -p no:cacheprovider -n 8 tests/test_fp8_gpu.py > "$OUT/tests.log" 2>&1
  grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | grep -v leaked | tail -15
fi
SHAPES="8192,8192,8192 4096,4096,4096 2048,28672,8192 128,8192,8192 16,8192,8192"
for s in ${SCALINGS:-tensor row block}; do
  timeout 100 python -m pingpong bench --dtype fp8 --scaling $s --shapes $SHAPES ${BENCH_ARGS} > "$OUT/bench_$s.txt" 2>&1
  grep -E "^[0-9]+x|geometric" "$OUT/bench_$s.txt" | grep -v "rel.err"
  if [ -n "$FAST" ] && [ "$s" != block ]; then
    timeout 100 python -m pingpong bench --dtype fp8 --scaling $s --fast-accum --shapes $SHAPES ${BENCH_ARGS} > "$OUT/bench_${s}_fast.txt" 2>&1
    grep -E "^[0-9]+x|geometric" "$OUT/bench_${s}_fast.txt" | grep -v "rel.err"
  fi
done
if [ -z "$SKIP_QUANT" ]; then
  timeout 60 python - > "$OUT/quantize.txt" 2>&1 <<'PY'
from pingpong.tools.bench_fp8 import bench_quantize
for g in ("row", "block", "tensor", "block128x128"):
    print(bench_quantize(8192, 8192, g))
PY
  grep shape "$OUT/quantize.txt"
fi
