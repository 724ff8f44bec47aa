"""Helpers for the cache-tier mount tests (issue 4): a thin layer over
tests/integration/mountlib.py (imported, not copied).

Everything is checked from outside the daemon, through the contract of
DESIGN.md section 2: records read from /jobs/<id>/next, /stats, the files
the daemon leaves under cache_dir.
"""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep __pycache__ out of others' folders
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import mountlib  # noqa: E402
from mountlib import (FUSERMOUNT, JoaderTestCase,  # noqa: E402
                      is_mounted, parse_records, read_epoch)

SIZE = 64
PIXELS = SIZE * SIZE * 3


def slot_bytes(pixels):
    """Disk bytes a sample takes: its slot, a 32-byte header and the pixels
    rounded up to a step of 1/16 to 1/8 of their size (a power of two), as
    the disk tier's budget and disk_bytes count them."""
    need, step = 32 + pixels, 64
    while step * 16 < need:
        step *= 2
    return (need + step - 1) // step * step


SLOT = slot_bytes(PIXELS)
RECORD = mountlib.record_size(PIXELS)


def log(msg, *args):
    """Figures for the report: go to stderr, which ctest -V shows."""
    sys.stderr.write(("    [tiers] " + msg + "\n") % args)
    sys.stderr.flush()


# ---------------------------------------------------------------- datasets

def small_layout(n, classes=4, prefix="img"):
    """{class: [names]} with n images spread over `classes` classes."""
    layout = {}
    for k in range(n):
        cls = "c%02d" % (k % classes)
        layout.setdefault(cls, []).append("%s%04d.jpg" % (prefix, k))
    return layout


def make_dataset(root, n, classes=4, seed=0):
    """n SIZE x SIZE JPEGs (mountlib's generator) in ImageFolder layout;
    returns (root, [(relpath, label)] in id order). At the suite's base=SIZE
    each cache entry is the whole image: PIXELS bytes, as the tiers' byte
    counts below assume."""
    rng = np.random.default_rng(seed)
    for cls, names in small_layout(n, classes).items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            mountlib._image(rng, SIZE, SIZE).save(os.path.join(root, cls, name), "JPEG",
                                                  quality=90)
    return root, mountlib.imagefolder_order(root)


def rewrite_image(path, seed):
    """Rewrites `path` in place (same name, same inode) with other pixels
    of the same dimensions."""
    with Image.open(path) as im:
        w, h = im.size
    rng = np.random.default_rng(seed)
    img = mountlib._image(rng, w, h)
    img.save(path, "JPEG", quality=90)


def payload_digest(record):
    return hashlib.sha1(record.payload).hexdigest()


def digests(records):
    """{id: sha1 of pixels}; asserts no id twice."""
    out = {}
    for r in records:
        assert r.id not in out, "id %d delivered twice in one epoch" % r.id
        out[r.id] = payload_digest(r)
    return out


# ------------------------------------------------------------ cache files

def cache_files(cache_dir, suffix="", prefix=""):
    """Files anywhere under cache_dir whose names start with `prefix` and
    end with `suffix` (slot files are `slots-<bytes>`; the RocksDB index
    lives in <folder>/index/)."""
    out = []
    for root, _, names in os.walk(cache_dir):
        for name in sorted(names):
            if name.startswith(prefix) and name.endswith(suffix):
                out.append(os.path.join(root, name))
    return sorted(out)


def flip_bytes(path, fractions=(0.3, 0.5, 0.7), length=64):
    """XORs `length` bytes with 0xFF at each fraction of the file's size;
    returns the offsets damaged."""
    size = os.path.getsize(path)
    offsets = []
    with open(path, "r+b") as f:
        for frac in fractions:
            off = max(0, min(size - length, int(size * frac)))
            f.seek(off)
            data = bytearray(f.read(length))
            for i in range(len(data)):
                data[i] ^= 0xFF
            f.seek(off)
            f.write(bytes(data))
            offsets.append(off)
        f.flush()
        os.fsync(f.fileno())
    return offsets


# ---------------------------------------------------------------- readers

class PacedReader(threading.Thread):
    """One reader of one job: reads one record at a time and sleeps
    `delay` seconds per record received, until EOF."""

    def __init__(self, next_path, delay, record_bytes=RECORD, on_eof=None):
        super().__init__(daemon=True)
        self.next_path = next_path
        self.delay = delay
        self.record_bytes = record_bytes
        self.on_eof = on_eof
        self.data = bytearray()
        self.error = None
        self.fd = os.open(next_path, os.O_RDONLY)  # opened before any read
        self.finished_at = None
        self.eof_stats = None

    def run(self):
        seen = 0
        try:
            while True:
                chunk = os.read(self.fd, self.record_bytes)
                if not chunk:
                    break
                self.data += chunk
                complete = len(self.data) // self.record_bytes
                if complete > seen and self.delay:
                    time.sleep(self.delay * (complete - seen))
                seen = complete
            self.finished_at = time.monotonic()
            if self.on_eof:
                self.eof_stats = self.on_eof()
        except OSError as e:
            self.error = e
        finally:
            try:
                os.close(self.fd)
            except OSError:
                pass

    def records(self):
        return parse_records(bytes(self.data))


class TierTestCase(JoaderTestCase):
    """JoaderTestCase (mounts always unmounted, daemon log printed on
    failure) plus helpers for the tier tests."""

    def read_job(self, m, job, spec=None, readers=1, timeout=90.0):
        """Makes `job` (if needed) and reads one epoch; returns records."""
        if not os.path.isdir(m.path("jobs", job)):
            m.mkjob(job, spec=spec)
        recs = [r for rs in read_epoch(m.path("jobs", job, "next"), readers,
                                       timeout=timeout) for r in rs]
        ids = [r.id for r in recs]
        self.assertEqual(len(ids), len(set(ids)),
                         "job %s: an id was delivered twice in one epoch" % job)
        return recs

    def reference(self, source, size=SIZE, n=None):
        """{id: sha1 of pixels} from a mount with cache_dir=none: every
        sample decoded afresh (decoding is deterministic)."""
        m = self.mount(source, {"cache_dir": "none", "size": str(size),
                                "ram_cache": "256M"})
        recs = self.read_job(m, "reference")
        ref = digests(recs)
        if n is not None:
            self.assertEqual(len(ref), n, "reference mount: %d of %d records"
                             % (len(ref), n))
        st = m.stats()
        self.assertEqual(st["skipped"], 0, "reference mount skipped samples")
        m.unmount()
        return ref

    def clean_unmount(self, m):
        """fusermount3 -u, then wait for the daemon to exit (it flushes the
        disk tier before exiting); asserts a clean exit."""
        r = subprocess.run([FUSERMOUNT, "-u", m.mnt], capture_output=True)
        self.assertEqual(r.returncode, 0, "fusermount3 -u %s: %s"
                         % (m.mnt, r.stderr.decode(errors="replace")))
        rc = m.wait_exit(30.0)
        self.assertEqual(rc, 0, "daemon exit status after fusermount3 -u")
        self.assertFalse(is_mounted(m.mnt))

    def kill9(self, m):
        """SIGKILL the daemon, then unmount the dead mount ('Transport
        endpoint is not connected'): fusermount3 -u, else -u -z."""
        os.kill(m.proc.pid, signal.SIGKILL)
        m.proc.wait(10)
        r = subprocess.run([FUSERMOUNT, "-u", m.mnt], capture_output=True)
        how = "fusermount3 -u"
        if r.returncode != 0 and is_mounted(m.mnt):
            r = subprocess.run([FUSERMOUNT, "-u", "-z", m.mnt],
                               capture_output=True)
            how = "fusermount3 -u -z"
        self.assertFalse(is_mounted(m.mnt), "dead mount still mounted after "
                         "%s: %s" % (how, r.stderr.decode(errors="replace")))
        m.wait_exit(5.0)
        return how


def wait_for(pred, timeout, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()
