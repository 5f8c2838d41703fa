"""The documents name only code that exists. In backticks, docs/*.md and the README name three
kinds of things this test can resolve without doubt:

- a dotted name under `pingpong.` (`pingpong.runtime.plan.get`, `pingpong.matmul(a, b)`): a
  module of src/pingpong, then a name defined at its top level (or a class's member);
- a path ending in `.py` (`hopper/host/launch.py`, `benchmarks/ptx_identity.py`): a file of the
  repository whose path ends with it;
- a bare call of a snake_case name `name_with_underscore(...)` (`tma_legal(t)`): a function or
  class defined somewhere in src/pingpong, unless torch, Triton, Gluon or Python define it (calls
  without an underscore are mostly ISA counters and notation: `vmcnt(0)`, `act(z)`).

The source is read, not imported (no kernel compiles, no import side effects)."""

import ast
import builtins
import pathlib
import re

import pytest
import torch
import torch.distributed.tensor
import torch.distributed.tensor.experimental
import torch.nn.functional
import triton.experimental.gluon.language as gl
import triton.experimental.gluon.language.amd as gl_amd
import triton.experimental.gluon.language.nvidia.ampere.async_copy as gl_async_copy
import triton.experimental.gluon.language.nvidia.hopper as gl_hopper
import triton.experimental.gluon.language.nvidia.hopper.tma as gl_tma
import triton.language

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
#: Where a bare call that pingpong does not define may come from.
OTHERS = (builtins, torch, torch.Tensor, torch.nn.functional, torch.distributed.tensor,
          torch.distributed.tensor.experimental, triton.language, gl, gl_amd, gl_async_copy, gl_hopper, gl_tma)
#: Known exceptions: (document, call) pairs a check may skip (none now)
KNOWN: set = set()


def _modules():
    """module name -> (its top-level names and their nodes, its path)."""
    out = {}
    for path in (SRC / "pingpong").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        tree = ast.parse(path.read_text())
        names = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for n in ast.walk(target):
                        if isinstance(n, ast.Name):
                            names[n.id] = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names[(alias.asname or alias.name).split(".")[0]] = node
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                names.update(dict.fromkeys(ast.literal_eval(node.value), node))  # lazily loaded exports
        out[".".join(parts)] = (names, tree)
    return out


MODULES = _modules()
DEFINED = {n.name for _, tree in MODULES.values() for n in ast.walk(tree)
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
FILES = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if ".git" not in p.parts]


def _resolves(dotted):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module not in MODULES:
            continue
        rest = parts[i:]
        if not rest:
            return True
        names = MODULES[module][0]
        if rest[0] not in names:
            return False
        node = names[rest[0]]
        if len(rest) == 1 or not isinstance(node, ast.ClassDef):
            return True  # an attribute of a non-class value is not checked
        members = {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        members |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        return rest[1] in members
    return False


def unresolved(text):
    """(line, span) of every backticked name in `text` that names nothing."""
    bad = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for span in re.findall(r"`([^`\n]+)`", line):
            span = span.strip()
            if m := re.fullmatch(r"(pingpong(?:\.\w+)+)(?:\(.*\))?", span):
                ok = _resolves(m.group(1))
            elif m := re.fullmatch(r"([\w./-]+\.py)(?:::\w+)?", span):
                ok = any(f == m.group(1) or f.endswith("/" + m.group(1)) for f in FILES)
            elif m := re.fullmatch(r"([a-z]\w*_\w*)\(.*\)", span):
                ok = m.group(1) in DEFINED or any(hasattr(ns, m.group(1)) for ns in OTHERS)
            else:
                continue
            if not ok:
                bad.append((lineno, span))
    return bad


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_documents_name_only_what_exists(doc):
    bad = [(n, s) for n, s in unresolved(doc.read_text()) if (doc.name, s) not in KNOWN]
    assert not bad, f"{doc.relative_to(ROOT)} names what does not exist: " + "; ".join(
        f"line {n}: `{s}`" for n, s in bad)


def test_the_check_sees_a_missing_name():
    assert unresolved("`pingpong.runtime.plan.get` `hopper/host/launch.py` `tma_orientation(t)`") == []
    assert unresolved("`pingpong.runtime.plan.no_such` `hopper/no_such.py` `tma_legal(t)` `pingpong.nope`") == [
        (1, "pingpong.runtime.plan.no_such"), (1, "hopper/no_such.py"), (1, "tma_legal(t)"), (1, "pingpong.nope")]


#: "run 123", "runs 7-13", "RESULTS.md run 5": a measurement cited by number.
RUN_CITATION = re.compile(r"\bRESULTS\.md,? runs? \d+|\bruns? \d+(?:\s*[-–]\s*\d+)?(?=\s*[);,.:]|\s*$)", re.M)


def test_no_source_file_cites_a_run():
    """Measurement history lives in benchmarks/RESULTS.md; a source comment says what was decided
    and, where it needs one, points to the document that explains why."""
    citing = {}
    for path in (SRC / "pingpong").rglob("*.py"):
        hits = RUN_CITATION.findall(path.read_text())
        if hits:
            citing[path.relative_to(SRC / "pingpong").as_posix()] = hits
    assert not citing, f"run citations in source files: {citing}"


def test_the_run_citation_pattern():
    found = RUN_CITATION.findall("(RESULTS.md run 142). run 13) runs 7-13: runs 150–153\nDEFAULT runs 2 tiles")
    assert found == ["RESULTS.md run 142", "run 13", "runs 7-13", "runs 150–153"]
