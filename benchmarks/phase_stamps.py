"""Experiment: where does one ping-pong tile's time go inside the CTA? SM clock stamps per phase.

    PYTHONPATH=src python benchmarks/phase_stamps.py --shapes 64,64,64 128,4096,4096 --config pingpong:64x64x64

The package is copied to a temporary directory and its Hopper kernel patched there (the source
tree is not touched): the producer and the consumers read %clock64 at the phases below and
store it through the bias pointer, which the patched launch points at a stamp buffer (the
kernels run without a bias, so nothing else reads it). Stamps are per SM cycle counters, so
only differences within one CTA mean anything. Printed: cycles from the kernel's entry (the
default partition, before the ring is allocated) to each phase, for CTA 0 and the median over
CTAs, and the CTA's span, next to the event-timed call (L2 flushed) of ours and cuBLAS.

    0 entry  1 producer start  2 producer's last load issued
    3 consumer 0 start  4 consumer 0 mainloop issued (last wgmma in flight)  5 its wgmma done
    6 consumer 0 epilogue stores issued  7 consumer 0 stores drained (its partition ends)
    8 ring allocated (its barriers initialized)  9 epilogue allocated  10 just before warp_specialize
"""

import argparse
import os
import shutil
import sys
import tempfile

PHASES = ["entry", "producer start", "last load issued", "consumer start", "mainloop issued", "wgmma done",
          "epilogue issued", "stores drained", "ring allocated", "epilogue allocated", "partitions start"]

STAMP = '''

@gluon.jit
def _stamp(dbg, SLOT: gl.constexpr):
    t = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)
    gl.store(dbg.to(gl.pointer_type(gl.int64), bitcast=True) + gl.program_id(0) * 16 + SLOT, t)

'''

PATCHES = {
    "hopper/kernel.py": [
        ("from .scheduler import SplitKScheduler, TileScheduler\n",
         "from .scheduler import SplitKScheduler, TileScheduler\n" + STAMP),
        ("def producer(loader, ring, sched):\n", "def producer(loader, ring, sched, dbg):\n"),
        ("    counter = 0\n    for t in range(sched.local_tiles()):",
         "    _stamp(dbg, 1)\n    counter = 0\n    for t in range(sched.local_tiles()):"),
        ("            counter += 1\n", "            counter += 1\n    _stamp(dbg, 2)\n"),
        ("    for j in range((sched.local_tiles() - CONSUMER + 1) // 2):\n",
         "    if CONSUMER == 0:\n        _stamp(epi.bias, 3)\n"
         "    for j in range((sched.local_tiles() - CONSUMER + 1) // 2):\n"),
        ("        sync.pass_turn(CONSUMER)\n        mma = finish_mainloop(mma, ring, first + sched.k_steps - 1)\n",
         "        if CONSUMER == 0 and j == 0:\n            _stamp(epi.bias, 4)\n"
         "        sync.pass_turn(CONSUMER)\n        mma = finish_mainloop(mma, ring, first + sched.k_steps - 1)\n"
         "        if CONSUMER == 0 and j == 0:\n            _stamp(epi.bias, 5)\n"),
        ("        epi.store(mma, CONSUMER, j, off_m, off_n, sched.tile_batch(t), sched.split(t))\n    epi.drain()\n",
         "        epi.store(mma, CONSUMER, j, off_m, off_n, sched.tile_batch(t), sched.split(t))\n"
         "        if CONSUMER == 0 and j == 0:\n            _stamp(epi.bias, 6)\n"
         "    epi.drain()\n    if CONSUMER == 0:\n        _stamp(epi.bias, 7)\n"),
        ("            (producer, (loader, ring, sched)),\n        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])\n    else:",
         "            (producer, (loader, ring, sched, epi.bias)),\n        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])\n    else:"),
        ("            (producer, (loader, ring, sched)),\n        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])\n\n",
         "            (producer, (loader, ring, sched, epi.bias)),\n        ], [CONSUMER_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])\n\n"),
        ("    sched = TileScheduler.create(M, N, K, BM, BN, BK, GROUP_M, batches)\n    ring = Ring.allocate(a_desc, b_desc, STAGES, RELEASERS, BN2, B_KMAJOR)\n"
         "    epi = Epilogue.allocate(c_desc, cin_desc, alpha, beta, bias, M, N, 2, CFG.EPI)\n",
         "    _stamp(bias, 0)\n    sched = TileScheduler.create(M, N, K, BM, BN, BK, GROUP_M, batches)\n"
         "    ring = Ring.allocate(a_desc, b_desc, STAGES, RELEASERS, BN2, B_KMAJOR)\n"
         "    _stamp(bias, 8)\n"
         "    epi = Epilogue.allocate(c_desc, cin_desc, alpha, beta, bias, M, N, 2, CFG.EPI)\n"
         "    _stamp(bias, 9)\n"),
        ("        sync = PhaseSync.allocate()\n", "        sync = PhaseSync.allocate()\n        _stamp(epi.bias, 10)\n"),
    ],
    "hopper/launch.py": [
        ("    bias_ptr = fused.bias_vector(bias) if bias is not None else out  # never read without a bias\n"
         "    args = (a_desc, b_desc, c_desc, cin_desc, bias_ptr, M, N, K, float(alpha), float(beta))\n",
         "    bias_ptr = STAMPS[0]\n"
         "    args = (a_desc, b_desc, c_desc, cin_desc, bias_ptr, M, N, K, float(alpha), float(beta))\n"),
        ("def prepare(", "STAMPS = [None]\n\n\ndef prepare("),
    ],
}


def patched_package() -> str:
    """A copy of the pingpong package with PATCHES applied; returns the directory to import from."""
    import pingpong

    root = tempfile.mkdtemp(prefix="pingpong-stamps-")
    shutil.copytree(os.path.dirname(pingpong.__file__), os.path.join(root, "pingpong"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    for rel, edits in PATCHES.items():
        path = os.path.join(root, "pingpong", rel)
        text = open(path).read()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"{rel}: expected one {old[:60]!r}, found {text.count(old)}")
            text = text.replace(old, new)
        open(path, "w").write(text)
    for name in [m for m in sys.modules if m == "pingpong" or m.startswith("pingpong.")]:
        del sys.modules[name]
    sys.path.insert(0, root)
    return root


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", required=True)
    p.add_argument("--config", default="pingpong:64x64x64")
    args = p.parse_args(argv)
    os.environ["PINGPONG_DIRECT_LAUNCH"] = "0"  # every call through the JIT launch (the patched prepare)
    patched_package()
    import torch
    import triton

    from pingpong.tools import bench
    from pingpong.api import matmul_tiled
    from pingpong.hopper import launch

    sys.path.insert(0, os.path.dirname(__file__))
    from schedules import parse_config

    config = parse_config(args.config)
    assert config.schedule == "pingpong" and config.split_k == 1 and not config.swap_ab, "ping-pong, one split"
    for text in args.shapes:
        M, N, K = bench.parse_shape(text)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        stamps = torch.zeros(132 * 16 + 16, device="cuda", dtype=torch.int64)
        launch.STAMPS[0] = stamps
        ref = a.float() @ w.float().t()
        out = matmul_tiled(a, w.t(), config)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        ours = triton.testing.do_bench(lambda: matmul_tiled(a, w.t(), config), rep=200)
        cublas = triton.testing.do_bench(lambda: torch.matmul(a, w.t()), rep=200)
        stamps.zero_()
        torch.cuda.synchronize()
        matmul_tiled(a, w.t(), config)
        torch.cuda.synchronize()
        s = stamps[:132 * 16].view(132, 16).cpu()
        ran = s[:, 0] != 0
        d = (s[ran] - s[ran, :1]).double()
        clock = torch.cuda.clock_rate() if hasattr(torch.cuda, "clock_rate") else None
        print(f"\n{M}x{N}x{K} {args.config}: rel.err {err:.1e}; event-timed ours {ours * 1e3:.2f} us, "
              f"cuBLAS {cublas * 1e3:.2f} us; {int(ran.sum())} CTAs; SM clock {clock} MHz")
        print(f"{'phase':<20} {'CTA 0':>8} {'median':>8}  (cycles from entry)")
        for i, name in enumerate(PHASES):
            print(f"{name:<20} {int(d[0, i]):>8} {int(d[:, i].median()):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
