"""Failures that heal (issue 20, failure 4): an image that could not be
decoded is skipped, and once its file is restored it is delivered again, to
the job that skipped it (its next epoch) and to a new job whose ids name only
it; the same file restored with its size and mtime as they were at the
failure comes back once the back-off of retry_failed= has passed.

Run: JOADERFS_BIN=build/joaderfs python3 -m unittest -v test_heal
(from tests/integration)."""

import os
import time
import unittest

import numpy as np

from harness import (DatasetMixin, JoaderTestCase, ids_of, read_epoch,
                      reference_pixels)


class HealTest(DatasetMixin, JoaderTestCase):

    def damage(self, ids, how):
        """Damages the images of `ids` in place; returns their bytes."""
        saved = {}
        for i in ids:
            path = os.path.join(self.source, self.order[i][0])
            with open(path, "rb") as f:
                saved[i] = f.read()
            with open(path, "r+b") as f:
                if how == "truncate":
                    f.truncate(len(saved[i]) // 3)
                else:  # zeros over every byte: same size, not an image
                    f.write(b"\0" * len(saved[i]))
        return saved

    def restore(self, saved, keep_stat=False):
        """Writes the saved bytes back; with keep_stat the file keeps the
        size and mtime it had while damaged (only the back-off heals it)."""
        for i, data in saved.items():
            path = os.path.join(self.source, self.order[i][0])
            before = os.stat(path)
            with open(path, "r+b") as f:
                f.write(data)
                f.truncate(len(data))
            if keep_stat:
                self.assertEqual(before.st_size, len(data))
                os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    def read_ids(self, next_path):
        return sorted(ids_of(read_epoch(next_path)))

    def check_pixels(self, m, next_path, ids):
        records = read_epoch(next_path)[0]
        self.assertEqual(sorted(r.id for r in records), ids)
        for r in records:
            path = os.path.join(self.source, self.order[r.id][0])
            ref = reference_pixels(path, 64).astype(np.int16)
            mad = float(np.abs(r.pixels().astype(np.int16) - ref).mean())
            self.assertLess(mad, 6.0, "sample %d differs from its file" % r.id)

    def test_restored_files_come_back(self):
        """Two truncated files are skipped; restored byte for byte (their
        size changes back), a new job whose ids hold only them gets both,
        and so does the job that skipped them, in its next epoch, though the
        back-off (an hour here) has not passed."""
        ids = [1, 5]
        saved = self.damage(ids, "truncate")
        self.addCleanup(self.restore, saved)
        m = self.mount(self.source, {"retry_failed": "3600"})
        first = m.mkjob("first", ids="".join("%d\n" % i for i in ids))
        self.assertEqual(self.read_ids(first), [])
        self.assertEqual(m.status("first")["skipped"], 2)
        self.assertEqual(m.stats()["skipped"], 2)

        self.restore(saved)
        time.sleep(2.2)  # a bad sample's file is looked at every 2 s at most
        fresh = m.mkjob("fresh", ids="".join("%d\n" % i for i in ids))
        self.check_pixels(m, fresh, ids)
        self.check_pixels(m, first, ids)
        self.assertEqual(m.stats()["skipped"], 0)

    def test_unchanged_files_come_back_after_the_backoff(self):
        """Zeroed in place, then restored with the damaged size and mtime:
        nothing tells the daemon, so they stay skipped within the back-off
        (retry_failed=5), though their files are looked at after 2 s, and
        come back after it."""
        ids = [2, 6]
        saved = self.damage(ids, "zero")
        self.addCleanup(self.restore, saved)
        m = self.mount(self.source, {"retry_failed": "5"})
        spec_ids = "".join("%d\n" % i for i in ids)
        self.assertEqual(self.read_ids(m.mkjob("first", ids=spec_ids)), [])
        failed_at = time.monotonic()
        self.restore(saved, keep_stat=True)
        time.sleep(2.2)  # past the 2 s between looks at a file
        self.assertEqual(self.read_ids(m.mkjob("early", ids=spec_ids)), [],
                         "retried before its back-off although its file "
                         "looked unchanged")
        self.assertLess(time.monotonic() - failed_at, 5.0,
                        "too slow to check the back-off; rerun")
        time.sleep(max(0.0, 5.3 - (time.monotonic() - failed_at)))
        self.check_pixels(m, m.mkjob("late", ids=spec_ids), ids)

if __name__ == "__main__":
    unittest.main()
