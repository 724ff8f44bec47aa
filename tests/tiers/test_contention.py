"""Sharing on a busy machine: twin jobs keep sharing decodes while other
processes compete for the cores.

Two identical jobs read one epoch each, a reader process each reading a
record at a time, beside four busy loops (processes spinning at the jobs'
priority), with a RAM tier of 10 % of the base images and no disk tier.
They must decode at most 1.05 per distinct sample, as on a quiet machine
(1.00), as the median of 7 mounts. A reader descheduled for a few
milliseconds lets its twin run ahead in the first seconds, before the drift
bound knew their paces; these decoded 1.13-1.40 per distinct, in every run,
before it held peers of unknown pace (docs/planner.md "Drift"). Overlapping
jobs are measured by `scripts/bench.sh contention` (docs/benchmarks.md
"Sharing on a busy machine").
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest

import harness
from harness import SIZE, TierTestCase, log
from harness.records import parse_records, record_size

N = 1500
RAM_PERCENT = 10
BASE = 256
BUSY = 4
RUNS = 7
# Opens the stream, says so on stdout, waits for a byte on stdin, then reads
# a record per read() until EOF into the file argv[2]: the readers begin
# together, as processes, and the busy loops deschedule them from there.
READER = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print("open", flush=True)
sys.stdin.read(1)
with open(sys.argv[2], "wb") as out:
    while True:
        b = os.read(fd, int(sys.argv[3]))
        if not b:
            break
        out.write(b)
"""


class ContentionTest(TierTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-contention-")
        cls.source, _ = harness.make_dataset(os.path.join(cls._data, "src"), N, classes=6,
                                             seed=11, shape=(320, 240))
        # Kept whole at base 256 (the shorter side is under it).
        cls.ram = N * 320 * 240 * 3 * RAM_PERCENT // 100

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def spin(self):
        """Starts the busy loops; returns them (killed at cleanup too)."""
        loops = []
        for _ in range(BUSY):
            p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
            loops.append(p)
        return loops

    def decodes_per_distinct(self, windows):
        """Reads one epoch of a job over each (first, last) id window at
        once; returns the daemon's decodes per distinct id. The mount and
        the busy loops end with it."""
        m = self.mount(self.source, {"ram_cache": str(self.ram), "base": str(BASE),
                                     "size": str(SIZE), "seed": "7"})
        loops = self.spin()
        try:
            return self.read_together(m, windows)
        finally:
            for p in loops:
                p.kill()
                p.wait()
            m.unmount()

    def read_together(self, m, windows):
        rec = record_size(SIZE * SIZE * 3)
        outs, readers = [], []
        for k, (first, last) in enumerate(windows):
            m.mkjob("j%d" % k, spec="epochs=1 subset=range:%d-%d" % (first, last))
            outs.append(os.path.join(self.tempdir(), "j%d.bin" % k))
        for k, out in enumerate(outs):
            p = subprocess.Popen([sys.executable, "-c", READER,
                                  m.path("jobs", "j%d" % k, "next"), out, str(rec)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.addCleanup(p.kill)
            readers.append(p)
        for p in readers:
            self.assertEqual(p.stdout.readline(), "open\n", "a reader could not open")
        for p in readers:
            p.stdin.write("g")
            p.stdin.close()
        for p in readers:
            self.assertEqual(p.wait(120), 0, "a reader failed")
            p.stdout.close()
        distinct = set()
        for out, (first, last) in zip(outs, windows):
            with open(out, "rb") as f:
                ids = sorted(r.id for r in parse_records(f.read()))
            self.assertEqual(ids, list(range(first, last + 1)), "not each sample once")
            distinct.update(ids)
        ratio = m.stats()["decoded"] / len(distinct)
        log("jobs over %s beside %d busy loops: %.2f decodes per distinct", windows, BUSY,
            ratio)
        return ratio

    def test_identical_jobs_share_beside_busy_loops(self):
        # The median of 7 mounts: the machine is busy by design, and about
        # one run in eight still loses its twin for a while (5 of 38 runs,
        # 1.10-1.23); the bound as it was lost it in every run (1.13-1.40).
        ratios = []
        for _ in range(RUNS):
            with self.subTest(run=len(ratios)):
                ratios.append(self.decodes_per_distinct([(0, N - 1)] * 2))
        self.assertLessEqual(statistics.median(ratios), 1.05, "runs: %s" % ratios)


if __name__ == "__main__":
    unittest.main()
