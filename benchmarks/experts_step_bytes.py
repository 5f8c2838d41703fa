"""Kernel launches and bytes of one MoE experts training step (forward + backward of the
gate-up and down projections with SwiGLU between, tests/copies.py's step), bf16 grouped_mm and
FP8 fp8_grouped_linear ("row_gw_hp"), counted on the CPU with every kernel a no-op
(tests/launches.py: aten's kernels through a dispatch mode, pingpong's through their launch
functions, grouped_mm planned as on a Hopper GPU). Bytes: each tensor a kernel reads or writes,
once, but where a kernel reads twice. No GPU; the sizes are real (about 6 GB of host memory at
the default Qwen3-30B-A3B shape).

    PYTHONPATH=src python benchmarks/experts_step_bytes.py [E H I ROWS]   # default 128 2048 768 65536
"""

import collections
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

import torch  # noqa: E402
from _pytest.monkeypatch import MonkeyPatch  # noqa: E402

from copies import experts_step, experts_tensors  # noqa: E402
from launches import Launches, no_op_kernels  # noqa: E402
from pingpong import fp8_grouped_training as fgt, grouped as gm  # noqa: E402


def count(project, tensors) -> Launches:
    mp = MonkeyPatch()
    launches = no_op_kernels(mp.setattr)
    x, w1, w2, g, offs = tensors
    x.grad = w1.grad = w2.grad = None
    try:
        with launches:
            experts_step(project, x, w1, w2, g, offs)
    finally:
        mp.undo()
    return launches


def main(argv) -> int:
    E, H, inter, rows = (int(v) for v in argv) if argv else (128, 2048, 768, 65536)
    tensors = experts_tensors(E=E, H=H, inter=inter, T=rows, gen=torch.Generator().manual_seed(0), dtype=torch.float16)
    for name, project in (("bf16 grouped_mm", lambda a, w, offs: gm.grouped_mm(a, w.transpose(1, 2), offs)),
                          ("FP8 row_gw_hp", lambda a, w, offs: fgt.fp8_grouped_linear(a, w, offs))):
        launches = count(project, tensors)
        per = collections.defaultdict(lambda: [0, 0])
        for kernel, b in launches.kernels:
            per[kernel][0] += 1
            per[kernel][1] += b
        print(f"{name}: {len(launches.kernels)} launches, {launches.bytes() / 1e9:.3f} GB")
        for kernel, (n, b) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f"    {kernel:24s} {n:3d} {b / 1e9:8.3f} GB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
