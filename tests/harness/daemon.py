"""The joaderfs daemon as the tests and benchmarks run it: one Mount per
instance, daemonized as users mount it (or with -f where a test needs the
foreground process), always unmounted and reaped.

Importing this module makes this process a child subreaper, so that every
daemonized joaderfs it starts is its to reap, with its exit status.

The daemon binary is $JOADERFS_BIN (CTest sets it), else build/joaderfs.
"""

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from .procfs import proc_cpu, proc_stat_fields, proc_status_kib

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get(
    "JOADERFS_BIN", os.path.join(HERE, "..", "..", "build", "joaderfs"))
FUSERMOUNT = shutil.which("fusermount3") or "/usr/bin/fusermount3"

# Every mount of the suite uses these unless a test says otherwise.
# base=64: cache entries are JPEGs IDCT-scaled to a shorter side of at least
# 64, as small as the output size allows.
BASE_OPTIONS = {"cache_dir": "none", "ram_cache": "64M", "size": "64",
                "base": "64", "seed": "1"}

MOUNT_TIMEOUT = 30.0   # seconds to wait for a mount to appear

# The tiers' byte counts assume the suite's default output size.
SIZE = int(BASE_OPTIONS["size"])
PIXELS = SIZE * SIZE * 3


def require_binary():
    """Skips when no binary was built; fails when $JOADERFS_BIN (as CTest
    sets it) names a missing one."""
    if os.access(BIN, os.X_OK):
        return
    if "JOADERFS_BIN" in os.environ:
        raise AssertionError("JOADERFS_BIN=%s is not an executable" % BIN)
    raise unittest.SkipTest("joaderfs binary not found at %s (set "
                            "JOADERFS_BIN or build it)" % BIN)


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
        # Lines end at \n alone: a path may hold U+2028 (python/joaderfs
        # read_manifest).
        for line in self.read_text("dataset", "manifest").split("\n"):
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
