#!/usr/bin/python3
"""One training job of the benchmark suite (scripts/bench.sh), for either system.

    python3 -m bench.throughput.job --system joaderfs --job-dir MNT/jobs/ID [--spec SPEC | --ids-file F] ...
    python3 -m bench.throughput.job --system baseline --data IMAGEFOLDER [--ids-file F] ...

The job builds its loader the way a user would, then prints ``ready`` and waits
for a line on stdin (the driver's start signal), so that import and set-up time
are left out and several jobs start when the driver says.  It then reads
``--epochs`` epochs through a torch DataLoader (``--workers`` processes,
``--batch`` samples a batch), sleeps ``--delay`` seconds after every batch (a
stand-in for a model's step; sleeping costs no CPU, like a GPU; each batch is
first copied into a staging buffer, as a host-to-device copy would), writes how many
samples it has consumed to ``--progress`` after every batch, and prints one JSON
line: per-epoch samples, distinct ids, missing and duplicate ids against the
expected subset, start and end times (CLOCK_MONOTONIC, comparable between
processes), and the user+sys CPU seconds it and its reaped DataLoader workers
spent from the start signal on.

joaderfs: ``joaderfs.JobDataset`` over the job directory (which this process
makes, and removes at the end), per sample under a batching DataLoader, or
with ``--batch-path`` whole batches (``JobDataset(batch_size=B)`` under
``DataLoader(batch_size=None)``); the daemon decodes and shuffles.  The
package is found through PYTHONPATH (scripts/bench.sh sets it to this
checkout's python/ folder).
baseline: ``torchvision.datasets.ImageFolder`` with PIL decoding and
Resize(size) + CenterCrop(size) + PILToTensor (uint8, CHW, like joaderfs'
records), shuffled by the DataLoader, optionally a ``torch.utils.data.Subset``;
every decode is counted in a shared counter so that decodes per sample are
measured, not assumed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, Subset



def cpu_seconds() -> float:
    """User+sys CPU of this process and its waited-for descendants."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


class CountedImageFolder(Dataset):
    """ImageFolder yielding (image, label, index); counts decodes across workers."""

    def __init__(self, root: str, size: int, counter) -> None:
        import torchvision
        from torchvision import transforms as T
        from torchvision.datasets.folder import pil_loader

        def loader(path: str):
            image = pil_loader(path)  # open + decode + convert("RGB")
            with counter.get_lock():
                counter.value += 1
            return image

        self.folder = torchvision.datasets.ImageFolder(
            root, loader=loader,
            transform=T.Compose([T.Resize(size), T.CenterCrop(size),
                                 T.PILToTensor()]))

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, index: int):
        image, label = self.folder[index]
        return image, label, index


def read_ids(path: str) -> list[int]:
    with open(path) as f:
        return [int(line) for line in f if line.strip()]


def expected_ids(args, total: int | None) -> set[int] | None:
    if args.ids_file:
        return set(read_ids(args.ids_file))
    if args.spec:
        for pair in args.spec.split():
            key, _, value = pair.partition("=")
            if key == "subset" and value.startswith("range:"):
                a, b = value[len("range:"):].split("-")
                return set(range(int(a), int(b) + 1))
            if key == "subset" and value != "all":
                return None  # other subsets are not checked here
    return set(range(total)) if total is not None else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", choices=("joaderfs", "baseline"), required=True)
    p.add_argument("--job-dir", help="joaderfs: MNT/jobs/ID, made by this job")
    p.add_argument("--data", help="baseline: the ImageFolder root")
    p.add_argument("--spec", default="", help="joaderfs job spec text")
    p.add_argument("--ids-file", help="subset: one sample id a line")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--delay", type=float, default=0.0,
                   help="seconds slept after each batch (the model's step)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--progress", help="file to write the consumed count to")
    p.add_argument("--result", help="file for the JSON result (default stdout)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-path", action="store_true",
                   help="joaderfs: read whole batches (JobDataset(batch_size=))")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    decodes = multiprocessing.Value("q", 0)
    if args.system == "joaderfs":
        import joaderfs
        os.mkdir(args.job_dir)
        if args.spec:
            joaderfs.write_spec(args.job_dir, args.spec)
        if args.ids_file:
            joaderfs.write_ids(args.job_dir, read_ids(args.ids_file))
        total = joaderfs.job_status(
            os.path.dirname(os.path.dirname(args.job_dir)),
            os.path.basename(args.job_dir))["subset_size"]
        expect = expected_ids(args, None)
        if args.batch_path:
            dataset = joaderfs.JobDataset(args.job_dir, batch_size=args.batch)
            loader = DataLoader(dataset, batch_size=None,
                                num_workers=args.workers)
        else:
            dataset = joaderfs.JobDataset(args.job_dir)
            loader = DataLoader(dataset, batch_size=args.batch,
                                num_workers=args.workers)
    else:
        dataset = CountedImageFolder(args.data, args.size, decodes)
        if args.ids_file:
            dataset = Subset(dataset, read_ids(args.ids_file))
        total = len(dataset)
        expect = expected_ids(args, total)
        loader = DataLoader(dataset, batch_size=args.batch, shuffle=True,
                            num_workers=args.workers)

    progress_fd = (os.open(args.progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                   if args.progress else None)

    def report_progress(n: int) -> None:
        if progress_fd is not None:
            os.pwrite(progress_fd, f"{n:>12d}\n".encode(), 0)

    report_progress(0)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit("bench.throughput.job: no start signal")
    go = time.monotonic()
    cpu0 = cpu_seconds()
    consumed = 0
    epochs = []
    # The model's input buffer: each batch is copied into it, touching every
    # byte as a host-to-device copy would.  Like .to(device), it keeps the
    # batch's layout (channels_last from the batch path), so the copy does not
    # also transpose.
    staging = None
    for epoch in range(args.epochs):
        start = time.monotonic()
        seen: list[int] = []
        first_batch = None
        first_batch_samples = 0
        shape_ok = True
        for images, _labels, ids in loader:
            if first_batch is None:
                first_batch = time.monotonic() - start
                first_batch_samples = len(ids)
            if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (
                    3, args.size, args.size):
                shape_ok = False
            if staging is None or len(staging) < len(images):
                staging = torch.empty_like(images)
            staging[:len(images)].copy_(images)
            seen += ids.tolist()
            consumed += len(ids)
            if args.delay:
                time.sleep(args.delay)
            report_progress(consumed)
        end = time.monotonic()
        distinct = set(seen)
        ep = {"epoch": epoch, "start": start, "end": end,
              "seconds": end - start, "samples": len(seen),
              "distinct": len(distinct), "first_batch_s": first_batch,
              "first_batch_samples": first_batch_samples,
              "shape_ok": shape_ok}
        if expect is not None:
            ep["missing"] = len(expect - distinct)
            ep["unexpected"] = len(distinct - expect)
        ep["duplicates"] = len(seen) - len(distinct)
        epochs.append(ep)
    end = time.monotonic()
    cpu = cpu_seconds() - cpu0
    if args.system == "joaderfs":
        try:
            os.rmdir(args.job_dir)
        except OSError as e:
            print(f"bench.throughput.job: rmdir {args.job_dir}: {e}", file=sys.stderr)
    result = json.dumps({
        "system": args.system, "go": go, "end": end, "cpu_s": cpu,
        "subset_size": total, "decodes": decodes.value
        if args.system == "baseline" else None,
        "delay": args.delay, "batch": args.batch, "workers": args.workers,
        "epochs": epochs})
    if args.result:
        with open(args.result + ".tmp", "w") as f:
            f.write(result + "\n")
        os.rename(args.result + ".tmp", args.result)
    else:
        print(result, flush=True)


if __name__ == "__main__":
    main()
