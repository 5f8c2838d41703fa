#!/bin/bash
# FP8 GPU check and benchmarks (RESULTS.md runs 130-139): tests, then scaled_mm vs torch._scaled_mm
# per scaling mode on the issue's shapes, then quantize_fp8's bandwidth. Logs under $1.
# Environment: TEST_TIMEOUT, SCALINGS ("tensor row block"), BENCH_ARGS (extra bench options),
# FAST ("1": also tensor/row with --fast-accum), SKIP_TESTS, SKIP_QUANT; SUITE (e.g. "all"): the
# named suite with 2 rounds instead of the issue's shapes, each scaling's geomean and rows below
# 0.95 (with their rounds' spread) printed last, the JSON under $1.
OUT=${1:-/tmp/fp8}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; hostname
  python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)"; } > "$OUT/device.txt" 2>&1
if [ -z "$SKIP_TESTS" ]; then
  timeout ${TEST_TIMEOUT:-150} python -m pytest -q -m gpu -p no:cacheprovider -n 8 tests/test_fp8_gpu.py > "$OUT/tests.log" 2>&1
  grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | grep -v leaked | tail -15
fi
SHAPES="8192,8192,8192 4096,4096,4096 2048,28672,8192 128,8192,8192 16,8192,8192"
if [ -n "$SUITE" ]; then
  for s in ${SCALINGS:-tensor row block}; do
    timeout 150 python -m pingpong bench --dtype fp8 --scaling $s --suite "$SUITE" --rounds 2 ${BENCH_ARGS} \
      --json "$OUT/suite_$s.json" > "$OUT/suite_$s.txt" 2>&1
    python - "$OUT/suite_$s.json" $s <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
low = [f"{r['shape']} {r['ratio']:.3f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})" for r in d["rows"]
       if r["ratio"] and r["ratio"] < 0.95]
print(f"{sys.argv[2]}: geomean {d['geomean_ratio']:.3f} over {sum(1 for r in d['rows'] if r['ratio'])}; below 0.95:",
      ", ".join(low) or "none")
PY
  done
  exit 0
fi
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
