"""The sample stream /jobs/<id>/next: record format, delivery, pixels,
epochs (docs/design.md 2.1, 2.2, 2.4)."""

import collections
import errno
import os
import sys
import threading
import unittest

import numpy as np
from PIL import Image

import harness
from harness import DatasetMixin, JoaderTestCase, read_epoch, ids_of

MAD_BOUND = 6.0  # mean |daemon - PIL| per pixel value, 0-255 scale


class StreamTest(DatasetMixin, JoaderTestCase):

    # -- helpers

    def check_records(self, records, size, epoch=0):
        """Every record well formed; returns nothing, asserts everything."""
        for r in records:
            self.assertEqual(r.magic, b"JSF1")
            self.assertEqual(r.header_size, 64)
            self.assertEqual(r.epoch, epoch, r)
            self.assertEqual(r.flags, 0, r)
            self.assertEqual(r.channels, 3, r)
            self.assertEqual(r.dtype, 1, r)
            self.assertEqual(r.crop_box, 0, r)
            self.assertEqual(r.payload_bytes, r.height * r.width * 3, r)
            self.assertEqual((64 + r.payload_bytes + len(r.padding)) % 64, 0,
                             r)
            self.assertLess(len(r.padding), 64, r)
            self.assertEqual(r.padding, b"\0" * len(r.padding),
                             "non-zero padding in %r" % r)
            self.assertLess(r.id, self.N, r)
            self.assertEqual(r.label, self.order[r.id][1],
                             "label of id %d (%s)" % (r.id, self.order[r.id][0]))
            if size:
                self.assertEqual((r.height, r.width), (size, size), r)

    def pixel_mads(self, records, size):
        mads = []
        for r in records:
            ref = harness.reference_pixels(
                os.path.join(self.source, self.order[r.id][0]), size)
            got = r.pixels()
            self.assertEqual(got.shape, ref.shape,
                             "shape of id %d (%s)" % (r.id, self.order[r.id][0]))
            mads.append((float(np.abs(got.astype(np.int16)
                                      - ref.astype(np.int16)).mean()), r.id))
        return mads

    def report_mads(self, what, mads):
        values = [m for m, _ in mads]
        worst = max(mads)
        sys.stderr.write(
            "\n[pixel MAD %s] images=%d mean=%.3f median=%.3f max=%.3f "
            "(id %d, %s)\n" % (what, len(values), np.mean(values),
                               np.median(values), worst[0], worst[1],
                               self.order[worst[1]][0]))
        for m, i in mads:
            self.assertLess(m, MAD_BOUND, "%s: id %d (%s) MAD %.3f"
                            % (what, i, self.order[i][0], m))

    # -- tests

    def test_two_jobs_one_and_four_readers(self):
        m = self.mount(self.source)
        # Job A: whole dataset, one reader. Job B: a random half, 4 readers.
        a = m.mkjob("jobA")
        b = m.mkjob("jobB", spec="subset=random:0.5:7")
        results = {}

        def run(name, path, readers):
            try:
                results[name] = read_epoch(path, readers)
            except BaseException as e:  # reported below
                results[name] = e

        threads = [threading.Thread(target=run, args=("A", a, 1)),
                   threading.Thread(target=run, args=("B", b, 4))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in "AB":
            if isinstance(results[name], BaseException):
                raise results[name]

        recs_a, recs_b = results["A"], results["B"]
        self.assertEqual(len(recs_a), 1)
        self.assertEqual(len(recs_b), 4)
        all_a = [r for rs in recs_a for r in rs]
        all_b = [r for rs in recs_b for r in rs]
        self.check_records(all_a, 64)
        self.check_records(all_b, 64)

        ids_a = ids_of(recs_a)
        self.assertEqual(sorted(ids_a), list(range(self.N)),
                         "job A must get each id exactly once")
        ids_b = ids_of(recs_b)
        dup = [i for i, c in collections.Counter(ids_b).items() if c > 1]
        self.assertEqual(dup, [], "ids given twice across B's readers")
        self.assertEqual(len(ids_b), round(0.5 * self.N))
        st = m.status("jobB")
        self.assertEqual(st["subset_size"], len(ids_b))
        sys.stderr.write("\n[two jobs] B readers got %s records\n"
                         % [len(rs) for rs in recs_b])

        self.report_mads("size=64", self.pixel_mads(all_a, 64))
        # Each record of B is the same sample as in A: same pixels (shared
        # or decoded the same way).
        by_id = {r.id: r for r in all_a}
        for r in all_b:
            self.assertEqual(r.label, by_id[r.id].label)

        stats = m.stats()
        self.assertGreaterEqual(stats["decoded"], len(set(ids_a) | set(ids_b)))
        self.assertGreaterEqual(stats["delivered"], len(ids_a) + len(ids_b))

    def test_same_size_jobs_share_decodes(self):
        """Two jobs of one size read concurrently: with RAM for everything,
        each sample is decoded once and served to both."""
        m = self.mount(self.source)
        paths = [m.mkjob("s1"), m.mkjob("s2")]
        results = {}

        def run(path):
            try:
                results[path] = read_epoch(path, 2)
            except BaseException as e:
                results[path] = e

        threads = [threading.Thread(target=run, args=(p,)) for p in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for p in paths:
            if isinstance(results[p], BaseException):
                raise results[p]
            self.assertEqual(sorted(ids_of(results[p])), list(range(self.N)))
        stats = m.stats()
        self.assertEqual(stats["delivered"], 2 * self.N, stats)
        self.assertEqual(stats["decoded"], self.N, stats)

    def test_dataset_info_and_manifest(self):
        m = self.mount(self.source)
        info = m.info()
        self.assertEqual(info["samples"], self.N)
        self.assertEqual(info["classes"], self.C)
        self.assertEqual(info["size"], 64)
        self.assertEqual(os.path.realpath(info["source"]),
                         os.path.realpath(self.source))
        rows = m.manifest()
        expected = [(i, label, rel) for i, (rel, label) in enumerate(self.order)]
        self.assertEqual(rows, expected)

    def test_size_zero_keeps_original(self):
        # size=0 delivers the base image; base=0 makes that the original.
        m = self.mount(self.source, {"size": "0", "base": "0"})
        self.assertEqual(m.info()["size"], 0)
        recs = read_epoch(m.mkjob("orig"), 2)
        all_r = [r for rs in recs for r in rs]
        self.check_records(all_r, 0)
        self.assertEqual(sorted(r.id for r in all_r), list(range(self.N)))
        for r in all_r:
            with Image.open(os.path.join(self.source, self.order[r.id][0])) as im:
                self.assertEqual((r.width, r.height), im.size,
                                 "id %d must keep its size" % r.id)
        self.report_mads("size=0", self.pixel_mads(all_r, 0))

    def test_job_size_spec(self):
        m = self.mount(self.source)
        recs = read_epoch(m.mkjob("small", spec="size=100"), 1)[0]
        self.check_records(recs, 100)
        self.assertEqual(sorted(r.id for r in recs), list(range(self.N)))
        self.report_mads("job size=100", self.pixel_mads(recs, 100))

    def test_second_epoch(self):
        m = self.mount(self.source)
        path = m.mkjob("ep", spec="window=1")
        first = read_epoch(path, 1)[0]
        self.check_records(first, 64, epoch=0)
        second = read_epoch(path, 1)[0]
        self.check_records(second, 64, epoch=1)
        self.assertEqual(sorted(r.id for r in first), list(range(self.N)))
        self.assertEqual(sorted(r.id for r in second), list(range(self.N)))
        self.assertNotEqual([r.id for r in first], [r.id for r in second],
                            "epoch 1 repeats epoch 0's order")
        st = m.status("ep")
        self.assertEqual(st["epoch"], 1)

    def test_epochs_limit(self):
        m = self.mount(self.source)
        path = m.mkjob("once", spec="epochs=1")
        recs = read_epoch(path, 1)[0]
        self.assertEqual(sorted(r.id for r in recs), list(range(self.N)))
        again = read_epoch(path, 1, timeout=15)[0]
        self.assertEqual(again, [], "epochs=1: a second epoch was delivered")
        again = read_epoch(path, 2, timeout=15)
        self.assertEqual(again, [[], []])

    def test_seed_determines_order(self):
        orders = []
        for seed in ("5", "5", "6"):
            m = self.mount(self.source, {"seed": seed})
            orders.append([r.id for r in
                           read_epoch(m.mkjob("j", spec="window=1"), 1)[0]])
            self.assertEqual(m.unmount(), 0)
        self.assertEqual(orders[0], orders[1], "same seed, same job arrivals")
        self.assertNotEqual(orders[0], orders[2], "different seeds")
        for o in orders:
            self.assertEqual(sorted(o), list(range(self.N)))

    def test_partial_reads_continue_records(self):
        """read() may stop inside a record; the next read continues it."""
        m = self.mount(self.source)
        path = m.mkjob("odd")
        fd = os.open(path, os.O_RDONLY)
        try:
            # sizes smaller than a header, odd, and straddling records
            data = harness.read_to_eof(fd, (1, 7, 63, 64, 65, 1000, 12351,
                                             12353, 100000, 3))
            self.assertEqual(harness.read_exact(fd, 4096, timeout=15), b"",
                             "a read after EOF must give EOF again")
        finally:
            os.close(fd)
        recs = harness.parse_records(data)
        self.check_records(recs, 64)
        self.assertEqual(sorted(r.id for r in recs), list(range(self.N)))

    def test_read_only_at_the_position(self):
        # Offsets other than the reader's position fail and take nothing;
        # the rest of the file semantics: python/tests/test_native.py.
        m = self.mount(self.source)
        fd = os.open(m.mkjob("seek"), os.O_RDONLY)
        try:
            self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 0)
            self.assertErrno(errno.ESPIPE, os.pread, fd, 64, 64)
            head = harness.read_exact(fd, 64)
            self.assertEqual(head[:4], b"JSF1")
            self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 64)
            self.assertErrno(errno.ESPIPE, os.pread, fd, 64, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            self.assertErrno(errno.ESPIPE, os.read, fd, 64)
            os.lseek(fd, 64, os.SEEK_SET)
            data = head + harness.read_to_eof(fd, (100000,))
        finally:
            os.close(fd)
        recs = harness.parse_records(data)
        self.assertEqual(sorted(r.id for r in recs), list(range(self.N)))

    def test_more_readers_than_samples(self):
        m = self.mount(self.source)
        recs = read_epoch(m.mkjob("few", spec="subset=range:0-1"), 4, timeout=30)
        self.assertEqual(sorted(ids_of(recs)), [0, 1])
        self.assertGreaterEqual(sum(1 for rs in recs if not rs), 2)

    def test_status_counters(self):
        m = self.mount(self.source)
        path = m.mkjob("st", spec="window=1")
        st = m.status("st")
        self.assertEqual(st, {**st, "epoch": 0, "delivered": 0,
                              "remaining": self.N, "subset_size": self.N,
                              "readers": 0})
        fds = [os.open(path, os.O_RDONLY) for _ in range(2)]
        try:
            self.assertEqual(m.status("st")["readers"], 2)
            os.close(fds.pop())
            self.assertEqual(m.status("st")["readers"], 1)
            rec_bytes = harness.record_size(64 * 64 * 3)
            data = harness.read_exact(fds[0], 3 * rec_bytes)
            self.assertEqual(len(harness.parse_records(data)), 3)
            st = m.status("st")
            self.assertEqual(st["epoch"], 0)
            self.assertGreaterEqual(st["delivered"], 3)
            self.assertEqual(st["delivered"] + st["remaining"], self.N, st)
            stats = m.stats()
            self.assertIn("st", stats["jobs"])
            for k in ("epoch", "delivered", "remaining", "subset_size",
                      "readers"):
                self.assertIn(k, stats["jobs"]["st"])
            self.assertEqual(stats["jobs"]["st"]["readers"], 1)
        finally:
            for fd in fds:
                os.close(fd)
        first = [r.id for r in harness.parse_records(data)]
        st = m.status("st")
        self.assertEqual(st["readers"], 0)
        self.assertEqual(st["epoch"], 0)
        self.assertEqual(st["delivered"] + st["remaining"], self.N, st)
        # The job keeps its position: re-opening continues epoch 0 with the
        # samples not yet handed out.
        rest = [r.id for r in read_epoch(path, 1)[0]]
        self.assertEqual(len(rest), st["remaining"])
        self.assertEqual(set(rest) & set(first), set())
        self.assertEqual(len(set(rest)), len(rest))
        st = m.status("st")
        self.assertEqual((st["delivered"], st["remaining"]), (self.N, 0), st)


    def test_reader_joins_mid_epoch(self):
        """A reader opened while the epoch runs shares it (no new epoch)."""
        m = self.mount(self.source)
        path = m.mkjob("join", spec="window=1")
        fd = os.open(path, os.O_RDONLY)
        try:
            head = harness.parse_records(harness.read_exact(
                fd, 5 * harness.record_size(64 * 64 * 3)))
            self.assertEqual(len(head), 5)
            late = read_epoch(path, 1)[0]   # opens, reads to EOF, closes
            rest = harness.parse_records(harness.read_exact(fd, 1 << 24))
        finally:
            os.close(fd)
        recs = head + late + rest
        self.check_records(recs, 64, epoch=0)
        self.assertEqual(sorted(r.id for r in recs), list(range(self.N)))

    def test_jobs_arrive_and_leave(self):
        """(P1) each job gets each id of its subset once per epoch while
        other jobs of other sizes and subsets come, read and go."""
        m = self.mount(self.source)
        a = m.mkjob("a", spec="window=1")
        fd = os.open(a, os.O_RDONLY)
        try:
            first = harness.parse_records(harness.read_exact(
                fd, 4 * harness.record_size(64 * 64 * 3)))
            m.mkjob("b", spec="subset=classes:1-2")
            m.mkjob("c", spec="size=32 subset=range:3-17")
            m.mkjob("gone", spec="subset=random:0.5:3")
            g = os.open(m.path("jobs", "gone", "next"), os.O_RDONLY)
            harness.read_exact(g, 2 * harness.record_size(64 * 64 * 3))
            results = {}

            def run(job, readers):
                try:
                    results[job] = read_epoch(m.path("jobs", job, "next"),
                                              readers)
                except BaseException as e:
                    results[job] = e

            threads = [threading.Thread(target=run, args=job_readers)
                       for job_readers in (("b", 3), ("c", 2))]
            for t in threads:
                t.start()
            os.close(g)
            os.rmdir(m.path("jobs", "gone"))
            rest = harness.parse_records(harness.read_exact(fd, 1 << 24))
            for t in threads:
                t.join()
        finally:
            os.close(fd)
        for job in ("b", "c"):
            if isinstance(results[job], BaseException):
                raise results[job]
        recs_a = first + rest
        self.check_records(recs_a, 64)
        self.assertEqual(sorted(r.id for r in recs_a), list(range(self.N)))
        recs_b = [r for rs in results["b"] for r in rs]
        self.check_records(recs_b, 64)
        self.assertEqual(sorted(r.id for r in recs_b),
                         [i for i, (_, l) in enumerate(self.order)
                          if l in (1, 2)])
        recs_c = [r for rs in results["c"] for r in rs]
        self.check_records(recs_c, 32)
        self.assertEqual(sorted(r.id for r in recs_c), list(range(3, 18)))
        self.assertEqual(sorted(m.stats()["jobs"]), ["a", "b", "c"])

    def test_small_ram_cache(self):
        """A RAM budget far below one epoch of originals still completes
        two concurrent jobs (eviction must not stall delivery)."""
        m = self.mount(self.source, {"size": "0", "ram_cache": "256K"})
        a, b = m.mkjob("a"), m.mkjob("b", spec="subset=range:0-15")
        results = {}

        def run(name, path, readers):
            try:
                results[name] = read_epoch(path, readers, timeout=60)
            except BaseException as e:
                results[name] = e

        threads = [threading.Thread(target=run, args=("a", a, 2)),
                   threading.Thread(target=run, args=("b", b, 1))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in "ab":
            if isinstance(results[name], BaseException):
                raise results[name]
        self.assertEqual(sorted(ids_of(results["a"])), list(range(self.N)))
        self.assertEqual(sorted(ids_of(results["b"])), list(range(16)))
        stats = m.stats()
        self.assertLessEqual(stats["ram_bytes"], stats["ram_budget"])


class GrayscaleTest(DatasetMixin, JoaderTestCase):
    LAYOUT = {"a": ["g.jpg", "rgb1.jpg"], "b": ["g2.jpg", "rgb2.jpg"]}
    GRAY = ("a/g.jpg", "b/g2.jpg")

    def test_grayscale_jpeg_becomes_rgb(self):
        m = self.mount(self.source)
        recs = read_epoch(m.mkjob("g"), 1)[0]
        self.assertEqual(sorted(r.id for r in recs), list(range(self.N)))
        for r in recs:
            self.assertEqual((r.height, r.width, r.channels, r.payload_bytes),
                             (64, 64, 3, 64 * 64 * 3), r)
            ref = harness.reference_pixels(
                os.path.join(self.source, self.order[r.id][0]), 64)
            mad = float(np.abs(r.pixels().astype(np.int16) - ref).mean())
            self.assertLess(mad, MAD_BOUND, "id %d (%s)"
                            % (r.id, self.order[r.id][0]))


class ManifestSourceTest(JoaderTestCase):
    """SOURCE may be a manifest file: relpath<TAB>label, ids in file order."""

    def test_manifest_file_source(self):
        harness.require_binary()
        d = self.tempdir()
        root = harness.make_imagefolder(
            os.path.join(d, "imgs"), {"x": ["1.jpg", "2.jpg"],
                                      "y": ["3.jpg", "4.jpg", "5.jpg"]})
        entries = [("y/5.jpg", 4), ("x/1.jpg", 0), ("y/3.jpg", 7),
                   ("x/2.jpg", 4), ("y/4.jpg", 1)]
        manifest = os.path.join(root, "train.tsv")
        with open(manifest, "w") as f:
            for rel, label in entries:
                f.write("%s\t%d\n" % (rel, label))
        m = self.mount(manifest)
        self.assertEqual(m.info()["samples"], len(entries))
        self.assertEqual(m.manifest(), [(i, label, rel) for i, (rel, label)
                                        in enumerate(entries)])
        recs = read_epoch(m.mkjob("m"), 1)[0]
        self.assertEqual(sorted(r.id for r in recs), list(range(len(entries))))
        for r in recs:
            self.assertEqual(r.label, entries[r.id][1])
            ref = harness.reference_pixels(
                os.path.join(root, entries[r.id][0]), 64)
            mad = float(np.abs(r.pixels().astype(np.int16) - ref).mean())
            self.assertLess(mad, MAD_BOUND)


if __name__ == "__main__":
    unittest.main()
