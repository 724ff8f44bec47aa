#!/usr/bin/env python3
"""Decode-once at scale: jobs as separate processes on a daemonized mount
whose RAM tier holds 5-20% of the decoded set (issue 8).

For each RAM fraction, schedule and sampler it mounts joaderfs the way users
do (daemonized), starts one reader process per job, each reading one epoch
of its own `/jobs/<id>/next`, and prints one table row: decodes per distinct
sample, RAM and disk hits, aggregate samples/s the daemon's CPU per
delivered sample, and beside the decodes the simulator's prediction for the
same schedule (`joaderfs-sim cadence`: the daemon's planning cadence with
jittered readers; no disk tier, so rows with one show "-").

Schedules (4 jobs over the whole dataset):
  same     all start together and read as fast as they can
  stagger  job i starts when job 0 has delivered i/4 of its epoch
  speeds   readers paced at 1:2:3:4 (a sleep per record)

With --augment the 4 jobs differ in size, crop and flip (AUGMENTS below)
and still share one decode per image: the cache holds base images (mount
option base=), so the RAM fraction is of the base images' bytes.

Run it through scripts/bench.sh (Debian's interpreter, PYTHONPATH set):
  scripts/bench.sh scale --images 10000 --fractions 0.05,0.1,0.2
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness.daemon import Mount

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JOADERFS_BUILD", os.path.join(ROOT, "build"))
RECORD_ALIGN = 64

# Four jobs with different augmentations (issue 11: they must still decode
# each image about once).
AUGMENTS = [(224, "crop=center"), (224, "crop=random flip=0.5"),
            (160, "crop=random:0.25-1:0.75-1.33 flip=1"), (192, "crop=center flip=0.5")]


def base_set_bytes(source, base):
    """Bytes of every image's base image: the JPEG scale M/8 (ceil) that
    keeps the shorter side at least `base`, from the headers only. Hidden
    names are left out, as the daemon's scan leaves them (a set's
    `.complete` marker)."""
    from PIL import Image
    total = 0
    for root, folders, files in os.walk(source):
        folders[:] = [f for f in folders if not f.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            w, h = Image.open(os.path.join(root, name)).size
            m = next((m for m in range(1, 9) if (min(w, h) * m + 7) // 8 >= base), 8)
            total += ((w * m + 7) // 8) * ((h * m + 7) // 8) * 3
    return total


def record_bytes(size):
    payload = size * size * 3
    return 64 + (payload + RECORD_ALIGN - 1) // RECORD_ALIGN * RECORD_ALIGN


def read_json(path):
    with open(path) as f:
        return json.load(f)


def run_case(args, source, fraction, schedule, sampler, disk):
    size = args.size
    decoded_set = args.images * size * size * 3
    if args.augment:
        decoded_set = base_set_bytes(source, args.base)
    ram = max(1 << 20, int(decoded_set * fraction))
    workdir = tempfile.mkdtemp(prefix="jfs-scale-")
    cache_dir = os.path.join(workdir, "cache") if disk else "none"
    opts = {"ram_cache": str(ram), "size": str(size), "seed": "7",
            "base": str(args.base), "cache_dir": cache_dir, "log_level": "info",
            "log": os.path.join(args.out, "daemon.log")}
    if disk:
        opts["disk_cache"] = str(2 * decoded_set)
    if sampler == "isa":
        opts["sampler"] = "isa"
    daemon = Mount(source, workdir, opts, foreground=args.foreground,
                   defaults={}, binary=os.path.join(BUILD, "joaderfs"))
    daemon.mount_timeout = 300  # scanning 10000 images
    mnt = daemon.mnt
    readers = []
    try:
        daemon.start()
        jobs = ["j%d" % i for i in range(4)]
        for j in jobs:
            os.mkdir(os.path.join(mnt, "jobs", j))
            with open(os.path.join(mnt, "jobs", j, "spec"), "w") as f:
                i = jobs.index(j)
                f.write("epochs=1" + (" size=%d %s" % AUGMENTS[i] if args.augment else ""))
        cpu0 = daemon.cpu()
        t0 = time.monotonic()
        def start(i):
            rec = record_bytes(AUGMENTS[i][0] if args.augment else size)
            delay = 0.0
            if schedule == "speeds":
                delay = args.pace / (i + 1)
            readers.append(subprocess.Popen(
                [sys.executable, "-m", "bench.scale.reader",
                 os.path.join(mnt, "jobs", jobs[i], "next"), str(rec), str(delay)],
                stdout=subprocess.PIPE, text=True))

        if schedule == "stagger":
            start(0)
            for i in range(1, 4):
                target = args.images * i // 4
                while read_json(os.path.join(mnt, "jobs", "j0", "status"))["delivered"] < target:
                    time.sleep(0.05)
                start(i)
        else:
            for i in range(4):
                start(i)
        counts = [int(r.communicate()[0]) for r in readers]
        wall = time.monotonic() - t0
        cpu = daemon.cpu() - cpu0
        stats = read_json(os.path.join(mnt, "stats"))
    finally:
        for r in readers:
            if r.poll() is None:
                r.kill()
        daemon.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    delivered = sum(counts)
    predicted = None
    if not disk:
        sim = [os.path.join(BUILD, "joaderfs-sim"), "cadence",
               "--jobs", ";".join(["0-%d" % (args.images - 1)] * 4),
               "--ram", str(max(1, int(args.images * fraction))), "--sampler", sampler,
               "--min-lookahead", str(4 * os.cpu_count())]
        if schedule == "stagger":
            sim += ["--starts", ",".join(str(args.images * i // 4) for i in range(4))]
        if schedule == "speeds":
            sim += ["--speeds", "1,2,3,4"]
        out = subprocess.run(sim, check=True, capture_output=True, text=True).stdout
        fields = dict(f.split("=") for f in out.split())
        predicted = int(fields["misses"]) / int(fields["union"])
    return {
        "ram": "%d%%" % round(fraction * 100), "disk": "yes" if disk else "no",
        "schedule": schedule, "sampler": sampler,
        "decodes/distinct": stats["decoded"] / args.images,
        "sim": "-" if predicted is None else "%.2f" % predicted,
        "ram_hits": stats["ram_hits"], "disk_hits": stats["disk_hits"],
        "samples/s": delivered / wall,
        "cpu ms/sample": 1000 * cpu / max(delivered, 1),
        "delivered": delivered,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=10000)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--base", type=int, default=256)
    p.add_argument("--augment", action="store_true",
                   help="jobs with different size, crop and flip (AUGMENTS)")
    p.add_argument("--fractions", default="0.05,0.1,0.2")
    p.add_argument("--schedules", default="same,stagger,speeds")
    p.add_argument("--samplers", default="dsa,isa")
    p.add_argument("--disk", default="no,yes", help="no, yes or both")
    p.add_argument("--pace", type=float, default=0.004,
                   help="seconds per record of the slowest job in 'speeds'")
    p.add_argument("--data", help="dataset folder (generated if missing)")
    p.add_argument("--foreground", action="store_true",
                   help="run the daemon with -f (to compare with the default)")
    p.add_argument("--out", default=tempfile.gettempdir())
    args = p.parse_args()
    data = args.data or os.path.join(tempfile.gettempdir(), "jfs-scale-%d" % args.images)
    if not os.path.isdir(data):
        subprocess.run([os.path.join(BUILD, "joaderfs-gendata"), data, "--images",
                        str(args.images), "--classes", "100"], check=True)
    rows = []
    columns = ["ram", "disk", "schedule", "sampler", "decodes/distinct", "sim", "ram_hits",
               "disk_hits", "samples/s", "cpu ms/sample", "delivered"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for fraction in [float(f) for f in args.fractions.split(",")]:
        for disk in args.disk.split(","):
            for schedule in args.schedules.split(","):
                for sampler in args.samplers.split(","):
                    row = run_case(args, data, fraction, schedule, sampler, disk == "yes")
                    rows.append(row)
                    cells = []
                    for c in columns:
                        v = row[c]
                        cells.append("%.2f" % v if isinstance(v, float) else str(v))
                    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
