"""The measured results as data, and the current-state table made from them.

    benchmarks/results/<session>.md     the history of one session, verbatim: prose, commands, tables
    benchmarks/results/<session>.json   its runs as data (below); only the runs someone quotes
    benchmarks/RESULTS.md               the current-state table (generated) and the index of sessions

A session's JSON: {"session", "versions": {...}, "runs": [run, ...]}. A run is what
`pingpong bench --json` writes (header, rows, geomean_ratio) plus what names it:

    {"run": "319", "product": "...", "reference": "torch._scaled_mm", "command": "...",
     "header": {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-27T17:59+00:00", "tree": "0674f7f"},
     "rows": [{"shape": "1024x1024x16384", "ratio": 0.941}, ...],
     "geomean_ratio": 1.001, "over": 36}

A run that is one measurement rather than a geometric mean over rows (a model's step time)
carries "ratio" instead of "geomean_ratio". The current state is the newest run (by
header.date) of each (product, reference, device).

    python benchmarks/results.py            write the table into RESULTS.md
    python benchmarks/results.py --check    exit 1 if RESULTS.md's table or the README's
                                            Performance numbers disagree with the data
    python benchmarks/results.py add SESSION BENCH.json --run N --product P --reference R --command C [--date D]
                                            append a `pingpong bench --json` output as a run
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- BEGIN GENERATED: python benchmarks/results.py -->", "<!-- END GENERATED -->"


def sessions(where: pathlib.Path = RESULTS) -> dict[str, dict]:
    """{session stem: its JSON document}, for every benchmarks/results/*.json."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(where.glob("*.json"))}


def short_device(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100"; "2 × NVIDIA H200" -> "2 × H200"."""
    m = re.search(r"(\d+\s*×\s*)?(?:NVIDIA\s+)?([A-Z]+\d+\w*)", name)
    return (m.group(1) or "") + m.group(2) if m else name


def headline(run: dict) -> float:
    """The number a run is quoted by: its geometric mean over rows, else its one ratio."""
    return run["geomean_ratio"] if run.get("geomean_ratio") is not None else run["ratio"]


def current(docs: dict[str, dict]) -> list[tuple[str, dict]]:
    """(session, run) of the newest run of each (product, reference, device), sorted."""
    newest: dict[tuple, tuple[str, dict]] = {}
    for stem, doc in docs.items():
        for run in doc["runs"]:
            key = (run["product"], run["reference"], short_device(run["header"]["device"]))
            if key not in newest or run["header"]["date"] > newest[key][1]["header"]["date"]:
                newest[key] = (stem, run)
    return [newest[k] for k in sorted(newest)]


def table(docs: dict[str, dict]) -> str:
    lines = ["| product | reference | ratio | over | device | date | run |", "|---|---|---|---|---|---|---|"]
    for stem, run in current(docs):
        h = run["header"]
        lines.append(f"| {run['product']} | {run['reference']} | {headline(run):.3f} | {run.get('over', '')} | "
                     f"{short_device(h['device'])} | {h['date'][:10]} | [run {run['run']}](results/{stem}.md) |")
    return "\n".join(lines)


def with_table(text: str, docs: dict[str, dict]) -> str:
    """`text` (RESULTS.md) with the generated block between BEGIN and END replaced."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(docs)}\n{END}{tail}"


# --------------------------------------------------------------------------- the README's numbers


def _runs(cell: str) -> list[set[str]]:
    """"runs 141 / 192" -> [{"141"}, {"192"}]; "runs 140–142" -> [{"140", "141", "142"}]."""
    out = []
    for part in re.sub(r"\bruns?\b", "", cell).split("/"):
        ends = [int(x) for x in re.findall(r"\d+", part)]
        out.append({str(n) for n in range(ends[0], ends[-1] + 1)} if ends else set())
    return out


def readme_quotes(text: str) -> list[tuple[str, int, str, str, set[str]]]:
    """(number as written, its decimals, reference, device, the runs it cites) for every ratio in
    the README's Performance table."""
    section = text.split("## Performance", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|")]
    head = rows[0]
    col = {name: head.index(name) for name in ("reference", "ratio", "device", "RESULTS.md")}
    quotes = []
    for row in rows[2:]:
        numbers = re.findall(r"\d+\.(\d+)", row[col["ratio"]])
        values = re.findall(r"\d+\.\d+", row[col["ratio"]])
        runs = _runs(row[col["RESULTS.md"]])
        if len(runs) == 1:
            runs = runs * len(values)
        if len(runs) != len(values):
            raise ValueError(f"README Performance row {row}: {len(values)} numbers, {len(runs)} run groups")
        quotes += [(v, len(d), row[col["reference"]], row[col["device"]], r) for v, d, r in zip(values, numbers, runs)]
    return quotes


def unheld(text: str, docs: dict[str, dict]) -> list[str]:
    """The README's quoted numbers that no current run holds (same reference, device, run, and
    the number at the README's precision)."""
    held = [(run["reference"], short_device(run["header"]["device"]), run["run"], headline(run))
            for _, run in current(docs)]
    bad = []
    for value, decimals, reference, device, runs in readme_quotes(text):
        if not any(r == reference and d == device and n in runs and math.isclose(round(x, decimals), float(value))
                   for r, d, n, x in held):
            bad.append(f"{value} ({reference}, {device}, runs {sorted(runs, key=int)})")
    return bad


# --------------------------------------------------------------------------- adding a run


def run_from_bench(doc: dict, run: str, product: str, reference: str, command: str, date: str | None = None) -> dict:
    """A run entry from a `pingpong bench --json` document (header, rows, geomean_ratio) or a
    `--op grouped` one (device, torch, rows; its date from `date`): the rows kept whole."""
    header = dict(doc.get("header") or {k: doc[k] for k in ("device", "torch") if k in doc})
    if date:
        header["date"] = date
    ok = [r["ratio"] for r in doc["rows"] if r.get("ratio") and r.get("status", "ok") in ("ok", "peer-unsupported")]
    gm = doc.get("geomean_ratio") or (math.exp(sum(map(math.log, ok)) / len(ok)) if ok else None)
    if "device" not in header or "date" not in header:
        raise ValueError("the bench JSON names no device or no date (give --date YYYY-MM-DDTHH:MM:SS+00:00)")
    return {"run": run, "product": product, "reference": reference, "command": command, "header": header,
            "rows": doc["rows"], "geomean_ratio": gm, "over": len(ok)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if RESULTS.md or the README is out of sync")
    sub = p.add_subparsers(dest="cmd")
    add = sub.add_parser("add", help="append a `pingpong bench --json` output to a session's runs")
    add.add_argument("session", help="the session's stem (benchmarks/results/<session>.md)")
    add.add_argument("bench_json")
    for name in ("--run", "--product", "--reference", "--command"):
        add.add_argument(name, required=True)
    add.add_argument("--date", help="the run's UTC date and time, where the JSON has none (--op grouped)")
    args = p.parse_args(argv)
    if args.cmd == "add":
        path = RESULTS / f"{args.session}.json"
        doc = json.loads(path.read_text()) if path.exists() else {"session": args.session, "versions": {}, "runs": []}
        bench = json.loads(pathlib.Path(args.bench_json).read_text())
        doc["runs"].append(run_from_bench(bench, args.run, args.product, args.reference, args.command, args.date))
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    docs = sessions()
    text = RESULTS_MD.read_text()
    if not args.check:
        RESULTS_MD.write_text(with_table(text, docs))
        return 0
    problems = [] if with_table(text, docs) == text else ["RESULTS.md: the table differs from the data "
                                                         "(run python benchmarks/results.py)"]
    problems += [f"README quotes {q}, which the table does not hold" for q in unheld(README.read_text(), docs)]
    print("\n".join(problems) or "in sync", file=sys.stderr if problems else sys.stdout)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
