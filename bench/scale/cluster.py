#!/usr/bin/python3
"""Cluster: two daemons x two jobs sharing decodes through the remote tier
(issue 27), on this one machine.

Every case reads one epoch of 4 jobs (same subset, no augmentation) of a
generated set of photo-sized JPEGs (joaderfs-gendata, ImageNet-like sizes),
each daemon with RAM at --ram of the decoded set and no disk tier:

  one daemon   all 4 jobs on one daemon (the aggregate's reference)
  2 x 2, none  2 daemons x 2 jobs, no remote tier: each daemon decodes the
               set for its own jobs
  2 x 2, tier  the same over 3 memcached servers on loopback
               (remote_cache=), the jobs with group= (the same order on
               both daemons, leases)
  2 x 2, tier, no group  the same without group=: the daemons' orders differ

Columns: decodes per distinct image (sum of /stats decoded over daemons /
images), aggregate samples/s (all deliveries / wall), its ratio to the one
daemon case, remote-tier bytes (fetched + published) and SOURCE bytes read
per delivered sample; medians of --reps runs, with several --joaderfs
builds side by side (sealed values against a build that does not seal). Then the get latency of a 200 KB and a 12 KB value
from one memcached over loopback (median of --gets, a persistent
text-protocol socket, Python), and from redis-server the same way where it
is installed (scripts/bench.sh installs it: the engine choice,
docs/design.md 3.2), and the decode CPU per image, from which the paper
estimate in docs/benchmarks.md follows.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench.scale.decode_once import base_set_bytes, read_json, record_bytes
from bench.scale.fast_store import stop_process, wait_for_port
from harness.daemon import Mount
from harness.memcached import Memcached, free_port

BUILD = os.environ.get("JOADERFS_BUILD", os.path.join(os.path.dirname(__file__), "..", "..",
                                                      "build"))


def seals(binary):
    """Whether this daemon seals the tier's values (remote_key=): builds
    from before the cluster key do not take the option."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    return "remote_key" in out


def run_case(args, binary, source, decoded_set, daemons, servers, group):
    ram = max(1 << 20, int(decoded_set * args.ram))
    mounts = []
    readers = []
    workdir = tempfile.mkdtemp(prefix="jfs-cluster-")
    try:
        for d in range(daemons):
            opts = {"ram_cache": str(ram), "size": str(args.size), "base": str(args.base),
                    "seed": "7", "cache_dir": "none", "threads": str(args.threads),
                    "log_level": "info"}
            if servers:
                opts["remote_cache"] = "memcached://" + "+".join(s.address for s in servers)
                if seals(binary):
                    opts["remote_key"] = args.key_file
            m = Mount(source, os.path.join(workdir, "d%d" % d), opts, defaults={},
                      binary=binary)
            m.mount_timeout = 120
            mounts.append(m)
            m.start()
        spec = "epochs=1 seed=5" + (" group=bench" if group else "")
        jobs = [(m, "j%d" % k) for k in range(4 // daemons) for m in mounts]
        for m, j in jobs:
            m.mkjob(j, spec=spec)
        rec = record_bytes(args.size)
        t0 = time.monotonic()
        for m, j in jobs:
            readers.append(subprocess.Popen(
                [sys.executable, "-m", "bench.scale.reader", m.path("jobs", j, "next"),
                 str(rec), "0"], stdout=subprocess.PIPE, text=True))
        delivered = sum(int(r.communicate()[0]) for r in readers)
        wall = time.monotonic() - t0
        stats = [m.stats() for m in mounts]
    finally:
        for r in readers:
            if r.poll() is None:
                r.kill()
        for m in mounts:
            m.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    total = lambda key: sum(s.get(key, 0) for s in stats)
    return {
        "decodes/distinct": total("decoded") / args.images,
        "samples/s": delivered / wall,
        "tier B/sample": (total("remote_bytes_in") + total("remote_bytes_out")) /
        max(delivered, 1),
        "source B/sample": total("source_bytes") / max(delivered, 1),
        "remote hits": total("remote_hits"),
        "lease waits": total("remote_lease_waits"),
        "decode ms/image": 1000 * total("decode_busy_seconds") / max(total("decoded"), 1),
        "delivered": delivered,
    }


def reply_latency(port, request, reply_bytes, gets):
    """Median seconds from sending `request` to 127.0.0.1:`port` until
    `reply_bytes` bytes came back, over one persistent connection."""
    times = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(reply_bytes)
        for _ in range(gets):
            t = time.perf_counter()
            s.sendall(request)
            view = memoryview(buf)
            got = 0
            while got < reply_bytes:
                n = s.recv_into(view[got:])
                if not n:
                    raise OSError("the server closed the connection")
                got += n
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def get_latency(server, size, gets):
    """Median seconds of one memcached get of a `size`-byte value."""
    server.set("bench:latency", os.urandom(size))
    want = len(b"VALUE bench:latency 0 %d\r\n" % size) + size + len(b"\r\nEND\r\n")
    return reply_latency(server.port, b"get bench:latency\r\n", want, gets)


def resp(*args):
    """A Redis command in RESP, its arguments bytes."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def redis_get_latency(size, gets):
    """Median seconds of one GET of a `size`-byte value from Debian's
    redis-server on loopback (no persistence), for the engine choice
    (docs/design.md 3.2); None without redis-server."""
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    port = free_port()
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, server, "redis-server")
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(resp(b"SET", b"bench:latency", os.urandom(size)))
            assert s.recv(16).startswith(b"+OK")
        want = len(b"$%d\r\n" % size) + size + 2
        return reply_latency(port, resp(b"GET", b"bench:latency"), want, gets)
    finally:
        stop_process(server)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=600)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--base", type=int, default=256)
    p.add_argument("--ram", type=float, default=0.1, help="RAM per daemon, share of the set")
    p.add_argument("--threads", type=int, default=2, help="decode threads per daemon")
    p.add_argument("--gets", type=int, default=2000)
    p.add_argument("--data", help="dataset folder (generated if missing)")
    p.add_argument("--reps", type=int, default=1, help="runs of every case; medians shown")
    p.add_argument("--joaderfs", default="this=" + os.path.join(BUILD, "joaderfs"),
                   help="NAME=PATH[,NAME=PATH...]: daemons compared in one run, their cases "
                   "interleaved within each rep (a build without remote_key= runs unsealed)")
    args = p.parse_args()
    binaries = [tuple(b.split("=", 1)) for b in args.joaderfs.split(",")]
    keydir = tempfile.mkdtemp(prefix="jfs-cluster-key-")
    args.key_file = os.path.join(keydir, "cluster.key")
    fd = os.open(args.key_file, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, os.urandom(32).hex().encode())
    os.close(fd)
    data = args.data or os.path.join(tempfile.gettempdir(), "jfs-cluster-%d" % args.images)
    if not os.path.isdir(data):
        subprocess.run([os.path.join(BUILD, "joaderfs-gendata"), data, "--images",
                        str(args.images), "--classes", "10", "--seed", "3"], check=True,
                       stdout=subprocess.DEVNULL)
    decoded_set = base_set_bytes(data, args.base)
    print("%d images, decoded set %.0f MiB (base %d), RAM %.0f%% per daemon, %d decode "
          "threads per daemon, no disk tier" % (args.images, decoded_set / 2**20, args.base,
                                                100 * args.ram, args.threads))
    servers = [Memcached(memory_mb=max(64, 2 * decoded_set >> 20)) for _ in range(3)]
    try:
        cases = [("one daemon, 4 jobs", 1, False, False),
                 ("2 x 2, no tier", 2, False, False),
                 ("2 x 2, tier, group=", 2, True, True),
                 ("2 x 2, tier, no group", 2, True, False)]
        columns = ["decodes/distinct", "samples/s", "vs one", "tier B/sample",
                   "source B/sample", "remote hits", "lease waits", "decode ms/image"]
        runs = {}  # (binary name, case name) -> rows
        for rep in range(args.reps):
            for bname, binary in binaries:
                one = None
                for name, daemons, tier, group in cases:
                    for s in servers:
                        s.kill()
                        if tier:
                            s.start()  # empty for each case
                    row = run_case(args, binary, data, decoded_set, daemons,
                                   servers if tier else [], group)
                    one = one or row["samples/s"]
                    row["vs one"] = row["samples/s"] / one
                    runs.setdefault((bname, name), []).append(row)
                    print("rep %d %s %s: %.0f samples/s, %.2f decodes/distinct"
                          % (rep, bname, name, row["samples/s"], row["decodes/distinct"]),
                          file=sys.stderr, flush=True)
        names = [b for b, _ in binaries]
        print("| case | " + ("joaderfs | " if len(names) > 1 else "") + " | ".join(columns) +
              " |")
        print("|---|" + "---|" * (len(columns) + (len(names) > 1)))
        for name, _, _, _ in cases:
            for bname in names:
                rows = runs[(bname, name)]
                cells = []
                for c in columns:
                    v = statistics.median(r[c] for r in rows)
                    cells.append("%.2f" % v if isinstance(v, float) else "%g" % v)
                print("| %s | %s%s |" % (name, bname + " | " if len(names) > 1 else "",
                                         " | ".join(cells)), flush=True)
        if servers[0].proc is None:  # the last case left them running
            servers[0].start()
        for size in (200 * 1000, 12 * 1000):
            lat = get_latency(servers[0], size, args.gets)
            print("memcached get of a %d KB value over loopback: median %.0f us (%.2f GB/s)"
                  % (size // 1000, lat * 1e6, size / lat / 1e9))
            lat = redis_get_latency(size, args.gets)
            if lat is not None:
                print("redis GET of a %d KB value over loopback: median %.0f us (%.2f GB/s)"
                      % (size // 1000, lat * 1e6, size / lat / 1e9))
    finally:
        for s in servers:
            s.cleanup()
        shutil.rmtree(keydir, ignore_errors=True)


if __name__ == "__main__":
    main()
