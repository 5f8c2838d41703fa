"""`python -m pingpong.streaming --sweep candidates ...`: the StreamConfig sweep (bench.main)."""

from ..tools.bench_streaming import main

raise SystemExit(main())
