"""quantize_fp8 on (8192, 8192) bf16 (GPU): the fraction of peak HBM bandwidth each granularity
reaches. Peak = `hbm_bandwidth(0)`: 2 transfers per memory clock × the bus width from the device
properties (3.35 TB/s on an H100 SXM). Bytes counted: 2 read + 1 written per element
(tensor-wise: 2 + 2 + 1, it reads x twice; its 3-byte fraction printed too); torch's own
bf16 -> bf16 copy (4 bytes) as the practical ceiling.

Each granularity's launch (`quantize.launch`, q and scales allocated once) is checked bitwise
against `quantize_fp8`, then timed in ROUNDS alternated rounds (median of ≥ 100 L2-flushed
repetitions each); printed: the median over rounds and the range. QUANT_INT32=path/to/quantize.py
adds that copy of the module (e.g. without its int64 offsets) for comparison. DRY=1: a
(256, 1024) fp16 tensor on the CPU under Triton's interpreter (TRITON_INTERPRET=1), checks only.

    python benchmarks/fp8_quant_sweep.py

Run 240 (benchmarks/RESULTS.md) compared, with the same tiles: x loaded with evict_first
(slower everywhere), the 2-D tiles in a (row tiles, column tiles) grid (0.77 against 0.82) and
tensor-wise's second pass in the first's order (0.82 against 0.85); the library kept the best.
"""
import importlib.util
import os
import statistics

import torch

from pingpong import quantize as qz
from quant_common import alternated_times, check_bitwise

DRY = os.environ.get("DRY") == "1"
M, K = (256, 1024) if DRY else (8192, 8192)
DEV, DT = ("cpu", torch.float16) if DRY else ("cuda", torch.bfloat16)
ROUNDS = 0 if DRY else int(os.environ.get("ROUNDS", "3"))
torch.manual_seed(0)
x = torch.randn(M, K, device=DEV, dtype=DT) * torch.exp2(torch.randint(-4, 5, (M, 1), device=DEV).float()).to(DT)
q = torch.empty(M, K, dtype=torch.float8_e4m3fn, device=DEV)
GRAN = {"row": "row", "1x128": "block", "128x128": "block128x128", "tensor": "tensor"}
mods = {"": qz}
if os.environ.get("QUANT_INT32"):
    spec = importlib.util.spec_from_file_location("pingpong._quantize_int32", os.environ["QUANT_INT32"])
    mods[" (int32 copy)"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mods[" (int32 copy)"])
cases = {}
for tag, mod in mods.items():
    for g, name in GRAN.items():
        s = qz.scale_like(x, name)
        cases[g + tag] = (s, lambda mod=mod, s=s, name=name: mod.launch(x, q, s, name), name)
check_bitwise(x, q, ((key, name, s, fn) for key, (s, fn, name) in cases.items()), verbose=True)
if DRY:
    raise SystemExit(0)

from pingpong.runtime.device import hbm_bandwidth  # noqa: E402

peak = hbm_bandwidth(0)
y = torch.empty_like(x)
cases["torch copy bf16 -> bf16"] = (None, lambda: y.copy_(x), "copy")
BYTES = {"tensor": 5, "copy": 4}
times = alternated_times({k: fn for k, (_, fn, _) in cases.items()}, ROUNDS)
print(f"peak {peak / 1e12:.3f} TB/s (hbm_bandwidth), {ROUNDS} rounds")
print("| granularity | median µs | fraction of peak (min–max) |")
print("|---|---|---|")
for k, ts in times.items():
    name = cases[k][2]
    frac = [BYTES.get(name, 3) * M * K / (t * 1e-3) / peak for t in ts]
    extra = f"; 3-byte {3 * M * K / (statistics.median(ts) * 1e-3) / peak:.3f}" if name == "tensor" else ""
    print(f"| {k} | {statistics.median(ts) * 1e3:.1f} | {statistics.median(frac):.3f} "
          f"({min(frac):.3f}–{max(frac):.3f}){extra} |", flush=True)
