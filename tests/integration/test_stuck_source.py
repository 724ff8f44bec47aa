"""A SOURCE whose reads never return (issue 28, failure 4): SOURCE lives on
joaderfs-stuck-fs (tests/tools/stuck_fs.c), a FUSE passthrough whose reads
of two chosen files hang as on a hung network filesystem. With threads=2
and read_timeout=2, a job that needs neither file gets all its samples in
time; a job that needs them gets the rest, the two skipped and counted; the
daemon exits on unmount (and on SIGTERM) while those reads are still
blocked, and a new mount on the same cache_dir starts.

Run: JOADERFS_BIN=build/joaderfs JOADERFS_STUCK_FS=build/joaderfs-stuck-fs
python3 -m unittest -v test_stuck_source (from tests/integration)."""

import os
import signal
import subprocess
import threading
import time
import unittest

from harness import DatasetMixin, JoaderTestCase, ids_of, read_epoch
from harness.daemon import FUSERMOUNT, is_mounted

STUCK_FS = os.environ.get("JOADERFS_STUCK_FS", "")


def close_quietly(fd):
    """A handle on a mount whose daemon is gone fails its flush."""
    try:
        os.close(fd)
    except OSError:
        pass


class StuckSourceTest(DatasetMixin, JoaderTestCase):

    STUCK = (3, 14)  # ids whose files' reads never return

    def setUp(self):
        if not os.access(STUCK_FS, os.X_OK):
            raise AssertionError("JOADERFS_STUCK_FS=%r is not an executable"
                                 % STUCK_FS)
        work = self.tempdir()
        self.stuck_mnt = os.path.join(work, "stuck")
        os.mkdir(self.stuck_mnt)
        names = ",".join(self.order[i][0] for i in self.STUCK)
        self.stuck_fs = subprocess.Popen(
            [STUCK_FS, self.source, names, self.stuck_mnt, "-f"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        # Added after tempdir's removal, so it runs before it.
        self.addCleanup(self.stop_stuck_fs)
        deadline = time.monotonic() + 10
        while not is_mounted(self.stuck_mnt):
            self.assertIsNone(self.stuck_fs.poll(), "joaderfs-stuck-fs exited")
            self.assertLess(time.monotonic(), deadline, "no stuck_fs mount")
            time.sleep(0.05)
        self.cache_dir = os.path.join(work, "cache")

    def stop_stuck_fs(self):
        """Killing it fails whatever reads still block on it."""
        if self.stuck_fs.poll() is None:
            self.stuck_fs.kill()
        self.stuck_fs.wait()
        if is_mounted(self.stuck_mnt):
            subprocess.run([FUSERMOUNT, "-u", "-z", self.stuck_mnt],
                           capture_output=True)

    def mount_stuck(self):
        return self.mount(self.stuck_mnt, {
            "threads": "2", "read_timeout": "2", "retry_failed": "3600",
            "cache_dir": self.cache_dir})

    def test_blocked_reads_cost_only_their_samples(self):
        m = self.mount_stuck()
        everything = m.mkjob("everything")
        rest = [i for i in range(self.N) if i not in self.STUCK]
        clean = m.mkjob("clean", ids="".join("%d\n" % i for i in rest))

        # The job that needs the stuck files reads first, so that their
        # reads are blocked while the other job reads.
        got = {}

        def read_everything():
            got["ids"] = ids_of(read_epoch(everything, timeout=60))
        reader = threading.Thread(target=read_everything)
        reader.start()
        self.addCleanup(reader.join, 70)
        time.sleep(0.5)
        start = time.monotonic()
        clean_ids = ids_of(read_epoch(clean, timeout=20))
        self.assertEqual(sorted(clean_ids), rest)
        self.assertLess(time.monotonic() - start, 15)

        reader.join(60)
        self.assertFalse(reader.is_alive(), "the stuck job's epoch never ended")
        self.assertEqual(sorted(got["ids"]), rest)
        self.assertEqual(m.status("everything")["skipped"], 2)
        stats = m.stats()
        self.assertEqual(stats["skipped"], 2)
        self.assertEqual(stats["source_reads_timed_out"], 2)
        self.assertEqual(stats["source_io_threads_stuck"], 2)
        self.assertGreater(stats["source_bytes"], 0)
        metrics = m.read_text("metrics")
        label = '{mount="%s"}' % m.mnt
        self.assertIn("joaderfs_source_reads_timed_out_total%s 2\n" % label, metrics)
        self.assertIn("joaderfs_source_io_threads_stuck%s 2\n" % label, metrics)
        with open(m.log_path, errors="replace") as f:
            log = f.read()
        self.assertIn("read_timeout", log)

        # The reads are still blocked; the daemon exits all the same.
        start = time.monotonic()
        subprocess.run([FUSERMOUNT, "-u", m.mnt], check=True)
        try:
            code = m.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.fail("the daemon did not exit within 10 s of the unmount")
        self.assertEqual(code, 0)
        self.assertLess(time.monotonic() - start, 5)
        m.wait_exit(1)

        # The cache_dir lock is free: a new mount starts, and SIGTERM ends
        # it while its own reads of the stuck files block.
        again = self.mount_stuck()
        job = again.mkjob("again")
        fd = os.open(job, os.O_RDONLY)
        self.addCleanup(close_quietly, fd)
        os.read(fd, 1)  # starts the epoch: its loads block on the two files
        time.sleep(0.5)
        start = time.monotonic()
        again.proc.send_signal(signal.SIGTERM)
        try:
            again.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.fail("the daemon did not exit within 10 s of SIGTERM")
        self.assertLess(time.monotonic() - start, 5)


if __name__ == "__main__":
    unittest.main()
