"""`python -m pingpong.streaming --sweep candidates ...`: the StreamConfig sweep (bench.main)."""

from .bench import main

raise SystemExit(main())
