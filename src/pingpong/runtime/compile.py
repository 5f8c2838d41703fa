"""Offline compilation: build any of the package's kernels for a named GPU target on a
machine with no GPU, and read facts off the machine code.

How it works: Triton compiles for whatever target its *active
driver* reports. We install a tiny stub driver whose ``get_current_target()`` returns the
GPUTarget we ask for, then call ``kernel.warmup(..., grid=(1,))`` with CPU tensors (TMA
descriptors are built from CPU tensors too: only their shapes, strides and dtypes matter).
The result carries PTX/cubin (NVIDIA) or AMDGCN/hsaco (AMD); `facts()` reads registers,
spills, shared memory, warps and counts of the key instructions from them.

Kernels take part through a registry: a module calls ``@register("name", targets=...)`` on a
builder ``build(target_name) -> Launch`` that returns the jit function, its arguments and
grid. `compile_kernel(name, target)` runs that builder inside the stub-driver context.

    >>> facts = compile_kernel("persistent", "sm_90a").facts()     # doctest: +SKIP
    >>> facts.counts["wgmma"] > 0                                    # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import re
import subprocess
import tempfile
import threading
from typing import Any, Callable, Iterator

from ..errors import TargetError, ToolMissing

# --------------------------------------------------------------------------- targets

#: Target name -> (backend, arch, warp size). sm_90a is Hopper with its arch-specific
#: instructions (wgmma, setmaxnreg); Triton emits `.target sm_90a` for capability 90.
TARGETS: dict[str, tuple[str, Any, int]] = {
    "sm_90a": ("cuda", 90, 32),
    "gfx942": ("hip", "gfx942", 64),   # CDNA3, MI300X
    "gfx950": ("hip", "gfx950", 64),   # CDNA4, MI355X
    "gfx1151": ("hip", "gfx1151", 32),  # RDNA3.5, Strix Halo
}

#: Hardware limits the facts are checked against (bytes). Hopper: 227 KB per block.
SHARED_MEMORY_LIMIT = {"sm_90a": 227 * 1024, "gfx942": 64 * 1024, "gfx950": 160 * 1024, "gfx1151": 64 * 1024}


def gpu_target(name: str):
    """The triton GPUTarget for a target name; unknown names list the valid ones."""
    from triton.backends.compiler import GPUTarget

    if name not in TARGETS:
        raise TargetError(f"target: unknown target {name!r}; valid targets: {', '.join(TARGETS)}")
    return GPUTarget(*TARGETS[name])


class _StubDriver:
    """Just enough of a triton driver for `JITFunction.warmup` to compile for `target`."""

    def __init__(self, target, device_id: int):
        self._target = target
        self._device = device_id

    def get_current_target(self):
        return self._target

    def get_current_device(self):
        return self._device

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def is_active(self):
        return True


class _PerThreadDriver:
    """Stands in for Triton's process-global active driver while any offline compile runs:
    a thread inside `offline()` sees its own stub, every other thread the driver that was
    active before (resolved lazily, as Triton does)."""

    def __init__(self, previous):
        self.previous = previous

    def _current(self):
        stub = getattr(_THREAD, "stub", None)
        if stub is not None:
            return stub
        if self.previous is not None:
            return self.previous
        from triton.runtime import driver

        return driver.default

    def __getattr__(self, name):
        return getattr(self._current(), name)


_THREAD = threading.local()
_INSTALL_LOCK = threading.Lock()
_installed: list = []  # [the _PerThreadDriver, number of offline() contexts open] while installed


@contextlib.contextmanager
def offline(target_name: str) -> Iterator[None]:
    """Make Triton compile for `target_name` with no GPU present, in this thread only.

    Triton compiles for its process-global *active driver*. The first `offline()` that opens
    installs a per-thread dispatcher there (under a lock, counted, removed when the last one
    closes): a thread inside `offline()` sees the stub of its own target, while other threads,
    launching real kernels or compiling offline for other targets at the same time, keep
    seeing their own driver. Each target gets its own device id so Triton's per-device caches
    never hand a kernel compiled for one target to another.
    """
    from triton.runtime import driver

    stub = _StubDriver(gpu_target(target_name), 1000 + list(TARGETS).index(target_name))
    outer = getattr(_THREAD, "stub", None)
    with _INSTALL_LOCK:
        if not _installed:
            _installed[:] = [_PerThreadDriver(driver._active), 0]
            driver._active = _installed[0]
        _installed[1] += 1
    _THREAD.stub = stub
    try:
        yield
    finally:
        _THREAD.stub = outer
        with _INSTALL_LOCK:
            _installed[1] -= 1
            if _installed[1] == 0:
                proxy = _installed[0]
                if driver._active is proxy:  # leave a driver someone else set meanwhile
                    driver._active = proxy.previous
                _installed.clear()


# --------------------------------------------------------------------------- registry


@dataclasses.dataclass
class Launch:
    """What a builder returns: a jit function and how to call it once."""

    fn: Any
    args: tuple
    kwargs: dict
    grid: tuple = (1,)


Builder = Callable[[str], Launch]
_REGISTRY: dict[str, tuple[Builder, tuple[str, ...], str]] = {}

#: Modules that register kernels; imported on first lookup so `import pingpong` stays light.
KERNEL_MODULES = (
    "pingpong.hopper.host.launch",
    "pingpong.hopper.host.fp8_launch",
    "pingpong.hopper.host.grouped",
    "pingpong.hopper.host.grouped_k",
    "pingpong.portable",
    "pingpong.amd",
    "pingpong.streaming.offline",
    "pingpong.hopper.host.fp8_grouped",
    "pingpong.hopper.host.fp8_grouped_k",
)


def register(name: str, targets: tuple[str, ...], doc: str = "") -> Callable[[Builder], Builder]:
    """Decorator: make `build(target_name) -> Launch` compilable as kernel `name`."""

    def deco(build: Builder) -> Builder:
        _REGISTRY[name] = (build, tuple(targets), doc or (build.__doc__ or "").strip().split("\n")[0])
        return build

    return deco


def _load_registry() -> None:
    for mod in KERNEL_MODULES:
        importlib.import_module(mod)


def kernels() -> dict[str, tuple[tuple[str, ...], str]]:
    """Registered kernel names -> (targets, one-line description)."""
    _load_registry()
    return {name: (targets, doc) for name, (_, targets, doc) in sorted(_REGISTRY.items())}


# --------------------------------------------------------------------------- compile + facts


@dataclasses.dataclass
class Facts:
    """What the machine code of one kernel says about it."""

    kernel: str
    target: str
    warps: int  # warps (NVIDIA) or waves (AMD) per block, all partitions included
    threads: int
    registers: int  # per thread: NVIDIA regs, AMD VGPR+AGPR
    spill_bytes: int  # NVIDIA local memory (stack) bytes; AMD scratch bytes
    shared_bytes: int
    counts: dict[str, int]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def shared_limit(self) -> int:
        return SHARED_MEMORY_LIMIT[self.target]

    def table(self) -> str:
        rows = [
            ("kernel", self.kernel),
            ("target", self.target),
            ("warps/waves per block", self.warps),
            ("threads per block", self.threads),
            ("registers per thread", self.registers),
            ("spill / local bytes", self.spill_bytes),
            ("shared memory bytes", f"{self.shared_bytes} (limit {self.shared_limit})"),
        ]
        rows += [(k, v) for k, v in self.extra.items()]
        rows += [(f"count {k}", v) for k, v in self.counts.items()]
        width = max(len(r[0]) for r in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


@dataclasses.dataclass
class Compiled:
    kernel: str
    target: str
    asm: dict[str, Any]
    metadata: Any

    @property
    def isa(self) -> str:
        """The human-readable machine code: SASS (NVIDIA, via cuobjdump) or AMDGCN."""
        if self.target.startswith("sm_"):
            return _cuda_tool("cuobjdump", "-sass", self.asm["cubin"])
        return self.asm["amdgcn"]

    def facts(self) -> Facts:
        if self.target.startswith("sm_"):
            return _cuda_facts(self)
        return _amd_facts(self)


def compile_kernel(name: str, target: str) -> Compiled:
    """Compile registered kernel `name` for `target` ("sm_90a", "gfx942", ...) without a GPU."""
    _load_registry()
    if name not in _REGISTRY:
        raise TargetError(f"kernel: unknown kernel {name!r}; valid kernels: {', '.join(sorted(_REGISTRY))}")
    build, targets, _ = _REGISTRY[name]
    gpu_target(target)  # validates the name
    if target not in targets:
        raise TargetError(f"target: kernel {name!r} compiles for {', '.join(targets)}, not {target!r}")
    with offline(target):
        launch = build(target)
        ck = launch.fn.warmup(*launch.args, grid=launch.grid, **launch.kwargs)
    return Compiled(name, target, dict(ck.asm), ck.metadata)


# --------------------------------------------------------------------------- NVIDIA facts


def _cuda_tool(tool: str, flag: str, cubin: bytes) -> str:
    from triton.backends.nvidia.compiler import get_ptxas  # noqa: F401  (ensures backend import)
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)
    if not os.path.isfile(path):
        raise ToolMissing(f"{tool}: not found at {path}; the offline compile facts (registers, spills, SASS) read the"
                          " cubin with the CUDA binary tools that Triton's NVIDIA backend ships beside ptxas (pip's"
                          " triton wheels have them): install such a Triton, or read Compiled.asm['ptx'] alone")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([path, flag, f.name], check=True, capture_output=True, text=True).stdout


#: name -> regex counted in PTX (p) or SASS (s). TMA load = global->shared bulk tensor copy.
_CUDA_PATTERNS = {
    "wgmma": ("p", r"wgmma\.mma_async"),
    "wgmma_wait": ("p", r"wgmma\.wait_group"),
    "tma_load": ("p", r"cp\.async\.bulk\.tensor\.\dd\.shared::(?:cluster|cta)\.global"),
    "tma_store": ("p", r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta"),
    "setmaxnreg": ("p", r"setmaxnreg"),
    "mbarrier_wait": ("p", r"mbarrier\.try_wait"),
    "bar_sync": ("p", r"\bbar\.sync|barrier\.sync"),
    "HGMMA": ("s", r"\bHGMMA\."),
    "UTMALDG": ("s", r"\bUTMALDG"),
    "UTMASTG": ("s", r"\bUTMASTG"),
    "LDL/STL": ("s", r"\b(LDL|STL)\b"),
    "atom_acq_rel": ("p", r"atom\.global\.gpu\.acq_rel"),
    "atom_acquire": ("p", r"atom\.global\.gpu\.acquire"),
    "ld_v4": ("p", r"ld\.global(\.\w+)*\.v4"),
    "st_v2": ("p", r"st\.global(\.\w+)*\.v[24]"),
}


def _cuda_facts(c: Compiled) -> Facts:
    ptx, sass = c.asm["ptx"], c.isa
    res = _cuda_tool("cuobjdump", "--dump-resource-usage", c.asm["cubin"])
    field = lambda key: int(re.search(rf"\b{key}:(\d+)", res).group(1))  # noqa: E731
    ntid = re.search(r"\.(?:reqntid|maxntid)\s+(\d+)", ptx)
    threads = int(ntid.group(1)) if ntid else 32 * c.metadata.num_warps
    counts = {k: len(re.findall(rx, ptx if src == "p" else sass)) for k, (src, rx) in _CUDA_PATTERNS.items()}
    return Facts(
        kernel=c.kernel,
        target=c.target,
        warps=threads // 32,
        threads=threads,
        registers=field("REG"),
        spill_bytes=field("STACK") + field("LOCAL"),
        shared_bytes=max(int(c.metadata.shared), field("SHARED")),
        counts=counts,
    )


# --------------------------------------------------------------------------- AMD facts

_AMD_PATTERNS = {
    "mfma": r"\bv_mfma_",
    "wmma": r"\bv_wmma_",
    "buffer_load": r"\bbuffer_load_",
    "buffer_load_lds": r"\bbuffer_load_\w+.*\blds\b",
    "global_load_lds": r"\bglobal_load_lds",
    "ds_read": r"\bds_read",
    "s_barrier": r"\bs_barrier\b",
    "s_waitcnt": r"\bs_waitcnt\b",
}


def _amd_meta(text: str, key: str, default: int = 0) -> int:
    m = re.search(rf"^\s*\.{key}:\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else default


def _amd_loop_body(text: str) -> str:
    """Instructions of the innermost loop: from a label to the last branch back to it
    (empty when the kernel has no loop)."""
    lines = text.splitlines()
    best = ""
    for i, line in enumerate(lines):
        m = re.match(r"^(\.LBB\w+):", line)
        if not m:
            continue
        for j in range(len(lines) - 1, i, -1):
            if re.search(rf"\bs_cbranch_\w+\s+{re.escape(m.group(1))}\b", lines[j]):
                body = "\n".join(lines[i + 1:j + 1])
                best = body if not best or len(body) < len(best) else best
                break
    return best


def _amd_facts(c: Compiled) -> Facts:
    text = c.asm["amdgcn"]
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith((";", ".")))
    loop = _amd_loop_body(text)
    counts = {k: len(re.findall(rx, code)) for k, rx in _AMD_PATTERNS.items()}
    vmcnt = sorted({int(v) for v in re.findall(r"vmcnt\((\d+)\)", code)})
    wave = _amd_meta(text, "wavefront_size", TARGETS[c.target][2])
    threads = _amd_meta(text, "max_flat_workgroup_size", c.metadata.num_warps * wave)
    agpr = re.search(r"; NumAgprs:\s+(\d+)", text)
    scratch = _amd_meta(text, "private_segment_fixed_size")  # per-lane stack: spills and local arrays
    vgpr_spills, sgpr_spills = _amd_meta(text, "vgpr_spill_count"), _amd_meta(text, "sgpr_spill_count")
    return Facts(
        kernel=c.kernel,
        target=c.target,
        warps=threads // wave,
        threads=threads,
        registers=_amd_meta(text, "vgpr_count"),
        spill_bytes=scratch + 4 * (vgpr_spills + sgpr_spills),
        shared_bytes=max(int(c.metadata.shared), _amd_meta(text, "group_segment_fixed_size")),
        counts=counts,
        extra={
            "wave size": wave,
            "scratch bytes": scratch,
            "vgpr spills": vgpr_spills,
            "sgprs": _amd_meta(text, "sgpr_count"),
            "agprs": int(agpr.group(1)) if agpr else 0,
            "vmcnt values": vmcnt,
            "loop vmcnt sequence": [int(v) for v in re.findall(r"vmcnt\((\d+)\)", loop)],
            "loop s_barrier": len(re.findall(_AMD_PATTERNS["s_barrier"], loop)),
        },
    )
