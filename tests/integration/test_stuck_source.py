"""A SOURCE whose reads never return (issue 28, failure 4): SOURCE lives on
joaderfs-stuck-fs (tests/tools/stuck_fs.c), a FUSE passthrough whose reads
of two chosen files hang as on a hung network filesystem. With threads=2
and read_timeout=2, a job that needs neither file gets all its samples in
time; a job that needs them gets the rest, the two skipped and counted; the
daemon exits on unmount (and on SIGTERM) while those reads are still
blocked, and a new mount on the same cache_dir starts.

Run: JOADERFS_BIN=build/joaderfs JOADERFS_STUCK_FS=build/joaderfs-stuck-fs
python3 -m unittest -v test_stuck_source (from tests/integration)."""

import io
import os
import signal
import subprocess
import tarfile
import threading
import time
import unittest

from harness import (DatasetMixin, JoaderTestCase, digests, ids_of, make_imagefolder,
                     read_epoch)
from harness.daemon import FUSERMOUNT, is_mounted

STUCK_FS = os.environ.get("JOADERFS_STUCK_FS", "")


def close_quietly(fd):
    """A handle on a mount whose daemon is gone fails its flush."""
    try:
        os.close(fd)
    except OSError:
        pass


def start_stuck_fs(case, root, names):
    """Mounts joaderfs-stuck-fs over `root` with `names` (its STUCK) stuck,
    unmounted when `case` ends; returns its mountpoint."""
    if not os.access(STUCK_FS, os.X_OK):
        raise AssertionError("JOADERFS_STUCK_FS=%r is not an executable" % STUCK_FS)
    mnt = os.path.join(case.tempdir(), "stuck")
    os.mkdir(mnt)
    proc = subprocess.Popen([STUCK_FS, root, names, mnt, "-f"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop():
        """Killing it fails whatever calls still block on it."""
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if is_mounted(mnt):
            subprocess.run([FUSERMOUNT, "-u", "-z", mnt], capture_output=True)
    # Added after tempdir's removal, so it runs before it.
    case.addCleanup(stop)
    deadline = time.monotonic() + 10
    while not is_mounted(mnt):
        case.assertIsNone(proc.poll(), "joaderfs-stuck-fs exited")
        case.assertLess(time.monotonic(), deadline, "no stuck_fs mount")
        time.sleep(0.05)
    return mnt


def unmount_and_see_exit(case, m):
    """Unmounts `m`; its daemon exits cleanly within 5 s though calls of it
    still block in the kernel."""
    start = time.monotonic()
    subprocess.run([FUSERMOUNT, "-u", m.mnt], check=True)
    try:
        code = m.proc.wait(10)
    except subprocess.TimeoutExpired:
        case.fail("the daemon did not exit within 10 s of the unmount")
    case.assertEqual(code, 0)
    case.assertLess(time.monotonic() - start, 5)


class StuckSourceTest(DatasetMixin, JoaderTestCase):

    STUCK = (3, 14)  # ids whose files' reads never return

    def setUp(self):
        names = ",".join(self.order[i][0] for i in self.STUCK)
        self.stuck_mnt = start_stuck_fs(self, self.source, names)
        self.cache_dir = os.path.join(self.tempdir(), "cache")

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
        unmount_and_see_exit(self, m)
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


class StuckScanTest(DatasetMixin, JoaderTestCase):
    """A file whose stat never returns, and a shard whose read never
    returns, at scan time: the scan gives each up at read_timeout, counts
    it in scan_skips.stuck and logs it, and the mount comes up. The shard
    is left out; the file stays a sample (a tree's ids come from its
    listing, design.md 2.1), whose read times out and is skipped. Before,
    the daemon never mounted (it waited in the kernel for an answer that
    never came)."""

    def mount_within(self, source, seconds):
        start = time.monotonic()
        m = self.mount(source, {"read_timeout": "2"})
        took = time.monotonic() - start
        self.assertLess(took, seconds, "the mount took %.1f s" % took)
        return m

    def assert_logged(self, m):
        with open(m.log_path, errors="replace") as f:
            self.assertIn("did not return within 2 s (read_timeout)", f.read())

    def test_a_file_whose_stat_hangs_is_kept_and_skipped(self):
        stuck = self.order[5][0]
        mnt = start_stuck_fs(self, self.source, "stat:" + stuck)
        m = self.mount_within(mnt, 15)
        self.assertEqual(m.info()["samples"], self.N)
        self.assertEqual(m.stats()["scan_skips"]["stuck"], 1)
        self.assertEqual(m.stats()["identities_pending"], 0)
        self.assertEqual([rel for _, _, rel in m.manifest()][5], stuck)
        self.assert_logged(m)
        ids = ids_of(read_epoch(m.mkjob("all"), timeout=30))
        self.assertEqual(sorted(ids), [i for i in range(self.N) if i != 5])
        self.assertEqual(m.status("all")["skipped"], 1)
        self.assertEqual(m.stats()["source_reads_timed_out"], 1)

    def test_a_shard_whose_read_hangs_is_left_out(self):
        shards = os.path.join(self.tempdir(), "shards")
        os.mkdir(shards)
        for k in range(3):
            with tarfile.open(os.path.join(shards, "shard-%d.tar" % k), "w") as tar:
                for i in range(k * 4, k * 4 + 4):
                    rel, label = self.order[i]
                    tar.add(os.path.join(self.source, rel), "s%03d.jpg" % i)
                    data = b"%d" % label
                    info = tarfile.TarInfo("s%03d.cls" % i)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        mnt = start_stuck_fs(self, shards, "shard-1.tar")
        m = self.mount_within(mnt, 15)
        self.assertEqual(m.info()["samples"], 8)
        self.assertEqual(m.stats()["scan_skips"]["stuck"], 1)
        self.assert_logged(m)
        ids = ids_of(read_epoch(m.mkjob("all"), timeout=30))
        self.assertEqual(len(ids), 8)


class StuckIdentityPassTest(JoaderTestCase):
    """A tree of more than 65,536 files takes its files' identities after
    the mount appears (design.md 2.1). With a file's stat hung in each of
    the first two folders, the pass's two threads (this 2-core machine's)
    wait read_timeout there while the last folder's files are not stat'ed:
    read meanwhile, their decodes take the identity their bytes were read
    with and are kept in the disk tier; an unmount while the pass is
    blocked ends the daemon at once; a remount serves them from the disk
    tier once its pass ended, the hung files counted and logged. (A hung
    lookup blocks its folder's other lookups on this FUSE filesystem, so
    the files read lie in another folder.) A pass held that way does not
    hold the disk tier's rebuild past read_timeout: its budget counts what
    it holds."""

    FILES, CLASSES = 66_000, 10

    def test_reads_before_the_pass_are_kept_and_the_pass_stops_at_unmount(self):
        base = self.tempdir()
        make_imagefolder(os.path.join(base, "orig"), {"o%02d" % k: ["x.jpg"] for k in range(12)})
        source = os.path.join(base, "src")
        for c in range(self.CLASSES):
            os.makedirs(os.path.join(source, "c%d" % c))
        for i in range(self.FILES):
            os.link(os.path.join(base, "orig", "o%02d" % (i % 12), "x.jpg"),
                    os.path.join(source, "c%d" % (i % self.CLASSES), "%05d.jpg" % i))
        # Ids follow the folders' name order. The hung files are their
        # folders' last (a hung lookup holds its folder's later ones), and
        # not among the 4096 spread files (every 17th id) stat'ed before the
        # mount appears, which would hold it for read_timeout.
        per_class = self.FILES // self.CLASSES
        # ids per_class - 1, 2 * per_class - 1 and 3 * per_class - 1: the
        # third is reached once the first two were given up.
        hung = ["c0/65990.jpg", "c1/65991.jpg", "c2/65992.jpg"]
        mnt = start_stuck_fs(self, source, ",".join("stat:" + h for h in hung))
        cache_dir = os.path.join(base, "cache")
        os.mkdir(cache_dir)
        wanted = list(range(9 * per_class + 100, 9 * per_class + 300))
        ids = "".join("%d\n" % i for i in wanted)

        m = self.mount(mnt, {"cache_dir": cache_dir, "size": "32", "read_timeout": "60"})
        self.assertEqual(m.info()["samples"], self.FILES)
        rels = [rel for _, _, rel in m.manifest()]
        self.assertEqual([rels[k * per_class - 1] for k in (1, 2, 3)], hung)
        first = [r for rs in read_epoch(m.mkjob("first", ids=ids), timeout=30) for r in rs]
        self.assertEqual(sorted(r.id for r in first), wanted)
        # The pass is still blocked at the hung stats (60 s); each decode
        # was kept all the same.
        self.assertGreater(m.stats()["identities_pending"], 0)
        deadline = time.monotonic() + 20
        while m.stats()["disk_writes"] < len(wanted):
            self.assertLess(time.monotonic(), deadline, m.stats())
            time.sleep(0.1)
        unmount_and_see_exit(self, m)

        m = self.mount(mnt, {"cache_dir": cache_dir, "size": "32", "read_timeout": "2"})
        deadline = time.monotonic() + 60
        while m.stats()["identities_pending"] > 0:
            self.assertLess(time.monotonic(), deadline, "the identity pass did not end")
            time.sleep(0.1)
        self.assertEqual(m.stats()["scan_skips"]["stuck"], 3)
        with open(m.log_path, errors="replace") as f:
            log = f.read()
        self.assertIn("did not return within 2 s (read_timeout)", log)
        self.assertIn("identities of %d files taken" % self.FILES, log)
        second = [r for rs in read_epoch(m.mkjob("second", ids=ids), timeout=30) for r in rs]
        stats = m.stats()
        self.assertEqual(stats["disk_hits"], len(wanted), stats)
        self.assertEqual(stats["decoded"], 0, stats)
        self.assertEqual(digests(second), digests(first))
        unmount_and_see_exit(self, m)

        # read_timeout=5: the pass waits 5 s on the first two hung files,
        # then 5 s on the third; the tier's 200 entries are counted after
        # the first 5, while the pass still runs.
        m = self.mount(mnt, {"cache_dir": cache_dir, "size": "32", "read_timeout": "5"})
        deadline = time.monotonic() + 30
        while True:
            stats = m.stats()
            if stats["disk_entries"] >= len(wanted):
                break
            self.assertLess(time.monotonic(), deadline, stats)
            time.sleep(0.1)
        self.assertEqual(stats["disk_entries"], len(wanted))
        self.assertGreater(stats["identities_pending"], 0,
                           "the tier was counted only once the pass ended: %s" % stats)

if __name__ == "__main__":
    unittest.main()
