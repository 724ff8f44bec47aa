#!/usr/bin/python3
"""Where the CPU of one job's cold epoch goes, client side included: the
README's loader (num_workers=0, the dataset's prefetch thread), the same
without prefetch, and num_workers=2; per process and thread, from /proc.

    PYTHONPATH=.:tests:python python3 -m bench.client.cold_profile \\
        --data IMAGEFOLDER --joaderfs build/joaderfs [--reps 3] [--perf DIR]
        [--step-ms MS] [--epochs N]

Each run mounts afresh (cold RAM tier, cache_dir=none, size=224) and reads
one epoch of a job with size=224 crop=random flip=0.5 through
DataLoader(JobDataset(job, batch_size=64), batch_size=None, ...) in a child
process, as bench/client/peers.py does.  The child reports the CPU of its
main thread, of its other threads (the prefetch thread; torch's idle pools)
and of each DataLoader worker (from its start: start-up included); the
daemon's over the epoch beside them.  With --perf DIR, `perf record -g` of
the child (workers included) for each setting's first run, and the shares
by DSO (`perf report --sort dso`) printed.  --step-ms: a training step
stand-in after each batch, a sleep (it releases the GIL, as a GPU step's
wait does), to see reading overlap the step; --epochs N times the last of
N epochs (N=2: RAM hits).  Medians of --reps, interleaved.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = {"w0": (0, 2), "w0-noprefetch": (0, 0), "w2": (2, 2)}
BATCH, SIZE = 64, 224
TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def child(job: str, workers: int, prefetch: int, step_ms: float,
          epochs: int) -> None:
    from torch.utils.data import DataLoader
    from joaderfs import JobDataset
    loader = DataLoader(JobDataset(job, batch_size=BATCH, prefetch=prefetch),
                        batch_size=None, num_workers=workers,
                        persistent_workers=workers > 0)
    me = os.getpid()
    print("ready", flush=True)
    sys.stdin.readline()
    for epoch in range(epochs):
        if epoch and epoch == epochs - 1:
            print("timed", flush=True)  # the parent reads the daemon's CPU
            sys.stdin.readline()
        main0, all0 = time.thread_time(), proc_cpu(me)
        workers0 = {p: proc_cpu(p) for p in children(me)}
        t0 = time.monotonic()
        samples = 0
        for images, labels, ids in loader:
            samples += len(ids)
            if step_ms:
                time.sleep(step_ms / 1e3)
    seconds = time.monotonic() - t0
    main, total = time.thread_time() - main0, proc_cpu(me) - all0
    # A worker started in the epoch counts from its start.
    workers_cpu = [proc_cpu(p) - workers0.get(p, 0.0) for p in children(me)]
    print(json.dumps({"samples": samples, "seconds": seconds, "main": main,
                      "other_threads": max(0.0, total - main),
                      "workers": workers_cpu}), flush=True)
    os._exit(0)


def run(args, setting: str, perf_out: str | None) -> dict:
    from harness.daemon import Mount
    import joaderfs
    workers, prefetch = SETTINGS[setting]
    with tempfile.TemporaryDirectory(prefix="cold-profile-") as work:
        daemon = Mount(os.path.abspath(args.data), work,
                       {"ram_cache": "4G", "cache_dir": "none",
                        "size": str(SIZE), "log_level": "info"},
                       defaults={}, binary=args.joaderfs)
        daemon.mount_timeout = 300
        daemon.start()
        perf = None
        try:
            job = joaderfs.make_job(daemon.mnt, "cold", {
                "size": SIZE, "crop": "random", "flip": 0.5, "seed": 7})
            p = subprocess.Popen(
                [sys.executable, "-m", "bench.client.cold_profile", "--child",
                 "--job", str(job), "--workers", str(workers),
                 "--prefetch", str(prefetch), "--step-ms", str(args.step_ms),
                 "--epochs", str(args.epochs)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("the reader did not get ready")
            if perf_out:
                perf = subprocess.Popen(
                    ["perf", "record", "-q", "-g", "-F", "999",
                     "-p", str(p.pid), "-o", perf_out],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            d0 = proc_cpu(daemon.proc.pid)
            p.stdin.write("go\n")
            p.stdin.flush()
            if args.epochs > 1:
                if p.stdout.readline().strip() != "timed":
                    raise RuntimeError("the reader died")
                d0 = proc_cpu(daemon.proc.pid)
                p.stdin.write("go\n")
                p.stdin.flush()
            result = json.loads(p.stdout.readline())
            result["daemon"] = proc_cpu(daemon.proc.pid) - d0
            p.wait(timeout=60)
        finally:
            if perf:
                perf.send_signal(2)
                perf.wait(timeout=120)
            daemon.cleanup()
    return result


def dso_shares(path: str) -> str:
    out = subprocess.run(["perf", "report", "-i", path, "--stdio",
                          "--no-children", "--sort", "comm,dso", "-g", "none",
                          "--percent-limit", "2"],
                         capture_output=True, text=True).stdout
    return "\n".join(l for l in out.splitlines() if l and not l.startswith("#"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data")
    p.add_argument("--joaderfs", default="build/joaderfs")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--perf", help="folder for perf.data files")
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    p.add_argument("--prefetch", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.job, args.workers, args.prefetch, args.step_ms,
              args.epochs)
    settings = args.settings.split(",")
    runs = collections.defaultdict(list)
    for rep in range(args.reps):
        for setting in settings:
            perf_out = (os.path.join(args.perf, f"{setting}.data")
                        if args.perf and rep == 0 else None)
            r = run(args, setting, perf_out)
            runs[setting].append(r)
            print(f"rep {rep} {setting}: {json.dumps(r)}", file=sys.stderr,
                  flush=True)
    print(f"Epoch {args.epochs} of one job, CPU ms per sample, medians of "
          f"{args.reps} (step {args.step_ms:g} ms a batch; load average "
          f"{os.getloadavg()[0]:.1f}):\n")
    print("| setting | samples/s | main thread | other threads (prefetch) "
          "| workers | daemon | total |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for setting in settings:
        def med(f):
            return statistics.median(f(r) for r in runs[setting])
        n = runs[setting][0]["samples"]
        cells = [med(lambda r: r["samples"] / r["seconds"]),
                 med(lambda r: r["main"] / n * 1e3),
                 med(lambda r: r["other_threads"] / n * 1e3),
                 med(lambda r: sum(r["workers"]) / n * 1e3),
                 med(lambda r: r["daemon"] / n * 1e3),
                 med(lambda r: (r["main"] + r["other_threads"] +
                                sum(r["workers"]) +
                                r["daemon"]) / n * 1e3)]
        print(f"| {setting} | {cells[0]:.0f} | " +
              " | ".join(f"{c:.3f}" for c in cells[1:]) + " |")
    if args.perf:
        for setting in settings:
            print(f"\nperf, {setting} (reader process and its workers):")
            print(dso_shares(os.path.join(args.perf, f"{setting}.data")))


if __name__ == "__main__":
    main()
