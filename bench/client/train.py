#!/usr/bin/python3
"""End-to-end training benchmark: N concurrent jobs, each a separate process
training torchvision's ResNet-18 for a fixed number of steps, every job
either through joaderfs or through its own DataLoader over ImageFolder (PIL,
the same augmentation); prints a Markdown table.

    scripts/bench.sh train --data IMAGEFOLDER [--jobs 1,4,8] [--steps 50]
                   [--batch 64] [--size 224] [--workers 2]
                   [--systems joaderfs,baseline] [--tiers all,0.1,0.1+disk]
                   [--augment random|center] [--device auto|cpu|cuda]

On a GPU machine this is the real measurement: images/s per job and in
aggregate, GPU utilisation sampled during the run (nvidia-smi, else
torch.cuda.utilization), and the GPU ceiling: one job training on a synthetic
batch already on the device.  Without a GPU it runs on the CPU; use a tiny
configuration as a smoke test, e.g.
``--jobs 2 --steps 4 --batch 8 --size 32 --workers 1``.

joaderfs jobs read ``JobDataset(job, batch_size=B)`` under
``DataLoader(batch_size=None, num_workers=W, persistent_workers=True,
pin_memory=<on GPU>)``, with the spec ``crop=random flip=0.5``; baseline
jobs use ``DataLoader(ImageFolder, batch_size=B, shuffle=True,
num_workers=W, persistent_workers=True, pin_memory=<on GPU>)`` with
torchvision's ``RandomResizedCrop(size)`` + ``RandomHorizontalFlip()``, the
same augmentation (``--augment center``: ``crop=center`` against ``Resize``
+ ``CenterCrop`` for both).  Both hand the model uint8 batches, converted and
normalised on the device.

Fairness: every row's jobs start together (each prints "ready" once its
model and loader are built, then waits for "go"); each joaderfs row has a
fresh daemonized mount, so no row inherits another's cache.  --tiers picks
the joaderfs rows: ``all`` (``ram_cache`` holds the decoded set),
``F`` (``ram_cache`` = F x the decoded set, ``cache_dir=none``) and
``F+disk`` (the same with a disk tier holding the set); the decoded set is
the base images' bytes (mount option base=, from the JPEG headers).

The aggregate is all jobs' images over the span from the barrier's release
(the first job's start) to the last job's end, warm-up included, the way a
user's wall clock sees it; a sum of per-job rates is not an aggregate.  Each
job's own images/s leave out its first --warmup steps (start-up, cuDNN
autotuning).  "decodes per distinct" is /stats `decoded` over the distinct
(epoch, id) pairs the jobs trained on; the daemon's and the loaders'
read-ahead is decoded but not trained on, so a run of a few steps shows
well above 1 (use steps covering epochs to compare it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def pick_device(name: str) -> str:
    import torch
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def train(args) -> None:
    """One job (a child process): prints one JSON line when done."""
    import torch
    import torchvision
    from torch.utils.data import DataLoader

    device = torch.device(pick_device(args.device))
    on_gpu = device.type == "cuda"
    torch.manual_seed(args.seed)
    if not on_gpu:
        torch.set_num_threads(args.threads)
    persistent = args.workers > 0
    if args.system == "joaderfs":
        import joaderfs
        spec = ({"crop": "random", "flip": "0.5"} if args.augment == "random"
                else {"crop": "center"})
        job = joaderfs.make_job(args.mount, args.job_id, spec)
        loader = DataLoader(joaderfs.JobDataset(job, batch_size=args.batch,
                                                drop_last=True),
                            batch_size=None, num_workers=args.workers,
                            persistent_workers=persistent, pin_memory=on_gpu)
        classes = joaderfs.dataset_info(args.mount)["classes"]
    elif args.system == "baseline":
        from torchvision import transforms as T
        if args.augment == "random":
            augment = [T.RandomResizedCrop(args.size), T.RandomHorizontalFlip()]
        else:
            augment = [T.Resize(args.size), T.CenterCrop(args.size)]
        folder = torchvision.datasets.ImageFolder(
            args.data, transform=T.Compose(augment + [T.PILToTensor()]))
        loader = DataLoader(folder, batch_size=args.batch, shuffle=True,
                            drop_last=True, num_workers=args.workers,
                            persistent_workers=persistent, pin_memory=on_gpu)
        classes = len(folder.classes)
    else:  # synthetic: the GPU (or CPU) ceiling, no input pipeline
        classes = 1000
        batch = (torch.randint(0, 256, (args.batch, 3, args.size, args.size),
                               dtype=torch.uint8, device=device),
                 torch.randint(0, classes, (args.batch,), device=device))
        loader = None

    model = torchvision.models.resnet18(num_classes=classes).to(device)
    model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def batches():
        """(epoch, images, labels, ids or None) until the steps are done."""
        epoch = 0
        while True:
            if loader is None:
                yield epoch, *batch, None
            else:
                for images, labels, *ids in loader:
                    yield (epoch, images.to(device, non_blocking=True),
                           labels.to(device, non_blocking=True),
                           ids[0] if ids else None)
                epoch += 1

    print("ready", flush=True)
    sys.stdin.readline()
    go = time.monotonic()
    times = []
    images_done = 0
    images_all = 0
    pairs = []  # (epoch, id) of every joaderfs sample trained on
    for step, (epoch, images, labels, ids) in enumerate(batches()):
        if step == args.steps:
            break
        if ids is not None:
            pairs.extend((epoch, i) for i in ids.tolist())
        x = ((images.float() - mean) / std).contiguous(
            memory_format=torch.channels_last)
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.monotonic())
        images_all += len(labels)
        if step >= args.warmup:
            images_done += len(labels)
    measured = times[args.warmup:]
    span = measured[-1] - times[args.warmup - 1] if len(measured) else 0.0
    print(json.dumps({"system": args.system, "go": go,
                      "images_all": images_all,
                      "end": times[-1] if times else 0.0,
                      "images_per_s": images_done / span if span else 0.0,
                      "pairs": pairs, "loss": loss.item()}), flush=True)


class GpuSampler(threading.Thread):
    """GPU utilisation in %, sampled every half second while running."""

    def __init__(self, device: str) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.stop_event = threading.Event()
        self.how = None
        if device == "cuda":
            if shutil.which("nvidia-smi"):
                self.how = "nvidia-smi"
            else:
                import torch
                try:
                    torch.cuda.utilization()
                    self.how = "torch.cuda.utilization"
                except Exception:  # noqa: BLE001 - needs pynvml; then no figure
                    self.how = None

    def read(self) -> float | None:
        if self.how == "nvidia-smi":
            r = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                "--format=csv,noheader,nounits", "-i", "0"],
                               capture_output=True, text=True)
            return float(r.stdout.split()[0]) if r.returncode == 0 else None
        import torch
        return float(torch.cuda.utilization())

    def run(self) -> None:
        while self.how and not self.stop_event.wait(0.5):
            value = self.read()
            if value is not None:
                self.samples.append(value)

    def result(self) -> str:
        self.stop_event.set()
        self.join()
        if not self.samples:
            return "n/a"
        return f"{statistics.mean(self.samples):.0f}%"


def run_jobs(args, system: str, count: int, mount: Path | None,
             device: str) -> tuple[list[dict], str]:
    # Here, not at the top: the jobs (this file run as a script) import
    # neither bench nor harness.
    from bench.processes import end_processes

    procs = []
    for i in range(count):
        cmd = [sys.executable, __file__, "--child", "--system", system,
               "--device", device, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--batch", str(args.batch),
               "--size", str(args.size), "--workers", str(args.workers),
               "--threads", str(args.threads), "--seed", str(i),
               "--augment", args.augment, "--data", args.data]
        if mount:
            cmd += ["--mount", str(mount), "--job-id",
                    f"train-{system}-{count}-{i}-{time.monotonic_ns()}"]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True))
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {system} job did not start")
        sampler = GpuSampler(device)
        sampler.start()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.stdout.readline()) for p in procs]
        utilisation = sampler.result()
        for p in procs:
            if p.wait(timeout=600):
                raise RuntimeError(f"a {system} job exited with {p.returncode}")
    finally:
        end_processes(procs)
    return results, utilisation


def tier_options(tier: str, decoded_set: int, tmp: Path, size: int,
                 base: int) -> dict[str, str]:
    """Mount options of one --tiers entry: ``all``, ``F`` or ``F+disk``."""
    opts = {"size": str(size), "base": str(base), "cache_dir": "none"}
    fraction, _, disk = tier.partition("+")
    if fraction == "all":
        # The set plus room for unread deliveries and the pinned samples.
        opts["ram_cache"] = str(int(1.5 * decoded_set) + (256 << 20))
    else:
        opts["ram_cache"] = str(max(16 << 20, int(float(fraction) * decoded_set)))
    if disk == "disk":
        opts["cache_dir"] = str(tmp / "cache")
        opts["disk_cache"] = str(2 * decoded_set + (64 << 20))
    elif disk:
        raise ValueError(f"bad --tiers entry {tier!r} (all, F or F+disk)")
    return opts


def tier_label(tier: str) -> str:
    fraction, _, disk = tier.partition("+")
    ram = "RAM holds the set" if fraction == "all" else f"RAM {float(fraction):.0%}"
    return ram + (", disk tier" if disk else "")


def aggregate(results: list[dict]) -> float:
    """All jobs' images over the span from the first start to the last end."""
    span = max(r["end"] for r in results) - min(r["go"] for r in results)
    return sum(r["images_all"] for r in results) / span


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("--joaderfs", default=str(REPO / "build" / "joaderfs"))
    p.add_argument("--jobs", default="1,4,8", help="job counts, e.g. 1,4,8")
    p.add_argument("--systems", default="joaderfs,baseline")
    p.add_argument("--tiers", default="all,0.1,0.1+disk",
                   help="joaderfs rows: all (RAM holds the decoded set), F "
                        "(ram_cache = F x the set, no disk tier), F+disk")
    p.add_argument("--augment", default="random", choices=("random", "center"),
                   help="random: crop=random flip=0.5 vs RandomResizedCrop + "
                        "RandomHorizontalFlip; center: crop=center vs Resize + CenterCrop")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--base", type=int, default=256, help="the mount's base=")
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader workers of each job")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads of each job on the CPU")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--mount", help=argparse.SUPPRESS)
    p.add_argument("--job-id", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.warmup < 1 or args.steps <= args.warmup:
        p.error("need --steps > --warmup >= 1")
    args.data = os.path.abspath(args.data)
    if args.child:
        train(args)
        return

    import joaderfs

    from bench.scale.decode_once import base_set_bytes

    from .client_cost import mount
    device = pick_device(args.device)
    counts = [int(k) for k in args.jobs.split(",")]
    systems = args.systems.split(",")
    tiers = args.tiers.split(",")
    decoded_set = base_set_bytes(args.data, args.base)
    rows = []
    ceiling_results, _ = run_jobs(args, "synthetic", 1, None, device)
    ceiling = aggregate(ceiling_results)
    for count in counts:
        for system in systems:
            for tier in (tiers if system == "joaderfs" else ["-"]):
                with tempfile.TemporaryDirectory(prefix="joaderfs-train-") as tmp:
                    daemon = None
                    if system == "joaderfs":
                        daemon = mount(args.joaderfs, args.data, Path(tmp),
                                       tier_options(tier, decoded_set, Path(tmp),
                                                    args.size, args.base))
                    try:
                        results, util = run_jobs(
                            args, system, count,
                            Path(daemon.mnt) if daemon else None, device)
                        per_distinct = "-"
                        if daemon:
                            decoded = joaderfs.read_stats(daemon.mnt)["decoded"]
                            pairs = {tuple(x) for r in results for x in r["pairs"]}
                            per_distinct = f"{decoded / max(1, len(pairs)):.2f}"
                    finally:
                        if daemon:
                            daemon.cleanup()
                label = tier_label(tier) if daemon else "own DataLoader"
                rows.append((system, label, count,
                             [r["images_per_s"] for r in results],
                             aggregate(results), per_distinct, util))
                print(f"{system} ({label}) x{count}: {rows[-1][4]:.1f} images/s",
                      file=sys.stderr, flush=True)

    print(f"ResNet-18 training, {device}, batch {args.batch}, size {args.size}, "
          f"augment {args.augment}, {args.steps} steps per job, "
          f"{args.workers} persistent DataLoader workers per job, "
          f"{os.cpu_count()} cores, decoded set {decoded_set / 2**20:.0f} MiB "
          f"at base {args.base}; ceiling (synthetic batches on the device, one "
          f"job): {ceiling:.1f} images/s. Aggregate: all images over the span "
          f"from the barrier to the last end; each job's images/s leave out "
          f"{args.warmup} warm-up steps\n")
    print("| system | cache | jobs | each job's images/s | aggregate images/s | "
          "vs ceiling | decodes per distinct | GPU utilisation |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for system, label, count, each, agg, per_distinct, util in rows:
        print(f"| {system} | {label} | {count} | "
              f"{' / '.join(f'{v:.1f}' for v in each)} | {agg:.1f} | "
              f"{agg / ceiling:.2f} | {per_distinct} | {util} |")


if __name__ == "__main__":
    main()
