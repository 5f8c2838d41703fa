"""vector_add at launch-bound sizes: many alternating rounds, median and range of the ratio.

    PYTHONPATH=src python benchmarks/stream_small_sizes.py

Each round times torch.add, vector_add (the API), the plain Triton kernel and several TMA
configs once (do_bench median, L2 flushed); the ratio is torch.add time / kernel time, per
round. RESULTS.md run 16 is this script's output (then `vector_add` ran tile-2k at every size; it
now runs the plain kernel below api.TMA_MIN_ELEMENTS, and the `tile-2k` row is the TMA default)."""

import statistics

import torch

from pingpong.streaming import hopper, portable, vector_add
from pingpong.streaming.bench import _median_ms
sms = torch.cuda.get_device_properties(0).multi_processor_count
for dtype in (torch.float32, torch.bfloat16):
    for n in (2**20, 2**22):
        a = torch.randn(n, device="cuda").to(dtype); b = torch.randn(n, device="cuda").to(dtype); out = torch.empty_like(a)
        fns = {"torch.add": lambda: torch.add(a, b, out=out), "vector_add": lambda: vector_add(a, b, out),
               "portable": lambda: portable.launch(a, b, out)}
        for name in ("tile-2k", "persistent", "tile-4k", "tile-8k"):
            fns[name] = lambda cfg=hopper.CANDIDATES[name]: hopper.launch(a, b, out, sms, cfg)
        for name in ("8k-4cta", "4k-8cta"):
            fns[name] = lambda cfg=hopper.CANDIDATES[name]: hopper.launch(a, b, out, sms, cfg)
        times = {k: [] for k in fns}
        for r in range(10):
            for k, fn in fns.items():
                times[k].append(_median_ms(fn, 100))
        t0 = times["torch.add"]
        print(f"n={n} {str(dtype)[6:]}: torch.add {statistics.median(t0)*1e3:.2f} us")
        for k in fns:
            ratios = sorted(t / o for t, o in zip(t0, times[k]))
            print(f"   {k:11} median ratio {statistics.median(ratios):.3f}  (rounds {ratios[0]:.3f}-{ratios[-1]:.3f})  {statistics.median(times[k])*1e3:.2f} us", flush=True)
