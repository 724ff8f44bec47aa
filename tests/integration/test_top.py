"""joaderfs-top (tools/top): one frame (--once) against a daemonized mount
whose jobs are reading: the header's RAM against its budget and decode
threads, a row per job with its owner, progress, rate and where its
samples came from; an error in one line for a folder that is no mount."""

import os
import subprocess
import sys
import threading
import unittest

from harness import DatasetMixin, JoaderTestCase, read_epoch

TOP = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "top", "joaderfs-top")


class TopTest(DatasetMixin, JoaderTestCase):

    def test_once_shows_each_job(self):
        m = self.mount(self.source, {"ram_cache": "64M"})
        read_epoch(m.mkjob("warm"), 1, timeout=60)  # an epoch done: its figures are in
        m.mkjob("second")
        reading = threading.Thread(target=read_epoch, args=(m.path("jobs", "second", "next"), 1),
                                   kwargs={"timeout": 60})
        reading.start()
        try:
            r = subprocess.run([sys.executable, TOP, "--once", "--interval", "0.5", m.mnt],
                               capture_output=True, text=True, timeout=60)
        finally:
            reading.join(60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"RAM \d+ / 64 MiB")
        self.assertIn("threads", lines[0])
        self.assertEqual(lines[2].split()[:3], ["JOB", "OWNER", "EPOCH"])
        rows = {line.split()[0]: line.split() for line in lines[3:]}
        self.assertEqual(set(rows), {"warm", "second"})
        warm = rows["warm"]
        self.assertEqual(warm[1], "root")
        self.assertEqual(warm[3], "100%", "a whole epoch read: " + r.stdout)
        self.assertEqual(warm[9], "100%", "the first epoch is decoded: " + r.stdout)

    def test_not_a_mount(self):
        r = subprocess.run([sys.executable, TOP, "--once", "/"], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("not a joaderfs mount", r.stderr)


if __name__ == "__main__":
    unittest.main()
