"""Where does the Hopper vector_add lose to torch.add? An experiment, not a library kernel.

The TMA ring (`pingpong.streaming.hopper`) tops out at ~0.955 of torch.add at 2**28 for
every StreamConfig swept (RESULTS.md, runs 7-8), while the plain Triton kernel matches it.
This keeps the ring's loads (TMA -> shared -> registers, the same `fill`/`take`) and swaps
one part at a time:

    tma-ring      the library kernel with the persistent config (hopper.PERSISTENT): TMA
                  loads, TMA stores from a shared-memory buffer
    tma-ld/st     TMA loads, registers stored with st.global (masked only by `offs < n`)
    ld/tma-st     ld.global loads (no shared memory), the library's TMA store ring
    ld/st         ld.global / st.global in the same persistent grid-stride loop
    tma-1tile-B   not persistent: one B-element tile per program (TMA in, add, TMA out),
                  as many programs as tiles, several resident per SM
    tma-ring-dyn  the library's ring and store ring, persistent, but each program takes its
                  next tile from a global atomic counter instead of pid + i*nprog (tiles
                  are handed out in order, as the hardware block scheduler does)

    PYTHONPATH=src python benchmarks/stream_store_experiment.py [--sizes 2**24 2**28]
"""

import argparse
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from pingpong.hopper.pipeline import Ring
from pingpong.streaming import hopper
from pingpong.streaming.bench import _median_ms
from pingpong.streaming.grid_stride import tile_of, tiles_of_program


@gluon.jit
def tma_load_st_store_kernel(a_desc, b_desc, c_ptr, n, STAGES: gl.constexpr, AHEAD: gl.constexpr,
                             num_warps: gl.constexpr):
    BLOCK: gl.constexpr = a_desc.block_type.shape[0]
    VEC: gl.constexpr = 16 // (a_desc.dtype.primitive_bitwidth // 8)
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])
    ring = Ring.allocate(a_desc, b_desc, STAGES, 1)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    count = tiles_of_program(gl.cdiv(n, BLOCK), pid, nprog)
    for j in gl.static_range(AHEAD):
        hopper.fill(ring, a_desc, b_desc, j, tile_of(pid, nprog, j), j < count)
    for i in range(count):
        ahead = i + AHEAD
        hopper.fill(ring, a_desc, b_desc, ahead, tile_of(pid, nprog, ahead), ahead < count)
        a, b = hopper.take(ring, i, layout)
        offs = tile_of(pid, nprog, i) * BLOCK + gl.arange(0, BLOCK, layout)
        gl.store(c_ptr + offs, a + b, mask=offs < n)


@gluon.jit
def plain_load_kernel(a_ptr, b_ptr, c_ptr, c_desc, n, BLOCK: gl.constexpr, TMA_STORE: gl.constexpr,
                      OUT_BUFS: gl.constexpr, num_warps: gl.constexpr):
    """Persistent grid-stride loop of ld.global loads; the sum leaves through the library's TMA
    store ring (TMA_STORE) or st.global."""
    VEC: gl.constexpr = 16 // (a_ptr.dtype.element_ty.primitive_bitwidth // 8)
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])
    out = hopper.StoreRing.create(c_desc, OUT_BUFS)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    for i in range(tiles_of_program(gl.cdiv(n, BLOCK), pid, nprog)):
        offs = tile_of(pid, nprog, i) * BLOCK + gl.arange(0, BLOCK, layout)
        c = gl.load(a_ptr + offs, mask=offs < n) + gl.load(b_ptr + offs, mask=offs < n)
        if TMA_STORE:
            out.put(c_desc, i, tile_of(pid, nprog, i), c)
        else:
            gl.store(c_ptr + offs, c, mask=offs < n)
    out.drain()


@gluon.jit
def tma_one_tile_kernel(a_desc, b_desc, c_desc, num_warps: gl.constexpr):
    VEC: gl.constexpr = 16 // (a_desc.dtype.primitive_bitwidth // 8)
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])
    a_s = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
    b_s = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    t = gl.program_id(0)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    hopper.tma_load(a_desc, t, bar, a_s, True)
    hopper.tma_load(b_desc, t, bar, b_s, True)
    mbarrier.wait(bar, 0)
    c = a_s.load(layout) + b_s.load(layout)
    a_s.store(c)  # each thread overwrites exactly the elements it read
    fence_async_shared()
    hopper.tma_store(c_desc, t, a_s)
    tma.store_wait(0)


@gluon.jit
def tma_ring_dynamic_kernel(a_desc, b_desc, c_desc, counter_ptr, n, STAGES: gl.constexpr,
                            OUT_BUFS: gl.constexpr, num_warps: gl.constexpr):
    BLOCK: gl.constexpr = a_desc.block_type.shape[0]
    VEC: gl.constexpr = 16 // (a_desc.dtype.primitive_bitwidth // 8)
    layout: gl.constexpr = gl.BlockedLayout([VEC], [32], [num_warps], [0])
    gl.static_assert(STAGES == 3, "this experiment refills 2 ahead into a 3-slot ring")
    ring = Ring.allocate(a_desc, b_desc, STAGES, 1)
    out = hopper.StoreRing.create(c_desc, OUT_BUFS)
    tiles = gl.cdiv(n, BLOCK)
    cur = gl.atomic_add(counter_ptr, 1)
    nxt = gl.atomic_add(counter_ptr, 1)
    hopper.fill(ring, a_desc, b_desc, 0, cur, cur < tiles)
    hopper.fill(ring, a_desc, b_desc, 1, nxt, nxt < tiles)
    i = 0
    while cur < tiles:
        nxt2 = gl.atomic_add(counter_ptr, 1)
        hopper.fill(ring, a_desc, b_desc, i + 2, nxt2, nxt2 < tiles)
        a, b = hopper.take(ring, i, layout)
        out.put(c_desc, i, cur, a + b)
        cur = nxt
        nxt = nxt2
        i += 1
    out.drain()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["2**24", "2**28"])
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args(argv)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = hopper.PERSISTENT  # the persistent ring: 1-D 16 KB boxes, 3 stages, 2 ahead
    print(f"{'n':>10} {'dtype':>9} {'kernel':>10} {'GB/s':>6} {'vs torch':>8} ok")
    for dtype in (torch.float32, torch.bfloat16):
        for text in args.sizes:
            n = int(eval(text, {}))
            a = torch.randn(n, device="cuda").to(dtype)
            b = torch.randn(n, device="cuda").to(dtype)
            out = torch.empty_like(a)
            expect = a + b
            descs = hopper.descriptors(a, b, out, cfg, [cfg.block(a.element_size())])
            block = cfg.block(a.element_size())
            nprog = min(sms, -(-n // block))
            kernels = {
                "torch.add": lambda: torch.add(a, b, out=out),
                "tma-ring": lambda: hopper.launch(a, b, out, sms, cfg),
                "tma-ld/st": lambda: tma_load_st_store_kernel[(nprog,)](descs[0], descs[1], out, n, STAGES=cfg.stages,
                                                                       AHEAD=cfg.ahead, num_warps=cfg.num_warps),
                "ld/tma-st": lambda: plain_load_kernel[(nprog,)](a, b, out, descs[2], n, BLOCK=block, TMA_STORE=True,
                                                                 OUT_BUFS=cfg.out_bufs, num_warps=cfg.num_warps),
                "ld/st": lambda: plain_load_kernel[(nprog,)](a, b, out, descs[2], n, BLOCK=block, TMA_STORE=False,
                                                             OUT_BUFS=1, num_warps=cfg.num_warps),
            }
            counter = torch.zeros(1, dtype=torch.int32, device="cuda")

            def dynamic():
                counter.zero_()
                tma_ring_dynamic_kernel[(nprog,)](*descs, counter, n, STAGES=3, OUT_BUFS=2, num_warps=4)

            kernels["tma-ring-dyn"] = dynamic
            for tile in (1024, 4096):
                d = hopper.descriptors(a, b, out, cfg, [tile])
                kernels[f"tma-1tile-{tile}"] = lambda d=d, tile=tile: tma_one_tile_kernel[(-(-n // tile),)](
                    *d, num_warps=4)
            base = None
            for round_ in range(2):
                for name, fn in kernels.items():
                    out.fill_(float("nan"))
                    fn()
                    ok = bool(torch.equal(out, expect))
                    ms = _median_ms(fn, args.reps)
                    base = ms if name == "torch.add" else base
                    print(f"{n:>10} {str(dtype)[6:]:>9} {name:>10} {3 * n * a.element_size() / ms * 1e-6:6.0f}"
                          f" {base / ms:8.3f} {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
