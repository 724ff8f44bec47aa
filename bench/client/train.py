#!/usr/bin/python3
"""End-to-end training benchmark: N concurrent jobs, each a separate process
training torchvision's ResNet-18 for a fixed number of steps, every job
either through joaderfs or through its own DataLoader over ImageFolder (PIL,
the same Resize + CenterCrop); prints a Markdown table.

    scripts/bench.sh train --data IMAGEFOLDER [--jobs 4] [--steps 50] [--batch 64]
                   [--size 224] [--workers 2] [--systems joaderfs,baseline]
                   [--device auto|cpu|cuda]

On a GPU machine this is the real measurement: images/s per job and in
aggregate, GPU utilisation sampled during the run (nvidia-smi, else
torch.cuda.utilization), and the GPU ceiling: one job training on a synthetic
batch already on the device.  Without a GPU it runs on the CPU; use a tiny
configuration as a smoke test, e.g.
``--jobs 2 --steps 4 --batch 8 --size 32 --workers 1``.

joaderfs jobs read ``JobDataset(job, batch_size=B)`` under
``DataLoader(batch_size=None, num_workers=W, pin_memory=<on GPU>)`` from one
daemonized mount (``size`` = --size, a RAM tier for the decoded set, no disk
tier); baseline jobs use ``DataLoader(ImageFolder, batch_size=B,
shuffle=True, num_workers=W, pin_memory=<on GPU>)``.  Both hand the model
uint8 batches, converted and normalised on the device.  Each job's images/s
leave out its first --warmup steps (start-up, cuDNN autotuning); the
aggregate is all jobs' images over the span from the first job's start to
the last one's end, after warm-up.
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
    if args.system == "joaderfs":
        import joaderfs
        job = joaderfs.make_job(args.mount, args.job_id)
        loader = DataLoader(joaderfs.JobDataset(job, batch_size=args.batch,
                                                drop_last=True),
                            batch_size=None, num_workers=args.workers,
                            pin_memory=on_gpu)
        classes = joaderfs.dataset_info(args.mount)["classes"]
    elif args.system == "baseline":
        from torchvision import transforms as T
        folder = torchvision.datasets.ImageFolder(
            args.data, transform=T.Compose([T.Resize(args.size),
                                            T.CenterCrop(args.size),
                                            T.PILToTensor()]))
        loader = DataLoader(folder, batch_size=args.batch, shuffle=True,
                            drop_last=True, num_workers=args.workers,
                            pin_memory=on_gpu)
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
        while True:  # epochs follow each other until the steps are done
            if loader is None:
                yield batch
            else:
                for images, labels, *_ in loader:
                    yield (images.to(device, non_blocking=True),
                           labels.to(device, non_blocking=True))

    print("ready", flush=True)
    sys.stdin.readline()
    times = []
    images_done = 0
    for step, (images, labels) in enumerate(batches()):
        if step == args.steps:
            break
        x = ((images.float() - mean) / std).contiguous(
            memory_format=torch.channels_last)
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.monotonic())
        if step >= args.warmup:
            images_done += len(labels)
    measured = times[args.warmup:]
    span = measured[-1] - times[args.warmup - 1] if len(measured) else 0.0
    print(json.dumps({"system": args.system, "images": images_done,
                      "start": times[args.warmup - 1] if times else 0.0,
                      "end": times[-1] if times else 0.0,
                      "images_per_s": images_done / span if span else 0.0,
                      "loss": float(loss)}), flush=True)


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
    procs = []
    for i in range(count):
        cmd = [sys.executable, __file__, "--child", "--system", system,
               "--device", device, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--batch", str(args.batch),
               "--size", str(args.size), "--workers", str(args.workers),
               "--threads", str(args.threads), "--seed", str(i),
               "--data", args.data]
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
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdin.close()
            p.stdout.close()
    return results, utilisation


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("--joaderfs", default=str(REPO / "build" / "joaderfs"))
    p.add_argument("--jobs", default="4", help="job counts, e.g. 1,4")
    p.add_argument("--systems", default="joaderfs,baseline")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader workers of each job")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads of each job on the CPU")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--ram-cache", default="4G")
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

    from .client_cost import mount
    device = pick_device(args.device)
    counts = [int(k) for k in args.jobs.split(",")]
    systems = args.systems.split(",")
    rows = []
    ceiling, _ = run_jobs(args, "synthetic", 1, None, device)
    with tempfile.TemporaryDirectory(prefix="joaderfs-train-") as tmp:
        daemon = None
        if "joaderfs" in systems:
            daemon = mount(args.joaderfs, args.data, Path(tmp),
                           {"ram_cache": args.ram_cache, "cache_dir": "none",
                            "size": str(args.size)})
        try:
            for count in counts:
                for system in systems:
                    results, util = run_jobs(
                        args, system, count,
                        Path(daemon.mnt) if system == "joaderfs" else None,
                        device)
                    span = (max(r["end"] for r in results) -
                            min(r["start"] for r in results))
                    rows.append((system, count, [r["images_per_s"] for r in results],
                                 sum(r["images"] for r in results) / span, util))
                    print(f"{system} x{count}: {rows[-1][3]:.1f} images/s",
                          file=sys.stderr, flush=True)
        finally:
            if daemon:
                daemon.cleanup()

    print(f"ResNet-18 training, {device}, batch {args.batch}, size {args.size}, "
          f"{args.steps} steps per job ({args.warmup} warm-up steps left out), "
          f"{args.workers} DataLoader workers per job, {os.cpu_count()} cores; "
          f"ceiling (synthetic batches on the device, one job): "
          f"{ceiling[0]['images_per_s']:.1f} images/s\n")
    print("| system | jobs | each job's images/s | aggregate images/s | "
          "vs ceiling | GPU utilisation |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for system, count, each, aggregate, util in rows:
        print(f"| {system} | {count} | {' / '.join(f'{v:.1f}' for v in each)} | "
              f"{aggregate:.1f} | {aggregate / ceiling[0]['images_per_s']:.2f} | "
              f"{util} |")


if __name__ == "__main__":
    main()
