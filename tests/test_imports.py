"""Module wiring: every module exists, so an import error surfaces instead of hiding a
subcommand or a kernel; the two benchmarks share one timing module instead of importing
each other."""

import subprocess
import sys

import pytest

from pingpong.tools import cli
from pingpong.runtime import compile


def test_cli_does_not_hide_an_import_error(monkeypatch):
    monkeypatch.setitem(cli.SUBCOMMANDS, "broken", ("pingpong.no_such_module", "a subcommand that fails to import"))
    with pytest.raises(ModuleNotFoundError, match="pingpong.no_such_module"):
        cli.main(["broken", "--help"])


def test_kernel_registry_does_not_hide_an_import_error(monkeypatch):
    monkeypatch.setattr(compile, "KERNEL_MODULES", compile.KERNEL_MODULES + ("pingpong.no_such_module",))
    with pytest.raises(ModuleNotFoundError, match="pingpong.no_such_module"):
        compile.kernels()


def test_streaming_bench_does_not_import_the_gemm_bench():
    code = ("import sys, pingpong.streaming.bench; "
            "assert 'pingpong.tools.bench' not in sys.modules, 'pingpong.streaming.bench imports pingpong.tools.bench'")
    subprocess.run([sys.executable, "-c", code], check=True)


def _imports(path, name: str, modules: set) -> set:
    """The pingpong modules `name` (at `path`) imports, at module level or inside functions."""
    import ast

    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return (found & modules) - {name}


def test_no_import_cycle():
    """The layers import downwards only (front end → runtime → backends; tools on top): no
    module reaches itself again through its imports, function-local ones included (a cycle
    held together by a deferred import is still a cycle)."""
    import pathlib

    import pingpong

    root = pathlib.Path(pingpong.__file__).parent
    paths = {}
    for path in root.rglob("*.py"):
        parts = ("pingpong",) + path.relative_to(root).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {name: _imports(path, name, set(paths)) for name, path in paths.items()}
    for start in graph:  # depth-first from each module: a path back to it is a cycle
        stack, seen = [(start, (start,))], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                assert nxt != start, f"import cycle: {' -> '.join(trail + (nxt,))}"
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + (nxt,)))


def test_version_is_pyprojects():
    import pathlib
    import re

    import pingpong

    pyproject = pathlib.Path(pingpong.__file__).parents[2] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("not a source checkout")
    assert re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M).group(1) == pingpong.__version__


@pytest.mark.parametrize("module", ["pingpong.fp8", "pingpong.ops", "pingpong.distributed", "pingpong.grouped"])
def test_a_submodule_imports_first(module):
    """`import pingpong` loads the API lazily; a submodule imported before anything else (as
    `from pingpong.fp8 import Float8Linear` or `import pingpong.distributed` do) must not make
    the package load the API around the module still being initialized."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
