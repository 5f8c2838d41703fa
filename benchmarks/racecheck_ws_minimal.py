"""Is racecheck's report on our warp-specialized GEMM about our code or about the dispatch
Triton 3.6 generates for `gl.warp_specialize`? This kernel has nothing but a warp_specialize:
each partition writes its own global elements, no shared memory of ours, no mbarriers.

    compute-sanitizer --tool racecheck python benchmarks/racecheck_ws_minimal.py

Measured (H200, compute-sanitizer racecheck, 2026-11-21): the first three kernels give 0
hazards; `mbarrier_ws_kernel` — the same plus ONE mbarrier the worker arrives on and the
default partition waits on — gives the GEMM's report exactly: a read at the kernel entry line
against a write at the `warp_specialize` line (the dispatch state Triton's lowering keeps in
shared memory). So that report comes with any warp-specialized kernel whose partitions
synchronize through an mbarrier (every producer/consumer pipeline does), not from pingpong's
ring, staging buffers or phase barriers.
"""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier


@gluon.jit
def write_ids(out_ptr, BASE: gl.constexpr, N: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout)
    gl.store(out_ptr + BASE + offs, offs + BASE)


@gluon.jit
def write_ids_synced(out_ptr, BASE: gl.constexpr, N: gl.constexpr):
    """write_ids, then a partition-wide barrier (Triton emits `bar.sync id, threads`; in the
    default partition id 0 — the GEMM's partitions have such barriers around TMA and wgmma)."""
    write_ids(out_ptr, BASE, N)
    gl.thread_barrier()


@gluon.jit
def minimal_ws_kernel(out_ptr, N: gl.constexpr):
    """Default partition + one 4-warp worker (8 warps, no register reallocation)."""
    gl.warp_specialize([
        (write_ids, (out_ptr, 0, N)),
        (write_ids, (out_ptr, N, N)),
    ], [4], [40])


@gluon.jit
def gemm_shaped_ws_kernel(out_ptr, N: gl.constexpr):
    """The GEMM's partition shape: default 4 warps + workers of 4 and 1 warps (padded to 12
    warps), setmaxnreg 232 / 40 from a 168-register entry cap."""
    gl.warp_specialize([
        (write_ids, (out_ptr, 0, N)),
        (write_ids, (out_ptr, N, N)),
        (write_ids, (out_ptr, 2 * N, 32)),
    ], [4, 1], [232, 40])


@gluon.jit
def synced_ws_kernel(out_ptr, N: gl.constexpr):
    """minimal_ws_kernel with a partition-local barrier in each partition."""
    gl.warp_specialize([
        (write_ids_synced, (out_ptr, 0, N)),
        (write_ids_synced, (out_ptr, N, N)),
    ], [4], [40])


@gluon.jit
def wait_then_write(out_ptr, bar, BASE: gl.constexpr, N: gl.constexpr):
    mbarrier.wait(bar, 0)
    write_ids(out_ptr, BASE, N)


@gluon.jit
def arrive_after_write(out_ptr, bar, BASE: gl.constexpr, N: gl.constexpr):
    write_ids(out_ptr, BASE, N)
    mbarrier.arrive(bar)


@gluon.jit
def mbarrier_ws_kernel(out_ptr, N: gl.constexpr):
    """The default partition waits on an mbarrier the worker arrives on (how the GEMM's
    partitions talk: ring, turns)."""
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    gl.warp_specialize([
        (wait_then_write, (out_ptr, bar, 0, N)),
        (arrive_after_write, (out_ptr, bar, N, N)),
    ], [4], [40])


if __name__ == "__main__":
    n = 128
    for name, kernel, size, kwargs in (("minimal (4 + 4 warps)", minimal_ws_kernel, 2 * n, {}),
                                       ("GEMM-shaped (4 + 4 + 1 warps, setmaxnreg)", gemm_shaped_ws_kernel, 2 * n + 32,
                                        dict(maxnreg=168)),
                                       ("with partition barriers", synced_ws_kernel, 2 * n, {}),
                                       ("with an mbarrier between partitions", mbarrier_ws_kernel, 2 * n, {})):
        out = torch.full((size,), -1, dtype=torch.int32, device="cuda")
        kernel[(4,)](out, n, num_warps=4, **kwargs)
        torch.cuda.synchronize()
        expect = torch.cat([torch.arange(2 * n), torch.arange(2 * n, 2 * n + 32)])[:size].to(torch.int32)
        print(name, "correct" if torch.equal(out.cpu(), expect) else "WRONG", flush=True)
