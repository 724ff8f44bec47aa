"""Issue 4, test 1: three jobs with identical subsets read at relative
speeds 1, 1/2 and 1/4 with a RAM tier of 10% of the decoded dataset.

- with a disk tier, every sample is decoded about once: /stats decoded
  <= 1.02 N until the slowest job ends its epoch;
- with cache_dir=none, dependent sampling (the default sampler) must decode
  fewer samples than independent shuffles (-o sampler=isa) under the same
  conditions. Both counts are printed.

Each is run as specified (default lookahead and window) and again with
lookahead=8 and window=8 in the jobs' spec, which bounds what each job pins
in RAM by its own settings, so that the 10% RAM tier is exercised even if
the daemon's budget accounting lets planned samples overrun it. The peak
RAM use seen in /stats during each run is printed.
"""

import os
import shutil
import tempfile
import time
import unittest

import harness
from harness import PIXELS, SIZE, PacedReader, TierTestCase, log

N = 240
RAM_CACHE = N * PIXELS // 10          # 10% of the decoded dataset
BASE_DELAY = 0.004                    # seconds per record of the fastest job
SPEEDS = (1, 2, 4)                    # delay multipliers: speeds 1, 1/2, 1/4


class SharingTest(TierTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-tiers-")
        cls.source, cls.order = harness.make_dataset(
            os.path.join(cls._data, "src"), N, classes=8, seed=4)
        assert len(cls.order) == N

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def run_three_jobs(self, options, spec=None):
        """Mounts with `options`, runs the three paced jobs (job spec
        `spec`) over one epoch each, and returns (stats when each job hit
        EOF, final stats)."""
        opts = {"ram_cache": str(RAM_CACHE), "size": str(SIZE),
                "threads": "2", "seed": "7"}
        opts.update(options)
        m = self.mount(self.source, opts)
        readers = []
        for k, mult in enumerate(SPEEDS):
            job = "speed%d" % k
            m.mkjob(job, spec=spec)
            readers.append(PacedReader(m.path("jobs", job, "next"),
                                       BASE_DELAY * mult, on_eof=m.stats))
        peak = {"ram_bytes": 0, "ram_pinned_bytes": 0}
        t0 = time.monotonic()
        for r in readers:
            r.start()
        while any(r.is_alive() for r in readers) and \
                time.monotonic() - t0 < 120:
            st = m.stats()
            for k in peak:
                peak[k] = max(peak[k], st.get(k, 0))
            time.sleep(0.05)
        for r in readers:
            r.join(1)
            self.assertFalse(r.is_alive(), "a paced reader did not finish")
            self.assertIsNone(r.error, "reader failed: %r" % (r.error,))
        final = m.stats()
        final["peak"] = peak
        for k, r in enumerate(readers):
            ids = [rec.id for rec in r.records()]
            self.assertEqual(sorted(ids), list(range(N)),
                             "job speed%d: not every sample exactly once" % k)
        slowest = max(readers, key=lambda r: r.finished_at)
        self.assertIs(slowest, readers[-1],
                      "the 1/4-speed job should end its epoch last")
        eof = [r.eof_stats for r in readers]
        log("%s%s: decoded at each job's EOF %s (speeds 1, 1/2, 1/4), "
            "slowest epoch %.1fs; ram_hits %d ram_misses %d disk_hits %d "
            "ram_evictions %d; peak ram_bytes %d (pinned %d) = %.1fx ram_budget %d",
            harness.format_options(options),
            " (spec %s)" % spec if spec else "",
            [s["decoded"] for s in eof], slowest.finished_at - t0,
            final["ram_hits"], final["ram_misses"], final.get("disk_hits", 0),
            final["ram_evictions"], peak["ram_bytes"],
            peak["ram_pinned_bytes"], peak["ram_bytes"] / final["ram_budget"],
            final["ram_budget"])
        m.unmount()
        return eof, final

    def check_disk_tier(self, extra, spec=None):
        cache_dir = self.tempdir()
        opts = {"cache_dir": cache_dir}
        opts.update(extra)
        eof, final = self.run_three_jobs(opts, spec)
        at_slowest_eof = eof[-1]["decoded"]
        self.assertLessEqual(
            at_slowest_eof, 1.02 * N,
            "with a disk tier every sample should be decoded about once: "
            "decoded %d for N=%d when the slowest job ended its epoch "
            "(stats then: %s)" % (at_slowest_eof, N, eof[-1]))
        self.assertGreaterEqual(at_slowest_eof, N)
        self.assertEqual(final["skipped"], 0)
        return final

    def test_disk_tier_decodes_each_sample_once(self):
        """The scenario as specified (default lookahead)."""
        self.check_disk_tier({})

    def test_disk_tier_decodes_each_sample_once_short_window(self):
        """Same with lookahead=8 and window=8, so that few samples stay
        pinned and RAM misses must be served by the disk tier."""
        final = self.check_disk_tier({"lookahead": "8"}, spec="window=8")
        self.assertGreater(final["disk_hits"], 0,
                           "RAM misses were expected to hit the disk tier: %s"
                           % final)

    def compare_samplers(self, options, spec=None):
        eof_dsa, fin_dsa = self.run_three_jobs(
            dict(options, cache_dir="none"), spec)
        eof_isa, fin_isa = self.run_three_jobs(
            dict(options, cache_dir="none", sampler="isa"), spec)
        dsa, isa = eof_dsa[-1]["decoded"], eof_isa[-1]["decoded"]
        log("cache_dir=none, ram_cache=%d (10%%), N=%d, %s %s: decoded "
            "dsa=%d (%.2f N), isa=%d (%.2f N)", RAM_CACHE, N,
            harness.format_options(options) or "defaults",
            spec or "", dsa, dsa / N, isa, isa / N)
        self.assertLess(
            dsa, isa,
            "dependent sampling decoded %d samples, independent shuffles %d "
            "(N=%d, 3 jobs at speeds 1, 1/2, 1/4, ram_cache %d = 10%%; peak "
            "ram_bytes dsa %d, isa %d, pinned dsa %d, isa %d)"
            % (dsa, isa, N, RAM_CACHE, fin_dsa["peak"]["ram_bytes"],
               fin_isa["peak"]["ram_bytes"],
               fin_dsa["peak"]["ram_pinned_bytes"],
               fin_isa["peak"]["ram_pinned_bytes"]))

    def test_no_disk_tier_dsa_beats_independent_shuffles(self):
        """The scenario as specified (default lookahead and window)."""
        self.compare_samplers({})

    def test_no_disk_tier_dsa_beats_independent_shuffles_short_window(self):
        """Same with lookahead=8 and window=8, which bounds what each job
        pins whatever the RAM budget accounting does."""
        self.compare_samplers({"lookahead": "8"}, spec="window=8")


if __name__ == "__main__":
    unittest.main()
