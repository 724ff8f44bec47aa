"""An s3:// SOURCE whose store is hostile or broken, and S3 credentials as
admins set them.

The store is harness/s3_hostile.py on loopback: answers that never end
(an error body, a body without a length, one that trickles), a listing
whose continuation token loops, keys outside the prefix or holding control
characters. The daemon must stay small (RSS under 300 MB: the test kills it
past that), fail a read or the mount with one line, never hang, and leave
out what it cannot use, counted. Credentials: s3_credentials=FILE (refused
unless mode 600) and s3_profile=, through the daemon and through the mount
helper run as mount(8) runs it (no HOME); no secret stays in
/proc/PID/environ.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import harness
from harness import (JoaderTestCase, format_options, ids_of, make_imagefolder, read_epoch,
                     wait_for)
from harness.procfs import proc_status_kib
from harness.s3_hostile import HostileS3

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LAYOUT = {"c0": ["a.jpg", "b.jpg", "c.jpg"], "c1": ["d.jpg", "e.jpg"]}
RSS_LIMIT = 300 << 20


class RssWatch(threading.Thread):
    """Samples a process's resident memory; kills it (SIGKILL) once past
    `limit`, so that a daemon that bloats fails its test instead of the
    machine. .peak: the most seen; .killed: whether it had to."""

    def __init__(self, pid, limit=RSS_LIMIT):
        super().__init__(daemon=True)
        self.pid, self.limit = pid, limit
        self.peak, self.killed = 0, False
        self.done = threading.Event()
        self.start()

    def run(self):
        while not self.done.is_set():
            kib = proc_status_kib(self.pid, "VmRSS")
            if kib is None:
                return
            self.peak = max(self.peak, kib << 10)
            if self.peak > self.limit:
                self.killed = True
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
                return
            self.done.wait(0.02)

    def stop(self):
        self.done.set()
        self.join()
        return self


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


class S3TrustTest(JoaderTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-s3-trust-")
        cls.folder = make_imagefolder(os.path.join(cls._data, "folder"), LAYOUT)
        cls.n = sum(len(v) for v in LAYOUT.values())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def setUp(self):
        self.s3 = HostileS3()
        self.addCleanup(self.s3.stop)
        self.s3.put_tree("folder", self.folder)
        self.set_env(self.s3.env())

    def options(self, extra=None):
        opts = {"s3_endpoint": self.s3.endpoint, "retry_failed": "1", "threads": "2"}
        opts.update(extra or {})
        return opts

    def mount_s3(self, prefix="folder", options=None, **kwargs):
        return self.mount("s3://%s/%s" % (self.s3.bucket, prefix), options=self.options(options),
                          **kwargs)

    def read_watched(self, m, job="one"):
        """One epoch with the daemon's RSS watched; (ids, peak RSS)."""
        watch = RssWatch(m.proc.pid)
        try:
            ids = ids_of(read_epoch(m.mkjob(job, spec="epochs=1"), timeout=120))
        except (AssertionError, OSError):
            if not watch.stop().killed:
                raise
        watch.stop()
        self.assertFalse(watch.killed, "the daemon passed %d MiB of RSS: killed"
                         % (RSS_LIMIT >> 20))
        return ids, watch.peak

    def failed_mount(self, argv, within=15.0):
        """Runs the daemonized launcher `argv`, which must fail; returns
        (status, stderr, seconds, peak RSS of the daemon it forked)."""
        stderr_path = os.path.join(self.tempdir(), "stderr")
        with open(stderr_path, "wb") as err:
            start = time.monotonic()
            launcher = subprocess.Popen(argv, stdout=err, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
            watches = {}
            try:
                while launcher.poll() is None and time.monotonic() - start < within:
                    for pid in children(launcher.pid):
                        if pid not in watches:
                            watches[pid] = RssWatch(pid)
                    time.sleep(0.01)
            finally:
                took = time.monotonic() - start
                if launcher.poll() is None:
                    for pid in children(launcher.pid):
                        os.kill(pid, signal.SIGKILL)
                    launcher.kill()
                launcher.wait()
                for w in watches.values():
                    w.stop()
        with open(stderr_path, "rb") as f:
            stderr = f.read().decode("utf-8", "replace")
        self.assertFalse(any(w.killed for w in watches.values()),
                         "the daemon passed %d MiB of RSS: killed" % (RSS_LIMIT >> 20))
        self.assertLess(took, within, "the mount neither came up nor failed: %s" % stderr)
        return launcher.returncode, stderr, took, max([w.peak for w in watches.values()] or [0])

    # -- answers that never end

    def test_endless_error_body_is_capped_and_the_sample_skipped(self):
        """A 500 whose body never ends: a few KiB of it are read, the GET is
        retried and fails, its sample is skipped and counted."""
        key = "folder/c0/b.jpg"
        self.s3.endless_error.add(key)
        m = self.mount_s3()
        ids, peak = self.read_watched(m)
        self.assertEqual(sorted(ids), [i for i in range(self.n) if i != 1])
        stats = m.stats()
        self.assertEqual(stats["skipped"], 1)
        self.assertEqual(stats["source_failures"], 1)
        self.assertLess(peak, RSS_LIMIT)
        # 4 attempts, each dropped after its first 64 KiB (plus what the
        # socket buffers held when the daemon hung up).
        self.assertLess(self.s3.body_bytes[key], 64 << 20)
        self.assertIn("HTTP 500", "\n".join(m.log_problems()))

    def test_endless_object_body_stops_at_the_listed_size(self):
        """A 200 without a Content-Length that never ends: the body stops at
        the size the listing gave; the sample is skipped and counted."""
        key = "folder/c1/d.jpg"
        self.s3.endless_ok.add(key)
        m = self.mount_s3()
        ids, peak = self.read_watched(m)
        self.assertEqual(sorted(ids), [i for i in range(self.n) if i != 3])
        self.assertEqual(m.stats()["skipped"], 1)
        self.assertLess(peak, RSS_LIMIT)

    def test_trickling_body_ends_at_read_timeout(self):
        """A body of one byte a second: the read is skipped at read_timeout,
        and its request ends then too (no I/O thread left stuck on it)."""
        self.s3.trickle.add("folder/c0/c.jpg")
        m = self.mount_s3(options={"read_timeout": "2"})
        start = time.monotonic()
        ids, _ = self.read_watched(m)
        self.assertEqual(sorted(ids), [i for i in range(self.n) if i != 2])
        self.assertLess(time.monotonic() - start, 20)
        self.assertTrue(wait_for(lambda: m.stats()["source_io_threads_stuck"] == 0, 5.0),
                        "an I/O thread is still held by the trickling GET: %s" % m.stats())

    # -- listings

    def test_looping_continuation_token_fails_the_mount(self):
        self.s3.loop_token = True
        m = self.mount_s3(start=False)
        status, stderr, took, peak = self.failed_mount(m.argv)
        self.assertEqual(status, 1, stderr)
        self.assertEqual(stderr.count("\n"), 1, stderr)  # one line
        self.assertIn("continuation token", stderr)
        self.assertLess(peak, RSS_LIMIT)
        self.assertLess(self.s3.requests["list"], 10)

    def test_endless_error_body_of_a_listing_fails_the_mount(self):
        """A 503 listing whose body never ends: each attempt reads 64 KiB
        of it, and after the last the mount fails with one line."""
        self.s3.list_endless_error = True
        m = self.mount_s3(start=False)
        status, stderr, took, peak = self.failed_mount(m.argv)
        self.assertEqual(status, 1, stderr)
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertIn("HTTP 503", stderr)
        self.assertIn("after 4 attempts", stderr)
        self.assertLess(peak, RSS_LIMIT)
        self.assertLess(self.s3.body_bytes[""], 64 << 20)

    def test_stray_and_control_character_keys_are_left_out(self):
        """Keys shorter than the prefix or outside it, and keys holding
        control characters: the mount comes up without them, counts them,
        and no key forges a line of /dataset/manifest."""
        with open(os.path.join(self.folder, "c0", "a.jpg"), "rb") as f:
            jpeg = f.read()
        self.s3.listed_extra += [("f", 10), ("fold", 10), ("other/c0/x.jpg", 10)]
        forged = "folder/c0/x.jpg\n99\t0\tc0/a.jpg"
        for key in (forged, "folder/c1/tab\there.jpg", "folder/c1/cr\r.jpg",
                    "folder/c\x01/z.jpg", "folder/c1/del\x7f.jpg", "folder/c1/esc\x1b[2J.jpg"):
            self.s3.put(key, jpeg)
        # Line breaks to str.splitlines() but not control bytes: kept, and
        # read back whole.
        unicode_breaks = ["c1/f\u2028g.jpg", "c1/h\x85i.jpg"]
        for rel in unicode_breaks:
            self.s3.put("folder/" + rel, jpeg)
        m = self.mount_s3()
        import joaderfs
        entries = joaderfs.read_manifest(m.mnt)
        want = sorted(["%s/%s" % (c, f) for c, files in LAYOUT.items() for f in files]
                      + unicode_breaks)
        n = len(want)
        self.assertEqual([e.relpath for e in entries], want)
        self.assertEqual([e.id for e in entries], list(range(n)))
        self.assertEqual(m.manifest(), [(i, int(rel[1]), rel) for i, rel in enumerate(want)])
        stats = m.stats()
        self.assertEqual(stats["scan_skips"]["unprintable"], 6)
        self.assertEqual(stats["scan_skips"]["stray_keys"], 3)
        self.assertEqual(m.info()["classes"], 2)
        log = "\n".join(m.log_problems())
        self.assertIn("left out 6 names holding a control character", log)
        self.assertIn("left out 3 keys the listing should not hold", log)
        self.assertNotIn("\x01", log)
        self.assertEqual(sorted(ids_of(read_epoch(m.mkjob("one", spec="epochs=1")))),
                         list(range(n)))

    # -- credentials

    def credentials_file(self, mode, profile="train"):
        path = os.path.join(self.tempdir(), "credentials")
        with open(path, "w") as f:
            f.write("[default]\naws_access_key_id = AKIADEFAULT\n"
                    "aws_secret_access_key = default-secret-xxxxxxxxxxxxxxxx\n"
                    "[%s]\naws_access_key_id = AKIAFROMFILE\n"
                    "aws_secret_access_key = file-secret-yyyyyyyyyyyyyyyyyyyy\n" % profile)
        os.chmod(path, mode)
        return path

    def test_credentials_file_readable_by_others_is_refused(self):
        path = self.credentials_file(0o644)
        m = self.mount_s3(options={"s3_credentials": path, "s3_profile": "train"}, start=False)
        with self.assertRaises(AssertionError):
            m.start()
        self.assertEqual(m.returncode, 1)
        with open(m.stderr_path) as f:
            stderr = f.read()
        self.assertEqual(stderr.count("\n"), 1, stderr)
        self.assertIn("s3_credentials %s may be read or written by group or others (mode 0644)"
                      % path, stderr)
        self.assertIn("chmod 600", stderr)
        self.assertNotIn("secret", stderr)
        self.assertEqual(self.s3.requests["list"], 0)

    def test_private_credentials_file_and_profile_are_used(self):
        """The file's profile signs every request, not the environment's
        keys (which the test's environment also holds)."""
        path = self.credentials_file(0o600)
        m = self.mount_s3(options={"s3_credentials": path, "s3_profile": "train"})
        self.assertEqual(len(ids_of(read_epoch(m.mkjob("one", spec="epochs=1")))), self.n)
        self.assertEqual(self.s3.access_keys, {"AKIAFROMFILE"})
        shown = m.read_text("stats") + m.read_text("metrics")
        self.assertEqual(m.unmount(), 0)
        with open(m.log_path) as f:
            shown += f.read()
        self.assertNotIn("file-secret", shown)
        self.assertNotIn("AKIAFROMFILE", shown)

    def test_mount_helper_without_home_uses_s3_credentials(self):
        """As mount(8) and fstab run it: the helper with no HOME and no AWS_
        variable, the credentials named by s3_credentials= in the options."""
        path = self.credentials_file(0o600, profile="default")
        work = self.tempdir()
        mnt = os.path.join(work, "mnt")
        os.makedirs(mnt)
        opts = dict(harness.BASE_OPTIONS)
        opts.update(self.options({"s3_credentials": path, "log": os.path.join(work, "log"),
                                  "nosuid": None, "nodev": None, "noauto": None,
                                  "_netdev": None}))
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
               "JOADERFS": os.path.abspath(harness.BIN)}
        r = subprocess.run([os.path.join(REPO, "mount", "mount.joaderfs"),
                            "s3://%s/folder" % self.s3.bucket, mnt, "-o", format_options(opts)],
                           env=env, capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        daemon = harness.DaemonProcess(harness.daemon_pid(mnt))

        def unmount():
            subprocess.run([harness.FUSERMOUNT, "-u", mnt], capture_output=True)
            daemon.wait(10)
        self.addCleanup(unmount)
        self.assertTrue(harness.is_mounted(mnt))
        with open(os.path.join(mnt, "dataset", "manifest")) as f:
            self.assertEqual(len(f.read().splitlines()), self.n)
        self.assertEqual(self.s3.access_keys, {"AKIAFROMFILE"})

    def test_no_secret_in_the_daemons_environment(self):
        """The keys came from the environment; once read, /proc/PID/environ
        of the daemon holds none of them (nor their names)."""
        env = self.s3.env()
        self.set_env(dict(env, AWS_SESSION_TOKEN="session-token-zzzzzzzzzzzzzzzz"))
        m = self.mount_s3()
        self.assertEqual(self.s3.access_keys, {env["AWS_ACCESS_KEY_ID"]})
        with open("/proc/%d/environ" % m.proc.pid, "rb") as f:
            environ = f.read()
        self.assertIn(b"PATH=", environ)  # the rest stays
        for secret in (env["AWS_SECRET_ACCESS_KEY"], env["AWS_ACCESS_KEY_ID"],
                       "session-token-zzzzzzzzzzzzzzzz", "AWS_SECRET_ACCESS_KEY",
                       "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
            self.assertNotIn(secret.encode(), environ)
        # Still served: the client holds the keys.
        self.assertEqual(len(ids_of(read_epoch(m.mkjob("one", spec="epochs=1")))), self.n)


if __name__ == "__main__":
    unittest.main()
