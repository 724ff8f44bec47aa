#!/usr/bin/python3
"""joaderfs against the other data loaders a user would pick, side by side,
and prints a Markdown table of medians.

    scripts/bench.sh peers [--data NAME=IMAGEFOLDER ...] [--reps 3]
                           [--loaders a,b,...] [--images 1000]

Every loader does the same work: RandomResizedCrop(224, scale 0.08-1,
ratio 3/4-4/3) and a horizontal flip (p=0.5) of every image, batches of 64,
uint8 pixels, 2 workers or threads:

  torch-pil     torch DataLoader over torchvision's ImageFolder, PIL decode,
                RandomResizedCrop + RandomHorizontalFlip + PILToTensor,
                num_workers=2, persistent workers;
  torch-tvio    the same DataLoader, decoding with torchvision.io.decode_jpeg
                and the same transforms on the tensor (antialiased); both
                torch loaders run on Debian's torch 1.13 / torchvision 0.14
                (/usr/bin/python3: PyPI's torchvision needs CUDA torch);
  tf-autotune   tf.data: read_file, sample_distorted_bounding_box +
                decode_and_crop_jpeg, resize, random flip, batch, prefetch,
                num_parallel_calls=AUTOTUNE;
  tf-fixed      the same with autotune off, 2 parallel calls, a private
                thread pool of 2, prefetch 2;
  dali-cpu      DALI's CPU pipeline (device_id=None, num_threads=2):
                readers.file (shuffle_after_epoch, per-job seed,
                pad_last_batch so that an epoch is exactly the dataset) ->
                decoders.image_random_crop -> resize -> flip;
  spdl          SPDL's pipeline: 2 threads decode through FFmpeg with a
                crop, scale and hflip filter, batches stacked in numpy;
  joaderfs      the README's loader: a fresh mount (cold RAM tier,
                cache_dir=none), jobs with size=224 crop=random flip=0.5,
                DataLoader(JobDataset(job, batch_size=64), batch_size=None,
                num_workers=0): the training process reads the batches, a
                thread of the dataset's reading 2 ahead (its 2 decode
                threads are the daemon's; a worker would only copy);
  joaderfs-w2   the same with num_workers=2, persistent workers;
  joaderfs-disk the README's loader over a mount with the disk tier and
                job store in a fresh cache_dir, as the daemon's defaults
                have them: a cold epoch also writes every base to disk;
  joaderfs-ram10 the same with the RAM tier at a tenth of the decoded set
                (the base images' bytes at the default base=256, from the
                JPEG headers, as bench.sh train and contention size it),
                the regime of a real dataset: epoch 2 is served mostly by
                the disk tier.

Scenarios: one job reading 2 epochs (epoch 1 and epoch 2 timed apart) and 4
concurrent jobs reading 1 epoch each (aggregate samples/s). Each job is its
own process; its CPU is that of its process tree (workers included, read
from /proc at its epoch boundaries, after imports and the pipeline's
construction), plus, for joaderfs, the daemon's over the same span. Runs
interleave the loaders (rep, dataset, scenario, loader), medians of --reps
with the min-max.

Before timing, each loader runs once with checks: every batch is 64 (the
last one of an epoch the rest) x 224 x 224 x 3 uint8, each epoch's label
multiset equals the dataset's, and the crops differ between the epochs
(under 5 % of epoch 2's images, hashed, appear in epoch 1).

The peers come from bench/requirements-peers.txt, installed by bench.sh in
build/venv-peers over the test venv (torch, TensorFlow, Pillow).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.procfs import proc_cpu, tree_cpu

from bench.processes import end_processes

# The README's loader first: the table's rows come in this order.
LOADERS = ("joaderfs", "joaderfs-w2", "joaderfs-disk", "joaderfs-ram10",
           "torch-pil", "torch-tvio", "tf-autotune", "tf-fixed", "dali-cpu",
           "spdl")
SIZE, BATCH, WORKERS = 224, 64, 2
# The daemon's default base=, at which joaderfs-ram10 measures the decoded set.
BASE = 256
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)


def image_folder(root: str) -> tuple[list[str], list[int]]:
    """(files, labels) of an ImageFolder, classes in sorted order."""
    classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
    files, labels = [], []
    for label, name in enumerate(classes):
        for f in sorted((Path(root) / name).iterdir()):
            files.append(str(f))
            labels.append(label)
    return files, labels


# -- the loaders: each an iterable of (images, labels) per epoch ------------

def torch_pil(args):
    import torch
    import torchvision.transforms as T
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder
    folder = ImageFolder(args.data, transform=T.Compose([
        T.RandomResizedCrop(SIZE, scale=SCALE, ratio=RATIO),
        T.RandomHorizontalFlip(), T.PILToTensor()]))
    return DataLoader(folder, batch_size=BATCH, shuffle=True,
                      num_workers=WORKERS, persistent_workers=True,
                      generator=torch.Generator().manual_seed(args.seed))


def torch_tvio(args):
    import torch
    import torchvision.io as io
    import torchvision.transforms as T
    from torch.utils.data import DataLoader, Dataset
    files, labels = image_folder(args.data)
    transform = T.Compose([T.RandomResizedCrop(SIZE, scale=SCALE, ratio=RATIO,
                                               antialias=True),
                           T.RandomHorizontalFlip()])

    class Files(Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            image = io.decode_jpeg(io.read_file(files[i]),
                                   mode=io.ImageReadMode.RGB)
            return transform(image), labels[i]

    return DataLoader(Files(), batch_size=BATCH, shuffle=True,
                      num_workers=WORKERS, persistent_workers=True,
                      generator=torch.Generator().manual_seed(args.seed))


def tf_random_resized_crop(tf, size: int):
    """tf.data's map function for (path, label): the usual ImageNet
    pipeline's RandomResizedCrop(size) + flip, decoding only the crop
    window (decode_and_crop_jpeg); also bench.client.tf_native's."""
    def load(path, label):
        data = tf.io.read_file(path)
        begin, crop, _ = tf.image.sample_distorted_bounding_box(
            tf.io.extract_jpeg_shape(data), tf.zeros([0, 0, 4]),
            area_range=SCALE, aspect_ratio_range=RATIO, max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
        image = tf.io.decode_and_crop_jpeg(data, window, channels=3)
        image = tf.image.resize(image, [size, size])
        image = tf.image.random_flip_left_right(image)
        return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8), label

    return load


def tf_data(args, fixed: bool):
    import tensorflow as tf
    files, labels = image_folder(args.data)
    load = tf_random_resized_crop(tf, SIZE)
    calls = WORKERS if fixed else tf.data.AUTOTUNE
    dataset = (tf.data.Dataset.from_tensor_slices((files, labels))
               .shuffle(len(files), seed=args.seed,
                        reshuffle_each_iteration=True)
               .map(load, num_parallel_calls=calls)
               .batch(BATCH).prefetch(2 if fixed else tf.data.AUTOTUNE))
    if fixed:
        options = tf.data.Options()
        options.autotune.enabled = False
        options.threading.private_threadpool_size = WORKERS
        dataset = dataset.with_options(options)
    return dataset


class DaliEpochs:
    """One exact epoch per iteration of a DALI CPU pipeline."""

    def __init__(self, args):
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(batch_size=BATCH, num_threads=WORKERS, device_id=None,
                      seed=args.seed, prefetch_queue_depth=2)
        def pipe():
            jpegs, labels = fn.readers.file(
                file_root=args.data, shuffle_after_epoch=True,
                pad_last_batch=True, seed=args.seed, name="reader")
            images = fn.decoders.image_random_crop(
                jpegs, device="cpu", output_type=types.RGB,
                random_area=list(SCALE), random_aspect_ratio=list(RATIO),
                num_attempts=10)
            images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
            images = fn.flip(images, horizontal=fn.random.coin_flip())
            return images, labels

        self.pipe = pipe()
        self.pipe.build()
        self.size = self.pipe.epoch_size("reader")

    def __iter__(self):
        steps = math.ceil(self.size / BATCH)
        for step in range(steps):
            images, labels = self.pipe.run()
            images, labels = images.as_array(), labels.as_array().reshape(-1)
            # pad_last_batch repeats the last sample to fill the batch.
            keep = self.size - step * BATCH
            yield images[:keep], labels[:keep]


class SpdlEpochs:
    """SPDL's pipeline, rebuilt per epoch over a fresh shuffle: 2 threads
    decode (FFmpeg, cropping, scaling and flipping in its filter graph)."""

    def __init__(self, args):
        import numpy as np
        import spdl.io
        from spdl.pipeline import PipelineBuilder
        self.np, self.io, self.builder = np, spdl.io, PipelineBuilder
        self.files, self.labels = image_folder(args.data)
        self.rng = random.Random(args.seed)
        self.epoch = 0

    def load(self, item):
        path, label, seed = item
        rng = random.Random(seed)
        with open(path, "rb") as f:
            data = f.read()
        packets = self.io.demux_image(data)
        width, height = packets.codec.width, packets.codec.height
        box = crop_box(width, height, rng)
        flip = ",hflip" if rng.random() < 0.5 else ""
        left, top, w, h = box
        frames = self.io.decode_packets(
            packets, filter_desc=f"crop={w}:{h}:{left}:{top},"
            f"scale={SIZE}:{SIZE}:flags=bilinear{flip},format=rgb24")
        image = self.io.to_numpy(self.io.convert_frames(frames))
        return image.reshape(SIZE, SIZE, 3), label

    def collate(self, items):
        return (self.np.stack([i[0] for i in items]),
                self.np.array([i[1] for i in items]))

    def __iter__(self):
        order = list(range(len(self.files)))
        self.rng.shuffle(order)
        seeds = [self.rng.getrandbits(63) for _ in order]
        source = [(self.files[i], self.labels[i], s)
                  for i, s in zip(order, seeds)]
        pipeline = (self.builder().add_source(source)
                    .pipe(self.load, concurrency=WORKERS)
                    .aggregate(BATCH, drop_last=False)
                    .pipe(self.collate)
                    .add_sink(4)
                    .build(num_threads=WORKERS))
        with pipeline.auto_stop():
            yield from pipeline
        self.epoch += 1


def crop_box(width: int, height: int, rng: random.Random):
    """torchvision's RandomResizedCrop.get_params: (left, top, w, h)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    w, h = width, height
    if width / height < RATIO[0]:
        h = round(width / RATIO[0])
    elif width / height > RATIO[1]:
        w = round(height * RATIO[1])
    return (width - w) // 2, (height - h) // 2, w, h


def joaderfs_loader(args, workers: int):
    from torch.utils.data import DataLoader
    from joaderfs import JobDataset
    return DataLoader(JobDataset(args.job, batch_size=BATCH), batch_size=None,
                      num_workers=workers, persistent_workers=workers > 0)


def make_loader(args):
    return {"torch-pil": torch_pil, "torch-tvio": torch_tvio,
            "tf-autotune": lambda a: tf_data(a, fixed=False),
            "tf-fixed": lambda a: tf_data(a, fixed=True),
            "dali-cpu": DaliEpochs, "spdl": SpdlEpochs,
            "joaderfs": lambda a: joaderfs_loader(a, 0),
            "joaderfs-disk": lambda a: joaderfs_loader(a, 0),
            "joaderfs-ram10": lambda a: joaderfs_loader(a, 0),
            "joaderfs-w2": lambda a: joaderfs_loader(a, WORKERS)}[args.loader](args)


def as_numpy(images, labels):
    """(images as [B, H, W, 3] uint8 numpy, labels as a list of ints)."""
    import numpy as np
    if hasattr(images, "numpy"):
        images = images.numpy()
    labels = labels.numpy() if hasattr(labels, "numpy") else labels
    images = np.asarray(images)
    if images.shape[1] == 3 and images.shape[-1] != 3:
        images = images.transpose(0, 2, 3, 1)
    return images, [int(x) for x in np.asarray(labels).reshape(-1)]


def job_main(args) -> None:
    """One job: builds its loader, says `ready`, waits for `go`, reads its
    epochs and prints their figures (and check results) as JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args.data = args.data[0]
    loader = make_loader(args)
    _, dataset_labels = image_folder(args.data)
    expected = collections.Counter(dataset_labels)
    print("ready", flush=True)
    sys.stdin.readline()
    me = os.getpid()
    epochs, problems, seen = [], [], []
    t0, c0 = time.monotonic(), tree_cpu(me)
    d0 = proc_cpu(args.daemon_pid) if args.daemon_pid else 0.0
    for epoch in range(args.epochs):
        samples, labels, hashes = 0, collections.Counter(), set()
        for images, batch_labels, *_ in loader:
            if args.check:
                images, batch_labels = as_numpy(images, batch_labels)
                if images.shape[1:] != (SIZE, SIZE, 3) or images.dtype.name != "uint8":
                    problems.append(f"epoch {epoch}: batch {images.shape} {images.dtype}")
                labels.update(batch_labels)
                hashes.update(hash(i.tobytes()) for i in images)
                samples += len(batch_labels)
            else:
                samples += len(batch_labels)
        t, c = time.monotonic(), tree_cpu(me)
        d = proc_cpu(args.daemon_pid) if args.daemon_pid else 0.0
        epochs.append({"samples": samples, "seconds": t - t0,
                       "job_cpu": c - c0, "daemon_cpu": d - d0})
        t0, c0, d0 = t, c, d
        if args.check:
            if labels != expected:
                problems.append(f"epoch {epoch}: labels differ from the dataset's")
            seen.append(hashes)
    if args.check and len(seen) > 1:
        again = len(seen[1] & seen[0]) / max(1, len(seen[1]))
        if again >= 0.05:
            problems.append(f"{again:.0%} of epoch 2's crops were in epoch 1")
    print(json.dumps({"epochs": epochs, "problems": problems}), flush=True)
    os._exit(0)  # no waiting on pipelines' threads and workers to wind down


# -- the harness -------------------------------------------------------------

def peer_python(loader: str) -> str:
    """The torchvision loaders run on Debian's torch and torchvision (PyPI's
    torchvision needs CUDA torch); the others in the peers venv."""
    if loader.startswith("torch-"):
        # Elsewhere (a GPU machine's venv): JOADERFS_TORCH_PYTHON.
        return os.environ.get("JOADERFS_TORCH_PYTHON", "/usr/bin/python3")
    return os.environ.get("JOADERFS_PEERS_PYTHON", sys.executable)


def run_jobs(args, data: str, loader: str, jobs: int, epochs: int,
             check: bool, workdir: Path) -> dict:
    """Starts `jobs` processes of `loader` (and a fresh mount for joaderfs),
    lets them go together; returns per-epoch figures summed over jobs."""
    from harness.daemon import Mount
    import joaderfs
    daemon = None
    procs = []
    try:
        if loader.startswith("joaderfs"):
            cache_dir, ram_cache = "none", "4G"
            if loader in ("joaderfs-disk", "joaderfs-ram10"):
                cache_dir = str(workdir / "cache")
                os.makedirs(cache_dir)
            if loader == "joaderfs-ram10":
                from bench.scale.decode_once import base_set_bytes
                ram_cache = str(base_set_bytes(data, BASE) // 10)
            daemon = Mount(os.path.abspath(data), str(workdir),
                           {"ram_cache": ram_cache, "cache_dir": cache_dir,
                            "size": str(SIZE), "log_level": "info",
                            **({"threads": str(WORKERS * jobs)}
                               if args.match_threads else {})},
                           defaults={}, binary=args.joaderfs)
            daemon.mount_timeout = 300
            daemon.start()
        for j in range(jobs):
            cmd = [peer_python(loader), "-m", "bench.client.peers", "--job-main",
                   "--loader", loader, "--data", data, "--epochs", str(epochs),
                   "--seed", str(1000 * j + 7 + args.rep_seed)]
            if check:
                cmd.append("--check")
            if daemon:
                job = joaderfs.make_job(daemon.mnt, f"peer-{j}", {
                    "size": SIZE, "crop": "random", "flip": 0.5,
                    "seed": 1000 * j + 7 + args.rep_seed})
                cmd += ["--job", str(job)]
                if jobs == 1:
                    cmd += ["--daemon-pid", str(daemon.proc.pid)]
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True))
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {loader} job did not get ready")
        d0 = daemon.cpu() if daemon else 0.0
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"a {loader} job died")
            results.append(json.loads(line))
            if p.wait(timeout=1800):
                raise RuntimeError(f"a {loader} job exited with {p.returncode}")
        daemon_cpu = (daemon.cpu() - d0) if daemon else 0.0
    finally:
        end_processes(procs)
        if daemon:
            daemon.cleanup()
    problems = [f"job {j}: {m}" for j, r in enumerate(results) for m in r["problems"]]
    figures = []
    for e in range(epochs):
        rows = [r["epochs"][e] for r in results]
        figures.append({
            "samples": sum(r["samples"] for r in rows),
            "seconds": max(r["seconds"] for r in rows),
            "cpu": sum(r["job_cpu"] for r in rows) + (
                sum(r["daemon_cpu"] for r in rows) if jobs == 1 else 0.0)})
    if jobs > 1:
        figures[0]["cpu"] += daemon_cpu
    return {"epochs": figures, "problems": problems}


def large_set(photos: str, out: Path) -> str:
    """The photos with a long tail of big pictures, ImageNet-like: every
    25th image upscaled (Lanczos, quality 90) to a longer side of
    2000-3200 px; the others as they are."""
    from PIL import Image
    done = out / ".complete"
    if done.exists():
        return str(out)
    shutil.rmtree(out, ignore_errors=True)
    rng = random.Random(29)
    files, _ = image_folder(photos)
    for i, f in enumerate(files):
        target = out / Path(f).parent.name / Path(f).name
        target.parent.mkdir(parents=True, exist_ok=True)
        if i % 25:
            shutil.copyfile(f, target)
            continue
        with Image.open(f) as im:
            factor = rng.uniform(2000, 3200) / max(im.size)
            big = im.convert("RGB").resize(
                (round(im.width * factor), round(im.height * factor)),
                Image.LANCZOS)
        big.save(target, quality=90)
    done.touch()
    return str(out)


def describe(data: str) -> str:
    from PIL import Image
    files, labels = image_folder(data)
    sizes = []
    for f in files:
        with Image.open(f) as im:
            sizes.append(im.size)
    w = statistics.mean(s[0] for s in sizes)
    h = statistics.mean(s[1] for s in sizes)
    big = sum(max(s) > 2000 for s in sizes)
    mb = sum(os.path.getsize(f) for f in files) / 1e6
    return (f"{len(files)} JPEGs in {len(set(labels))} classes, mean "
            f"{w:.0f}x{h:.0f}, {big} over 2000 px, {mb:.0f} MB")


def fmt(values: list[float]) -> str:
    return (f"{statistics.median(values):.0f} "
            f"({min(values):.0f}-{max(values):.0f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", action="append", default=[],
                   help="NAME=IMAGEFOLDER (repeatable)")
    p.add_argument("--photos", help="the photos to derive `large` from, and "
                   "to use as `photos` when no --data is given")
    p.add_argument("--large-dir", help="where the large set is cached")
    p.add_argument("--joaderfs", default=str(
        Path(__file__).resolve().parents[2] / "build" / "joaderfs"))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--loaders", default=",".join(LOADERS))
    p.add_argument("--scenarios", default="1x2,4x1",
                   help="JOBSxEPOCHS, comma-separated")
    p.add_argument("--no-check", action="store_true")
    p.add_argument("--match-threads", action="store_true",
                   help="give the daemon 2 decode threads per job, the CPU "
                        "the peers' workers get (where there are more cores "
                        "than that; the daemon's default is one per core)")
    p.add_argument("--from-log", metavar="STDERR",
                   help="only print the table of an earlier run's stderr")
    p.add_argument("--job-main", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--loader", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--daemon-pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.job_main:
        job_main(args)
        return
    if args.from_log:
        table_from_log(args.from_log)
        return
    sets = dict(d.split("=", 1) for d in args.data)
    if not sets:
        sets = {"photos": args.photos,
                "large": large_set(args.photos, Path(args.large_dir))}
    loaders = args.loaders.split(",")
    scenarios = [tuple(int(x) for x in s.split("x")) for s in args.scenarios.split(",")]
    for name, data in sets.items():
        print(f"{name}: {describe(data)}", file=sys.stderr, flush=True)
    figures: dict[tuple, list[dict]] = collections.defaultdict(list)
    failed: dict[tuple, str] = {}
    with tempfile.TemporaryDirectory(prefix="joaderfs-bench-peers-") as tmp:
        n = 0
        if not args.no_check:
            for name, data in sets.items():
                for loader in loaders:
                    n += 1
                    args.rep_seed = 0
                    try:
                        r = run_jobs(args, data, loader, 1, 2, True,
                                     Path(tmp) / f"check-{n}")
                        verdict = "; ".join(r["problems"]) or "ok"
                    except Exception as e:  # noqa: BLE001 - reported, loader left out
                        verdict = f"failed: {e}"
                    print(f"check {name} {loader}: {verdict}", file=sys.stderr, flush=True)
                    if verdict != "ok":
                        failed[(name, loader)] = verdict
        for rep in range(args.reps):
            args.rep_seed = 1 + rep
            for name, data in sets.items():
                for jobs, epochs in scenarios:
                    for loader in loaders:
                        if (name, loader) in failed:
                            continue
                        n += 1
                        r = run_jobs(args, data, loader, jobs, epochs, False,
                                     Path(tmp) / f"run-{n}")
                        figures[(name, jobs, loader)].append(r)
                        line = ", ".join(
                            f"epoch {e + 1} {f['samples'] / f['seconds']:.0f}/s "
                            f"{f['samples'] / f['cpu']:.0f}/CPU-s"
                            for e, f in enumerate(r["epochs"]))
                        print(f"rep {rep} {name} {jobs}x{epochs} {loader}: {line}",
                              file=sys.stderr, flush=True)
    cells = {key: [[(f["samples"] / f["seconds"], f["samples"] / f["cpu"])
                    for f in r["epochs"]] for r in runs]
             for key, runs in figures.items()}
    print_table(cells, {n: describe(d) for n, d in sets.items()}, loaders,
                scenarios, args.reps, failed)


def print_table(cells: dict, sets: dict, loaders: list, scenarios: list,
                reps: int, failed: dict) -> None:
    """cells[(set, jobs, loader)]: per run, per epoch (samples/s,
    samples/CPU-s)."""
    counts = sorted({len(runs) for runs in cells.values()})
    if counts and counts[0] != counts[-1]:
        reps = f"{counts[0]}-{counts[-1]}"
    print(f"Peer loaders ({os.cpu_count()} cores; RandomResizedCrop({SIZE}) + "
          f"flip, batch {BATCH}, uint8, {WORKERS} workers/threads; medians "
          f"(min-max) of {reps} interleaved runs; samples/s, and samples "
          "per CPU-second of the jobs' process trees plus the daemon):\n")
    for name, description in sets.items():
        print(f"**{name}** ({description})\n")
        head = "| loader |"
        rule = "| --- |"
        for jobs, epochs in scenarios:
            for e in range(epochs):
                label = f"{jobs} job{'s' if jobs > 1 else ''}"
                label += f", epoch {e + 1}" if epochs > 1 else ", aggregate"
                head += f" {label}: samples/s | samples/CPU-s |"
                rule += " ---: | ---: |"
        print(head)
        print(rule)
        best = collections.defaultdict(float)      # samples/s
        best_eff = collections.defaultdict(float)  # samples per CPU-s
        medians = {}
        for loader in loaders:
            if (name, loader) in failed:
                continue
            row = f"| {loader} |"
            for jobs, epochs in scenarios:
                runs = cells[(name, jobs, loader)]
                for e in range(epochs):
                    rate = [r[e][0] for r in runs]
                    eff = [r[e][1] for r in runs]
                    row += f" {fmt(rate)} | {fmt(eff)} |"
                    medians[(loader, jobs, e)] = (statistics.median(rate),
                                                  statistics.median(eff))
                    if not loader.startswith("joaderfs"):
                        best[(jobs, e)] = max(best[(jobs, e)], statistics.median(rate))
                        best_eff[(jobs, e)] = max(best_eff[(jobs, e)],
                                                  statistics.median(eff))
            print(row)
        for ours in loaders:
            if not ours.startswith("joaderfs") or (name, ours) in failed or not best:
                continue
            ratios = ", ".join(
                f"{jobs} job{'s' if jobs > 1 else ''} epoch {e + 1}: "
                f"{medians[(ours, jobs, e)][0] / b:.2f}x "
                f"({medians[(ours, jobs, e)][1] / best_eff[(jobs, e)]:.2f}x)"
                for (jobs, e), b in best.items())
            print(f"\n{ours} / best peer, samples/s (samples/CPU-s): {ratios}")
        print()
        for (fname, loader), verdict in failed.items():
            if fname == name:
                print(f"- {loader} left out: {verdict}")
        print()


def table_from_log(path: str) -> None:
    """The table again from a run's progress lines (stderr), as far as it
    got: `rep R SET JxE LOADER: epoch 1 N/s M/CPU-s[, epoch 2 ...]`."""
    cells = collections.defaultdict(list)
    sets, loaders, scenarios, reps = {}, [], [], set()
    for line in open(path):
        if re.match(r"^\w+: \d+ JPEGs", line):
            name, description = line.strip().split(": ", 1)
            sets[name] = description
            continue
        m = re.match(r"^rep (\d+) (\S+) (\d+)x(\d+) (\S+): (.*)$", line)
        if not m:
            continue
        rep, name, jobs, epochs, loader, rest = m.groups()
        jobs, epochs = int(jobs), int(epochs)
        reps.add(rep)
        if loader not in loaders:
            loaders.append(loader)
        if (jobs, epochs) not in scenarios:
            scenarios.append((jobs, epochs))
        cells[(name, jobs, loader)].append(
            [(float(a), float(b)) for a, b in
             re.findall(r"epoch \d+ ([\d.]+)/s ([\d.]+)/CPU-s", rest)])
    print_table(cells, sets, loaders, scenarios, len(reps), {})

if __name__ == "__main__":
    main()
