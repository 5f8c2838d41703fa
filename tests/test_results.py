"""The measured results as data (benchmarks/results.py): RESULTS.md's current-state table is the
one the data makes, the README quotes only numbers that table holds, every session's record is
in the index, and benchmarks/ holds only tools that a document or a test names."""

import copy
import json
import pathlib
import re

import pytest

from bench_scripts import load

ROOT = pathlib.Path(__file__).resolve().parent.parent
results = load("results")

DOCS = results.sessions()
RESULTS_MD = results.RESULTS_MD.read_text()
README = results.README.read_text()


def test_the_table_is_the_one_the_data_makes():
    assert results.with_table(RESULTS_MD, DOCS) == RESULTS_MD, "run python benchmarks/results.py"


def test_the_readme_quotes_only_numbers_the_table_holds():
    assert results.readme_quotes(README), "no Performance numbers found in the README"
    assert results.unheld(README, DOCS) == []


def _run(product="bf16 GEMM, --suite all", device="NVIDIA H100 80GB HBM3", date="2026-11-27T15:04:00+00:00", run="296",
         value=0.995):
    return {"run": run, "product": product, "reference": "cuBLAS", "command": "pingpong bench --suite all",
            "header": {"device": device, "date": date}, "rows": [{"shape": "1024x1024x1024", "ratio": value}],
            "geomean_ratio": value, "over": 1}


def test_the_checks_see_a_change():
    """One number of the data changed, the README's number, device or run changed, or a newer run
    of the same product: each is caught."""
    docs = {"s": {"session": "s", "versions": {}, "runs": [_run()]}}
    text = results.with_table(f"# R\n{results.BEGIN}\nold\n{results.END}\nindex\n", docs)
    assert text.endswith(f"{results.END}\nindex\n") and "| 0.995 | 1 | H100 | 2026-11-27 |" in text
    changed = copy.deepcopy(docs)
    changed["s"]["runs"][0]["rows"] = [{"ratio": 2.0}]
    assert results.with_table(text, changed) == text  # the rows are not the table
    changed["s"]["runs"][0]["geomean_ratio"] = 0.996
    assert results.with_table(text, changed) != text

    readme = ("## Performance\n\n| product | reference | ratio | device | RESULTS.md |\n|---|---|---|---|---|\n"
              "| bf16 (`pingpong bench`) | cuBLAS | {} | {} | {} |\n\n## Next\n")
    assert results.unheld(readme.format("0.995", "H100", "run 296"), docs) == []
    assert results.unheld(readme.format("0.99", "H100", "runs 290–299"), docs) == []  # the README's precision
    for wrong in (("0.996", "H100", "run 296"), ("0.995", "H200", "run 296"), ("0.995", "H100", "run 295")):
        assert results.unheld(readme.format(*wrong), docs), wrong
    docs["s"]["runs"].append(_run(date="2026-11-28T00:00:00+00:00", run="400", value=1.01))  # newer: replaces 296
    assert results.unheld(readme.format("0.995", "H100", "run 296"), docs)
    assert results.unheld(readme.format("1.010", "H100", "run 400"), docs) == []
    assert "[run 400](results/s.md)" in results.table(docs) and "run 296" not in results.table(docs)


def test_a_bench_json_becomes_a_run(tmp_path):
    """`pingpong bench --json`'s document (and `--op grouped`'s, given a date) as a run entry."""
    from pingpong.tools.bench import write_json
    from pingpong.tools.rows import Row

    rows = [Row(1024, 1024, 1024, "hopper", "ok", 1e-3, 0.010, 0.011), Row(64, 64, 64, "hopper", "FAILED", 1.0)]
    header = {"device": "NVIDIA H200", "date": "2026-11-29T10:00:00+00:00", "torch": "2.11.0"}
    write_json(tmp_path / "r.json", rows, header)
    run = results.run_from_bench(json.loads((tmp_path / "r.json").read_text()), "345", "p", "cuBLAS", "pingpong bench")
    assert run["geomean_ratio"] == pytest.approx(1.1) and run["over"] == 1 and len(run["rows"]) == 2
    assert results.short_device(run["header"]["device"]) == "H200"
    grouped = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "rows": [
        {"status": "ok", "ratio": 2.0}, {"status": "ok", "ratio": 0.5}, {"status": "FAILED"}]}
    with pytest.raises(ValueError, match="date"):
        results.run_from_bench(grouped, "346", "p", "torch._grouped_mm", "pingpong bench --op grouped")
    run = results.run_from_bench(grouped, "346", "p", "torch._grouped_mm", "c", date="2026-11-29T11:00:00+00:00")
    assert run["geomean_ratio"] == pytest.approx(1.0) and run["over"] == 2


@pytest.mark.parametrize("stem", sorted(DOCS))
def test_each_recorded_run_names_its_device_date_command_and_rows(stem):
    doc = DOCS[stem]
    assert (results.RESULTS / f"{stem}.md").exists(), f"{stem}.json has no history {stem}.md"
    assert doc["versions"].get("torch") and doc["versions"].get("triton"), stem
    for run in doc["runs"]:
        where = f"{stem} run {run.get('run')}"
        assert all(run.get(k) for k in ("run", "product", "reference", "command")), where
        assert "|" not in run["product"] + run["reference"], where
        assert run["header"]["device"] and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]+\+00:00", run["header"]["date"]), where
        assert run["rows"] and results.headline(run) > 0, where
        assert re.search(rf"\b[Rr]uns? (\d+[–-])?{run['run']}\b|\b{run['run']}[–-]\d+", (results.RESULTS / f"{stem}.md").read_text()), \
            f"{where}: the session's history does not name the run"


def test_every_session_is_in_the_index():
    linked = re.findall(r"\]\(results/([\w.-]+\.md)\)", RESULTS_MD.split("## Sessions", 1)[1])
    files = sorted(p.name for p in results.RESULTS.glob("*.md"))
    assert sorted(set(linked)) == files, "the index and benchmarks/results/*.md differ"
    assert len(linked) == len(set(linked))
    for name in files:
        first = (results.RESULTS / name).read_text().splitlines()[0]
        assert first.startswith("## " + name[:10]), f"{name}: the record starts with its dated ## heading"


def test_runs_the_documents_cite_are_recorded():
    """"RESULTS.md run 141" in a document: some session's record names run 141."""
    history = "\n".join(p.read_text() for p in results.RESULTS.glob("*.md"))
    recorded = {int(n) for a, b in re.findall(r"\b[Rr]uns? (\d+)(?:\s*[–-]\s*(\d+))?", history)
                for n in range(int(a), int(b or a) + 1)}
    missing = []
    for doc in sorted((ROOT / "docs").glob("*.md")) + [results.README]:
        for a, b in re.findall(r"RESULTS\.md,? runs? (\d+)(?:\s*[–-]\s*(\d+))?", doc.read_text()):
            missing += [(doc.name, n) for n in range(int(a), int(b or a) + 1) if n not in recorded]
    assert not missing, missing


#: Where a tool of benchmarks/ must be named: the documents, the tests, the GPU check script.
NAMERS = [*(ROOT / "docs").glob("*.md"), ROOT / "README.md", *(ROOT / "benchmarks").glob("*.md"),
          *(ROOT / "tests").glob("*.py"), *(ROOT / "scripts").glob("*")]


def test_benchmarks_holds_only_named_tools():
    text = "\n".join(p.read_text() for p in NAMERS if p.is_file())
    tools = sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh"))
    unnamed = [t for t in tools if not re.search(rf"\b{re.escape(t)}\b", text)]
    assert tools and not unnamed, f"benchmarks/ tools no document or test names: {unnamed}"
