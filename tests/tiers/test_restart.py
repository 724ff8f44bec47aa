"""Issue 4, test 2: the disk tier survives a restart.

Mount with cache_dir=D, read an epoch, unmount cleanly (the daemon flushes
the tier before it exits); mount again on the same D and SOURCE: a new job's
whole epoch decodes nothing. Rewrite one source file (same name, other
pixels) and remount: that sample alone is decoded again, and its pixels are
the new ones.
"""

import os
import shutil
import tempfile
import unittest

import numpy as np

import harness
from harness import SIZE, TierTestCase, digests, log

N = 40


class RestartTest(TierTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-tiers-")
        cls.source, cls.order = harness.make_dataset(
            os.path.join(cls._data, "src"), N, classes=4, seed=11)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def mount_d(self, cache_dir):
        return self.mount(self.source, {"cache_dir": cache_dir,
                                        "size": str(SIZE), "threads": "2"})

    def test_restart_keeps_disk_tier_and_notices_changed_file(self):
        cache_dir = self.tempdir()

        # 1. First mount: every sample decoded once and written to D.
        m1 = self.mount_d(cache_dir)
        first = self.read_job(m1, "first")
        self.assertEqual(len(first), N)
        st1 = m1.stats()
        self.assertEqual(st1["decoded"], N, st1)
        before = digests(first)
        self.clean_unmount(m1)
        self.assertTrue(harness.cache_files(cache_dir, prefix="slots-"),
                        "no slot file under %s after a clean unmount: %s"
                        % (cache_dir, os.listdir(cache_dir)))

        # 2. Restart on the same D and SOURCE: nothing is decoded.
        m2 = self.mount_d(cache_dir)
        second = self.read_job(m2, "second")
        st2 = m2.stats()
        log("restart: decoded %d, disk_hits %d, disk_misses %d, disk_bytes "
            "%d (N=%d)", st2["decoded"], st2["disk_hits"],
            st2.get("disk_misses", -1), st2["disk_bytes"], N)
        self.assertEqual(len(second), N)
        self.assertEqual(st2["decoded"], 0,
                         "after a restart nothing should be decoded: %s" % st2)
        self.assertEqual(st2["disk_hits"], N, st2)
        self.assertEqual(digests(second), before,
                         "pixels served from the disk tier differ from the "
                         "decoded ones")
        self.clean_unmount(m2)

        # 3. Rewrite one source file in place; remount.
        victim = 17
        rel = self.order[victim][0]
        path = os.path.join(self.source, rel)
        old_pixels = {r.id: r.pixels().copy() for r in first}[victim]
        harness.rewrite_image(path, seed=999)
        new_ref = harness.reference_pixels(path, SIZE)

        m3 = self.mount_d(cache_dir)
        third = self.read_job(m3, "third")
        st3 = m3.stats()
        log("after rewriting %s: decoded %d, disk_hits %d", rel,
            st3["decoded"], st3["disk_hits"])
        self.assertEqual(len(third), N)
        self.assertEqual(st3["decoded"], 1,
                         "only the rewritten sample should be decoded: %s"
                         % st3)
        self.assertEqual(st3["disk_hits"], N - 1, st3)
        got = digests(third)
        for i in range(N):
            if i != victim:
                self.assertEqual(got[i], before[i], "sample %d changed" % i)
        rec = [r for r in third if r.id == victim][0]
        new_pixels = rec.pixels()
        self.assertFalse(np.array_equal(new_pixels, old_pixels),
                         "sample %d (%s) still has its old pixels"
                         % (victim, rel))
        mad_new = float(np.abs(new_pixels.astype(np.int16) - new_ref).mean())
        mad_old = float(np.abs(new_pixels.astype(np.int16) - old_pixels).mean())
        log("rewritten sample: mean abs diff to the new PIL reference %.2f, "
            "to the old pixels %.2f", mad_new, mad_old)
        self.assertLess(mad_new, 6.0, "pixels of the rewritten file do not "
                        "match its new content")
        self.assertLess(mad_new, mad_old / 3)
        self.clean_unmount(m3)

        # The new pixels equal an independent fresh decode of the new file.
        ref = self.reference(self.source, n=N)
        self.assertEqual(got[victim], ref[victim])
        self.assertEqual(got, ref)

        # 4. The new version was stored: a fourth mount decodes nothing.
        m4 = self.mount_d(cache_dir)
        fourth = self.read_job(m4, "fourth")
        st4 = m4.stats()
        self.assertEqual(st4["decoded"], 0, st4)
        self.assertEqual(digests(fourth), ref)


if __name__ == "__main__":
    unittest.main()
