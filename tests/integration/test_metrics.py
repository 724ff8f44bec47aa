"""Where each job's time goes: status/stats `stall_seconds`, `samples_per_s`
and tier counts, and /metrics in Prometheus text format (docs/design.md 2.5).
"""

import os
import re
import shutil
import socket
import threading
import time
import unittest
import urllib.error
import urllib.request

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
            assert kind in ("counter", "gauge", "histogram"), line
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            name, labels, value = m.groups()
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            if types.get(family) == "histogram":
                name = family + name[len(family):]  # its series, under its family's HELP
                assert family in helps, "no HELP: " + family
                key = (name, tuple(LABEL.findall(labels or "")))
                assert key not in samples, "duplicate series %r" % (key,)
                samples[key] = float(value)
                continue
            assert name in helps and name in types, "no HELP/TYPE: " + name
            if types[name] == "counter":
                assert name.endswith("_total"), name
            key = (name, tuple(LABEL.findall(labels or "")))
            assert key not in samples, "duplicate series %r" % (key,)
            samples[key] = float(value)
    return samples


def stats_keys(text: str) -> dict:
    """{/stats key: metric} from the HELP lines, which end naming the
    /stats key(s) of their figure: "(/stats a.b)" or
    "(/stats jobs.ID.x = jobs.ID.y; ...)"."""
    named = {}
    # The process's figures and the latency histograms have no /stats key.
    own = set(re.findall(r"^# TYPE (\S+) histogram$", text, re.M))
    own |= {"joaderfs_build_info", "process_resident_memory_bytes", "process_start_time_seconds"}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            if name in own:
                continue
            m = re.search(r"\(/stats ([^;)]*)", line)
            assert m, "HELP names no /stats key: " + line
            for key in m.group(1).split(" = "):
                assert key not in named, "two series for " + key
                named[key] = name
    return named


def flatten(obj: dict, prefix: str = "") -> dict:
    """The numbers of a JSON object, by dotted key."""
    out = {}
    for key, value in obj.items():
        if isinstance(value, dict):
            out.update(flatten(value, prefix + key + "."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix + key] = value
    return out


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

    def test_busy_fraction_tells_a_saturated_decoder(self):
        """decode_busy_fraction: near 1 while one decode thread is the
        bound (a reader that does nothing else, full-resolution decodes),
        near 0 for a slow reader of small images."""
        src = os.path.join(self.tempdir(), "big")
        rng = np.random.default_rng(4)
        # 32 decodes of about 60 ms each: an epoch of 1 s (16) ended before
        # the look at 1 s on a quick core.
        for k in range(32):
            os.makedirs(os.path.join(src, "c%d" % (k % 2)), exist_ok=True)
            pixels = rng.integers(0, 256, (1800, 2400, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(
                os.path.join(src, "c%d" % (k % 2), "i%d.jpg" % k), quality=95)
        m = self.mount(src, {"threads": "1", "base": "0", "size": "64",
                             "ram_cache": "256M"})
        m.mkjob("hungry")
        done = threading.Event()
        reader = threading.Thread(
            target=lambda: (read_epoch(m.path("jobs", "hungry", "next")),
                            done.set()))
        reader.start()
        try:
            time.sleep(1.0)
            busy = m.stats()["decode_busy_fraction"]
            self.assertFalse(done.is_set(), "the epoch ended too soon to tell")
        finally:
            reader.join()
        self.assertGreater(busy, 0.5)
        self.assertLessEqual(busy, 1.0)

        calm = self.mount(self.source)
        calm.mkjob("slow", spec="window=1")
        record = 64 + 64 * 64 * 3
        fd = os.open(calm.path("jobs", "slow", "next"),
                     os.O_RDONLY)
        try:
            while os.read(fd, record):
                time.sleep(0.03)  # a training step
        finally:
            os.close(fd)
        stats = calm.stats()
        self.assertGreater(stats["decode_busy_seconds"], 0)
        self.assertLess(stats["decode_busy_fraction"], 0.2, stats)

    def test_metrics_match_stats(self):
        """Key by key: every number of /stats has the series whose HELP
        names its key, labelled with the mount, showing the same value."""
        m = self.mount(self.source)
        m.mkjob("a")
        read_epoch(m.path("jobs", "a", "next"), readers=2)
        m.mkjob("r", spec="ranks=2")
        read_epoch(m.path("jobs", "r", "next.1"))
        text = m.read_text("metrics")
        samples = parse_metrics(text)
        stats = m.stats()
        named = stats_keys(text)
        mount = ("mount", m.mnt)
        # Rates over the last 10 s may move between the two reads.
        moving = ("samples_per_s", "decode_busy_fraction")
        figures = flatten({k: v for k, v in stats.items() if k != "jobs"})
        self.assertIn("decode_busy_seconds", figures)
        for key, value in figures.items():
            self.assertIn(key, named, "/stats %s has no series" % key)
            got = samples[(named[key], (mount,))]
            if key not in moving:
                self.assertEqual(got, value, key)
        a = m.status("a")
        r = m.status("r")
        job_keys = {k[len("jobs.ID."):]: v for k, v in named.items()
                    if k.startswith("jobs.ID.")}
        for key, value in flatten(stats["jobs"]["a"]).items():
            self.assertIn(key, job_keys, "/stats jobs.a.%s has no series" % key)
            got = samples[(job_keys[key], (mount, ("job", "a")))]
            if not key.endswith(moving):
                self.assertEqual(got, value, key)
        for rank in (0, 1):
            for key, value in flatten(r["ranks"][rank]).items():
                if key in job_keys and not key.endswith(moving):
                    self.assertEqual(
                        samples[(job_keys[key],
                                 (mount, ("job", "r"), ("rank", str(rank))))],
                        value, key)
        for key in ("delivered", "ram_hits", "disk_hits", "decodes",
                    "stall_seconds", "delivered_total"):
            # A ranked job's figures are its ranks' sums.
            self.assertAlmostEqual(r[key], sum(x[key] for x in r["ranks"]),
                                   places=9)
        self.assertNotIn(("joaderfs_job_delivered_total",
                          (mount, ("job", "r"))), samples)
        self.assertEqual(a["delivered_total"], self.N)
        self.assertEqual(a["decodes"] + a["ram_hits"], self.N, a)
        self.assertEqual(stats["decoded"], a["decodes"] + r["decodes"])
        self.assertGreater(samples[("joaderfs_job_samples_per_second",
                                    (mount, ("job", "r"), ("rank", "1")))], 0)
        self.assertEqual(samples[("joaderfs_job_samples_per_second",
                                  (mount, ("job", "r"), ("rank", "0")))], 0)
        self.assertEqual(os.stat(m.path("metrics")).st_mode & 0o777, 0o444)

    def test_scopes_add_up(self):
        """Each job figure in two scopes: this_epoch restarts with each
        epoch, total does not, and the tiers of the delivered samples add
        up to delivered in both."""
        m = self.mount(self.source)
        m.mkjob("s", spec="epochs=2")
        read_epoch(m.path("jobs", "s", "next"))
        first = m.status("s")
        read_epoch(m.path("jobs", "s", "next"))
        st = m.status("s")
        for scope in ("this_epoch", "total"):
            c = st[scope]
            self.assertEqual(c["ram_hits"] + c["disk_hits"] + c["decodes"],
                             c["delivered"], (scope, st))
        self.assertEqual(first["this_epoch"]["delivered"], self.N, first)
        self.assertEqual(first["this_epoch"]["decodes"], self.N, first)
        self.assertEqual(st["this_epoch"]["delivered"], self.N, st)
        self.assertEqual(st["this_epoch"]["ram_hits"], self.N, st)
        self.assertEqual(st["this_epoch"]["decodes"], 0, st)
        self.assertEqual(st["total"]["delivered"], 2 * self.N, st)
        self.assertEqual(st["total"]["decodes"], self.N, st)
        # The older names: delivered is the epoch's, ram_hits the total.
        self.assertEqual(st["delivered"], st["this_epoch"]["delivered"])
        self.assertEqual(st["ram_hits"], st["total"]["ram_hits"])
        self.assertEqual(m.stats()["jobs"]["s"]["total"], st["total"])

    def test_hits_count_deliveries_not_picks(self):
        """A reader that leaves mid-epoch: the samples planned for it and
        never delivered count in no tier."""
        m = self.mount(self.source)
        m.mkjob("k", spec="window=8")
        fd = os.open(m.path("jobs", "k", "next"), os.O_RDONLY)
        try:
            os.read(fd, 64 + 64 * 64 * 3)  # one record; more are planned
            time.sleep(0.5)  # the planned samples load
        finally:
            os.close(fd)
        st = m.status("k")
        self.assertEqual(st["delivered_total"], 1, st)
        self.assertEqual(st["ram_hits"] + st["disk_hits"] + st["decodes"], 1, st)
        t = st["total"]
        self.assertEqual(t["delivered"], 1, st)
        self.assertEqual(t["ram_hits"] + t["disk_hits"] + t["decodes"], 1, st)
        self.assertGreater(m.stats()["decoded"], 1)  # picks were loaded

    def test_rendered_files_stat_the_size_an_open_reads(self):
        """fstat after open gives the bytes that open reads, for every
        rendered and control file, and cp (shutil.copyfile: sendfile) copies
        them whole; the size follows each open (a job's status grows as it
        reads). Before, they all said 0."""
        m = self.mount(self.source)
        m.mkjob("j", spec="size=32")
        paths = ["README", "stats", "metrics", "dataset/info", "jobs/j/status",
                 "jobs/j/error", "jobs/j/spec"]
        out = os.path.join(self.tempdir(), "copy")
        for rel in paths + ["stats", "jobs/j/status"]:
            path = m.path(*rel.split("/"))
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read()
            self.assertEqual(size, len(data), rel)
            self.assertEqual(os.stat(path).st_size, len(data), rel)
            shutil.copyfile(path, out)
            self.assertGreaterEqual(os.path.getsize(out), 1 if rel != "jobs/j/error" else 0, rel)
            if rel == "jobs/j/status":
                read_epoch(m.path("jobs", "j", "next"))

    def test_parser_is_strict(self):
        good = "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"q\\\"\"} 1\n"
        self.assertEqual(parse_metrics(good), {("x_total", (("a", 'q\\"'),)): 1.0})
        for bad in ("x_total 1\n",
                    "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"\"\"} 1\n",
                    "# HELP x h\n# TYPE x counter\nx 1\n",
                    "# HELP x h\n# TYPE x gauge\nx 1"):
            with self.assertRaises(AssertionError, msg=bad):
                parse_metrics(bad)


class MetricsEndpointTest(DatasetMixin, JoaderTestCase):
    """metrics_listen=: Prometheus scrapes the daemon itself. What it
    serves parses with Prometheus's own parser (prometheus_client), matches
    the /metrics file, and nothing else of the mount is reachable."""

    def test_scrape(self):
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError:
            self.skipTest("prometheus_client is not installed (scripts/setup.sh)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        m = self.mount(self.source, {"metrics_listen": "127.0.0.1:%d" % port})
        base = "http://127.0.0.1:%d" % port
        recs = read_epoch(m.mkjob("scraped"), 1, timeout=60)[0]
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain; version=0.0.4"))
            body = r.read().decode()
            self.assertEqual(int(r.headers["Content-Length"]), len(body.encode()))
        families = {f.name: f for f in text_string_to_metric_families(body)}
        with open(m.path("metrics")) as f:
            from_file = {f.name for f in text_string_to_metric_families(f.read())}
        self.assertEqual(set(families), from_file, "HTTP and the /metrics file differ")
        self.assertGreater(families["process_resident_memory_bytes"].samples[0].value, 1 << 20)
        start = families["process_start_time_seconds"].samples[0].value
        self.assertLess(abs(start - time.time()), 600)
        # The latency histograms: an epoch decoded, each read of SOURCE and
        # of the stream observed.
        def count(family):
            self.assertEqual(families[family].type, "histogram")
            return [x.value for x in families[family].samples if x.name == family + "_count"][0]
        self.assertGreaterEqual(count("joaderfs_decode_latency_seconds"), len(recs))
        self.assertGreaterEqual(count("joaderfs_source_read_latency_seconds"), len(recs))
        self.assertGreater(count("joaderfs_stream_read_wait_seconds"), 0)
        self.assertEqual(count("joaderfs_remote_get_latency_seconds"), 0)  # no remote tier
        info = families["joaderfs_build_info"].samples[0]
        self.assertTrue(info.labels["version"])
        # prometheus_client names a counter's family without its _total.
        delivered = [s.value for s in families["joaderfs_job_delivered"].samples
                     if s.labels.get("job") == "scraped"]
        self.assertEqual(delivered, [len(recs)])
        # Nothing else: no stream can be read, or consumed, over HTTP.
        m.mkjob("victim")
        for path in ("/jobs/victim/next", "/stats", "/", "/metrics/../jobs/victim/next"):
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + path, timeout=10)
            self.assertEqual(e.exception.code, 404, path)
        request = urllib.request.Request(base + "/metrics", data=b"x", method="POST")
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=10)
        self.assertEqual(e.exception.code, 405)
        self.assertEqual(m.status("victim")["delivered"], 0, "HTTP took from a stream")


if __name__ == "__main__":
    unittest.main()
