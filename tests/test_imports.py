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
    code = ("import sys, pingpong.tools.bench_streaming; "
            "assert 'pingpong.tools.bench' not in sys.modules, 'pingpong.tools.bench_streaming imports pingpong.tools.bench'")
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


def _graph() -> dict:
    """Every module of the package -> the pingpong modules it imports (`_imports`)."""
    import pathlib

    import pingpong

    root = pathlib.Path(pingpong.__file__).parent
    paths = {}
    for path in root.rglob("*.py"):
        parts = ("pingpong",) + path.relative_to(root).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {name: _imports(path, name, set(paths)) for name, path in paths.items()}


def test_no_import_cycle():
    """No module reaches itself again through its imports, function-local ones included (a
    cycle held together by a deferred import is still a cycle)."""
    graph = _graph()
    for start in graph:  # depth-first from each module: a path back to it is a cycle
        stack, seen = [(start, (start,))], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                assert nxt != start, f"import cycle: {' -> '.join(trail + (nxt,))}"
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, trail + (nxt,)))


#: The layers, lowest first (docs/design.md "The layers"). A module imports its own layer and the
#: ones below, never one above. An entry is a module, or "pkg.*": a package and all under it; the
#: most specific entry decides. Every module has one: a new module is given its layer here.
LAYERS = (
    ("leaves", ("pingpong.errors", "pingpong.toolchain")),
    ("runtime", ("pingpong.runtime.*",)),
    # the schedule checker's vocabulary, which the kernels' schedules are written in
    ("schedule model", ("pingpong.schedule", "pingpong.schedule.model", "pingpong.schedule.checker",
                        "pingpong.schedule.errors", "pingpong.schedule.timeline")),
    # the Hopper kernels in three layers: the @gluon.jit parts, the kernels composed of them, and
    # the host side that configures and launches them (a device part never imports a host part)
    ("hopper device parts", ("pingpong.hopper.device.*",)),
    ("hopper kernels", ("pingpong.hopper.kernels.*",)),
    # the backends' host sides; each GEMM backend is named in runtime.plan.BACKEND_MODULES
    ("backends", ("pingpong.hopper", "pingpong.hopper.host.*", "pingpong.amd.*", "pingpong.portable.*",
                  "pingpong.streaming.hopper", "pingpong.streaming.portable", "pingpong.streaming.gfx942",
                  "pingpong.streaming.grid_stride", "pingpong.streaming.offline")),
    # torch integration under the functions: the torch.library ops, their autograd and lowering;
    # the kept FP8 copies of parameters that the quantizations consult
    ("torch integration", ("pingpong.integration.*", "pingpong.kept")),
    ("public API", ("pingpong.api", "pingpong.functional", "pingpong.grouped", "pingpong.fp8", "pingpong.fp8_grouped",
                    "pingpong.quantize", "pingpong.quantize_groups", "pingpong.streaming", "pingpong.streaming.api")),
    # torch integration built on the functions, as torch.nn on torch.nn.functional
    ("torch modules", ("pingpong.nn", "pingpong.distributed", "pingpong.moe", "pingpong.fp8_training",
                       "pingpong.fp8_grouped_training")),
    ("package", ("pingpong",)),  # the lazy front door: every public name
    ("tools", ("pingpong.__main__", "pingpong.tools.*", "pingpong.schedule.*", "pingpong.streaming.__main__")),
)

#: (importer, imported) pairs let through against the layers, each with its reason. Empty: keep it so.
ALLOWED: dict = {}


def _layer(name: str) -> int:
    """The index in LAYERS of `name`'s most specific entry."""
    best = None
    for rank, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            package = entry.removesuffix(".*")
            exact = entry == name
            under = entry.endswith(".*") and (name == package or name.startswith(package + "."))
            if exact or under:
                key = (exact, len(package))
                if best is None or key > best[0]:
                    best = (key, rank)
    assert best is not None, f"{name} has no layer: give it one in LAYERS (tests/test_imports.py)"
    return best[1]


def test_imports_go_down_the_layers():
    """The direction, as the cycle test checks cycles: the runtime never imports the torch
    integration, a backend never the public API, a Hopper device part never a kernel or the host
    side, nothing but the tools imports a tool; function-local imports count. The runtime asks
    the backends by name (BACKEND_MODULES), not by an import."""
    graph = _graph()
    against = sorted(f"{name} ({LAYERS[_layer(name)][0]}) imports {dep} ({LAYERS[_layer(dep)][0]})"
                     for name, deps in graph.items() for dep in deps
                     if _layer(dep) > _layer(name) and (name, dep) not in ALLOWED)
    assert not against, "imports against the layers:\n" + "\n".join(against)
    assert not set(ALLOWED) - {(n, d) for n, deps in graph.items() for d in deps}, "an ALLOWED pair no longer imports"


def test_the_backend_list_names_backends():
    """Each entry of the runtime's backend list is a module of the backends layer (the order
    they are asked in shows in the refusal's message: tests/test_spec.py)."""
    from pingpong.runtime import plan

    graph = _graph()
    assert plan.BACKEND_MODULES
    for name in plan.BACKEND_MODULES:
        assert name in graph and LAYERS[_layer(name)][0] == "backends", name


def test_a_backend_that_fails_to_import_is_named(monkeypatch):
    from pingpong.runtime import plan

    monkeypatch.setattr(plan, "BACKEND_MODULES", plan.BACKEND_MODULES + ("pingpong.no_such_backend",))
    monkeypatch.setattr(plan, "BACKENDS", None)
    with pytest.raises(ModuleNotFoundError, match="the backend pingpong.no_such_backend .*cannot be imported"):
        plan.backends()
    assert plan.BACKENDS is None, "nothing half-loaded is kept"


def test_import_pingpong_loads_no_backend():
    code = ("import sys, pingpong, pingpong.api; "
            "assert not [m for m in sys.modules if m.startswith(('pingpong.hopper.host.backend', 'pingpong.amd', "
            "'pingpong.portable'))], sorted(m for m in sys.modules if m.startswith('pingpong'))")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_version_is_pyprojects():
    import pathlib
    import re

    import pingpong

    pyproject = pathlib.Path(pingpong.__file__).parents[2] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("not a source checkout")
    assert re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M).group(1) == pingpong.__version__


@pytest.mark.parametrize("module", ["pingpong.fp8", "pingpong.integration.ops", "pingpong.distributed",
                                    "pingpong.grouped"])
def test_a_submodule_imports_first(module):
    """`import pingpong` loads the API lazily; a submodule imported before anything else (as
    `from pingpong.fp8 import Float8Linear` or `import pingpong.distributed` do) must not make
    the package load the API around the module still being initialized."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


def test_every_pingpong_name_the_tests_and_tools_import_exists():
    """Each `from pingpong... import name` and `import pingpong...` in tests/, benchmarks/ and
    scripts/, function-local ones included, names something that exists: a module move that
    leaves a GPU-only test (which CI never runs) importing the old path fails here."""
    import ast
    import importlib
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    missing = []
    for path in sorted(p for d in ("tests", "benchmarks", "scripts") for p in (root / d).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "pingpong":
                module = importlib.import_module(node.module)
                missing += [f"{path.relative_to(root)}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                            if a.name != "*" and not hasattr(module, a.name)
                            and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "pingpong" and importlib.util.find_spec(a.name) is None:
                        missing.append(f"{path.relative_to(root)}:{node.lineno}: {a.name}")
    assert not missing, "imports of names that do not exist:\n" + "\n".join(missing)
