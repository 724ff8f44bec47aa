"""Where each job's time goes: status/stats `stall_seconds`, `samples_per_s`
and tier counts, and /metrics in Prometheus text format (docs/design.md 2.5).
"""

import os
import re
import time
import unittest

import numpy as np
from PIL import Image

from harness import DatasetMixin, JoaderTestCase, read_epoch

# name{labels} value, labels as the text format writes them.
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)'
                    r'(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\})?'
                    r' (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_metrics(text: str) -> dict:
    """Strict: every line a HELP, a TYPE or a sample of a metric that has
    both, declared before its samples. Returns {(name, labels): value}."""
    assert text.endswith("\n"), "no final newline"
    helps, types, samples = set(), {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in helps, "two HELP lines for " + name
            helps.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge"), line
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            name, labels, value = m.groups()
            assert name in helps and name in types, "no HELP/TYPE: " + name
            if types[name] == "counter":
                assert name.endswith("_total"), name
            key = (name, tuple(LABEL.findall(labels or "")))
            assert key not in samples, "duplicate series %r" % (key,)
            samples[key] = float(value)
    return samples


def timed_read_to_eof(path: str) -> float:
    """Reads the stream to EOF as fast as it comes; returns the seconds
    from the first read to EOF."""
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.monotonic()
        while os.read(fd, 1 << 20):
            pass
        return time.monotonic() - start
    finally:
        os.close(fd)


class MetricsTest(DatasetMixin, JoaderTestCase):

    def test_reader_that_sleeps_has_no_stall(self):
        m = self.mount(self.source)
        m.mkjob("warm")
        read_epoch(m.path("jobs", "warm", "next"))  # the RAM tier holds the set
        warm = m.status("warm")
        self.assertEqual(warm["decodes"], self.N, warm)
        self.assertEqual(warm["ram_hits"] + warm["disk_hits"], 0, warm)

        m.mkjob("calm", spec="window=1")
        path = m.path("jobs", "calm", "next")
        record = 64 + 64 * 64 * 3  # one record per read, at the suite's size
        fd = os.open(path, os.O_RDONLY)
        try:
            # The first read starts the epoch and may wait for its first
            # render; every later one, after a pause, finds data ready.
            self.assertEqual(len(os.read(fd, record)), record)
            first = m.status("calm")["stall_seconds"]
            start = time.monotonic()
            while True:
                time.sleep(0.02)
                if not os.read(fd, record):
                    break
            wall = time.monotonic() - start
        finally:
            os.close(fd)
        st = m.status("calm")
        self.assertEqual(st["delivered"], self.N, st)
        self.assertEqual(st["ram_hits"], self.N, st)
        self.assertEqual(st["decodes"] + st["disk_hits"], 0, st)
        self.assertLess(first, 5.0, st)
        self.assertLess(st["stall_seconds"] - first, 0.05 * wall + 0.02, (st, first, wall))
        self.assertGreater(st["samples_per_s"], 0, st)

    def test_starved_reader_stalls(self):
        src = os.path.join(self.tempdir(), "big")
        rng = np.random.default_rng(3)
        for k in range(8):
            os.makedirs(os.path.join(src, "c%d" % (k % 2)), exist_ok=True)
            pixels = rng.integers(0, 256, (1800, 2400, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(
                os.path.join(src, "c%d" % (k % 2), "i%d.jpg" % k), quality=95)
        # One decode thread, decoding at full resolution: slower than a
        # reader that does nothing else.
        m = self.mount(src, {"threads": "1", "base": "0", "size": "64",
                             "ram_cache": "256M"})
        m.mkjob("hungry")
        wall = timed_read_to_eof(m.path("jobs", "hungry", "next"))
        st = m.status("hungry")
        self.assertEqual(st["delivered"], 8, st)
        self.assertEqual(st["decodes"], 8, st)
        self.assertGreater(st["stall_seconds"], 0.6 * wall, (st, wall))
        self.assertLessEqual(st["stall_seconds"], wall + 0.01, (st, wall))
        stats = m.stats()
        self.assertAlmostEqual(stats["stall_seconds"], st["stall_seconds"], places=6)
        self.assertEqual(stats["jobs"]["hungry"]["stall_seconds"], st["stall_seconds"])

    def test_metrics_match_stats(self):
        m = self.mount(self.source)
        m.mkjob("a")
        read_epoch(m.path("jobs", "a", "next"), readers=2)
        m.mkjob("r", spec="ranks=2")
        read_epoch(m.path("jobs", "r", "next.1"))
        text = m.read_text("metrics")
        samples = parse_metrics(text)
        stats = m.stats()
        mount = {"joaderfs_decoded_total": "decoded",
                 "joaderfs_delivered_total": "delivered",
                 "joaderfs_ram_hits_total": "ram_hits",
                 "joaderfs_disk_hits_total": "disk_hits",
                 "joaderfs_ram_bytes": "ram_bytes",
                 "joaderfs_stall_seconds_total": "stall_seconds"}
        for name, key in mount.items():
            self.assertEqual(samples[(name, ())], stats[key], name)
        self.assertIn(("joaderfs_samples_per_second", ()), samples)
        per_job = {"joaderfs_job_stall_seconds_total": "stall_seconds",
                   "joaderfs_job_delivered_total": "delivered_total",
                   "joaderfs_job_ram_hits_total": "ram_hits",
                   "joaderfs_job_disk_hits_total": "disk_hits",
                   "joaderfs_job_decodes_total": "decodes"}
        a = m.status("a")
        r = m.status("r")
        for name, key in per_job.items():
            self.assertEqual(samples[(name, (("job", "a"),))], a[key], name)
            for rank in (0, 1):
                self.assertEqual(
                    samples[(name, (("job", "r"), ("rank", str(rank))))],
                    r["ranks"][rank][key], name)
            # A ranked job's figures are its ranks' sums.
            self.assertAlmostEqual(r[key], sum(x[key] for x in r["ranks"]), places=9)
        self.assertNotIn(("joaderfs_job_delivered_total", (("job", "r"),)), samples)
        self.assertEqual(a["delivered_total"], self.N)
        self.assertEqual(a["decodes"] + a["ram_hits"], self.N, a)
        self.assertEqual(stats["decoded"], a["decodes"] + r["decodes"])
        self.assertGreater(samples[("joaderfs_job_samples_per_second",
                                    (("job", "r"), ("rank", "1")))], 0)
        self.assertEqual(samples[("joaderfs_job_samples_per_second",
                                  (("job", "r"), ("rank", "0")))], 0)
        self.assertEqual(os.stat(m.path("metrics")).st_mode & 0o777, 0o444)

    def test_parser_is_strict(self):
        good = "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"q\\\"\"} 1\n"
        self.assertEqual(parse_metrics(good), {("x_total", (("a", 'q\\"'),)): 1.0})
        for bad in ("x_total 1\n",
                    "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"\"\"} 1\n",
                    "# HELP x h\n# TYPE x counter\nx 1\n",
                    "# HELP x h\n# TYPE x gauge\nx 1"):
            with self.assertRaises(AssertionError, msg=bad):
                parse_metrics(bad)


if __name__ == "__main__":
    unittest.main()
