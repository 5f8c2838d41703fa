"""The structured Hopper (sm_90a) GEMM, in three layers (docs/design.md "The parts"):

    device/    the @gluon.jit building blocks: loader, pipeline (the ring), mma, epilogue,
               fixup (split-K / stream-K sums), scheduler, phase_sync, batched (rank-3 boxes)
    kernels/   the kernels, composed from the device parts: gemm (dense, batched, split-K,
               stream-K), fp8_gemm, grouped, grouped_k (ragged K), fp8_grouped
    host/      everything on the CPU: config (KernelConfig), select and table (which config),
               splits (split-K / stream-K arithmetic), launch and fp8_launch (descriptors,
               constexprs, grids), grouped, grouped_k, fp8_grouped (their launches), and
               backend (the runtime's entry: can_implement, plan)

A layer imports only the ones above it in this list: the device parts never import a kernel
or the host side, a kernel never the host side (tests/test_imports.py).
"""
