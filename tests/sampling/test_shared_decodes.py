"""Dependent sampling in the daemon (issue 3): jobs reading at the same pace
decode shared samples once, with a RAM cache far smaller than the dataset.

Two jobs read one epoch each, concurrently and in step (a barrier after
every record keeps them at the same pace), with `ram_cache` at 5% of the
decoded dataset. Identical subsets must decode at most 1.05 N images;
subsets overlapping by half at most 1.55 N (N = one job's subset). The same
runs with independent shuffles (`sampler=isa`) are printed for comparison
and must cost more.
"""

import os
import threading
import unittest

import harness

SIZE = 32
PER_CLASS = 250
LAYOUT = {c: ["%s%03d.jpg" % (c, i) for i in range(PER_CLASS)] for c in "abcd"}
SAMPLES = 4 * PER_CLASS


def read_exactly(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def records(path):
    """Yields sample ids from a `next` file, one record at a time."""
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            header = read_exactly(fd, 64)
            if not header:
                return
            fields = harness.HEADER.unpack(header)
            assert fields[0] == harness.MAGIC, fields
            read_exactly(fd, harness.record_size(fields[10]) - 64)
            yield fields[2]
    finally:
        os.close(fd)


class SharedDecodesTest(harness.DatasetMixin, harness.JoaderTestCase):
    LAYOUT = LAYOUT

    def run_pair(self, spec_a, spec_b, sampler):
        budget = SAMPLES * SIZE * SIZE * 3 * 5 // 100
        m = self.mount(self.source, {"size": str(SIZE), "ram_cache": str(budget),
                                     "sampler": sampler, "threads": "2"})
        paths = {"a": m.mkjob("a", spec_a), "b": m.mkjob("b", spec_b)}
        barrier = threading.Barrier(2)
        seen = {"a": [], "b": []}
        errors = []

        def reader(name):
            try:
                for sample_id in records(paths[name]):
                    seen[name].append(sample_id)
                    try:
                        barrier.wait(timeout=30)
                    except threading.BrokenBarrierError:
                        pass  # the other job's epoch ended first
            except Exception as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
            barrier.abort()

        threads = [threading.Thread(target=reader, args=(n,), daemon=True) for n in paths]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=harness.EPOCH_TIMEOUT)
        self.assertFalse(any(t.is_alive() for t in threads), "an epoch did not end")
        self.assertEqual(errors, [])
        for name, ids in seen.items():
            self.assertEqual(len(ids), len(set(ids)), "job %s got an id twice" % name)
        return m.stats(), seen

    def check(self, spec_a, spec_b, n, bound):
        dsa, seen = self.run_pair(spec_a, spec_b, "dsa")
        isa, _ = self.run_pair(spec_a, spec_b, "isa")
        print("\n%s / %s: N=%d decoded: dsa %d (%.2f N), isa %d (%.2f N); shared picks %d"
              % (spec_a, spec_b, n, dsa["decoded"], dsa["decoded"] / n, isa["decoded"],
                 isa["decoded"] / n, dsa["planner"]["shared_picks"]))
        self.assertEqual(len(seen["a"]), n)
        self.assertEqual(len(seen["b"]), n)
        self.assertLessEqual(dsa["decoded"], bound * n)
        self.assertLess(dsa["decoded"], isa["decoded"])

    def test_identical_subsets(self):
        self.check("subset=all", "subset=all", SAMPLES, 1.05)

    def test_half_overlap(self):
        # a: the first 2/3 of the ids, b: the last 2/3: they share half.
        n = SAMPLES * 2 // 3
        self.check("subset=range:0-%d" % (n - 1),
                   "subset=range:%d-%d" % (SAMPLES - n, SAMPLES - 1), n, 1.55)


if __name__ == "__main__":
    unittest.main()
