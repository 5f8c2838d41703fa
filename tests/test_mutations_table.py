"""benchmarks/mutations.py's breaks still apply: each one's text occurs exactly once in its file
(a refactor that moves it would make the mutation pass stop at that row, or test nothing), and
benchmarks/MUTATIONS.md lists exactly the mutations the script holds."""

import re
from pathlib import Path

from bench_scripts import load

ROOT = Path(__file__).resolve().parent.parent


def _mutations():
    return load("mutations").MUTATIONS


def test_every_mutation_text_occurs_exactly_once():
    bad = [(name, file, (ROOT / file).read_text().count(old)) for name, file, old, _, _ in _mutations()
           if (ROOT / file).read_text().count(old) != 1]
    assert not bad, bad


def test_the_table_lists_the_script_s_mutations():
    rows = re.findall(r"^\| (.+?) \| (\S+) \| (?:killed|SURVIVED)", (ROOT / "benchmarks" / "MUTATIONS.md").read_text(),
                      re.MULTILINE)
    assert sorted(rows) == sorted((name, file) for name, file, *_ in _mutations())
