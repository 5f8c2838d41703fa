"""The tools behind the command line: bench, tune, isa, demo, suites, overhead, timing."""
