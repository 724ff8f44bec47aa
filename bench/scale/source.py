#!/usr/bin/env python3
"""SOURCE in object storage vs on local disk (issue 26): 4 jobs, one epoch
each, RAM tier at 10% of the base images' bytes, no disk tier, over

  local     the ImageFolder tree on disk
  s3        the same tree as keys of a bucket on a loopback S3 server:
            --store rclone (the default), `rclone serve s3` over the tree
            behind HAProxy (bench/scale/fast_store.py), which answers at
            the speed of its round trip; --store moto, the tests' moto
            (tests/harness/s3.py) behind their Python proxy, which bounds
            the rate by its own (about 400 GETs/s on 2 cores)
  s3+Nms    the same with N ms added to every request by the proxy

each with plan-driven reads (the default: as many reads in flight as the
measured round trip needs, loader/source_reader.h) and with
`source_reads=THREADS` (one read per decode thread in flight, which is what
synchronous reads on the decode threads gave) beside it; then, for the
comparison with an S3 FUSE client under SOURCE (docs/design.md 2.1), the
same bucket through the same proxies mounted with s3fs (Debian's s3fs,
which scripts/bench.sh source installs) and read by joaderfs as a local
tree:

  s3fs      joaderfs over an s3fs mount of the bucket, through the proxy
  s3fs+Nms  the same with N ms added to every request

with joaderfs's reads of a local tree (the default: one per decode thread)
and with `source_reads=N` (--s3fs-reads, as many as the s3:// default
takes at that round trip). One row per case: samples/s over the 4 jobs
(the readers' wall time), the rate as a fraction of the local tree's with
the same reads (the s3fs rows: of the local default), decodes per distinct
sample, the GETs and all requests the store saw (listings and HEADs too,
the mount's included), the mount's seconds (the scan), and I/O wait.
With --reps N every row is run once a rep, the rows interleaved (a rep
runs the rows of one kind of reads back to back, local among them, in an
order reversed every other rep), and the table gives each row's median
run (stderr: every run's rate) and, as "per rep, x local", the median and
range of each run's rate over the local run of its rep.

On a small machine a loopback store takes CPU from the decoders:
--store-cpus LIST runs the store and its proxies on those CPUs and the
daemons and readers on the others (the local tree too), as if the store
were another machine.

Run it through scripts/bench.sh (Debian's interpreter, PYTHONPATH set):
  scripts/bench.sh source --delay-ms 20
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
from bench.scale.fast_store import DelayingFront, RcloneS3

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JOADERFS_BUILD", os.path.join(ROOT, "build"))


class S3fsMount:
    """The bucket's PREFIX mounted with s3fs at a temporary folder through
    `endpoint`, with the S3 server's credentials; stop() unmounts it."""

    def __init__(self, s3, bucket, prefix, endpoint):
        self.dir = tempfile.mkdtemp(prefix="jfs-s3fs-")
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        passwd = os.path.join(self.dir, "passwd")
        with open(os.open(passwd, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("%s:%s\n" % (s3.access_key, s3.secret_key))
        # Its defaults otherwise: no local cache (use_cache unset), its own
        # read-ahead and stat cache.
        subprocess.run(["s3fs", "%s:/%s" % (bucket, prefix), self.mnt,
                        "-o", "url=" + endpoint, "-o", "use_path_request_style",
                        "-o", "endpoint=us-east-1", "-o", "passwd_file=" + passwd,
                        "-o", "ro"], check=True)
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.mnt):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("s3fs did not mount %s:/%s" % (bucket, prefix))
            time.sleep(0.1)

    def stop(self):
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-u", self.mnt], check=False)
            deadline = time.monotonic() + 10
            while os.path.ismount(self.mnt) and time.monotonic() < deadline:
                time.sleep(0.1)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_case(args, source, extra, env):
    workdir = tempfile.mkdtemp(prefix="jfs-source-")
    opts = {"ram_cache": str(args.ram), "size": str(args.size), "seed": "7",
            "base": str(args.base), "cache_dir": "none", "threads": str(args.threads),
            "log_level": "info", "log": os.path.join(args.out, "daemon.log")}
    opts.update(dict(o.split("=", 1) for o in args.option))
    opts.update(extra)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    daemon = Mount(source, workdir, opts, defaults={},
                   binary=os.path.join(BUILD, "joaderfs"))
    daemon.mount_timeout = 300
    readers = []
    try:
        t_mount = time.monotonic()
        daemon.start()
        mount_s = time.monotonic() - t_mount
        mnt = daemon.mnt
        for i in range(args.jobs):
            os.mkdir(os.path.join(mnt, "jobs", "j%d" % i))
            with open(os.path.join(mnt, "jobs", "j%d" % i, "spec"), "w") as f:
                f.write(" ".join(["epochs=1"] + args.spec))
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
            "mount_s": mount_s, "decodes_per_distinct": stats["decoded"] / args.images,
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
    p.add_argument("--s3fs-reads", type=int, default=32,
                   help="source_reads of the second s3fs row of each delay")
    p.add_argument("--no-s3fs", action="store_true", help="leave out the s3fs rows")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a mount option for every daemon (repeatable)")
    p.add_argument("--spec", action="append", default=[], metavar="KEY=VALUE",
                   help="a spec key for every job, beside epochs=1 (repeatable)")
    p.add_argument("--store", choices=("rclone", "moto"), default="rclone",
                   help="rclone serve s3 behind HAProxy (bench/scale/fast_store.py), or moto "
                   "behind the tests' Python proxy (the store is then the bottleneck)")
    p.add_argument("--store-cpus", metavar="LIST",
                   help="run the store and its proxies on these CPUs (e.g. 1) and the daemon "
                   "and its readers on the others, as if the store were another machine: on a "
                   "small machine a loopback store otherwise takes the decoders' cores")
    p.add_argument("--out", default=os.path.join(BUILD, "bench-out", "source"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    args.images = sum(len(files) for _, _, files in os.walk(args.data))
    args.ram = max(1 << 20, int(base_set_bytes(args.data, args.base) * args.fraction))

    node_cpus = None
    if args.store_cpus:
        store_cpus = {int(c) for c in args.store_cpus.split(",")}
        node_cpus = os.sched_getaffinity(0) - store_cpus
        if not node_cpus or not store_cpus <= os.sched_getaffinity(0):
            p.error("--store-cpus must name some but not all of this process's CPUs")
        os.sched_setaffinity(0, store_cpus)  # what the store's processes inherit
    if args.store == "rclone":
        s3 = RcloneS3(args.data, "bench", "train")
        front = DelayingFront
    else:
        s3 = S3Server()
        s3.bucket("bench")
        s3.upload_tree("bench", "train", args.data)
        front = Proxy
    proxies = []
    try:
        fast = front(s3.port)
        proxies.append(fast)
        slow = front(s3.port, delay=args.delay_ms / 1000.0)
        proxies.append(slow)
        if node_cpus:
            os.sched_setaffinity(0, node_cpus)  # the daemons and readers from here on
        sync = "sync (source_reads=%d)" % args.threads
        both = (("plan-driven", {}), (sync, {"source_reads": str(args.threads)}))
        # (name, SOURCE or an s3fs proxy, options, environment, reads, rate base)
        cases = [("local", args.data, {}, {}, both, None),
                 ("s3", "s3://bench/train", {"s3_endpoint": fast.endpoint}, s3.env(), both,
                  fast),
                 ("s3+%gms" % args.delay_ms, "s3://bench/train",
                  {"s3_endpoint": slow.endpoint}, s3.env(), both, slow)]
        if not args.no_s3fs:
            local_reads = (("local default (%d)" % args.threads, {}),
                           ("source_reads=%d" % args.s3fs_reads,
                            {"source_reads": str(args.s3fs_reads)}))
            cases += [("s3fs", fast, {}, {}, local_reads, fast),
                      ("s3fs+%gms" % args.delay_ms, slow, {}, {}, local_reads, slow)]
        cells = [(name, source, opts, env, reads, extra, proxy)
                 for name, source, opts, env, reads_list, proxy in cases
                 for reads, extra in reads_list]
        # Reps outermost, every cell once a rep: a machine that slows or
        # speeds up over minutes moves every row alike, not one row. Within
        # a rep the cells of one kind of reads (the first of each case's, then
        # the second) run back to back, so that a run and the local run it is
        # divided by are seconds apart, in an order reversed every other rep,
        # so that a drift within a rep favours the local run in half the reps
        # and the others in the rest.
        kinds = [i for *_, reads_list, _ in cases for i in range(len(reads_list))]
        by_reads = [[c for c, kind in zip(cells, kinds) if kind == i] for i in range(2)]
        runs = {(name, reads): [] for name, _, _, _, reads, _, _ in cells}
        for rep in range(args.reps):
            sequence = [c for group in by_reads
                        for c in (group if rep % 2 == 0 else group[::-1])]
            for name, source, opts, env, reads, extra, proxy in sequence:
                s3fs = None
                if proxy:
                    proxy.reset_counts()
                try:
                    if isinstance(source, (Proxy, DelayingFront)):
                        s3fs = S3fsMount(s3, "bench", "train", source.endpoint)
                        path = s3fs.mnt
                    else:
                        path = source
                    r = run_case(args, path, dict(opts, **extra), env)
                finally:
                    if s3fs:
                        s3fs.stop()
                r["gets"] = proxy.total_gets() if proxy else 0
                r["requests"] = proxy.requests if proxy else 0
                runs[(name, reads)].append(r)
                print("run %d: %s, %s: %.0f samples/s" % (rep + 1, name, reads, r["rate"]),
                      file=sys.stderr, flush=True)
        print("| SOURCE | reads | samples/s | x local | per rep, x local | decodes/distinct "
              "| GETs | requests | mount s | I/O wait s |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        rows = []
        local_rate = {}
        local_runs = {}
        for name, source, opts, env, reads, extra, proxy in cells:
            in_order = runs[(name, reads)]
            cell_runs = sorted(in_order, key=lambda r: r["rate"])
            r = cell_runs[len(cell_runs) // 2]  # the median
            if name == "local":
                local_rate[reads] = r["rate"]
                local_runs[reads] = in_order
            base = reads if reads in local_rate else "plan-driven"
            ratio = r["rate"] / local_rate[base]
            # Each run over the local run of the same rep, minutes apart at
            # most: the paired figure, steadier than the ratio of medians
            # where the machine drifts between reps.
            paired = sorted(a["rate"] / b["rate"] for a, b in zip(in_order, local_runs[base]))
            rows.append(dict(r, source=name, reads=reads, ratio=ratio,
                             paired_ratios=paired))
            print("| %s | %s | %.0f | %.2f | %.2f (%.2f-%.2f) | %.2f | %d | %d | %.1f | %.1f |"
                  % (name, reads, r["rate"], ratio, paired[len(paired) // 2], paired[0],
                     paired[-1], r["decodes_per_distinct"], r["gets"], r["requests"],
                     r["mount_s"], r["io_wait"]), flush=True)
        with open(os.path.join(args.out, "source.json"), "w") as f:
            json.dump(rows, f, indent=1)
    finally:
        for proxy in proxies:
            proxy.stop()
        s3.stop()


if __name__ == "__main__":
    main()
