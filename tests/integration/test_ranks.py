"""Issue 11, parts 2-3: data-parallel ranks, resume, jobs that survive a
restart of the daemon (docs/design.md 2.6, 2.7), checked from outside.

- ranks=W for W = 1..8 over a subset of 23 samples (divisible by none of
  them but 1), drop_last both ways, two readers on every rank: each rank
  gets ceil(23/W) (or floor) samples per epoch, none twice, and together
  the ranks cover the subset (padding repeats only as many as it must);
- two mounts of one dataset (two daemons, two cache_dirs) with the same
  job: rank 0 read on one, rank 1 on the other, together deliver each
  sample exactly once per epoch;
- resume: after part of an epoch, `resume` with the ids consumed makes the
  stream deliver exactly the rest;
- with a cache_dir, a job survives SIGTERM and kill -9 of the daemon: after
  the remount /jobs lists it, its spec is kept, and its ranks continue the
  epoch without what was handed out before.
"""

import os
import signal
import subprocess
import sys
import threading
import unittest

import harness
from harness import DatasetMixin, JoaderTestCase, read_epoch, read_exact

SUBSET = 23  # range:0-22


def record_bytes(size):
    return harness.record_size(size * size * 3)


def read_records(fd, count, size=64):
    """Reads exactly `count` whole records, one record per read(): the daemon
    then hands out exactly those."""
    out = []
    for _ in range(count):
        out += harness.parse_records(read_exact(fd, record_bytes(size)))
    return out


class RanksTest(DatasetMixin, JoaderTestCase):

    def read_ranks(self, m, job, ranks, readers=2):
        """Reads one epoch of every rank, ranks in parallel; returns the ids
        of each rank and the epochs seen."""
        got = [None] * ranks
        errors = []

        def run(r):
            try:
                got[r] = read_epoch(m.path("jobs", job, "next.%d" % r),
                                    readers=readers)
            except AssertionError as e:
                errors.append(e)

        threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return [[rec.id for reader in g for rec in reader] for g in got], \
            {rec.epoch for g in got for reader in g for rec in reader}

    def test_every_rank_gets_the_same_count(self):
        m = self.mount(self.source)
        for ranks in range(1, 9):
            for drop_last in (0, 1):
                with self.subTest(ranks=ranks, drop_last=drop_last):
                    job = "w%d-%d" % (ranks, drop_last)
                    m.mkjob(job, "subset=range:0-%d ranks=%d drop_last=%d epochs=2"
                            % (SUBSET - 1, ranks, drop_last))
                    names = sorted(os.listdir(m.path("jobs", job)))
                    self.assertEqual(
                        [n for n in names if n.startswith("next")],
                        sorted("next.%d" % r for r in range(ranks)))
                    self.assertErrno(2, os.open, m.path("jobs", job, "next"),
                                     os.O_RDONLY)
                    self.assertErrno(2, os.open, m.path("jobs", job, "next.%d" % ranks),
                                     os.O_RDONLY)
                    per_rank = SUBSET // ranks if drop_last else -(-SUBSET // ranks)
                    splits = []
                    for epoch in range(2):
                        ids, epochs = self.read_ranks(m, job, ranks)
                        self.assertEqual(epochs, {epoch})
                        for r, rank_ids in enumerate(ids):
                            self.assertEqual(len(rank_ids), per_rank, "rank %d" % r)
                            self.assertEqual(len(set(rank_ids)), per_rank,
                                             "an id twice within rank %d" % r)
                        every = [i for rank_ids in ids for i in rank_ids]
                        distinct = set(every)
                        self.assertTrue(distinct <= set(range(SUBSET)))
                        self.assertEqual(len(distinct), min(SUBSET, per_rank * ranks))
                        splits.append([sorted(x) for x in ids])
                    # The ranks' ids are exhausted after epochs=2.
                    self.assertEqual(read_epoch(m.path("jobs", job, "next.0")), [[]])
                    status = m.status(job)
                    self.assertEqual(len(status["ranks"]), ranks)
                    self.assertEqual(status["ranks"][0]["subset_size"], per_rank)
                    if ranks > 1:
                        self.assertNotEqual(splits[0], splits[1],
                                            "the split changes every epoch")

    def test_two_mounts_split_every_epoch(self):
        a = self.mount(self.source, {"cache_dir": self.tempdir(), "seed": "1"})
        b = self.mount(self.source, {"cache_dir": self.tempdir(), "seed": "2"})
        for m in (a, b):
            m.mkjob("ddp", "ranks=2 epochs=2")
        for epoch in range(2):
            got = {}

            def run(m, r):
                got[r] = read_epoch(m.path("jobs", "ddp", "next.%d" % r), readers=2)

            threads = [threading.Thread(target=run, args=(a, 0)),
                       threading.Thread(target=run, args=(b, 1))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            every = [rec.id for r in (0, 1) for reader in got[r] for rec in reader]
            self.assertEqual(sorted(every), list(range(self.N)),
                             "epoch %d: each sample exactly once across the mounts"
                             % epoch)
            self.assertEqual(len(every), self.N)

    def test_resume_delivers_exactly_the_rest(self):
        m = self.mount(self.source)
        m.mkjob("r", "ranks=2")
        fd = os.open(m.path("jobs", "r", "next.1"), os.O_RDONLY)
        try:
            first = [rec.id for rec in read_records(fd, 5)]
        finally:
            os.close(fd)
        consumed = first[:3]  # the checkpoint saw three of them
        m.write_file("r", "resume", "epoch=0\nrank=1\n" + "".join(
            "%d\n" % i for i in consumed))
        rest = [rec for reader in read_epoch(m.path("jobs", "r", "next.1"), readers=2)
                for rec in reader]
        self.assertEqual({rec.epoch for rec in rest}, {0})
        ids = consumed + [rec.id for rec in rest]
        self.assertEqual(len(ids), self.N // 2)
        self.assertEqual(len(set(ids)), self.N // 2, "a sample twice in the epoch")
        # Rank 0 was not named: its epoch is whole.
        rank0 = [rec.id for reader in read_epoch(m.path("jobs", "r", "next.0"))
                 for rec in reader]
        self.assertEqual(sorted(rank0 + ids), list(range(self.N)))
        # Bad resume writes change nothing.
        for bad in ("1\n2\n", "epoch=x\n", "epoch=0\nrank=2\n", "epoch=0\nnope.jpg\n"):
            self.assertErrno(22, m.write_file, "r", "resume", bad)

    def check_restart(self, sig):
        cache_dir = self.tempdir()
        m = self.mount(self.source, {"cache_dir": cache_dir})
        m.mkjob("keep", "subset=range:0-22 ranks=2 window=1")
        fd = os.open(m.path("jobs", "keep", "next.0"), os.O_RDONLY)
        before = [rec.id for rec in read_records(fd, 4)]
        if sig == signal.SIGKILL:
            m.proc.kill()
            m.wait_exit(10)
        else:
            os.close(fd)
            m.unmount()
            self.assertEqual(m.returncode, 0)
        if sig == signal.SIGKILL:
            try:
                os.close(fd)
            except OSError:
                pass  # ENOTCONN: the daemon is gone
        m2 = self.mount(self.source, {"cache_dir": cache_dir})
        self.assertEqual(os.listdir(m2.path("jobs")), ["keep"])
        spec = m2.read_spec("keep")
        self.assertEqual((spec["subset"], spec["ranks"], spec["window"]),
                         ("range:0-22", "2", "1"))
        self.assertErrno(16, m2.write_spec, "keep", "ranks=3")  # still fixed
        after = [rec for reader in read_epoch(m2.path("jobs", "keep", "next.0"))
                 for rec in reader]
        self.assertEqual({rec.epoch for rec in after}, {0})
        ids = before + [rec.id for rec in after]
        self.assertEqual(len(ids), 12, "rank 0's epoch: ceil(23/2)")
        self.assertEqual(len(set(ids)), 12, "a sample handed out twice")
        rank1 = [rec.id for reader in read_epoch(m2.path("jobs", "keep", "next.1"))
                 for rec in reader]
        self.assertEqual(set(ids) | set(rank1), set(range(SUBSET)))
        # The next epoch is whole again.
        nxt = [rec for reader in read_epoch(m2.path("jobs", "keep", "next.0"))
               for rec in reader]
        self.assertEqual(len(nxt), 12)
        self.assertEqual({rec.epoch for rec in nxt}, {1})

    def test_jobs_survive_sigterm(self):
        self.check_restart(signal.SIGTERM)

    def test_jobs_survive_kill_9(self):
        self.check_restart(signal.SIGKILL)

    def test_resume_after_a_daemon_crash_returns_what_was_not_consumed(self):
        cache_dir = self.tempdir()
        m = self.mount(self.source, {"cache_dir": cache_dir})
        m.mkjob("ckpt", "window=1")
        fd = os.open(m.path("jobs", "ckpt", "next"), os.O_RDONLY)
        handed = [rec.id for rec in read_records(fd, 6)]
        m.proc.kill()
        m.wait_exit(10)
        try:
            os.close(fd)
        except OSError:
            pass
        m2 = self.mount(self.source, {"cache_dir": cache_dir})
        # The checkpoint saw only the first two: the other four come back.
        m2.write_file("ckpt", "resume", "epoch=0\n%d\n%d\n" % tuple(handed[:2]))
        rest = [rec.id for reader in read_epoch(m2.path("jobs", "ckpt", "next"))
                for rec in reader]
        self.assertEqual(sorted(handed[:2] + rest), list(range(self.N)))

    def test_other_users_may_not_read_ranks_or_resume(self):
        m = self.mount(self.source, {"allow_other": None})
        os.chmod(m.workdir, 0o755)
        m.mkjob("mine", "ranks=2")
        probe = ("import errno, os, sys\n"
                 "for path, flags in ((sys.argv[1], os.O_RDONLY),"
                 " (sys.argv[2], os.O_WRONLY), (sys.argv[3], os.O_RDONLY)):\n"
                 "    try:\n"
                 "        os.close(os.open(path, flags)); print('ok')\n"
                 "    except OSError as e:\n"
                 "        print(errno.errorcode[e.errno])\n")
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-c", probe, m.path("jobs", "mine", "next.1"),
             m.path("jobs", "mine", "resume"), m.path("jobs", "mine", "status")],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(out.stdout.split(), ["EACCES", "EACCES", "ok"], out.stderr)

    def test_no_persistence_without_cache_dir(self):
        m = self.mount(self.source)  # cache_dir=none
        m.mkjob("gone")
        m.unmount()
        m2 = self.mount(self.source)
        self.assertEqual(os.listdir(m2.path("jobs")), [])


class GuideDdpSnippetTest(unittest.TestCase):
    """The user guide's DDP example, which users copy: with forkserver
    workers (its own advice) it must guard its main code, or every rank
    hangs."""

    def test_snippet_guards_main_and_sets_a_timeout(self):
        guide = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "..", "docs", "user-guide.md")
        with open(guide) as f:
            text = f.read()
        blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
        ddp = [b for b in blocks if "torchrun" in b]
        self.assertEqual(len(ddp), 1, "one DDP example")
        code = ddp[0]
        compile(code, "user guide DDP example", "exec")
        self.assertIn('if __name__ == "__main__":', code)
        self.assertIn("timeout=", code)
        self.assertIn('multiprocessing_context="forkserver"', code)
        # Nothing but definitions and the guard at the top level.
        top = [line for line in code.splitlines()
               if line and not line[0].isspace() and not line.startswith("#")]
        self.assertTrue(all(line.startswith(("def ", "import ", "from ",
                                             "if __name__"))
                            for line in top), top)
        self.assertIn("does not kill its ranks", text)


if __name__ == "__main__":
    unittest.main()
