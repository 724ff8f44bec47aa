"""joaderfs benchmarks: run them through scripts/bench.sh (see
docs/benchmarks.md), which sets PYTHONPATH to this checkout's repo, tests and
python folders; each is a module, run as python3 -m bench.GROUP.MODULE."""
