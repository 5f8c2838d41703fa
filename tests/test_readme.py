"""The README as a newcomer meets it: every Python block runs (on the CPU, the blocks that need a
GPU have every pingpong name they use checked instead), its test command is CI's, it stays short,
and it links every document."""

import ast
import pathlib
import re

import pytest
import torch

import pingpong

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def _pingpong_names(tree: ast.AST) -> set[str]:
    """Every dotted name the code reads from pingpong ("pingpong.nn.replace_linear", ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = []
            while isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name) and node.id == "pingpong":
                names.add(".".join(["pingpong", *reversed(parts)]))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pingpong"):
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_there_are_blocks_for_the_gpu_and_the_cpu():
    assert any("cuda" in b for b in BLOCKS) and any("cuda" not in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_python_block_runs(index):
    code = BLOCKS[index]
    tree = ast.parse(code)
    if "cuda" in code and not torch.cuda.is_available():
        names = _pingpong_names(tree)
        missing = sorted(n for n in names if not _resolves(n))
        assert names and not missing, f"README block {index}: no such name {missing}"
        return
    exec(compile(tree, f"README block {index}", "exec"), {"__name__": "__readme__"})


def test_pingpong_names_are_checked_for_real():
    """The name check above fails on a name that does not exist."""
    assert not _resolves("pingpong.no_such_function") and not _resolves("pingpong.nn.NoSuchLayer")
    assert _resolves("pingpong.nn.replace_linear") and _resolves("pingpong.portable.portable_gemm")


def test_install_and_test_commands_are_cis():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in README, f"README lacks CI's command: {ci}"
    assert ci.endswith("python -m pytest -q")
    assert "git clone" in README


def test_readme_is_short_and_links_every_document():
    assert len(README.splitlines()) <= 150
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    missing = [d for d in docs + ["benchmarks/RESULTS.md", "LICENSE"] if f"]({d})" not in README]
    assert not missing, f"README links none of {missing}"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
