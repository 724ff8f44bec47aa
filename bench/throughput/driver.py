#!/usr/bin/python3
"""Benchmark suite: joaderfs against the PyTorch DataLoader (issue 5).

Runs the JOADER paper's evaluation scenarios (section 5) twice, once with every
job reading through joaderfs (the Python client under a torch DataLoader) and
once with every job using its own DataLoader over torchvision's ImageFolder
(PIL decoding, the same Resize+CenterCrop), and prints Markdown tables.  Jobs
are real processes (job.py) that consume batches, optionally
sleeping a fixed time per batch to emulate a model's speed.

  S1  one job, cold (joaderfs: cache_dir=none, empty RAM tier)
  S2  one job, two epochs: the second from joaderfs' tiers, decoded again by
      the baseline (the OS page cache holds the JPEGs for both); S2-small does
      the same with a RAM budget of a quarter of the decoded set and a disk tier
  S3  1..6 jobs on the same data at the same speed, started together
  S4  five jobs at speeds 1:2:3:4:5 (per-batch sleeps), each compared with the
      speed it reaches alone through joaderfs
  S5  four jobs starting at 0%, 25%, 50%, 75% of the first job's epoch
  S6  two jobs whose subsets overlap 25%, 50%, 75%, 100%

Usually run through scripts/bench.sh, which builds, makes the dataset and
cleans up; this program mounts and unmounts joaderfs itself, one fresh daemon
per run, and unmounts everything it mounted even when interrupted.

The parts: harness.procfs (figures of process trees), scenarios.py (runs, the
cleanup, component costs, S1-S6), report.py (tables, CSV, plots); every
daemon is mounted through the harness package, tests/harness,
which the tests use too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from .report import (costs_table, fmt_list, machine_description, plot,
                    results_table, targets, write_csv, write_plot_data)
from .scenarios import Bench, scenarios, warm_page_cache

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="ImageFolder root (required unless --replot)")
    p.add_argument("--joaderfs", default=str(REPO / "build" / "joaderfs"))
    p.add_argument("--workdir", help="mountpoints, logs, caches (required unless --replot)")
    p.add_argument("--out", required=True, help="folder for table.md, CSV, PNG")
    p.add_argument("--pidfile", help="append started process-group ids here")
    p.add_argument("--scenarios", default="C,S1,S2,S3,S4,S5,S6",
                   help="C = component costs, S1..S6 = the paper's scenarios")
    p.add_argument("--reps", type=int, default=3,
                   help="runs of S1, S2 and S3 at 4 jobs, per system")
    p.add_argument("--reps-other", type=int, default=1, help="runs of the other cases")
    p.add_argument("--s3-jobs", default="1,2,3,4,5,6")
    p.add_argument("--s4-samples", type=int, default=960)
    p.add_argument("--s6-overlaps", default="25,50,75,100")
    p.add_argument("--s4-rate", type=float, default=0,
                   help="fastest S4 job's target samples/s (0: 3/4 of S1's joaderfs "
                        "speed, at most 150)")
    p.add_argument("--no-w0", dest="w0", action="store_false",
                   help="skip the joaderfs num_workers=0 variant in S1-S3")
    p.add_argument("--no-batch-path", dest="batch_path", action="store_false",
                   help="skip the joaderfs batch-path variant of S3 at 4 jobs")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=os.cpu_count(),
                   help="DataLoader workers of each baseline job")
    p.add_argument("--jfs-workers", type=int, default=os.cpu_count(),
                   help="DataLoader workers of each joaderfs job")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--ram-cache", default="2G")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--run-timeout", type=float, default=600)
    p.add_argument("--stall-timeout", type=float, default=120)
    p.add_argument("--replot", action="store_true",
                   help="only render the plots again from s3.dat and s6.dat in --out")
    args = p.parse_args()
    if args.replot:
        print(", ".join(plot(Path(args.out))) or "nothing to plot")
        return
    if not args.data or not args.workdir:
        p.error("--data and --workdir are required")
    args.s3_jobs = [int(k) for k in args.s3_jobs.split(",")]
    args.s6_overlaps = [int(k) for k in args.s6_overlaps.split(",")]
    args.data = os.path.abspath(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    bench = Bench(args)
    bench.s4_rates = []
    bench.costs = {}

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    started = time.monotonic()
    try:
        print(f"warming the page cache with {args.data}...", flush=True)
        bench.dataset_size = warm_page_cache(args.data)
        which = set(s.strip() for s in args.scenarios.split(","))
        scenarios(bench, which)
    except KeyboardInterrupt:
        print("\ninterrupted: cleaning up", file=sys.stderr, flush=True)
        bench.reaper.cleanup()
        sys.exit(130)
    finally:
        bench.reaper.cleanup()
    elapsed = time.monotonic() - started

    table = results_table(bench)
    target_table, target_rows = targets(bench)
    write_csv(bench, out)
    with open(out / "targets.json", "w") as f:
        json.dump(target_rows, f, indent=1)
    if bench.costs:
        with open(out / "costs.json", "w") as f:
            json.dump(bench.costs, f, indent=1)
    write_plot_data(bench, out)
    plots = plot(out)
    errors = [(r.scenario, r.case, r.system, r.rep, e) for r in bench.results for e in r.errors]
    text = [f"# joaderfs vs PyTorch DataLoader ({time.strftime('%Y-%m-%d %H:%M')})", "",
            machine_description(args, bench.dataset_size) + f"; suite {elapsed / 60:.1f} min.",
            "", "Medians of the runs; per-job lists in job order (S2: per epoch).", "",
            table, "", target_table, ""]
    if bench.costs:
        text += ["Component costs (one job, cold mount, first " +
                 f"{min(bench.dataset_size, 500)} images for PIL):", "",
                 costs_table(bench.costs, args), ""]
    if bench.s4_rates:
        text += [f"S4 target speeds: {fmt_list(bench.s4_rates)} samples/s.", ""]
    if plots:
        text += [f"Plots: {', '.join(plots)}.", ""]
    if errors:
        text += ["Problems seen:", ""]
        text += [f"- {s} {c} {sy} rep {rep}: {e}" for s, c, sy, rep, e in errors]
        text += [""]
    report = "\n".join(text)
    (out / "table.md").write_text(report)
    print()
    print(report)


if __name__ == "__main__":
    main()
