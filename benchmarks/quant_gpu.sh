#!/bin/bash
# quantize_fp8 on the GPU in one call: the quantize tests with the library's launch options and
# with them off (a copy of src/), the >2^31-element test against a copy without the int64
# offsets (each granularity in its own process: an illegal address kills the CUDA context),
# then the bandwidth sweep alone. Logs under $1.
OUT=${1:?log directory}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch, triton; print(torch.__version__, triton.__version__)"; git log --oneline -1 2>/dev/null; } > "$OUT/env.txt"
rm -rf /tmp/q_flip /tmp/q_old && mkdir -p /tmp/q_flip /tmp/q_old
cp -r src/pingpong /tmp/q_flip/ && cp -r src/pingpong /tmp/q_old/
sed -i 's/^KMAJOR, EVICT, REVERSE = .*$/KMAJOR, EVICT, REVERSE = False, "", False/' /tmp/q_flip/pingpong/quantize.py
sed -i 's/\.to(tl\.int64)//g' /tmp/q_old/pingpong/quantize.py
T="python -m pytest -q -m gpu -p no:cacheprovider -rfE"
($T -n 4 tests/test_fp8_gpu.py -k quantize > "$OUT/tests.log" 2>&1; echo "options on: rc=$?" >> "$OUT/tests.log") &
(PYTHONPATH=/tmp/q_flip:$PYTHONPATH $T -n 4 tests/test_fp8_gpu.py -k quantize > "$OUT/tests_off.log" 2>&1; echo "options off: rc=$?" >> "$OUT/tests_off.log") &
wait  # (≤ 8 of the 7 GB tests at once, then the 4 below)
for g in row block block128x128 tensor; do
  (PYTHONPATH=/tmp/q_old:$PYTHONPATH timeout 120 $T "tests/test_fp8_gpu.py::test_quantize_past_2_to_the_31_elements[$g]" > "/tmp/q_old_$g.log" 2>&1; echo "int32 offsets $g: rc=$?" >> "/tmp/q_old_$g.log") &
done
wait
for g in row block block128x128 tensor; do grep -E "Error|error|passed|failed|rc=" "/tmp/q_old_$g.log" | tail -4; done > "$OUT/old.log"
QUANT_INT32=/tmp/q_old/pingpong/quantize.py python benchmarks/fp8_quant_sweep.py > "$OUT/sweep.log" 2>&1
echo "sweep rc=$?" >> "$OUT/sweep.log"
cat "$OUT/env.txt"; tail -2 "$OUT/tests.log" "$OUT/tests_off.log"; cat "$OUT/old.log"; grep -v "^check" "$OUT/sweep.log" | tail -30
