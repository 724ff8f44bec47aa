"""The one joaderfs daemon harness: mount-level tests (tests/integration,
tests/tiers, tests/sampling), the Python client's tests (python/tests) and
the benchmarks (bench/) all mount, read, measure and unmount through it.

Everything here is written from the contract (DESIGN.md section 2), not from
the daemon's sources: datasets are made with PIL, records are parsed by hand,
the expected pixels come from an independent PIL decode.

Importing it makes this process a child subreaper, so that every daemonized
joaderfs it starts is its to reap, with its exit status.

The daemon binary is $JOADERFS_BIN (CTest sets it), else build/joaderfs.
Other folders import it with
``sys.path.insert(0, "<repo>/tests/integration")``.
"""

import ctypes
import errno
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np
from PIL import Image, ImageDraw

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get(
    "JOADERFS_BIN", os.path.join(HERE, "..", "..", "build", "joaderfs"))
FUSERMOUNT = shutil.which("fusermount3") or "/usr/bin/fusermount3"

# Every mount of the suite uses these unless a test says otherwise.
# base=64: cache entries are JPEGs IDCT-scaled to a shorter side of at least
# 64, as small as the output size allows.
BASE_OPTIONS = {"cache_dir": "none", "ram_cache": "64M", "size": "64",
                "base": "64", "seed": "1"}

HEADER = struct.Struct("<4sIQqIIIIIIQQ")
assert HEADER.size == 64
MAGIC = b"JSF1"

MOUNT_TIMEOUT = 30.0   # seconds to wait for a mount to appear
EPOCH_TIMEOUT = 90.0   # seconds for one epoch of a small dataset


def require_binary():
    """Skips when no binary was built; fails when $JOADERFS_BIN (as CTest
    sets it) names a missing one."""
    if os.access(BIN, os.X_OK):
        return
    if "JOADERFS_BIN" in os.environ:
        raise AssertionError("JOADERFS_BIN=%s is not an executable" % BIN)
    raise unittest.SkipTest("joaderfs binary not found at %s (set "
                            "JOADERFS_BIN or build it)" % BIN)


# ---------------------------------------------------------------- datasets

def _image(rng, w, h, gray=False):
    """Gradient + shapes + mild noise: structure that survives resizing."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0 = rng.uniform(0, 255, 3)
    cx = rng.uniform(-120, 120, 3)
    cy = rng.uniform(-120, 120, 3)
    img = c0 + cx * (xx / w)[..., None] + cy * (yy / h)[..., None]
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(pil)
    for _ in range(3):
        x0, y0 = rng.integers(0, w - 8), rng.integers(0, h - 8)
        x1 = x0 + rng.integers(8, max(9, w // 2))
        y1 = y0 + rng.integers(8, max(9, h // 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
    arr = np.asarray(pil).astype(np.float32)
    arr += rng.normal(0, 6.0, arr.shape)
    pil = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    return pil.convert("L") if gray else pil


SIZES = [(80, 60), (300, 200), (120, 200), (160, 120), (200, 200),
         (96, 150), (250, 90), (64, 64), (180, 240), (140, 100)]


def make_imagefolder(root, layout, seed=0, gray=()):
    """Writes SOURCE/<class>/<file> JPEGs; layout: {class: [file names]}.

    gray: relpaths to save as single-channel (grayscale) JPEGs.
    """
    rng = np.random.default_rng(seed)
    k = 0
    for cls, names in layout.items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            w, h = SIZES[k % len(SIZES)]
            k += 1
            rel = cls + "/" + name
            _image(rng, w, h, gray=rel in gray).save(
                os.path.join(root, cls, name), "JPEG", quality=90)
    return root


# Class names chosen so that comparing whole relpath strings ('bee-x/..' <
# 'bee/..' because '-' < '/') and comparing path components ('bee' <
# 'bee-x') disagree; file names mix upper and lower case and numbers.
DEFAULT_LAYOUT = {
    "ant": ["a0.jpg", "a1.jpg", "a10.jpg", "a2.jpg", "B3.jpg", "b4.jpg"],
    "bee": ["img_9.jpg", "img_10.jpg", "Zed.jpg", "alpha.jpg", "x.jpg"],
    "bee-x": ["p.jpg", "q.jpg", "r.jpg", "s.jpg", "t.jpg", "u.jpg",
              "v.jpg"],
    "cat": ["c1.jpg", "c2.jpg", "c3.jpg", "c4.jpg", "c5.jpg", "c6.jpg"],
}


def imagefolder_order(root):
    """[(relpath, label)] in torchvision ImageFolder order.

    Classes are the sub-folders sorted by name (labels 0..C-1); samples are
    sorted by relative path compared component by component (class, then
    file name), which is what ImageFolder's nested sorted() walk yields.
    """
    classes = sorted(d for d in os.listdir(root)
                     if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            out.append((cls + "/" + name, label))
    assert [r for r, _ in out] == sorted(
        (r for r, _ in out), key=lambda r: r.split("/"))
    return out


def reference_pixels(path, size):
    """Independent decode: torchvision Resize(size) + CenterCrop(size).

    Resize: the shorter side becomes `size`, the longer one
    int(size * long / short), PIL bilinear (antialiased when shrinking).
    CenterCrop: top-left at round((H - size) / 2), round((W - size) / 2).
    size 0 means the decoded image as it is.
    """
    with Image.open(path) as im:
        im = im.convert("RGB")
        if size:
            w, h = im.size
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = size, int(size * long / short)
            nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
            if (nw, nh) != (w, h):
                im = im.resize((nw, nh), Image.BILINEAR)
            top = int(round((nh - size) / 2.0))
            left = int(round((nw - size) / 2.0))
            im = im.crop((left, top, left + size, top + size))
        return np.asarray(im, dtype=np.uint8)


# ----------------------------------------------------------------- records

class Record:
    __slots__ = ("magic", "header_size", "id", "label", "epoch", "flags",
                 "height", "width", "channels", "dtype", "payload_bytes",
                 "reserved", "payload", "padding")

    def __init__(self, fields, payload, padding):
        (self.magic, self.header_size, self.id, self.label, self.epoch,
         self.flags, self.height, self.width, self.channels, self.dtype,
         self.payload_bytes, self.reserved) = fields
        self.payload = payload
        self.padding = padding

    def pixels(self):
        return np.frombuffer(self.payload, np.uint8).reshape(
            self.height, self.width, self.channels)

    def __repr__(self):
        return ("Record(id=%d label=%d epoch=%d %dx%dx%d dtype=%d bytes=%d)"
                % (self.id, self.label, self.epoch, self.height, self.width,
                   self.channels, self.dtype, self.payload_bytes))


class StreamError(AssertionError):
    pass


def parse_records(data):
    """Splits a reader's whole byte stream into Records; strict framing."""
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < 64:
            raise StreamError("stream ends inside a header at byte %d "
                              "(%d bytes left)" % (pos, n - pos))
        fields = HEADER.unpack_from(data, pos)
        if fields[0] != MAGIC:
            raise StreamError("bad magic %r at byte %d" % (fields[0], pos))
        if fields[1] != 64:
            raise StreamError("header size %d at byte %d" % (fields[1], pos))
        payload_bytes = fields[10]
        if payload_bytes > 1 << 30:
            raise StreamError("absurd payload size %d" % payload_bytes)
        padded = (payload_bytes + 63) // 64 * 64
        end = pos + 64 + padded
        if end > n:
            raise StreamError("stream ends inside a record at byte %d "
                              "(record needs %d bytes, %d left)"
                              % (pos, 64 + padded, n - pos))
        payload = data[pos + 64:pos + 64 + payload_bytes]
        padding = data[pos + 64 + payload_bytes:end]
        out.append(Record(fields, payload, padding))
        pos = end
    return out


def record_size(payload_bytes):
    return 64 + (payload_bytes + 63) // 64 * 64


def read_exact(fd, nbytes, timeout=EPOCH_TIMEOUT):
    """Reads exactly nbytes (or up to EOF) from a stream fd in a thread."""
    box = {}

    def run():
        buf = bytearray()
        try:
            while len(buf) < nbytes:
                chunk = os.read(fd, nbytes - len(buf))
                if not chunk:
                    break
                buf += chunk
        except OSError as e:
            box["error"] = e
        box["data"] = bytes(buf)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError("read of %d bytes still blocked after %.0fs"
                             % (nbytes, timeout))
    if "error" in box:
        raise box["error"]
    return box["data"]


def read_to_eof(fd, sizes=(1 << 20,), timeout=EPOCH_TIMEOUT):
    """Reads fd until EOF with read() sizes cycling through `sizes`."""
    box = {}

    def run():
        buf = bytearray()
        k = 0
        try:
            while True:
                chunk = os.read(fd, sizes[k % len(sizes)])
                k += 1
                if not chunk:
                    break
                buf += chunk
        except OSError as e:
            box["error"] = e
        box["data"] = bytes(buf)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError("no EOF after %.0fs" % timeout)
    if "error" in box:
        raise box["error"]
    return box["data"]


class _Reader(threading.Thread):
    def __init__(self, fd, chunk):
        super().__init__(daemon=True)
        self.fd = fd
        self.chunk = chunk
        self.data = bytearray()
        self.error = None

    def run(self):
        try:
            while True:
                chunk = os.read(self.fd, self.chunk)
                if not chunk:
                    return
                self.data += chunk
        except OSError as e:
            self.error = e


def read_epoch(next_path, readers=1, timeout=EPOCH_TIMEOUT, chunk=1 << 20):
    """Opens `readers` fds on next (all before any read), reads each to EOF
    in its own thread, closes them; returns one record list per reader."""
    fds = [os.open(next_path, os.O_RDONLY) for _ in range(readers)]
    threads = [_Reader(fd, chunk) for fd in fds]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [i for i, t in enumerate(threads) if t.is_alive()]
        if stuck:
            raise AssertionError(
                "readers %s of %s did not reach EOF within %.0fs (records so "
                "far: %s)" % (stuck, next_path, timeout,
                              [len(t.data) for t in threads]))
        for t in threads:
            if t.error is not None:
                raise AssertionError("reader of %s failed: %r"
                                     % (next_path, t.error))
        return [parse_records(bytes(t.data)) for t in threads]
    finally:
        for i, fd in enumerate(fds):
            if not threads[i].is_alive():
                os.close(fd)
            # A stuck reader keeps its fd; the unmount in the cleanup aborts
            # the connection, which ends the read.


# -------------------------------------------------------------- the mount

def format_options(opts):
    return ",".join(k if v is None else "%s=%s" % (k, v)
                    for k, v in opts.items())


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4] == path:
                return True
    return False


def become_subreaper():
    """Makes this process adopt its orphaned descendants (PR_SET_CHILD_SUBREAPER),
    so that a daemonized joaderfs, whose launcher exits once it has mounted,
    is still this process's to wait for, with its exit status."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


become_subreaper()


# ------------------------------------------------------------ /proc figures

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (field 3 onward:
    state is [0], ppid [1], pgrp [2], minflt [7], utime [11], stime [12])."""
    with open("/proc/%s/stat" % pid, "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2:].split()


def proc_cpu(pid):
    """utime + stime of a live process (all its threads), in seconds."""
    fields = proc_stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_status_kib(pid, key):
    """A kB figure of /proc/PID/status (VmHWM, VmRSS...), None if gone."""
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def daemon_pid(mountpoint, timeout=10.0, cwd=None):
    """The pid of our adopted joaderfs daemon serving `mountpoint` (given
    on its command line relative to `cwd`, if it was started there)."""
    mountpoint = os.path.abspath(mountpoint).encode()
    deadline = time.monotonic() + timeout
    while True:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    args = f.read().split(b"\0")
                ppid = int(proc_stat_fields(pid)[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == os.getpid() and any(
                    os.path.abspath(os.path.join(cwd or os.getcwd(), a.decode(
                        "utf-8", "replace"))).encode() == mountpoint
                    for a in args if a):
                return int(pid)
        if time.monotonic() > deadline:
            raise AssertionError("no joaderfs daemon found for %s" % mountpoint)
        time.sleep(0.05)


class DaemonProcess:
    """A daemonized joaderfs: not our child but our orphan (we are a
    subreaper), so it can be waited for like a Popen."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -255  # reaped elsewhere: gone, status lost
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("joaderfs", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class Mount:
    """One joaderfs instance, daemonized as users run it (`foreground`: run
    with -f as a child instead, for tests about the foreground process)."""

    def __init__(self, source, workdir, options=None, extra_args=(),
                 foreground=False, defaults=None, binary=None):
        """`options` override `defaults` (BASE_OPTIONS and a debug log in
        workdir); an option given as False is left out.  `binary`: the
        daemon to run instead of BIN (the benchmarks' --joaderfs)."""
        self.source = source
        self.workdir = workdir
        self.mnt = os.path.join(workdir, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.log_path = os.path.join(workdir, "joaderfs.log")
        self.stderr_path = os.path.join(workdir, "stderr.txt")
        opts = dict(BASE_OPTIONS if defaults is None else defaults)
        opts.update({"log": self.log_path, "log_level": "debug"})
        if options:
            opts.update(options)
        self.options = {k: v for k, v in opts.items() if v is not False}
        self.foreground = foreground
        self.argv = [binary or BIN] + (["-f"] if foreground else []) + [
            "-o", format_options(self.options)] + list(extra_args) + [
            source, self.mnt]
        self.proc = None
        self.returncode = None
        self.saved_log = ""
        # A big dataset takes longer to scan before the daemon mounts.
        self.mount_timeout = MOUNT_TIMEOUT

    # -- life cycle

    def start(self):
        self._stderr = open(self.stderr_path, "wb")
        if self.foreground:
            self.proc = subprocess.Popen(self.argv, stdout=self._stderr,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        else:
            # The launcher returns once the daemon has mounted.
            r = subprocess.run(self.argv, stdout=self._stderr,
                               stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL,
                               timeout=self.mount_timeout)
            if r.returncode != 0:
                self.returncode = r.returncode
                raise AssertionError(
                    "joaderfs exited with status %d before mounting\n%s"
                    % (r.returncode, self.diagnostics()))
            if not is_mounted(self.mnt):
                raise AssertionError("joaderfs exited 0 but %s is not mounted"
                                     "\n%s" % (self.mnt, self.diagnostics()))
            self.proc = DaemonProcess(daemon_pid(self.mnt))
        deadline = time.monotonic() + self.mount_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    "joaderfs exited with status %d before mounting\n%s"
                    % (self.proc.returncode, self.diagnostics()))
            if is_mounted(self.mnt) and os.path.exists(self.path("stats")):
                return self
            time.sleep(0.05)
        raise AssertionError("no mount after %.0fs\n%s"
                             % (self.mount_timeout, self.diagnostics()))

    def unmount(self, lazy_fallback=True):
        """fusermount3 -u (lazy if busy), then wait for / kill the daemon."""
        if self.proc is None:
            return None
        if is_mounted(self.mnt):
            r = subprocess.run([FUSERMOUNT, "-u", self.mnt],
                               capture_output=True)
            if r.returncode != 0 and lazy_fallback and is_mounted(self.mnt):
                subprocess.run([FUSERMOUNT, "-u", "-z", self.mnt],
                               capture_output=True)
        self.wait_exit(10.0)
        return self.returncode

    def wait_exit(self, timeout):
        if self.proc is None:
            return self.returncode
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.returncode = self.proc.wait()
        self._finish()
        return self.returncode

    def _finish(self):
        if is_mounted(self.mnt):
            subprocess.run([FUSERMOUNT, "-u", "-z", self.mnt],
                           capture_output=True)
        if not self._stderr.closed:
            self._stderr.close()
        self.saved_log = self.diagnostics()

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.unmount()
        elif self.proc is not None:
            self.returncode = self.proc.returncode
            self._finish()
        elif is_mounted(self.mnt):  # start() failed half-way
            subprocess.run([FUSERMOUNT, "-u", "-z", self.mnt],
                           capture_output=True)

    def diagnostics(self, tail=200):
        parts = ["argv: %s" % " ".join(self.argv)]
        for title, path in (("stderr", self.stderr_path),
                            ("log", self.log_path)):
            try:
                with open(path, "rb") as f:
                    lines = f.read().decode("utf-8", "replace").splitlines()
            except OSError as e:
                lines = ["(%s)" % e]
            if len(lines) > tail:
                lines = ["... %d lines before ..." % (len(lines) - tail)] + \
                    lines[-tail:]
            parts.append("---- %s (%s) ----\n%s"
                         % (title, path, "\n".join(lines)))
        return "\n".join(parts)

    def log_problems(self):
        """Warning, error and critical lines of the daemon's log."""
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if "[warning]" in line
                or "[error]" in line or "[critical]" in line]

    # -- figures of the daemon process

    def cpu(self):
        """CPU seconds the daemon has used so far (all its threads)."""
        return proc_cpu(self.proc.pid)

    def minflt(self):
        return int(proc_stat_fields(self.proc.pid)[7])

    def hwm_kib(self):
        """The daemon's peak resident memory (VmHWM) so far."""
        return proc_status_kib(self.proc.pid, "VmHWM") or 0

    # -- the tree

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def read_text(self, *parts):
        with open(self.path(*parts), "rb") as f:
            return f.read().decode("utf-8")

    def read_json(self, *parts):
        text = self.read_text(*parts)
        try:
            return json.loads(text)
        except ValueError as e:
            raise AssertionError("%s is not JSON (%s): %r"
                                 % ("/".join(parts), e, text[:500]))

    def stats(self):
        return self.read_json("stats")

    def info(self):
        return self.read_json("dataset", "info")

    def manifest(self):
        rows = []
        for line in self.read_text("dataset", "manifest").splitlines():
            if not line:
                continue
            i, label, rel = line.split("\t")
            rows.append((int(i), int(label), rel))
        return rows

    def mkjob(self, job, spec=None, ids=None):
        os.mkdir(self.path("jobs", job))
        if spec is not None:
            self.write_spec(job, spec)
        if ids is not None:
            self.write_file(job, "ids", ids)
        return self.path("jobs", job, "next")

    def write_file(self, job, name, text):
        """One open(O_WRONLY|O_TRUNC) + one write(), like `echo ... > f`."""
        data = text.encode() if isinstance(text, str) else text
        fd = os.open(self.path("jobs", job, name), os.O_WRONLY | os.O_TRUNC)
        try:
            n = os.write(fd, data)
            if n != len(data):
                raise AssertionError("short write %d of %d" % (n, len(data)))
        finally:
            os.close(fd)

    def write_spec(self, job, text):
        self.write_file(job, "spec", text)

    def read_spec(self, job):
        return parse_spec(self.read_text("jobs", job, "spec"))

    def status(self, job):
        return self.read_json("jobs", job, "status")


def parse_spec(text):
    out = {}
    for tok in text.split():
        k, _, v = tok.partition("=")
        out[k] = v
    return out


# ------------------------------------------------------------ test base

class JoaderTestCase(unittest.TestCase):
    """Mounts through self.mount(); every mount is unmounted afterwards and
    its stderr and log are printed when the test fails or errors."""

    def run(self, result=None):
        self._mounts = []
        if result is None:
            return super().run(result)
        before = len(result.failures) + len(result.errors)
        out = super().run(result)
        if len(result.failures) + len(result.errors) > before:
            for m in self._mounts:
                sys.stderr.write("\n==== joaderfs diagnostics for %s ====\n%s\n"
                                 % (self.id(), m.saved_log or m.diagnostics()))
        return out

    def tempdir(self):
        d = tempfile.mkdtemp(prefix="joaderfs-it-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def mount(self, source, options=None, extra_args=(), start=True,
              foreground=False):
        m = Mount(source, self.tempdir(), options, extra_args, foreground)
        self._mounts.append(m)
        self.addCleanup(m.cleanup)
        return m.start() if start else m

    def assertErrno(self, err, fn, *args, **kwargs):
        with self.assertRaises(OSError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.errno, err,
                         "expected %s, got %s (%s)"
                         % (errno.errorcode[err],
                            errno.errorcode.get(cm.exception.errno),
                            cm.exception))
        return cm.exception


class DatasetMixin:
    """setUpClass makes one ImageFolder dataset for the whole class."""

    LAYOUT = DEFAULT_LAYOUT
    GRAY = ()

    @classmethod
    def setUpClass(cls):
        require_binary()
        cls._data_dir = tempfile.mkdtemp(prefix="joaderfs-data-")
        cls.source = make_imagefolder(os.path.join(cls._data_dir, "src"),
                                      cls.LAYOUT, gray=cls.GRAY)
        cls.order = imagefolder_order(cls.source)
        cls.N = len(cls.order)
        cls.C = len(cls.LAYOUT)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data_dir, True)


def ids_of(records_per_reader):
    return [r.id for rs in records_per_reader for r in rs]


# ------------------------------------------------- cache-tier helpers
# Used by tests/tiers (issue 4): sample digests, the files under cache_dir,
# paced readers and the mount life cycles of restarts and crashes.

SIZE = int(BASE_OPTIONS["size"])
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
RECORD = record_size(PIXELS)


def log(msg, *args):
    """Figures for the report: go to stderr, which ctest -V shows."""
    sys.stderr.write(("    [tiers] " + msg + "\n") % args)
    sys.stderr.flush()


def small_layout(n, classes=4, prefix="img"):
    """{class: [names]} with n images spread over `classes` classes."""
    layout = {}
    for k in range(n):
        cls = "c%02d" % (k % classes)
        layout.setdefault(cls, []).append("%s%04d.jpg" % (prefix, k))
    return layout


def make_dataset(root, n, classes=4, seed=0):
    """n SIZE x SIZE JPEGs (make_imagefolder's generator) in ImageFolder
    layout; returns (root, [(relpath, label)] in id order). At the suite's
    base=SIZE each cache entry is the whole image: PIXELS bytes, as the
    tiers' byte counts assume."""
    rng = np.random.default_rng(seed)
    for cls, names in small_layout(n, classes).items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            _image(rng, SIZE, SIZE).save(os.path.join(root, cls, name), "JPEG",
                                         quality=90)
    return root, imagefolder_order(root)


def rewrite_image(path, seed):
    """Rewrites `path` in place (same name, same inode) with other pixels
    of the same dimensions."""
    with Image.open(path) as im:
        w, h = im.size
    rng = np.random.default_rng(seed)
    _image(rng, w, h).save(path, "JPEG", quality=90)


def payload_digest(record):
    return hashlib.sha1(record.payload).hexdigest()


def digests(records):
    """{id: sha1 of pixels}; asserts no id twice."""
    out = {}
    for r in records:
        assert r.id not in out, "id %d delivered twice in one epoch" % r.id
        out[r.id] = payload_digest(r)
    return out


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
    """JoaderTestCase plus the tier tests' epochs, references, clean
    unmounts and crashes."""

    def read_job(self, m, job, spec=None, readers=1, timeout=90.0):
        """Makes `job` (if needed) and reads one epoch; returns records."""
        if not os.path.isdir(m.path("jobs", job)):
            m.mkjob(job, spec=spec)
        recs = [r for rs in read_epoch(m.path("jobs", job, "next"), readers,
                                       timeout=timeout) for r in rs]
        ids = [r.id for r in recs]
        self.assertEqual(len(ids), len(set(ids)), "job %s: an id was "
                         "delivered twice in one epoch" % job)
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
