#!/usr/bin/env python3
"""SOURCE in object storage vs on local disk (issue 26): 4 jobs, one epoch
each, RAM tier at 10% of the base images' bytes, no disk tier, over

  local     the ImageFolder tree on disk
  s3        the same tree as keys of a bucket on a loopback S3 server (moto,
            tests/harness/s3.py), through the harness's proxy
  s3+Nms    the same with N ms added to every request by the proxy

each with plan-driven reads (the default: as many reads in flight as the
measured round trip needs, loader/source_reader.h) and with
`source_reads=THREADS` (one read per decode thread in flight, which is what
synchronous reads on the decode threads gave) beside it. One row per case:
samples/s over the 4 jobs, decodes per distinct sample, GETs, and the rate
as a fraction of the local tree's with the same reads.

Run it through scripts/bench.sh (Debian's interpreter, PYTHONPATH set):
  scripts/bench.sh source --images 600 --delay-ms 20
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
from harness.s3 import Proxy, S3Server

from bench.scale.decode_once import base_set_bytes, read_json, record_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JOADERFS_BUILD", os.path.join(ROOT, "build"))


def run_case(args, source, extra, env):
    workdir = tempfile.mkdtemp(prefix="jfs-source-")
    opts = {"ram_cache": str(args.ram), "size": str(args.size), "seed": "7",
            "base": str(args.base), "cache_dir": "none", "threads": str(args.threads),
            "log_level": "info", "log": os.path.join(args.out, "daemon.log")}
    opts.update(extra)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    daemon = Mount(source, workdir, opts, defaults={},
                   binary=os.path.join(BUILD, "joaderfs"))
    daemon.mount_timeout = 300
    readers = []
    try:
        daemon.start()
        mnt = daemon.mnt
        for i in range(args.jobs):
            os.mkdir(os.path.join(mnt, "jobs", "j%d" % i))
            with open(os.path.join(mnt, "jobs", "j%d" % i, "spec"), "w") as f:
                f.write("epochs=1")
        t0 = time.monotonic()
        for i in range(args.jobs):
            readers.append(subprocess.Popen(
                [sys.executable, "-m", "bench.scale.reader",
                 os.path.join(mnt, "jobs", "j%d" % i, "next"),
                 str(record_bytes(args.size)), "0"], stdout=subprocess.PIPE, text=True))
        counts = [int(r.communicate()[0]) for r in readers]
        wall = time.monotonic() - t0
        stats = read_json(os.path.join(mnt, "stats"))
    finally:
        for r in readers:
            if r.poll() is None:
                r.kill()
        daemon.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    delivered = sum(counts)
    return {"rate": delivered / wall, "delivered": delivered, "wall": wall,
            "decodes_per_distinct": stats["decoded"] / args.images,
            "gets": stats.get("source_requests", 0),
            "io_wait": stats.get("source_read_seconds", 0.0)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="an ImageFolder tree")
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--base", type=int, default=256)
    p.add_argument("--fraction", type=float, default=0.1)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--out", default=os.path.join(BUILD, "bench-out", "source"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.images = sum(len(files) for _, _, files in os.walk(args.data))
    args.ram = max(1 << 20, int(base_set_bytes(args.data, args.base) * args.fraction))

    s3 = S3Server()
    proxies = []
    try:
        s3.bucket("bench")
        s3.upload_tree("bench", "train", args.data)
        fast = Proxy(s3.port)
        slow = Proxy(s3.port, delay=args.delay_ms / 1000.0)
        proxies = [fast, slow]
        cases = [("local", args.data, {}, {}),
                 ("s3", "s3://bench/train", {"s3_endpoint": fast.endpoint}, s3.env()),
                 ("s3+%gms" % args.delay_ms, "s3://bench/train",
                  {"s3_endpoint": slow.endpoint}, s3.env())]
        rows = []
        local_rate = {}
        print("| SOURCE | reads | samples/s | x local | decodes/distinct | GETs | I/O wait s |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, source, opts, env in cases:
            for reads, extra in (("plan-driven", {}),
                                 ("sync (source_reads=%d)" % args.threads,
                                  {"source_reads": str(args.threads)})):
                runs = [run_case(args, source, dict(opts, **extra), env)
                        for _ in range(args.reps)]
                runs.sort(key=lambda r: r["rate"])
                r = runs[len(runs) // 2]  # the median
                if name == "local":
                    local_rate[reads] = r["rate"]
                ratio = r["rate"] / local_rate[reads]
                rows.append(dict(r, source=name, reads=reads, ratio=ratio))
                print("| %s | %s | %.0f | %.2f | %.2f | %d | %.1f |"
                      % (name, reads, r["rate"], ratio, r["decodes_per_distinct"],
                         r["gets"], r["io_wait"]), flush=True)
        with open(os.path.join(args.out, "source.json"), "w") as f:
            json.dump(rows, f, indent=1)
    finally:
        for proxy in proxies:
            proxy.stop()
        s3.stop()


if __name__ == "__main__":
    main()
