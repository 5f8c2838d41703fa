"""The shapes whose pick a selection change moves, as a `schedules.py` plan: the held-out A/B of
a change, on shapes no fit has seen.

    PYTHONPATH=src python benchmarks/changed_picks.py --base REV [--dtype bf16|fp8] [--scaling S]
        [--seeds 300-799] [--rows 961-8192] [--count 16] [--seed 0] > plan.json
    PYTHONPATH=src python benchmarks/schedules.py --plan plan.json --rounds 3 [--dtype fp8 --scaling S]

For each shape of `pingpong bench --suite random` with the given seeds whose M lies in --rows
(FP8: N and K multiples of 16), the rule's pick (the 16-bit `select.heuristic_config`, or FP8's
`fp8_select.rule_fp8`, promoted; no tuning table) under git revision REV (checked out into a
temporary worktree) and under the working tree, each computed by its own interpreter. The
shapes whose pick differs, at most one per (N, K, new tile) (its M drawn with --seed among
that key's changed shapes) and --count of them drawn with --seed, print as JSON:
[[M, N, K, [pick under REV, pick now]], ...], configs named as schedules.py names them.
Seeds a fit has used are no held-out test: pass others.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: run by each tree's interpreter: shapes (JSON on stdin) -> the rule's pick of each, by name
PICKS = """
import json, sys
shapes, dtype, scaling, sms = json.load(sys.stdin)
if dtype == "fp8":
    try:
        from pingpong.hopper.host.fp8_select import rule_fp8
    except ImportError:  # a tree from before the rule's own module
        from pingpong.hopper.host.fp8_launch import rule_fp8
    pick = lambda M, N, K: rule_fp8(M, N, K, True, sms, scaling)
else:
    from pingpong.hopper.host.select import heuristic_config
    pick = lambda M, N, K: heuristic_config(M, N, K, sms)
json.dump([pick(*s).name() for s in shapes], sys.stdout)
"""


def picks(src: Path, shapes, dtype: str, scaling: str, sms: int) -> list[str]:
    """The pick of each shape by the tree whose sources are `src`."""
    out = subprocess.run([sys.executable, "-c", PICKS], input=json.dumps([shapes, dtype, scaling, sms]),
                         capture_output=True, text=True, check=True, env={"PYTHONPATH": str(src), "PATH": ""})
    return json.loads(out.stdout)


def span(text: str) -> range:
    """"300-799" -> range(300, 800); "5" -> range(5, 6)."""
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the git revision before the change")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp8"))
    p.add_argument("--scaling", default="tensor", choices=("tensor", "row", "block"), help="--dtype fp8: the scales")
    p.add_argument("--seeds", type=span, default=span("300-799"), help="random-suite seeds, FIRST-LAST")
    p.add_argument("--rows", type=span, default=span("33-8192"), help="M, FIRST-LAST")
    p.add_argument("--count", type=int, default=16)
    p.add_argument("--seed", type=int, default=0, help="draws --count of the changed shapes")
    p.add_argument("--sms", type=int, default=132)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from pingpong.tools.suites import random_suite

    shapes = sorted({s for seed in args.seeds for s in random_suite(seed) if s[0] in args.rows
                     and (args.dtype != "fp8" or (s[1] % 16 == 0 and s[2] % 16 == 0))})
    now = picks(ROOT / "src", shapes, args.dtype, args.scaling, args.sms)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.base], check=True)
        try:
            before = picks(tree / "src", shapes, args.dtype, args.scaling, args.sms)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    changed: dict = {}
    for (M, N, K), old, new in zip(shapes, before, now):
        if old != new:
            changed.setdefault((N, K, new), []).append([M, N, K, [old, new]])
    rng = random.Random(args.seed)
    plan = [rng.choice(rows) for _, rows in sorted(changed.items())]  # each key's M drawn, not its least
    rng.shuffle(plan)
    print(json.dumps(sorted(plan[:args.count])))
    print(f"{len(plan)} of {len(shapes)} shapes' (N, K, new pick) changed; {min(len(plan), args.count)} printed",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
