#!/usr/bin/env python3
"""The catalog at scale (issue 44): what a mount of an ImageNet-sized tree
costs in time and memory, fresh, remounted and restarted over a full disk
tier, against torchvision's ImageFolder over the same tree.

Trees: ImageNet-shaped (1000 class folders, nXXXXXXXX/nXXXXXXXX_I.JPEG) of
small distinct JPEGs (one 16 x 16 image, each file with a COM segment that
holds its index), made once and cached under build/bench-data:
catalog-128k (128,000 files), catalog-1280k (1,281,000), catalog-5m
(5,001,024, with --big) and catalog-1k (1000: the small mount the
per-sample memory is measured against). A tree is complete once its
DIR.complete marker exists; a half-made one is made again.

For each size, --reps runs (medians are printed), every daemon mounted
daemonized as users run it (harness.daemon.Mount), unmounted and reaped on
exit, error or Ctrl-C:

  fresh mount    an empty cache_dir: wall seconds from the launch until
                 /stats answers, the daemon's CPU seconds then (utime +
                 stime of /proc/PID/stat), seconds from the launch until
                 /stats identities_pending is 0 (the pass of stats after
                 the listing ended, docs/design.md 2.1), its VmRSS 2 s
                 after that (after the idle reaper's trim) and (RSS - RSS
                 of the 1k mount) / (N - 1000): bytes per sample;
  manifest       /dataset/manifest read whole in 1 MiB reads: seconds, and
                 the daemon's peak RSS growth (VmHWM reset through
                 clear_refs before, else VmRSS sampled every 10 ms);
  random subset  a job with subset=random:0.5:7: seconds from mkdir to the
                 spec write's return, and to its first record;
  remount        the same cache_dir (a few samples cached): seconds until
                 /stats answers, until every identity is taken, VmRSS;
  full tier      (128k; 1.28M with --big) ram_cache at 10% of the decoded
                 set, one job reads a whole epoch at size=64: samples/s,
                 /stats disk_entries and disk_write_drops, the daemon's RSS
                 at the end and its peak against the documented bound;
                 then unmounted and remounted over that cache_dir: seconds
                 until /stats answers and (RSS - RSS of the same mount
                 fresh) / disk_entries;
  anchors        torchvision ImageFolder(DIR) in a fresh interpreter:
                 seconds and its RSS growth per sample; `find DIR -type f |
                 wc -l`: seconds.

The page cache is not dropped (that needs root and hits everyone on the
machine): one `find` over the tree before measuring makes every run warm.
The last line extrapolates mount time and RSS linearly to 14M samples.

Run it through scripts/bench.sh:
  scripts/bench.sh scale-catalog --sizes 128k,1280k --reps 3
"""

import argparse
import csv
import io
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import Pool

from bench.scale.decode_once import record_bytes
from harness.daemon import Mount
from harness.procfs import proc_cpu, proc_status_kib, reset_peak

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("JOADERFS_BUILD", os.path.join(ROOT, "build"))

CLASSES = 1000
SIZES = {"1k": 1000, "128k": 128_000, "1280k": 1_281_000, "5m": 5_001_024}
TINY = "1k"
SIDE = 16               # the JPEGs' width and height
OUT_SIZE = 64           # the epoch's spec size
SETTLE = 2.0            # seconds between a mount and its RSS (the idle trim runs each second)
EXTRAPOLATE_TO = 14_000_000
MIB = 1 << 20

# Targets of issue 44.
T_BYTES_PER_SAMPLE = 64
T_REMOUNT_1280K = 1.5
T_FULL_RESTART_128K = 1.0
T_BYTES_PER_CACHED = 128


# -- the trees

def jpeg_template():
    """A 16 x 16 JPEG, split after SOI so a COM segment fits in between."""
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (SIDE, SIDE), (120, 60, 200)).save(buf, "JPEG", quality=75)
    data = buf.getvalue()
    assert data[:2] == b"\xff\xd8"
    return data[:2], data[2:]


def class_counts(n):
    """Files per class: n spread over CLASSES, the first n % CLASSES get one more."""
    q, r = divmod(n, CLASSES)
    return [q + (1 if c < r else 0) for c in range(CLASSES)]


def write_classes(task):
    """Writes the classes [first, last) of a tree (a Pool worker)."""
    root, n, first, last = task
    soi, rest = jpeg_template()
    counts = class_counts(n)
    index = sum(counts[:first])
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for c in range(first, last):
        wnid = "n%08d" % c
        folder = os.path.join(root, wnid)
        os.makedirs(folder, exist_ok=True)
        for i in range(counts[c]):
            comment = b"joaderfs-bench %d" % index
            data = soi + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + rest
            fd = os.open(os.path.join(folder, "%s_%d.JPEG" % (wnid, i)), flags, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            index += 1
    return last - first


def tree(name, workers=2):
    """The tree of SIZES[name] under build/bench-data, made if missing."""
    n = SIZES[name]
    root = os.path.join(BUILD, "bench-data", "catalog-" + name)
    marker = root + ".complete"
    if os.path.exists(marker):
        return root
    if os.path.exists(root):
        log("catalog: %s is half-made (no %s): removing it" % (root, os.path.basename(marker)))
        shutil.rmtree(root)
    os.makedirs(root)
    t0 = time.monotonic()
    step = 25
    tasks = [(root, n, c, min(c + step, CLASSES)) for c in range(0, CLASSES, step)]
    with Pool(workers) as pool:
        for _ in pool.imap_unordered(write_classes, tasks):
            pass
    with open(marker, "w") as f:
        f.write("%d\n" % n)
    log("catalog: generated %s (%d files) in %.1f s" % (root, n, time.monotonic() - t0))
    return root


def log(text):
    print(text, file=sys.stderr, flush=True)


# -- mounts and figures

class MountFailed(Exception):
    pass


def rss(pid):
    kib = proc_status_kib(pid, "VmRSS")
    if kib is None:
        raise AssertionError("joaderfs (pid %d) is gone" % pid)
    return kib * 1024


class Run:
    """One daemonized mount of `source` in a folder of `work`, cleaned up on
    exit whatever happens (main's finally and signal handlers)."""

    live = set()

    def __init__(self, args, source, work, name, options):
        self.mount = Mount(source, os.path.join(work, name), options, defaults={},
                           binary=args.joaderfs)
        self.mount.mount_timeout = 600  # a 5M-file scan on a loaded machine

    def start(self):
        """Mounts; returns the wall seconds from the launch until /stats
        answers, and the monotonic time of the launch."""
        Run.live.add(self)
        t0 = time.monotonic()
        try:
            self.mount.start()
            self.mount.read_text("stats")
        except (AssertionError, subprocess.TimeoutExpired) as e:
            self.stop()
            raise MountFailed(str(e)) from None
        return time.monotonic() - t0, t0

    def identities_taken(self, t0, timeout=600.0):
        """Seconds from the launch until /stats identities_pending is 0 (the
        identity pass after the listing ended), polled every 10 ms."""
        while self.mount.stats()["identities_pending"] > 0:
            if time.monotonic() - t0 > timeout:
                raise MountFailed("identities still pending after %.0f s" % timeout)
            time.sleep(0.01)
        return time.monotonic() - t0

    @property
    def pid(self):
        return self.mount.proc.pid

    def stop(self):
        if self not in Run.live:
            return
        self.mount.cleanup()
        Run.live.discard(self)
        problems = self.mount.log_problems()
        if self.mount.returncode not in (0, None):
            log("catalog: joaderfs exited with status %s\n%s"
                % (self.mount.returncode, "\n".join(problems[-20:])))


def options(cache_dir, **extra):
    opts = {"cache_dir": cache_dir, "size": str(OUT_SIZE), "seed": "7", "log_level": "info"}
    opts.update({k: str(v) for k, v in extra.items()})
    return opts


def mount_figures(run):
    """Wall seconds until /stats, CPU seconds then, seconds until every
    file's identity was taken, VmRSS SETTLE s after that."""
    wall, t0 = run.start()
    cpu = proc_cpu(run.pid)
    identities = run.identities_taken(t0)
    time.sleep(SETTLE)
    return {"wall": wall, "cpu": cpu, "identities": identities, "rss": rss(run.pid)}


class RssSampler(threading.Thread):
    """The largest VmRSS of `pid` while running, sampled every 10 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak = pid, 0
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            kib = proc_status_kib(self.pid, "VmRSS") or 0
            self.peak = max(self.peak, kib * 1024)
            self.done.wait(0.01)

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def read_manifest(run):
    """Seconds to read /dataset/manifest whole, and the daemon's peak RSS
    growth meanwhile (VmHWM after a clear_refs reset, else VmRSS sampled)."""
    pid = run.pid
    before = rss(pid)
    try:
        reset_peak(pid)
        hwm = True
    except OSError:
        hwm = False
    sampler = RssSampler(pid)
    sampler.start()
    t0 = time.monotonic()
    lines = 0
    with open(run.mount.path("dataset", "manifest"), "rb", buffering=0) as f:
        while True:
            chunk = f.read(MIB)
            if not chunk:
                break
            lines += chunk.count(b"\n")
    seconds = time.monotonic() - t0
    peak = sampler.stop()
    if hwm:
        peak = max(peak, proc_status_kib(pid, "VmHWM") * 1024)
    return {"manifest_s": seconds, "manifest_growth": peak - before, "manifest_lines": lines}


def random_job(run):
    """A job over subset=random:0.5:7: seconds from its mkdir to the spec
    write's return, and to its first record read from `next`."""
    m = run.mount
    t0 = time.monotonic()
    os.mkdir(m.path("jobs", "half"))
    m.write_spec("half", "subset=random:0.5:7")
    created = time.monotonic() - t0
    fd = os.open(m.path("jobs", "half", "next"), os.O_RDONLY)
    try:
        want, got = record_bytes(OUT_SIZE), 0
        while got < want:
            chunk = os.read(fd, want - got)
            if not chunk:
                raise AssertionError("the subset job's next ended after %d bytes" % got)
            got += len(chunk)
        first = time.monotonic() - t0
    finally:
        os.close(fd)
    size = m.status("half")["subset_size"]
    os.rmdir(m.path("jobs", "half"))  # not kept in the job store for the remount
    return {"job_create_s": created, "job_first_s": first, "job_subset": size}


def settle_disk_writes(run, quiet=1.0, timeout=60.0):
    """/stats once disk_writes has not moved for `quiet` seconds."""
    stats = run.mount.stats()
    last, since = stats["disk_writes"], time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        stats = run.mount.stats()
        if stats["disk_writes"] != last:
            last, since = stats["disk_writes"], time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return stats


def full_tier(args, source, n, work):
    """One job's epoch at size=64 over a fresh cache_dir, then a restart
    over the tier it filled."""
    cache = os.path.join(work, "full-cache")
    decoded_set = n * SIDE * SIDE * 3   # base images: a 16 x 16 JPEG is not scaled
    ram = max(4 * MIB, decoded_set // 10)
    delivery = record_bytes(OUT_SIZE)
    opts = options(cache, ram_cache=ram, disk_cache=max(256 * MIB, 8 * n * 1024))
    out = {"ram_cache": ram}
    run = Run(args, source, work, "full", opts)
    fresh = mount_figures(run)
    reader = None
    try:
        m = run.mount
        os.mkdir(m.path("jobs", "epoch"))
        m.write_spec("epoch", "epochs=1 size=%d" % OUT_SIZE)
        threads = m.stats()["decode_threads"]
        try:
            reset_peak(run.pid)
        except OSError:
            pass
        sampler = RssSampler(run.pid)
        sampler.start()
        t0 = time.monotonic()
        reader = subprocess.Popen([sys.executable, "-m", "bench.scale.reader",
                                   m.path("jobs", "epoch", "next"), str(delivery), "0"],
                                  stdout=subprocess.PIPE, text=True)
        delivered = int(reader.communicate()[0])
        wall = time.monotonic() - t0
        end_rss = rss(run.pid)
        peak = max(sampler.stop(), (proc_status_kib(run.pid, "VmHWM") or 0) * 1024)
        stats = settle_disk_writes(run)
        os.rmdir(m.path("jobs", "epoch"))
    finally:
        if reader is not None and reader.poll() is None:
            reader.kill()
            reader.wait()
        run.stop()
    # docs/cache.md: fixed (the daemon after mount, catalog included)
    # + 1.25 x ram_cache + one delivery per decode thread and per reader
    # + the disk tier's write queue (at most 64 MiB of base images, or the
    # whole decoded set if smaller) + per RocksDB database (the tier's
    # index, the job store) two 4 MiB memtables and an 8 MiB block cache
    # + per tier entry its array slot (at most 24 bytes) and ~2 bytes of
    # index and filter blocks.
    queue = min(64 << 20, n * SIDE * SIDE * 3)
    bound = (fresh["rss"] + 1.25 * ram + (threads + 1) * delivery + queue + 2 * (16 << 20)
             + 26 * stats["disk_entries"])
    out["epoch_over_per_entry"] = (peak - bound) / max(1, stats["disk_entries"])
    out.update({"epoch_sps": delivered / wall, "epoch_delivered": delivered,
                "disk_entries": stats["disk_entries"], "disk_write_drops": stats["disk_write_drops"],
                "epoch_end_rss": end_rss, "epoch_peak_rss": peak, "epoch_bound": bound,
                "full_fresh_rss": fresh["rss"]})
    again = Run(args, source, work, "full-again", opts)
    try:
        re = mount_figures(again)
        out["full_restart_s"] = re["wall"]
        out["full_restart_rss"] = re["rss"]
        out["full_restart_cached"] = again.mount.stats()["disk_entries"]
    finally:
        again.stop()
    out["full_bytes_per_cached"] = (out["full_restart_rss"] - fresh["rss"]) / max(1, out["full_restart_cached"])
    return out


ANCHOR = r"""
import json, sys, time
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
from torchvision.datasets import ImageFolder
before = rss()
t0 = time.monotonic()
ds = ImageFolder(sys.argv[1])
seconds = time.monotonic() - t0
print(json.dumps({"s": seconds, "growth": rss() - before, "n": len(ds)}))
"""


def anchors(source, n):
    r = subprocess.run([sys.executable, "-c", ANCHOR, source], check=True,
                       capture_output=True, text=True)
    folder = json.loads(r.stdout)
    if folder["n"] != n:
        raise AssertionError("ImageFolder found %d samples in %s, not %d" % (folder["n"], source, n))
    t0 = time.monotonic()
    r = subprocess.run("find %s -type f | wc -l" % shlex.quote(source), shell=True,
                       check=True, capture_output=True, text=True)
    find_s = time.monotonic() - t0
    return {"imagefolder_s": folder["s"], "imagefolder_bytes_per_sample": folder["growth"] / n,
            "find_s": find_s}


def tiny_mount(args, work):
    """Seconds and RSS of a fresh mount of the 1000-file tree (the base of
    the per-sample marginal)."""
    cache = os.path.join(work, "tiny-cache")
    run = Run(args, tree(TINY), work, "tiny", options(cache))
    try:
        f = mount_figures(run)
        return {"tiny_s": f["wall"], "tiny_rss": f["rss"]}
    finally:
        run.stop()
        shutil.rmtree(cache, ignore_errors=True)


def one_rep(args, name, source, work, full):
    n = SIZES[name]
    row = {"size": name, "n": n}
    row.update(tiny_mount(args, work))
    cache = os.path.join(work, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    run = Run(args, source, work, "fresh", options(cache))
    try:
        f = mount_figures(run)
        row.update({"fresh_s": f["wall"], "fresh_cpu": f["cpu"], "fresh_rss": f["rss"],
                    "fresh_identities_s": f["identities"]})
        row["bytes_per_sample"] = (f["rss"] - row["tiny_rss"]) / (n - SIZES[TINY])
        row.update(read_manifest(run))
        if row["manifest_lines"] != n:
            raise AssertionError("/dataset/manifest has %d lines, not %d" % (row["manifest_lines"], n))
        row.update(random_job(run))
    finally:
        run.stop()
    run = Run(args, source, work, "remount", options(cache))
    try:
        r = mount_figures(run)
        row.update({"remount_s": r["wall"], "remount_cpu": r["cpu"], "remount_rss": r["rss"],
                    "remount_identities_s": r["identities"]})
    finally:
        run.stop()
    shutil.rmtree(cache, ignore_errors=True)
    if full:
        row.update(full_tier(args, source, n, work))
        shutil.rmtree(os.path.join(work, "full-cache"), ignore_errors=True)
    row.update(anchors(source, n))
    return row


# -- the table

def mib(v):
    return "%.1f" % (v / MIB)


# (key, figure, format, target text, target test or None): one table row.
ROWS = [
    ("tiny_s", "1k mount (the fixed cost): s until /stats answers", "%.2f", "", None),
    ("tiny_rss", "1k mount: daemon RSS MiB", mib, "", None),
    ("fresh_s", "fresh mount: s until /stats answers", "%.2f", "1.28M: <= ImageFolder", None),
    ("fresh_cpu", "fresh mount: daemon CPU s", "%.2f", "", None),
    ("fresh_identities_s", "fresh mount: s until every identity is taken", "%.2f", "", None),
    ("fresh_rss", "fresh mount: daemon RSS MiB", mib, "", None),
    ("bytes_per_sample", "fresh mount: RSS B/sample over the 1k mount", "%.0f", "<= 64",
     lambda v, n: v <= T_BYTES_PER_SAMPLE),
    ("fresh_vs_imagefolder", "fresh mount s / ImageFolder s", "%.2f", "1.28M: <= 1.00",
     lambda v, n: n < SIZES["1280k"] or v <= 1.0),
    ("remount_s", "remount, same cache_dir: s until /stats", "%.2f", "1.28M: <= 1.5",
     lambda v, n: n != SIZES["1280k"] or v <= T_REMOUNT_1280K),
    ("remount_identities_s", "remount: s until every identity is taken", "%.2f", "", None),
    ("remount_rss", "remount: daemon RSS MiB", mib, "", None),
    ("manifest_s", "/dataset/manifest read whole: s", "%.2f", "", None),
    ("manifest_growth", "/dataset/manifest: daemon peak RSS growth MiB", mib, "", None),
    ("job_create_s", "subset=random:0.5:7: s mkdir to spec written", "%.3f", "", None),
    ("job_first_s", "subset=random:0.5:7: s to its first sample", "%.3f", "", None),
    ("epoch_sps", "full tier: one job's epoch at size=64, samples/s", "%.0f", "", None),
    ("disk_entries", "full tier: disk_entries after the epoch", "%d", "", None),
    ("disk_write_drops", "full tier: disk_write_drops, median (max)", "%d", "0", None),
    ("epoch_end_rss", "full tier: daemon RSS at the epoch's end MiB", mib, "<= bound", None),
    ("epoch_peak_rss", "full tier: daemon peak RSS in the epoch MiB", mib, "<= bound", None),
    ("epoch_bound", "full tier: documented bound MiB", mib, "", None),
    ("epoch_over_per_entry", "full tier: (peak - bound) / disk_entries B", "%.0f", "", None),
    ("full_restart_s", "full-tier restart: s until /stats", "%.2f", "128k: <= 1.0",
     lambda v, n: n != SIZES["128k"] or v <= T_FULL_RESTART_128K),
    ("full_bytes_per_cached", "full-tier restart: RSS B per cached sample over fresh", "%.0f",
     "<= 128", lambda v, n: v <= T_BYTES_PER_CACHED),
    ("imagefolder_s", "anchor: ImageFolder(DIR) s", "%.2f", "", None),
    ("imagefolder_bytes_per_sample", "anchor: ImageFolder RSS B/sample", "%.0f", "", None),
    ("find_s", "anchor: find DIR -type f \\| wc -l s", "%.2f", "", None),
]


def medians(rows):
    out = {}
    for key in rows[0]:
        values = [r[key] for r in rows if key in r]
        if values and all(isinstance(v, (int, float)) for v in values):
            out[key] = statistics.median(values)
        else:
            out[key] = values[0]
    if "fresh_s" in out and "imagefolder_s" in out:
        # the median of the per-run ratios (each against its own anchor)
        out["fresh_vs_imagefolder"] = statistics.median(
            r["fresh_s"] / r["imagefolder_s"] for r in rows)
    if "disk_write_drops" in out:
        # the target is no drops at all: a median would hide one run's
        out["disk_write_drops_max"] = max(r["disk_write_drops"] for r in rows)
    if "epoch_end_rss" in out:
        out["epoch_bound_met"] = all(r["epoch_peak_rss"] <= r["epoch_bound"] for r in rows)
    return out


def cell(fmt, value):
    return fmt(value) if callable(fmt) else fmt % value


def table(sizes, results):
    lines = ["| figure | target | " + " | ".join(sizes) + " |",
             "|---|---|" + "---|" * len(sizes)]
    for key, title, fmt, target, test in ROWS:
        if not any(key in results[s] for s in sizes):
            continue
        cells = []
        for s in sizes:
            r = results[s]
            if key not in r:
                cells.append("-")
                continue
            text = cell(fmt, r[key])
            if key == "disk_write_drops":
                text += " (max %d)" % r["disk_write_drops_max"]
                if r["disk_write_drops_max"] > 0:
                    text += " (miss)"
            elif test is not None and not test(r[key], r["n"]):
                text += " (miss)"
            if key == "epoch_peak_rss" and r[key] > r["epoch_bound"]:
                text += " (over)"
            cells.append(text)
        lines.append("| %s | %s | %s |" % (title, target or "", " | ".join(cells)))
    return lines


def fit(points, x):
    """The least-squares line through `points` (x, y), at `x`."""
    xs, ys = zip(*points)
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((a - mx) ** 2 for a in xs)
    slope = sum((a - mx) * (b - my) for a, b in points) / sxx if sxx else 0.0
    return my + slope * (x - mx)


def extrapolation(sizes, results):
    big = [s for s in sizes if SIZES[s] >= SIZES["1280k"]]
    used = big if len(big) >= 2 else sizes
    if len(used) < 2:
        if not used:
            return None
        # one size: proportional from the 1k mount's RSS, time through 0
        r = results[used[0]]
        k = EXTRAPOLATE_TO / r["n"]
        return ("extrapolation to 14M (linear in N from %s alone): fresh mount %.1f s, "
                "remount %.1f s, RSS %.0f MiB" % (used[0], r["fresh_s"] * k, r["remount_s"] * k,
                (r["tiny_rss"] + r["bytes_per_sample"] * (EXTRAPOLATE_TO - SIZES[TINY])) / MIB))
    pts = lambda key: [(results[s]["n"], results[s][key]) for s in used]
    return ("extrapolation to 14M (linear fit through %s): fresh mount %.1f s, remount %.1f s, "
            "fresh RSS %.0f MiB, remount RSS %.0f MiB"
            % (", ".join(used), fit(pts("fresh_s"), EXTRAPOLATE_TO),
               fit(pts("remount_s"), EXTRAPOLATE_TO),
               fit(pts("fresh_rss"), EXTRAPOLATE_TO) / MIB,
               fit(pts("remount_rss"), EXTRAPOLATE_TO) / MIB))


# -- main

def on_signal(sig, _frame):
    raise SystemExit(128 + sig)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="128k,1280k",
                   help="comma-separated, of %s (5m also with --big)" % ",".join(SIZES))
    p.add_argument("--reps", type=int, default=3, help="runs per size (medians)")
    p.add_argument("--big", action="store_true",
                   help="add the 5M tree, and the full-tier restart at 1.28M")
    p.add_argument("--joaderfs", default=os.path.join(BUILD, "joaderfs"),
                   help="the daemon (another build, to compare)")
    p.add_argument("--out", help="folder for table.md and runs.csv")
    p.add_argument("--generate-only", action="store_true",
                   help="make the trees of --sizes and stop")
    args = p.parse_args()
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if args.big and "5m" not in sizes:
        sizes.append("5m")
    for s in sizes:
        if s not in SIZES or s == TINY:
            p.error("unknown size %r (one of %s)" % (s, ", ".join(k for k in SIZES if k != TINY)))
    if not os.access(args.joaderfs, os.X_OK):
        p.error("%s is not an executable joaderfs" % args.joaderfs)
    args.joaderfs = os.path.abspath(args.joaderfs)
    full_sizes = {"128k"} | ({"1280k"} if args.big else set())

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    tree(TINY)
    trees = {s: tree(s) for s in sizes}
    if args.generate_only:
        return 0
    work = tempfile.mkdtemp(prefix="jfs-catalog-")
    results, raw, took = {}, [], {}
    try:
        for s in sizes:
            t0 = time.monotonic()
            log("catalog: %s: warming the page cache (find %s)" % (s, trees[s]))
            subprocess.run(["find", trees[s], "-type", "f"], check=True, stdout=subprocess.DEVNULL)
            rows = []
            for rep in range(args.reps):
                row = one_rep(args, s, trees[s], work, s in full_sizes)
                row["rep"] = rep
                log("catalog: %s rep %d: fresh %.2f s, remount %.2f s, RSS %.1f MiB, "
                    "ImageFolder %.2f s" % (s, rep, row["fresh_s"], row["remount_s"],
                                            row["fresh_rss"] / MIB, row["imagefolder_s"]))
                rows.append(row)
            raw += rows
            results[s] = medians(rows)
            took[s] = time.monotonic() - t0
            log("catalog: %s took %.0f s" % (s, took[s]))
    except MountFailed as e:
        log("catalog: the harness could not mount joaderfs (%s):\n%s" % (args.joaderfs, e))
        return 1
    finally:
        for run in list(Run.live):
            run.stop()
        shutil.rmtree(work, ignore_errors=True)

    lines = ["Catalog at scale: %s, medians of %d; %d cores, load average %s; page cache warm "
             "(one find over each tree first, not dropped)"
             % (args.joaderfs, args.reps, os.cpu_count(),
                " ".join("%.1f" % v for v in os.getloadavg())), ""]
    lines += table(sizes, results)
    lines.append("")
    lines.append("full tier: ram_cache %s (10%% of the decoded set), bound = RSS after mount "
                 "+ 1.25 x ram_cache + (decode threads + 1 reader) x one size=64 delivery + the "
                 "disk write queue (64 MiB at most) + 2 RocksDB databases x 16 MiB + 26 B "
                 "a tier entry (docs/cache.md); peak %s"
                 % (", ".join("%s %s MiB" % (s, mib(results[s]["ram_cache"]))
                              for s in sizes if "ram_cache" in results[s]) or "-",
                    ", ".join("%s %s the bound" % (s, "within" if results[s]["epoch_bound_met"]
                                                   else "OVER")
                              for s in sizes if "epoch_bound_met" in results[s]) or "-"))
    lines.append("time per size: " + ", ".join("%s %.0f s" % (s, took[s]) for s in sizes))
    line = extrapolation(sizes, results)
    if line:
        lines.append(line)
    text = "\n".join(lines)
    print(text, flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write(text + "\n")
        keys = []
        for r in raw:
            keys += [k for k in r if k not in keys]
        with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
