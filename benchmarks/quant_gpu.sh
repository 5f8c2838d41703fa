#!/bin/bash
# quantize_fp8 on the GPU in one call: the quantize tests, the >2^31-element test against a
# copy of src/ without the int64 offsets (each granularity in its own process: an illegal
# address kills the CUDA context), then the bandwidth sweep alone. Logs under $1.
OUT=${1:?log directory}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch, triton; print(torch.__version__, triton.__version__)"; git log --oneline -1 2>/dev/null; } > "$OUT/env.txt"
rm -rf /tmp/q_old && mkdir -p /tmp/q_old && cp -r src/pingpong /tmp/q_old/
sed -i 's/\.to(tl\.int64)//g' /tmp/q_old/pingpong/quantize.py
T="python -m pytest -q -m gpu -p no:cacheprovider -rfE"
$T -n 4 tests/test_fp8_gpu.py -k quantize > "$OUT/tests.log" 2>&1; echo "tests: rc=$?" >> "$OUT/tests.log"
for g in row block block128x128 tensor; do
  (PYTHONPATH=/tmp/q_old:$PYTHONPATH timeout 120 $T "tests/test_fp8_gpu.py::test_quantize_past_2_to_the_31_elements[$g]" > "/tmp/q_old_$g.log" 2>&1; echo "int32 offsets $g: rc=$?" >> "/tmp/q_old_$g.log") &
done
wait
for g in row block block128x128 tensor; do grep -E "illegal|Error: |passed|failed|rc=" "/tmp/q_old_$g.log" | tail -n 5; done > "$OUT/old.log"
QUANT_INT32=/tmp/q_old/pingpong/quantize.py python benchmarks/fp8_quant_sweep.py > "$OUT/sweep.log" 2>&1
echo "sweep rc=$?" >> "$OUT/sweep.log"
cat "$OUT/env.txt"; tail -n 2 "$OUT/tests.log"; cat "$OUT/old.log"; grep -v "^check" "$OUT/sweep.log" | tail -30
