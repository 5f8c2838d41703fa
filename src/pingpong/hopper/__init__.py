"""The structured Hopper (sm_90a) GEMM: one module per part (docs/design.md "The parts").

config -> loader, pipeline, mma, epilogue, scheduler, phase_sync -> kernel -> launch
"""
