"""Issue 4, test 5: /stats reports each tier, and the figures agree with
each other and with what the readers saw.

Keys: ram_hits, ram_misses, ram_bytes, ram_evictions, disk_hits,
disk_misses, disk_bytes, disk_evictions, decode_queue, decode_busy_seconds
(plus the contract's decoded, delivered, ram_budget, skipped, jobs).
/stats is polled while two jobs read, and checked at the end.
"""

import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import harness
from harness import PIXELS, SIZE, SLOT, TierTestCase, log, wait_for

N = 60
THREADS = 2
JOBS = 2
EPOCHS = 2
RAM_SAMPLES = 10             # ram_cache holds 10 of the 60 samples
DISK_SAMPLES = 30            # disk_cache holds 30
READ_DELAY = 0.02            # seconds per record
# What planned-but-undelivered (pinned) samples may add to the RAM budget:
# docs/design.md 3 says that when pinned samples fill the budget, jobs plan only
# "a minimum ahead (enough to keep the decode threads busy)". Allowed here:
# 8 samples per decode thread per job (twice the daemon's own minimum).
PIN_ALLOWANCE = JOBS * 8 * THREADS * PIXELS

TIER_KEYS = ("ram_hits", "ram_misses", "ram_bytes", "ram_evictions",
             "disk_hits", "disk_misses", "disk_bytes", "disk_evictions",
             "decode_queue", "decode_busy_seconds")
CONTRACT_KEYS = ("decoded", "delivered", "ram_hits", "disk_hits",
                 "ram_bytes", "ram_budget", "disk_bytes", "skipped", "jobs")
COUNTERS = ("decoded", "delivered", "ram_hits", "ram_misses",
            "ram_evictions", "disk_hits", "disk_misses", "disk_evictions",
            "decode_busy_seconds")


class Poller(threading.Thread):
    """Reads /stats every few ms while the jobs run; keeps every sample."""

    def __init__(self, m):
        super().__init__(daemon=True)
        self.m = m
        self.samples = []
        self.stop = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self.stop.is_set():
                self.samples.append(self.m.stats())
                time.sleep(0.01)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e


def fill_up(path):
    """Writes `path` until its filesystem is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


class StatsTest(TierTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-tiers-")
        cls.source, cls.order = harness.make_dataset(
            os.path.join(cls._data, "src"), N, classes=3, seed=41)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def check_keys(self, st):
        for k in TIER_KEYS + CONTRACT_KEYS:
            self.assertIn(k, st, "/stats lacks %r: %s" % (k, sorted(st)))
        for k in TIER_KEYS + CONTRACT_KEYS:
            if k == "jobs":
                self.assertIsInstance(st[k], dict)
            elif k == "decode_busy_seconds":
                self.assertIsInstance(st[k], (int, float))
                self.assertGreaterEqual(st[k], 0)
            else:
                self.assertIsInstance(st[k], int, "%s=%r" % (k, st[k]))
                self.assertGreaterEqual(st[k], 0, k)

    def run_jobs(self, m):
        """JOBS jobs with identical subsets, EPOCHS epochs each, read
        concurrently, one record per read and READ_DELAY seconds per record
        (slower than decoding, so that planned samples wait in RAM);
        returns the records read."""
        for j in range(JOBS):
            m.mkjob("s%d" % j)
        out = [[] for _ in range(JOBS)]
        errors = []

        def job(j):
            try:
                for _ in range(EPOCHS):
                    r = harness.PacedReader(m.path("jobs", "s%d" % j, "next"),
                                            READ_DELAY)
                    r.run()
                    if r.error:
                        raise r.error
                    recs = r.records()
                    self.assertEqual(sorted(r.id for r in recs),
                                     list(range(N)))
                    out[j] += recs
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=job, args=(j,), daemon=True)
                   for j in range(JOBS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        if errors:
            raise errors[0]
        return out

    def test_tier_stats_with_disk_tier(self):
        cache_dir = self.tempdir()
        ram_budget = RAM_SAMPLES * PIXELS
        disk_budget = DISK_SAMPLES * SLOT
        t_mount = time.monotonic()
        m = self.mount(self.source, {"cache_dir": cache_dir,
                                     "size": str(SIZE),
                                     "threads": str(THREADS),
                                     "ram_cache": str(ram_budget),
                                     "disk_cache": str(disk_budget)})
        st0 = m.stats()
        self.check_keys(st0)
        self.assertEqual(st0["ram_budget"], ram_budget)
        for k in ("decoded", "delivered", "ram_hits", "ram_misses",
                  "ram_bytes", "disk_hits", "disk_bytes"):
            self.assertEqual(st0[k], 0, "%s before any read: %s" % (k, st0))

        poller = Poller(m)
        poller.start()
        recs = self.run_jobs(m)
        # Writes to the disk tier are asynchronous: wait until they settle.
        wait_for(lambda: m.stats()["decode_queue"] == 0, 10)
        time.sleep(0.3)
        poller.stop.set()
        poller.join(5)
        self.assertIsNone(poller.error)
        samples = poller.samples
        st = m.stats()
        elapsed = time.monotonic() - t_mount
        self.check_keys(st)
        self.assertGreater(len(samples), 5)

        peak_ram = max(s["ram_bytes"] for s in samples)
        peak_pinned = max(s.get("ram_pinned_bytes", 0) for s in samples)
        peak_unpinned = max(s["ram_bytes"] - s.get("ram_pinned_bytes", 0)
                            for s in samples)
        peak_disk = max(s["disk_bytes"] for s in samples + [st])
        log("disk tier: %d polls; peak ram_bytes %d (%.1fx ram_budget %d), "
            "peak pinned %d, peak unpinned %d; final %s", len(samples),
            peak_ram, peak_ram / ram_budget, ram_budget, peak_pinned,
            peak_unpinned, {k: st[k] for k in TIER_KEYS + (
                "decoded", "delivered", "disk_entries", "disk_writes",
                "disk_corrupt", "ram_entries")
                if k in st})

        # Counters never go backwards.
        with self.subTest(check="counters are monotonic"):
            for k in COUNTERS:
                values = [s[k] for s in samples] + [st[k]]
                self.assertEqual(values, sorted(values),
                                 "%s decreased between polls" % k)

        delivered = sum(len(r) for r in recs)
        with self.subTest(check="delivered"):
            self.assertEqual(delivered, JOBS * EPOCHS * N)
            self.assertEqual(st["delivered"], delivered)
            self.assertEqual(st["skipped"], 0)

        # RAM tier: every delivered record was looked up once.
        with self.subTest(check="RAM tier"):
            self.assertEqual(st["ram_hits"] + st["ram_misses"], delivered, st)
            self.assertGreater(st["ram_evictions"], 0,
                               "60 samples through a 10-sample RAM tier")
            # Unpinned samples always fit the budget (eviction works) ...
            self.assertLessEqual(peak_unpinned, ram_budget,
                                 "unpinned RAM bytes above ram_budget")
            self.assertLessEqual(st["ram_bytes"], ram_budget,
                                 "nothing is pinned at the end: %s" % st)
        # ... and pins add at most a bounded allowance.
        with self.subTest(check="RAM budget with pins"):
            self.assertLessEqual(
                peak_ram, ram_budget + PIN_ALLOWANCE,
                "ram_bytes peaked at %d (pinned %d): %.1fx ram_budget %d, more "
                "than budget + %d bytes of planned samples (%d jobs x %d per "
                "decode thread x %d threads)" % (
                    peak_ram, peak_pinned, peak_ram / ram_budget, ram_budget,
                    PIN_ALLOWANCE, JOBS, 8, THREADS))
        with self.subTest(check="ram_entries"):
            if "ram_entries" in st:
                self.assertEqual(st["ram_entries"] * PIXELS, st["ram_bytes"])

        # Disk tier: looked up once per RAM miss; every miss decoded.
        with self.subTest(check="disk tier"):
            corrupt = st.get("disk_corrupt", 0)
            self.assertEqual(st["disk_hits"] + st["disk_misses"] + corrupt,
                             st["ram_misses"], st)
            self.assertEqual(st["decoded"], st["disk_misses"] + corrupt, st)
            self.assertGreater(st["disk_bytes"], 0)
            self.assertLessEqual(peak_disk, disk_budget,
                                 "disk_bytes above disk_budget")
            self.assertGreater(st["disk_evictions"], 0,
                               "60 samples through a 30-sample disk tier")
            self.assertEqual(st["disk_bytes"] % SLOT, 0)
            if "disk_entries" in st:
                self.assertEqual(
                    st["disk_entries"] * SLOT, st["disk_bytes"],
                    "disk_entries %d does not match disk_bytes %d (%d samples)"
                    % (st["disk_entries"], st["disk_bytes"],
                       st["disk_bytes"] // SLOT))

        # Decoders.
        with self.subTest(check="decoders"):
            self.assertEqual(st["decode_queue"], 0, "idle, yet work is queued")
            self.assertGreater(st["decode_busy_seconds"], 0)
            self.assertLessEqual(st["decode_busy_seconds"],
                                 THREADS * elapsed + 0.5)

        # After a restart the disk tier reports what it kept, and serves it
        # (a larger disk budget now, so that no new write evicts a kept
        # sample before it is read).
        disk_bytes = st["disk_bytes"]
        self.clean_unmount(m)
        m2 = self.mount(self.source, {"cache_dir": cache_dir,
                                      "size": str(SIZE),
                                      "threads": str(THREADS),
                                      "ram_cache": str(ram_budget),
                                      "disk_cache": "1G"})
        st2 = m2.stats()
        self.assertEqual(st2["disk_bytes"], disk_bytes,
                         "disk_bytes after a restart: %s" % st2)
        self.assertEqual(st2["disk_hits"], 0)
        recs2 = self.read_job(m2, "after")
        st3 = m2.stats()
        kept = disk_bytes // SLOT
        self.assertEqual(st3["disk_hits"], kept,
                         "the %d samples kept on disk should all be hits: %s"
                         % (kept, st3))
        self.assertEqual(st3["decoded"], N - kept, st3)
        self.assertEqual(len(recs2), N)

    def test_disk_entries_counts_new_writes(self):
        """Without evictions, disk_entries and disk_bytes grow together."""
        m = self.mount(self.source, {"cache_dir": self.tempdir(),
                                     "size": str(SIZE),
                                     "threads": str(THREADS)})
        self.read_job(m, "a")
        self.assertTrue(wait_for(lambda: m.stats()["disk_bytes"] == N * SLOT,
                                 10), m.stats())
        st = m.stats()
        log("disk tier, one epoch, no eviction: disk_bytes %d (%d samples), "
            "disk_entries %s, disk_writes %s", st["disk_bytes"],
            st["disk_bytes"] // SLOT, st.get("disk_entries"),
            st.get("disk_writes"))
        self.assertEqual(st["disk_evictions"], 0)
        if "disk_entries" in st:
            self.assertEqual(st["disk_entries"], N,
                             "disk_entries after %d samples were written: %s"
                             % (N, st))

    @unittest.skipUnless(os.geteuid() == 0, "mounts a tmpfs: needs root")
    def test_full_cache_filesystem_is_survived_and_logged_once(self):
        """cache_dir on a 256 KiB tmpfs: slot writes and the RocksDB stores'
        writes fail with ENOSPC mid-epoch, then the rest is filled up. The daemon goes on serving every
        sample for three epochs (Debian's RocksDB aborted the process on the
        write after a failed one), logs each cause once per interval,
        counts only what it wrote, and exits 0 at unmount."""
        cachefs = os.path.join(self.tempdir(), "cachefs")
        os.makedirs(cachefs)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs",
                            cachefs], capture_output=True, text=True)
        if r.returncode != 0:  # a container without CAP_SYS_ADMIN
            self.skipTest("cannot mount a tmpfs: %s" % r.stderr.strip())
        self.addCleanup(subprocess.run, ["umount", "-l", cachefs])
        m = self.mount(self.source, {"cache_dir": cachefs, "disk_cache": "1G",
                                     "size": str(SIZE), "threads": str(THREADS)})
        m.mkjob("a")
        for epoch in range(3):
            # A record per read: a job store write per hand-out.
            r = harness.PacedReader(m.path("jobs", "a", "next"), 0)
            r.run()
            if r.error:
                raise r.error
            self.assertEqual(sorted(x.id for x in r.records()), list(range(N)))
            if epoch == 0:
                # Whatever the slots left: the job store's WAL then fails on
                # the next hand-outs it records.
                fill_up(os.path.join(cachefs, "filler"))
        st = m.stats()
        self.assertLess(st["disk_entries"], N, "the tmpfs cannot hold them all")
        self.assertEqual(st["disk_writes"], st["disk_entries"],
                         "disk_writes counts samples written, not tries: %s" % st)
        self.assertEqual(st["disk_evictions"], 0)
        with open(m.log_path) as f:
            log_text = f.read()
        warnings = [line for line in log_text.splitlines()
                    if "disk cache write failed" in line]
        log("full cache filesystem: %d entries written, %d write warnings",
            st["disk_entries"], len(warnings))
        self.assertGreaterEqual(len(warnings), 1, "the failure is logged")
        # One line per cause (no space, short write) within the interval.
        self.assertLessEqual(len(warnings), 2, "\n".join(warnings))
        self.assertEqual(m.unmount(), 0, "the daemon's exit status")

    def test_tier_stats_without_disk_tier(self):
        m = self.mount(self.source, {"cache_dir": "none", "size": str(SIZE),
                                     "threads": str(THREADS),
                                     "ram_cache": "64M"})
        recs = self.read_job(m, "a")
        recs += self.read_job(m, "a")
        st = m.stats()
        self.check_keys(st)
        log("no disk tier: %s", {k: st[k] for k in TIER_KEYS + ("decoded",)})
        self.assertEqual(st["decoded"], N)
        self.assertEqual(st["ram_misses"], N)
        self.assertEqual(st["ram_hits"], N)
        self.assertEqual(st["ram_evictions"], 0)
        self.assertEqual(st["ram_bytes"], N * PIXELS)
        for k in ("disk_hits", "disk_misses", "disk_bytes",
                  "disk_evictions"):
            self.assertEqual(st[k], 0, "%s without a disk tier" % k)
        self.assertEqual(st["delivered"], 2 * N)
        self.assertEqual(len(recs), 2 * N)


if __name__ == "__main__":
    unittest.main()
