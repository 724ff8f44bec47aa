#!/usr/bin/env python3
"""Sharing on a busy machine: decodes per distinct sample of N jobs that
read together while K busy processes compete for the cores.

Training machines are never quiet: the training processes, their data
threads and other users all want the cores, and a job's reader is
descheduled now and then.  For each RAM fraction, job mix and K, this
mounts joaderfs the way users do (daemonized), starts K busy loops (each a
process spinning on one core, at the jobs' priority), one reader process
per job (each reads one epoch of its own `/jobs/<id>/next`), and prints
one row: decodes per distinct sample, aggregate samples/s and the daemon's
CPU per delivered sample, medians of --reps runs.

Job mixes:
  identical    N jobs over the whole dataset (the optimum: 1.00)
  overlapping  N jobs over windows of the dataset, each 3/4 of it, shifted
               evenly, so that every pair overlaps (their union is the
               whole dataset; the optimum is again 1.00)

Targets (issue 46): identical jobs at K=4 decode at most 1.05 per
distinct, and overlapping ones stay within 10 % of their K=0 figure.

Run it through scripts/bench.sh:
  scripts/bench.sh contention --images 2000 --jobs 2,4 --busy 0,2,4
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench.processes import end_processes
from bench.scale.decode_once import base_set_bytes, read_json, record_bytes
from harness.daemon import Mount

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JOADERFS_BUILD", os.path.join(ROOT, "build"))
SPIN = "while True: pass"


def subsets(mix, jobs, images):
    """The `subset=` of each job of the mix ("" for the whole dataset)."""
    if mix == "identical":
        return [""] * jobs
    span = images * 3 // 4
    step = (images - span) // max(jobs - 1, 1)
    return [" subset=range:%d-%d" % (i * step, i * step + span - 1) for i in range(jobs)]


def run_once(args, source, fraction, mix, jobs, busy):
    size = args.size
    # The RAM tier holds base images (mount option base=): the fraction is
    # of their bytes.
    ram = max(1 << 20, int(base_set_bytes(source, args.base) * fraction))
    workdir = tempfile.mkdtemp(prefix="jfs-contention-")
    opts = {"ram_cache": str(ram), "size": str(size), "base": str(args.base), "seed": "7",
            "cache_dir": "none",
            "log_level": "info", "log": os.path.join(args.out, "daemon.log")}
    daemon = Mount(source, workdir, opts, defaults={}, binary=args.joaderfs)
    daemon.mount_timeout = 300
    mnt = daemon.mnt
    spinners, readers = [], []
    try:
        daemon.start()
        names = ["j%d" % i for i in range(jobs)]
        for name, subset in zip(names, subsets(mix, jobs, args.images)):
            os.mkdir(os.path.join(mnt, "jobs", name))
            with open(os.path.join(mnt, "jobs", name, "spec"), "w") as f:
                f.write("epochs=1" + subset)
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
        time.sleep(0.5)  # the spinners are running before the jobs start
        # The readers open their streams, then begin together: what is
        # measured is their descheduling while they read, not how long a
        # process takes to start beside busy ones (tens of ms, more than
        # the time a few per cent of this small set lasts).
        readers = [subprocess.Popen(
            [sys.executable, "-m", "bench.scale.reader",
             os.path.join(mnt, "jobs", name, "next"), str(record_bytes(size)), "0", "together"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for name in names]
        for r in readers:
            r.stdout.readline()
        cpu0 = daemon.cpu()
        t0 = time.monotonic()
        for r in readers:
            r.stdin.write("go\n")
            r.stdin.close()
        delivered = sum(int(r.stdout.read()) for r in readers)
        for r in readers:
            r.wait()
        wall = time.monotonic() - t0
        cpu = daemon.cpu() - cpu0
        stats = read_json(os.path.join(mnt, "stats"))
    finally:
        end_processes(readers + spinners)
        daemon.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"decodes/distinct": stats["decoded"] / args.images,
            "samples/s": delivered / wall,
            "cpu ms/sample": 1000 * cpu / max(delivered, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--base", type=int, default=256)
    p.add_argument("--fractions", default="0.05,0.1")
    p.add_argument("--mixes", default="identical,overlapping")
    p.add_argument("--jobs", default="2,4", help="job counts, comma-separated")
    p.add_argument("--busy", default="0,2,4", help="busy process counts (K)")
    p.add_argument("--reps", type=int, default=3, help="runs per row (medians)")
    p.add_argument("--data", help="dataset folder (generated if missing)")
    p.add_argument("--out", default=tempfile.gettempdir())
    p.add_argument("--joaderfs", default=os.path.join(BUILD, "joaderfs"),
                   help="the daemon (another build, to compare)")
    args = p.parse_args()
    data = args.data or os.path.join(BUILD, "bench-data", "contention-%d" % args.images)
    if not os.path.isdir(data):
        os.makedirs(os.path.dirname(data), exist_ok=True)
        subprocess.run([os.path.join(BUILD, "joaderfs-gendata"), data, "--images",
                        str(args.images), "--classes", "20"], check=True)
    columns = ["ram", "mix", "jobs", "K", "decodes/distinct", "samples/s", "cpu ms/sample"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for fraction in [float(f) for f in args.fractions.split(",")]:
        for mix in args.mixes.split(","):
            for jobs in [int(j) for j in args.jobs.split(",")]:
                for busy in [int(k) for k in args.busy.split(",")]:
                    runs = [run_once(args, data, fraction, mix, jobs, busy)
                            for _ in range(args.reps)]
                    cells = ["%d%%" % round(fraction * 100), mix, str(jobs), str(busy)]
                    for c in columns[4:]:
                        cells.append("%.2f" % statistics.median(r[c] for r in runs))
                    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
