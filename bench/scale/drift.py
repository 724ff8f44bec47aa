#!/usr/bin/python3
"""Drift: GPU-paced jobs sharing one (fake) GPU drift apart, and then each
image may be decoded again (issue 18).

N jobs, each a separate process on the client's batch path
(``JobDataset(job, batch_size=B)`` under ``DataLoader(batch_size=None,
num_workers=W, persistent_workers=True)``), train for --epochs epochs on a
fake GPU they share: every batch a job holds the GPU for its step time
(a sleep), so only one job "computes" at a time, as on one real GPU.  The
fake GPU has two modes:

  fifo  first come, first served: a ticket queue kept by this process, which
        the jobs reach over a Unix socket; the GPU goes to the job that asked
        first (jobs take turns, so they stay close to each other)
  lock  a plain lock (flock(2) on one file): whichever waiting process the OS
        wakes runs next; the job that just released it may take it again,
        so identical jobs can drift apart, as processes time-sliced by a real
        GPU do
  own   no sharing: each job has a GPU of its own (a plain sleep per step),
        so jobs of different step times run at their own paces and drift
        apart for good

Each job has its own step time (--step-ms 180,360 models two models at 1:2).
All jobs start together at a barrier (each prints "ready", then waits for
"go").  The daemon is mounted daemonized, as users mount it, with
``ram_cache`` a fraction of the decoded set (the base images' bytes, from
the JPEG headers) and no disk tier unless --disk. Each case runs once per
--drift-bound value (the daemon's drift_bound option: 1 holds a job far
ahead of a peer of similar pace, 0 lets it run free), so the policy is
compared with its baseline in one run.

The table (one row per mode, then per job):

  ceiling    images/s with the GPU never idle: all jobs' images over the GPU
             time their steps take (sum over jobs of batches x step time);
             for equal steps this is batch / step.  In `own` mode, all
             jobs' images over the longest job's GPU time
  aggregate  all jobs' images over the span from the first job's start to
             the last one's end, and its fraction of the ceiling
  job rates  each job's images over its own span; "alone" is its batch /
             step time, what it would get with the GPU to itself
  decodes per distinct  /stats `decoded` over the distinct (epoch, id) pairs
             the jobs consumed (1.00: each image decoded once per epoch;
             below 1 when RAM keeps images from one epoch to the next)
  renders per image  /stats `renders` over the images the jobs consumed:
             with identical centre crops (--spec crop=center) 1/N when the
             N jobs share every render, 1.00 when none is shared

--joaderfs takes several daemons, NAME=PATH,NAME=PATH (a baseline build
beside this one); each case runs with each in turn, --reps times.

Run it through scripts/bench.sh (Debian's interpreter, PYTHONPATH set):
  scripts/bench.sh drift --images 10000 --modes lock,fifo --ram-frac 0.1
  scripts/bench.sh drift --images 2000 --epochs 2 --step-ms 180,360
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("JOADERFS_BUILD", REPO / "build"))


# --- the fake GPU ---------------------------------------------------------

class FifoGpu(threading.Thread):
    """A first-come-first-served GPU: a job sends b"a" to ask, gets b"g" when
    it is its turn, and sends b"r" when its step is done.  One thread per
    connection; the queue and the holder are guarded by one lock."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(64)
        self.lock = threading.Lock()
        self.queue: collections.deque[socket.socket] = collections.deque()
        self.holder: socket.socket | None = None

    def dispatch(self) -> None:
        # Called with self.lock held.
        if self.holder is None and self.queue:
            self.holder = self.queue.popleft()
            self.holder.sendall(b"g")

    def serve(self, conn: socket.socket) -> None:
        with conn:
            while (byte := conn.recv(1)):
                with self.lock:
                    if byte == b"a":
                        self.queue.append(conn)
                    elif byte == b"r" and self.holder is conn:
                        self.holder = None
                    self.dispatch()
            with self.lock:  # a job that exits never holds the GPU
                if self.holder is conn:
                    self.holder = None
                    self.dispatch()

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self.server.close()


class GpuClient:
    """A job's side of the fake GPU: hold(seconds) occupies it."""

    def __init__(self, mode: str, path: str) -> None:
        self.mode = mode
        if mode == "own":
            return
        if mode == "fifo":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(path)
        else:
            self.fd = os.open(path, os.O_RDWR)

    def hold(self, seconds: float) -> None:
        if self.mode == "fifo":
            self.sock.sendall(b"a")
            if self.sock.recv(1) != b"g":
                raise RuntimeError("fake GPU server went away")
            time.sleep(seconds)
            self.sock.sendall(b"r")
        elif self.mode == "own":
            time.sleep(seconds)
        else:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            time.sleep(seconds)
            fcntl.flock(self.fd, fcntl.LOCK_UN)


# --- one job (a child process) --------------------------------------------

def job_main(args) -> None:
    import torch
    from torch.utils.data import DataLoader

    import joaderfs

    torch.set_num_threads(1)
    dataset = joaderfs.JobDataset(args.job, batch_size=args.batch)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    gpu = GpuClient(args.mode, args.gpu)
    step = args.step_ms / 1000.0
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.monotonic()
    images = 0
    ids_per_epoch = []
    for _ in range(args.epochs):
        ids = []
        for _images, _labels, batch_ids in loader:
            gpu.hold(step)
            images += len(batch_ids)
            ids.extend(batch_ids.tolist())
        ids_per_epoch.append(ids)
    end = time.monotonic()
    with open(args.result, "w") as f:
        json.dump({"start": start, "end": end, "images": images,
                   "ids": ids_per_epoch}, f)


# --- the bench ------------------------------------------------------------

def dataset(images: int) -> str:
    """An ImageFolder of `images` generated JPEGs (ImageNet-like sizes),
    made once with build/joaderfs-gendata and cached under build/bench-data."""
    path = BUILD / "bench-data" / f"drift-{images}"
    done = Path(f"{path}.complete")
    if not done.exists():
        subprocess.run(["rm", "-rf", str(path)], check=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(BUILD / "joaderfs-gendata"), str(path), "--images",
                        str(images), "--classes", str(max(10, images // 100)),
                        "--seed", "1"], check=True, stdout=sys.stderr)
        done.touch()
    return str(path)


def run_case(args, binary: str, source: str, decoded_set: int, mode: str,
             steps: list[float], ram_frac: float, drift_bound: str) -> dict:
    from bench.client.client_cost import mount
    from bench.processes import end_processes

    with tempfile.TemporaryDirectory(prefix="jfs-drift-") as tmp:
        work = Path(tmp)
        ram = max(1 << 20, int(decoded_set * ram_frac))
        opts = {"ram_cache": str(ram), "size": str(args.size), "base": str(args.base),
                "seed": "7", "cache_dir": str(work / "cache") if args.disk else "none",
                "log": str(work / "daemon.log"), "drift_bound": drift_bound}
        if args.disk:
            opts["disk_cache"] = str(2 * decoded_set)
        gpu_path = str(work / "gpu")
        server = None
        if mode == "fifo":
            server = FifoGpu(gpu_path)
            server.start()
        else:
            Path(gpu_path).touch()
        daemon = mount(binary, source, work, opts)
        procs = []
        try:
            import joaderfs
            for i, step in enumerate(steps):
                job = joaderfs.make_job(daemon.mnt, f"j{i}", {
                    "epochs": args.epochs, **dict(
                        kv.split("=", 1) for kv in args.spec.split())})
                cmd = [sys.executable, "-m", "bench.scale.drift", "--child",
                       "--job", str(job), "--mode", mode, "--gpu", gpu_path,
                       "--step-ms", str(step), "--batch", str(args.batch),
                       "--workers", str(args.workers), "--epochs", str(args.epochs),
                       "--result", str(work / f"j{i}.json")]
                procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, text=True))
            for p in procs:  # the barrier
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError("a job did not start")
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            for p in procs:
                if p.wait(timeout=args.timeout):
                    raise RuntimeError(f"a job exited with {p.returncode}")
            stats = joaderfs.read_stats(daemon.mnt)
            results = [json.loads((work / f"j{i}.json").read_text())
                       for i in range(len(steps))]
        finally:
            end_processes(procs)
            daemon.cleanup()
            if server:
                server.close()
    pairs = set()
    gpu_seconds = []  # each job's
    for r, step in zip(results, steps):
        gpu_seconds.append(0.0)
        for epoch, ids in enumerate(r["ids"]):
            pairs.update((epoch, i) for i in ids)
            gpu_seconds[-1] += -(-len(ids) // args.batch) * step / 1000.0
    busy = max(gpu_seconds) if mode == "own" else sum(gpu_seconds)
    images = sum(r["images"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "mode": mode, "ram": ram, "ceiling": images / busy,
        "aggregate": images / span,
        "jobs": [r["images"] / (r["end"] - r["start"]) for r in results],
        "alone": [args.batch * 1000.0 / s for s in steps],
        "decoded": stats["decoded"], "distinct": len(pairs),
        "ram_hits": stats["ram_hits"], "disk_hits": stats["disk_hits"],
        "renders": stats["renders"], "images": images,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=10000,
                   help="generated images (cached under build/bench-data)")
    p.add_argument("--data", help="an ImageFolder to use instead")
    p.add_argument("--modes", default="lock,fifo",
                   help="fake GPU modes: lock, fifo (one shared GPU), own (one per job)")
    p.add_argument("--step-ms", default="180,180,180,180",
                   help="one step time per job, in ms (e.g. 180,360 for 1:2)")
    p.add_argument("--ram-frac", default="0.1",
                   help="ram_cache as fractions of the decoded set, e.g. 0.05,0.1,1.5")
    p.add_argument("--disk", action="store_true",
                   help="a disk tier (disk_cache = 2 x the decoded set); default cache_dir=none")
    p.add_argument("--drift-bound", default="1,0",
                   help="the daemon's drift_bound values to compare (1: on, 0: off)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers per job")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--base", type=int, default=256)
    p.add_argument("--spec", default="crop=random flip=0.5",
                   help="each job's spec besides epochs")
    p.add_argument("--joaderfs", default=str(BUILD / "joaderfs"),
                   help="the daemon, or NAME=PATH,NAME=PATH to compare builds")
    p.add_argument("--reps", type=int, default=1, help="runs of each case")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per case")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--gpu", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.step_ms = float(args.step_ms)
        job_main(args)
        return
    for mode in args.modes.split(","):
        if mode not in ("lock", "fifo", "own"):
            p.error(f"unknown mode {mode!r} (lock, fifo, own)")
    steps = [float(s) for s in args.step_ms.split(",")]
    source = os.path.abspath(args.data) if args.data else dataset(args.images)
    images = sum(len(files) for _, _, files in os.walk(source))
    from bench.scale.decode_once import base_set_bytes
    decoded_set = base_set_bytes(source, args.base)

    print(f"drift: {images} images, decoded set {decoded_set / 2**20:.0f} MiB at "
          f"base {args.base}, {len(steps)} jobs, steps {args.step_ms} ms, batch "
          f"{args.batch}, {args.workers} workers per job, {args.epochs} epochs, "
          f"spec '{args.spec}', disk tier {'on' if args.disk else 'off'}, "
          f"{os.cpu_count()} cores\n")
    daemons = [d.split("=", 1) if "=" in d else (Path(d).name, d)
               for d in args.joaderfs.split(",")]
    print("| daemon | mode | drift_bound | ram_cache | ceiling img/s | aggregate img/s | "
          "of ceiling | each job's img/s (alone) | decodes per distinct | "
          "renders per image | ram hits | disk hits |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
          flush=True)
    for frac in [float(f) for f in args.ram_frac.split(",")]:
        for mode, bound, _, (name, binary) in itertools.product(
                args.modes.split(","), args.drift_bound.split(","), range(args.reps),
                daemons):
            r = run_case(args, binary, source, decoded_set, mode, steps, frac, bound)
            jobs = " / ".join(f"{v:.0f} ({a:.0f})" for v, a in zip(r["jobs"], r["alone"]))
            print(f"| {name} | {mode} | {bound} | {frac:g} of set ({r['ram'] / 2**20:.0f} MiB) | "
                  f"{r['ceiling']:.0f} | {r['aggregate']:.0f} | "
                  f"{r['aggregate'] / r['ceiling']:.2f} | {jobs} | "
                  f"{r['decoded'] / r['distinct']:.2f} ({r['decoded']}/{r['distinct']}) | "
                  f"{r['renders'] / r['images']:.2f} | "
                  f"{r['ram_hits']} | {r['disk_hits']} |", flush=True)


if __name__ == "__main__":
    main()
