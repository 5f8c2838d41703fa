"""What benchmarks/fp8_quant_sweep.py and quant_tiles.py share: the bitwise check
of each variant against quantize_fp8 (outputs poisoned first), and alternated timing rounds."""
import torch

import pingpong
from pingpong.tools.timing import time_callable


def check_bitwise(x, q, variants, verbose=False):
    """Each (key, granularity, s, fn) of `variants`: fn() writes q and s from x after both were
    poisoned with NaN; both must equal quantize_fp8(x, granularity) bitwise."""
    for key, granularity, s, fn in variants:
        q.fill_(float("nan"))
        s.fill_(float("nan"))
        fn()
        wq, ws = pingpong.quantize_fp8(x, granularity)
        assert torch.equal(q.view(torch.uint8), wq.view(torch.uint8)) and torch.equal(s, ws), key
        if verbose:
            print(f"check {key}: bitwise equal to quantize_fp8", flush=True)


def alternated_times(fns, rounds, reps=100):
    """{key: [median ms per round]} of `fns` ({key: fn}), in forward and reversed order by turns."""
    times = {k: [] for k in fns}
    for r in range(rounds):
        for k, fn in (fns.items() if r % 2 == 0 else reversed(fns.items())):
            times[k].append(time_callable(fn, reps).median_ms)
    return times
