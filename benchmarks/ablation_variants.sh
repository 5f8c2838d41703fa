#!/usr/bin/env bash
# Ablation rows that need a one-line change to a kernel, not a config field: each variant is
# a patched copy of src/ (made here, in a temp dir) timed by benchmarks/schedules.py in its
# own process, next to cuBLAS in that process. Compare each variant's ratio with the
# unpatched row of the same run.
#   bash benchmarks/ablation_variants.sh [--shapes 8192,8192,8192] [--check]
#   --check: only build the variants and compile them offline (CPU), no GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."
shapes=8192,8192,8192
check=0
while [ $# -gt 0 ]; do
    case $1 in
        --shapes) shapes=$2; shift 2 ;;
        --check) check=1; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name | file | python expression applied to the file's text (must change it)
variant() {
    local name=$1 file=$2 expr=$3
    cp -r src "$tmp/$name"
    python - "$tmp/$name/$file" "$expr" <<'PY'
import sys
path, expr = sys.argv[1], sys.argv[2]
text = open(path).read()
new = eval(expr, {"t": text})
assert new != text, f"variant patch did not apply to {path}"
open(path, "w").write(new)
PY
}

# 1. no store overlap: wait for each TMA store right after issuing it
variant no-store-overlap pingpong/hopper/epilogue.py \
    't.replace("tma.async_copy_shared_to_global(self.c_desc, [off_m, off_n], staging)\n", "tma.async_copy_shared_to_global(self.c_desc, [off_m, off_n], staging)\n        tma.store_wait(0)\n")'
# 2. ping-pong without epilogue overlap: a consumer passes its turn after its epilogue, not
#    after its last wgmma, so the other consumer's mainloop no longer hides the epilogue.
#    (Dropping the turns altogether is not a variant: two consumers would wait on ring
#    phases the producer has not reached — mbarrier parity aliasing — and the kernel fails.)
variant turn-after-epilogue pingpong/hopper/kernel.py \
    't.replace("        sync.pass_turn(CONSUMER)\n", "").replace("        epi.store(mma.acc, CONSUMER, j, off_m, off_n)\n", "        epi.store(mma.acc, CONSUMER, j, off_m, off_n)\n        sync.pass_turn(CONSUMER)\n")'

for name in no-store-overlap turn-after-epilogue; do
    if [ $check = 1 ]; then
        for k in cooperative pingpong; do
            PYTHONPATH=$tmp/$name python -m pingpong isa --target sm_90a --kernel $k | grep -E "^(kernel|spill|count wgmma )" | tr '\n' ' '
            echo "[$name]"
        done
    else
        echo "== variant $name"
        PYTHONPATH=$tmp/$name python benchmarks/schedules.py --shapes $shapes \
            --configs cooperative:128x256x64 pingpong:128x128x64 2>/dev/null | grep -E "^[0-9]|geometric"
    fi
done
