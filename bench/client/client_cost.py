#!/usr/bin/python3
"""Client CPU per sample of reading RAM hits: raw reads, the per-sample path
and the batch path of the Python client, in one run, and prints a Markdown
table of medians.

    scripts/bench.sh client-cost --data IMAGEFOLDER [--reps 5] [--size 224] [--batch 32]

Mounts the dataset once, daemonized (as admins run it; this process is a
child subreaper so that it can reap the daemon), with a RAM tier that holds
every decoded sample, and reads one epoch to fill it.  Then, for each rep and
in turn, one epoch per mode, each in a fresh job (so every read is a RAM
hit):

  raw         1 MiB readinto calls into one buffer, in this process;
  sample wK   bench/throughput/job.py: JobDataset per sample under DataLoader(batch_size=
              B, num_workers=K), each batch copied into a staging buffer;
  batch wK    job.py --batch-path: JobDataset(batch_size=B) under
              DataLoader(batch_size=None, num_workers=K), the same copy.

CPU is user+sys of the reader and its DataLoader workers from the start of
its epoch (job.py's start signal) to its end, per sample; the daemon's CPU
over the same span is shown beside it.  Always unmounts and reaps the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import joaderfs
from harness.daemon import Mount

from bench.processes import end_processes

REPO = Path(__file__).resolve().parents[2]


def mount(binary: str, source: str, workdir: Path, options: dict[str, str]) -> Mount:
    """A daemonized joaderfs through the daemon harness, logging at info
    level; the caller ends it with cleanup()."""
    m = Mount(source, str(workdir), dict(options, log_level="info"),
              defaults={}, binary=binary)
    m.mount_timeout = 300  # scanning a large dataset
    try:
        return m.start()
    except BaseException:
        m.cleanup()
        raise


def raw_epoch(job: Path) -> tuple[float, int]:
    """(CPU seconds, samples) of one epoch read with 1 MiB reads."""
    buf = bytearray(1 << 20)
    total = 0
    c0 = time.process_time()
    with open(job / "next", "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return time.process_time() - c0, total


def job_epoch(job: Path, args, workers: int, batch_path: bool,
              workdir: Path) -> tuple[float, int, float]:
    """(CPU seconds incl. workers, samples, samples/s) of bench/throughput/job.py."""
    result = workdir / f"{job.name}.json"
    cmd = [sys.executable, "-m", "bench.throughput.job", "--system", "joaderfs",
           "--job-dir", str(job), "--batch", str(args.batch),
           "--workers", str(workers), "--size", str(args.size),
           "--result", str(result)] + (["--batch-path"] if batch_path else [])
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{job.name} did not get ready")
        p.stdin.write("go\n")
        p.stdin.flush()
        if p.wait(timeout=600):
            raise RuntimeError(f"{job.name} exited with {p.returncode}")
    finally:
        end_processes([p])
    res = json.loads(result.read_text())
    n = sum(e["samples"] for e in res["epochs"])
    return res["cpu_s"], n, n / sum(e["seconds"] for e in res["epochs"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--joaderfs", default=str(REPO / "build" / "joaderfs"))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2,
                   help="the DataLoader workers of the wK modes besides w0")
    p.add_argument("--ram-cache", default="2G")
    args = p.parse_args()

    modes = [("raw", None, False)] + [
        (f"{path} w{w}", w, path == "batch")
        for path in ("sample", "batch") for w in sorted({0, args.workers})]
    cpu_ms: dict[str, list[float]] = {m[0]: [] for m in modes}
    daemon_ms: dict[str, list[float]] = {m[0]: [] for m in modes}
    rates: dict[str, list[float]] = {m[0]: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="joaderfs-client-cost-") as tmp:
        workdir = Path(tmp)
        daemon = mount(args.joaderfs, os.path.abspath(args.data), workdir,
                       {"ram_cache": args.ram_cache, "cache_dir": "none",
                        "size": str(args.size)})
        mnt = Path(daemon.mnt)
        try:
            raw_epoch(joaderfs.make_job(mnt, "fill"))
            decoded = joaderfs.read_stats(mnt)["decoded"]
            for rep in range(args.reps):
                for name, workers, batch_path in modes:
                    # job.py makes its job itself.
                    job = joaderfs.job_dir(
                        mnt, f"{name.replace(' ', '-')}-{rep}")
                    d0, t0 = daemon.cpu(), time.monotonic()
                    if workers is None:
                        job.mkdir()
                        cpu, _ = raw_epoch(job)
                        n = joaderfs.job_status(mnt, job.name)["subset_size"]
                        rate = n / (time.monotonic() - t0)
                    else:
                        cpu, n, rate = job_epoch(job, args, workers,
                                                 batch_path, workdir)
                    cpu_ms[name].append(1000 * cpu / n)
                    daemon_ms[name].append(1000 * (daemon.cpu() - d0) / n)
                    rates[name].append(rate)
                    print(f"rep {rep} {name:9s} {1000 * cpu / n:.3f} ms/sample, "
                          f"{rate:.0f} samples/s", file=sys.stderr, flush=True)
            stats = joaderfs.read_stats(mnt)
            if stats["decoded"] != decoded:
                print(f"warning: {stats['decoded'] - decoded} decodes after the "
                      f"first epoch (RAM tier too small?)", file=sys.stderr)
        finally:
            daemon.cleanup()

    med = statistics.median
    print(f"Client CPU per sample, RAM hits ({os.cpu_count()} cores, size "
          f"{args.size}, batch {args.batch}, {n} samples an epoch, medians of "
          f"{args.reps} epochs per mode):\n")
    print("| reader | client CPU ms / sample (incl. workers) | daemon CPU ms / "
          "sample | samples/s | vs per-sample path |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, workers, _ in modes:
        same = f"sample w{workers}" if workers is not None else None
        ratio = (f"{med(cpu_ms[same]) / med(cpu_ms[name]):.1f}x less"
                 if name.startswith("batch") else "")
        print(f"| {name} | {med(cpu_ms[name]):.3f} | {med(daemon_ms[name]):.3f} "
              f"| {med(rates[name]):.0f} | {ratio} |")


if __name__ == "__main__":
    main()
