"""The Grain dataset (joaderfs.grain_dataset) against joaderfs.jax_batches:
samples/s of RAM hits reaching a JAX device, and prints a Markdown table of
medians.

    .venv-test/bin/python -m bench.client.grain --data IMAGEFOLDER \\
        [--reps 3] [--epochs 2] [--size 64] [--batch 32] [--workers 2] \\
        [--buffer 1]

(run from the repository root, with python/ and tests/ on PYTHONPATH).
Mounts the dataset once, daemonized, with a RAM tier that holds every
decoded sample, and reads one epoch to fill it.  Then, for each rep and in
turn (interleaved, so that a drift of the machine's load spreads over every
mode), ``--epochs`` epochs per mode, each mode in a fresh job:

  jax_batches     joaderfs.jax_batches(job, batch) once per epoch, prefetch 2;
  grain           grain_dataset(job, batch_size=batch, epochs=E), one
                  iterator, in this process;
  grain mp K      the same with .mp_prefetch(K worker processes, each
                  --buffer elements ahead);
  grain samples   grain_dataset(job, epochs=E).batch(batch): per-sample
                  elements batched by Grain, in this process.

Every batch's images are put on JAX's default device and waited for, as a
training step would take them.  samples/s counts from the first batch to
the end (the start, e.g. the workers' spawn, is shown apart: time to the
first batch).  Always unmounts and reaps the daemon.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grain
import jax

import joaderfs
from harness.daemon import Mount

REPO = Path(__file__).resolve().parents[2]


def batches(mode: str, job: Path, args):
    """The batches' images of ``args.epochs`` epochs of ``job``."""
    if mode == "jax_batches":
        for _ in range(args.epochs):
            for images, _, _ in joaderfs.jax_batches(job, args.batch,
                                                     drop_last=False):
                yield images
        return
    if mode == "grain samples":
        dataset = joaderfs.grain_dataset(job, epochs=args.epochs).batch(
            args.batch)
    else:
        dataset = joaderfs.grain_dataset(job, batch_size=args.batch,
                                         epochs=args.epochs)
        if mode.startswith("grain mp"):
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(
                num_workers=args.workers,
                per_worker_buffer_size=args.buffer))
    iterator = iter(dataset)
    try:
        for batch in iterator:
            yield jax.device_put(batch["image"])
    finally:
        iterator.close()


def run(mode: str, job: Path, args) -> tuple[float, float, int]:
    """(seconds to the first batch, samples/s after it, samples)."""
    start = time.monotonic()
    first = None
    samples = 0
    for images in batches(mode, job, args):
        images.block_until_ready()
        if first is None:
            first = time.monotonic()
        else:
            samples += images.shape[0]
    end = time.monotonic()
    return first - start, samples / (end - first), samples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--joaderfs", default=str(REPO / "build" / "joaderfs"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--buffer", type=int, default=1,
                   help="per_worker_buffer_size of grain mp (Grain's default)")
    p.add_argument("--ram-cache", default="2G")
    args = p.parse_args()

    modes = ["jax_batches", "grain", f"grain mp {args.workers}",
             "grain samples"]
    starts: dict[str, list[float]] = {m: [] for m in modes}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="joaderfs-grain-bench-") as tmp:
        daemon = Mount(os.path.abspath(args.data), tmp,
                       {"ram_cache": args.ram_cache, "cache_dir": "none",
                        "size": str(args.size), "log_level": "info"},
                       defaults={}, binary=args.joaderfs)
        daemon.mount_timeout = 300
        try:
            daemon.start()
            mnt = Path(daemon.mnt)
            for _ in joaderfs.iter_batches(joaderfs.make_job(mnt, "fill"),
                                           256):
                pass
            decoded = joaderfs.read_stats(mnt)["decoded"]
            for rep in range(args.reps):
                for mode in modes:
                    job = joaderfs.make_job(
                        mnt, f"{mode.replace(' ', '-')}-{rep}")
                    start, rate, samples = run(mode, job, args)
                    starts[mode].append(start)
                    rates[mode].append(rate)
                    print(f"rep {rep} {mode:13s} first batch {start:.2f} s, "
                          f"{rate:.0f} samples/s", file=sys.stderr,
                          flush=True)
            if joaderfs.read_stats(mnt)["decoded"] != decoded:
                print("warning: decodes after the first epoch (RAM tier too "
                      "small?)", file=sys.stderr)
            epoch = joaderfs.job_status(job)["subset_size"]
        finally:
            daemon.cleanup()

    med = statistics.median
    base = med(rates["jax_batches"])
    print(f"RAM hits to a JAX device ({os.cpu_count()} cores, "
          f"{jax.devices()[0].platform}, size {args.size}, batch "
          f"{args.batch}, {args.epochs} epochs of {epoch} samples, medians "
          f"of {args.reps} interleaved runs):\n")
    print("| reader | samples/s | vs jax_batches | first batch s |")
    print("| --- | ---: | ---: | ---: |")
    for mode in modes:
        print(f"| {mode} | {med(rates[mode]):.0f} | "
              f"{med(rates[mode]) / base:.2f}x | {med(starts[mode]):.2f} |")


if __name__ == "__main__":
    main()
