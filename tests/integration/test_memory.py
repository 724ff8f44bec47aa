"""Memory and disk that fit the machine (issue 20 failure 2, issue 18 items
3 and 4):

- memory freed by removed jobs goes back to the system: RSS returns near
  where it was before a hundred jobs with ranks=4096 were made and removed;
- the default ram_cache is a quarter of the cgroup's memory limit when that
  is lower than the machine's RAM (a real cgroup, where one can be made);
- the default disk tier is sized from the decoded set and cache_dir's free
  space, and says so in one log line when the set cannot fit.

Run: JOADERFS_BIN=build/joaderfs python3 -m unittest -v test_memory
(from tests/integration)."""

import os
import subprocess
import time
import unittest

from harness import BIN, DatasetMixin, JoaderTestCase, rss_bytes, wait_for

MIB = 1 << 20


def decoded_estimate(base):
    """joaderfs(8) disk_cache: a 4:3 RGB image at `base`, plus 1/8."""
    return base * base * 4 // 3 * 3 * 9 // 8


class MemoryTest(DatasetMixin, JoaderTestCase):

    def test_rss_returns_after_jobs_are_removed(self):
        """100 jobs with ranks=4096 take ~350 MiB; once removed, at least
        half of it goes back to the system within 10 s (glibc kept all of it
        before the daemon trimmed; 70-85% goes back in practice, the rest is
        what the heap's live blocks keep in partly used pages)."""
        m = self.mount(self.source)
        pid = m.proc.pid
        time.sleep(1.5)
        before = rss_bytes(pid)
        for i in range(100):
            m.mkjob("r%d" % i, spec="ranks=4096")
        grown = rss_bytes(pid)
        self.assertGreater(grown - before, 128 * MIB,
                           "the jobs took too little memory to tell")
        for i in range(100):
            os.rmdir(m.path("jobs", "r%d" % i))
        returned = wait_for(lambda: rss_bytes(pid) < before + (grown - before) // 2,
                            10.0)
        after = rss_bytes(pid)
        self.assertTrue(returned, "RSS %d MiB before, %d MiB with the jobs, "
                        "%d MiB 10 s after removing them"
                        % (before // MIB, grown // MIB, after // MIB))

    def test_ram_cache_default_follows_the_cgroup_limit(self):
        """A daemon started in a cgroup limited to 2 GiB gets ram_cache
        512 MiB (a quarter), not a quarter of the machine's RAM."""
        launcher, _ = self.memory_cgroup_launcher(2 << 30)
        m = self.mount(self.source, {"ram_cache": False}, start=False)
        m.argv[0] = launcher
        m.start()
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        self.assertEqual(m.stats()["ram_budget"], min(ram, 2 << 30) // 4)

    def test_disk_tier_default_holds_a_small_set(self):
        """Without disk_cache, a set that fits gets its decoded size (at
        least the 64 MiB floor) and no warning."""
        cache = os.path.join(self.tempdir(), "cache")
        st = os.statvfs(os.path.dirname(cache))
        if st.f_bavail * st.f_frsize < 200 * MIB:
            self.skipTest("too little free space to tell")
        m = self.mount(self.source, {"cache_dir": cache})
        expected = max(64 * MIB, self.N * decoded_estimate(64))
        self.assertEqual(m.stats()["disk_budget"], expected)
        m.unmount()
        with open(m.log_path) as f:
            self.assertNotIn("disk tier:", f.read())

    @unittest.skipUnless(os.geteuid() == 0, "mounts a tmpfs: needs root")
    def test_disk_tier_default_fits_the_free_space_and_says_so(self):
        """cache_dir on a 36 MiB tmpfs with a set of ~7 MiB decoded at base
        256: the tier takes 80% of what the free space leaves after room for
        the two databases there (index, job store: 2 x (16 MiB + 128 bytes a
        sample), daemon/options.h DefaultDiskCache), and one warning line
        gives both figures."""
        cachefs = os.path.join(self.tempdir(), "cachefs")
        os.makedirs(cachefs)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=36m", "tmpfs",
                            cachefs], capture_output=True, text=True)
        if r.returncode != 0:  # a container without CAP_SYS_ADMIN
            self.skipTest("cannot mount a tmpfs: %s" % r.stderr.strip())
        self.addCleanup(subprocess.run, ["umount", "-l", cachefs])
        m = self.mount(self.source, {"cache_dir": cachefs, "base": "256"})
        budget = m.stats()["disk_budget"]
        usable = 36 * MIB - 2 * (16 * MIB + 128 * self.N)
        self.assertLessEqual(budget, usable // 10 * 8)
        self.assertGreater(budget, usable // 10 * 7)
        estimate = self.N * decoded_estimate(256)
        self.assertGreater(estimate, budget)
        m.unmount()
        with open(m.log_path) as f:
            lines = [l for l in f if "disk tier:" in l]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("%d MiB in %s" % (budget >> 20, cachefs), lines[0])
        self.assertIn("~%d MiB" % (estimate >> 20), lines[0])


if __name__ == "__main__":
    unittest.main()
