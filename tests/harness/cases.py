"""The unittest bases of the mount-level tests: every mount made through
them is unmounted and reaped afterwards, and its stderr and log are printed
when the test fails."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from .daemon import BIN, FUSERMOUNT, SIZE, Mount, is_mounted, require_binary
from .datasets import DEFAULT_LAYOUT, imagefolder_order, make_imagefolder
from .records import digests, read_epoch


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

    def memory_cgroup_launcher(self, limit_bytes):
        """A launcher for Mount.argv[0] that joins a new memory cgroup
        limited to `limit_bytes`, then runs the daemon (which it forks stays
        in it); (launcher, cgroup folder). Skips without root or cgroups."""
        if os.geteuid() != 0:
            self.skipTest("makes a cgroup: needs root")
        found = own_memory_cgroup()
        if found is None:
            self.skipTest("no memory cgroup")
        parent, limit_file = found
        cgroup = os.path.join(parent, "joaderfs-test-%d-%d" % (os.getpid(), len(self._mounts)))
        try:
            os.mkdir(cgroup)
        except OSError as e:
            self.skipTest("cannot make a cgroup under %s: %s" % (parent, e))
        # Cleanups run last-in first-out: the mounts made later are gone,
        # their processes with them, before the cgroup is removed.
        self.addCleanup(remove_cgroup, cgroup)
        with open(os.path.join(cgroup, limit_file), "w") as f:
            f.write(str(limit_bytes))
        launcher = os.path.join(self.tempdir(), "in-cgroup")
        with open(launcher, "w") as f:
            f.write('#!/bin/sh\necho $$ > %s/cgroup.procs || exit 99\n'
                    'exec %s "$@"\n' % (cgroup, os.path.abspath(BIN)))
        os.chmod(launcher, 0o755)
        return launcher, cgroup

    def set_env(self, values, remove=()):
        """Sets the environment the daemons it starts inherit (variables
        in `values`, and none of `remove`) until the test ends."""
        names = set(values) | set(remove)
        saved = {k: os.environ.get(k) for k in names}

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.addCleanup(restore)
        for k in remove:
            os.environ.pop(k, None)
        os.environ.update(values)

    def assertErrno(self, err, fn, *args, **kwargs):
        with self.assertRaises(OSError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.errno, err,
                         "expected %s, got %s (%s)"
                         % (errno.errorcode[err],
                            errno.errorcode.get(cm.exception.errno),
                            cm.exception))
        return cm.exception


def own_memory_cgroup():
    """(folder of this process's memory cgroup, limit file name), v2 or v1,
    or None."""
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return "/sys/fs/cgroup/memory" + path.rstrip("/"), \
                "memory.limit_in_bytes"
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            return "/sys/fs/cgroup" + path.rstrip("/"), "memory.max"
    return None


def remove_cgroup(cgroup):
    """Removes a cgroup whose processes have exited (or are exiting)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            os.rmdir(cgroup)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


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


def log(msg, *args):
    """Figures for the report: go to stderr, which ctest -V shows."""
    sys.stderr.write(("    [tiers] " + msg + "\n") % args)
    sys.stderr.flush()


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
