"""Scripts run in a process of their own under Triton's interpreter (TRITON_INTERPRET=1 must be set
before triton is imported, so never in the test process): the plain-Triton kernels' bitwise
checks on CPU tensors."""

import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def interpreted(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -c script args...` under the interpreter, from the repository's root."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def check_interpreted(script: str, seed: int | None = None, timeout: int = 600) -> None:
    """Run `script` with a seed (fresh unless given) as its argument; it must print OK. The seed
    is in the failure's message."""
    seed = int(torch.randint(0, 2**31, ()).item()) if seed is None else seed
    r = interpreted(script, str(seed), timeout=timeout)
    assert r.returncode == 0 and "OK" in r.stdout, f"seed {seed}: {r.stderr[-3000:]}"
