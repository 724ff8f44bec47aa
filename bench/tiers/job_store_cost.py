#!/usr/bin/python3
"""What keeping jobs across restarts costs the read path (docs/design.md 2.7).

With a cache_dir the daemon writes the ids of every read reply to its job
store (RocksDB, WAL, no fsync) before the reply leaves. This reads epochs of
RAM hits (the worst case: no decode to hide the write) with one reader and
small read() sizes (many replies) on two mounts with a cache_dir, the same
in every way but that the baseline's job store cannot be opened (a file
stands where its folder goes, so the daemon logs it and keeps no jobs), and
prints a Markdown table of the median epoch time and the cost per reply.

Usage: scripts/bench.sh job-store [--samples 2000] [--size 32] [--runs 5]
       [--read-records 1]
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time

import harness


def job_store_path(cache_dir, source):
    """Where the daemon puts the job store: FNV-1a 64 of the source's
    absolute path (src/store/job_store.cc)."""
    h = 0xcbf29ce484222325
    for byte in os.path.normpath(os.path.abspath(source)).encode():
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(cache_dir, "%016x-jobs1" % h)


def epoch_seconds(m, job, read_bytes):
    fd = os.open(m.path("jobs", job, "next"), os.O_RDONLY)
    try:
        start = time.perf_counter()
        replies = 0
        while os.read(fd, read_bytes):
            replies += 1
        return time.perf_counter() - start, replies
    finally:
        os.close(fd)


LABELS = ["no job store", "job store"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--read-records", type=int, default=1,
                    help="records per read() (1: one reply per sample)")
    args = ap.parse_args()
    harness.require_binary()
    harness.become_subreaper()
    work = tempfile.mkdtemp(prefix="joaderfs-store-bench-")
    try:
        per_class = args.samples // 10
        layout = {"c%d" % c: ["i%04d.jpg" % i for i in range(per_class)]
                  for c in range(10)}
        source = harness.make_imagefolder(os.path.join(work, "src"), layout)
        read_bytes = args.read_records * harness.record_size(args.size ** 2 * 3)
        mounts = {}
        try:
            for label in LABELS:
                cache_dir = tempfile.mkdtemp(dir=work)
                if label == "no job store":
                    with open(job_store_path(cache_dir, source), "w"):
                        pass
                m = harness.Mount(source, tempfile.mkdtemp(dir=work),
                                   {"size": str(args.size), "ram_cache": "1G",
                                    "cache_dir": cache_dir, "log_level": "info"})
                mounts[label] = m
                m.start()
                os.mkdir(m.path("jobs", "bench"))
                for _ in range(2):  # decodes, then a first pass of RAM hits
                    epoch_seconds(m, "bench", 1 << 20)
                kept = "jobs are not kept" not in open(m.log_path).read()
                if kept != (label == "job store"):
                    raise SystemExit("%s: the job store is %s"
                                     % (label, "used" if kept else "unused"))
            # Alternating, so that both see the same load of the machine.
            times = {label: [] for label in LABELS}
            replies = 0
            for _ in range(args.runs):
                for label in LABELS:
                    seconds, replies = epoch_seconds(mounts[label], "bench", read_bytes)
                    times[label].append(seconds)
            results = {label: (statistics.median(times[label]), replies)
                       for label in LABELS}
        finally:
            for m in mounts.values():
                m.cleanup()
        base, _ = results["no job store"]
        store, _ = results["job store"]
        print("| mount | median epoch (s) | replies | per reply (us) |")
        print("| --- | --- | --- | --- |")
        for label, (seconds, n) in results.items():
            print("| %s | %.3f | %d | %.1f |" % (label, seconds, n, 1e6 * seconds / n))
        print("\nratio %.2f; the store adds %.1f us per reply (%d samples, size %d, "
              "%d record(s) per read, median of %d epochs)"
              % (store / base, 1e6 * (store - base) / replies, args.samples,
                 args.size, args.read_records, args.runs))
    finally:
        shutil.rmtree(work, True)


if __name__ == "__main__":
    main()
