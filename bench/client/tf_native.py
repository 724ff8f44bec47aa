#!/usr/bin/python3
"""TensorFlow input pipelines over joaderfs against tf.data decoding the
JPEGs itself, for 1 job and for 4 concurrent jobs, and prints a Markdown
table of medians.

    scripts/bench.sh tf --data IMAGEFOLDER [--reps 3] [--size 224] [--batch 128]

Modes, each a training process per job reading one epoch of random crops
(crop=random flip=0.5, size x size) in batches, with no training step:

  native      format=tfrecord: tf.data.TFRecordDataset(next) -> parse ->
              decode_raw -> reshape -> batch -> prefetch (no joaderfs import);
  tf_dataset  joaderfs.tf_dataset(job, batch) over the plain stream (one
              Python call per batch);
  tf.data     tf.data over the ImageFolder: read_file,
              sample_distorted_bounding_box + decode_and_crop_jpeg, resize,
              random flip, AUTOTUNE parallelism, batch, prefetch.

Each rep of each mode with joaderfs mounts the dataset afresh, daemonized
(cold RAM tier, cache_dir=none), so that the decodes count. CPU is
user+sys of the job processes from the start of their epoch (after
TensorFlow's import and the pipeline's construction) to its end, plus the
daemon's over the same span, per sample. Wall time is from the start signal
to the last job's end. Always unmounts and reaps the daemon.
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

from bench.client.peers import image_folder, tf_random_resized_crop
from bench.processes import end_processes

MODES = ("native", "tf_dataset", "tf.data")


def job_main(args) -> None:
    """One training process: builds its pipeline, says `ready`, waits for
    `go`, reads one epoch and prints its figures as JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    size, batch = args.size, args.batch
    if args.mode == "native":
        def parse(serialized):
            example = tf.io.parse_single_example(serialized, {
                "image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
            image = tf.reshape(tf.io.decode_raw(example["image/encoded"],
                                                tf.uint8), [size, size, 3])
            return image, example["image/class/label"]
        dataset = (tf.data.TFRecordDataset(args.job + "/next")
                   .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
                   .batch(batch).prefetch(tf.data.AUTOTUNE))
    elif args.mode == "tf_dataset":
        dataset = joaderfs.tf_dataset(args.job, batch)
    else:
        files, labels = image_folder(args.data)
        load = tf_random_resized_crop(tf, size)

        dataset = (tf.data.Dataset.from_tensor_slices((files, labels))
                   .shuffle(len(files))
                   .map(load, num_parallel_calls=tf.data.AUTOTUNE)
                   .batch(batch).prefetch(tf.data.AUTOTUNE))
    print("ready", flush=True)
    sys.stdin.readline()
    c0, t0 = time.process_time(), time.monotonic()
    samples = 0
    for images, _ in dataset:
        samples += int(images.shape[0])
    print(json.dumps({"samples": samples, "cpu_s": time.process_time() - c0,
                      "seconds": time.monotonic() - t0}), flush=True)


def run_jobs(args, mode: str, jobs: int, mnt: Path | None) -> list[dict]:
    """Starts `jobs` processes of `mode`, lets them go together, returns
    their figures."""
    procs = []
    try:
        for j in range(jobs):
            cmd = [sys.executable, "-m", "bench.client.tf_native", "--job-main",
                   "--mode", mode, "--size", str(args.size),
                   "--batch", str(args.batch), "--data", args.data]
            if mnt is not None:
                spec = {"size": args.size, "crop": "random", "flip": 0.5}
                if mode == "native":
                    spec["format"] = "tfrecord"
                job = joaderfs.make_job(mnt, f"{mode.replace('.', '-')}-{j}", spec)
                cmd += ["--job", str(job)]
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True))
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {mode} job did not get ready")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            results.append(json.loads(p.stdout.readline()))
            if p.wait(timeout=900):
                raise RuntimeError(f"a {mode} job exited with {p.returncode}")
        return results
    finally:
        end_processes(procs)


def one_run(args, mode: str, jobs: int, workdir: Path) -> dict:
    """Figures of one rep: samples, wall seconds, CPU seconds (jobs and
    daemon)."""
    daemon = None
    mnt = None
    if mode != "tf.data":
        daemon = Mount(os.path.abspath(args.data), str(workdir),
                       {"ram_cache": args.ram_cache, "cache_dir": "none",
                        "size": str(args.size), "log_level": "info"},
                       defaults={}, binary=args.joaderfs)
        daemon.mount_timeout = 300
        daemon.start()
        mnt = Path(daemon.mnt)
    try:
        d0 = daemon.cpu() if daemon else 0.0
        results = run_jobs(args, mode, jobs, mnt)
        wall = max(r["seconds"] for r in results)
        daemon_cpu = (daemon.cpu() - d0) if daemon else 0.0
    finally:
        if daemon:
            daemon.cleanup()
    samples = sum(r["samples"] for r in results)
    return {"samples": samples, "wall": wall,
            "job_cpu": sum(r["cpu_s"] for r in results),
            "daemon_cpu": daemon_cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--joaderfs", default=str(
        Path(__file__).resolve().parents[2] / "build" / "joaderfs"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--jobs", default="1,4")
    p.add_argument("--ram-cache", default="1G")
    p.add_argument("--job-main", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.job_main:
        job_main(args)
        return
    counts = [int(n) for n in args.jobs.split(",")]
    figures: dict[tuple[int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="joaderfs-bench-tf-") as tmp:
        for rep in range(args.reps):
            for jobs in counts:
                for mode in MODES:
                    workdir = Path(tmp) / f"{mode}-{jobs}-{rep}"
                    workdir.mkdir()
                    f = one_run(args, mode, jobs, workdir)
                    figures.setdefault((jobs, mode), []).append(f)
                    print(f"rep {rep} jobs {jobs} {mode:10s} "
                          f"{f['samples'] / f['wall']:.0f} samples/s, "
                          f"{1000 * (f['job_cpu'] + f['daemon_cpu']) / f['samples']:.2f} "
                          f"CPU ms/sample", file=sys.stderr, flush=True)
    med = statistics.median
    print(f"TensorFlow input pipelines ({os.cpu_count()} cores, size "
          f"{args.size}, crop=random flip=0.5, batch {args.batch}, "
          f"{figures[(counts[0], MODES[0])][0]['samples'] // counts[0]} "
          f"samples an epoch per job, medians of {args.reps}):\n")
    print("| jobs | pipeline | samples/s (all jobs) | CPU ms / sample "
          "(jobs + daemon) | of which daemon | vs tf.data samples/s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for jobs in counts:
        rate = {m: med(f["samples"] / f["wall"] for f in figures[(jobs, m)])
                for m in MODES}
        for mode in MODES:
            fs = figures[(jobs, mode)]
            cpu = med(1000 * (f["job_cpu"] + f["daemon_cpu"]) / f["samples"]
                      for f in fs)
            daemon = med(1000 * f["daemon_cpu"] / f["samples"] for f in fs)
            print(f"| {jobs} | {mode} | {rate[mode]:.0f} | {cpu:.2f} | "
                  f"{daemon:.2f} | {rate[mode] / rate['tf.data']:.2f}x |")


if __name__ == "__main__":
    main()
