"""Issue 4, test 3: the disk tier survives a crash and damaged files.

- kill -9 the daemon while several jobs read (so the disk tier is being
  written), unmount the dead mount, mount again on the same cache_dir: the
  tier opens, an epoch completes, and every record's pixels equal an
  independent reference (a cache_dir=none mount: decoding is deterministic).
  Done twice in a row, at two different points of the writing.
- after a clean run has filled the tier, flip bytes in the middle of its
  slot files (then, separately, of its index's .sst and .log files),
  remount, read an epoch: no record differs from the reference.
"""

import os
import shutil
import tempfile
import threading
import unittest

import harness
from harness import TierTestCase, digests, log, wait_for

N_CRASH = 200
# 150 KB per sample at 224: ~30 MB to write, so memtables flush mid-epoch.
# Each crash round writes a size not stored yet (so there is writing to
# interrupt); the first round's size must survive the second crash.
CRASH_SIZES = (224, 192)
N_CORRUPT = 80


class _Slurp(threading.Thread):
    """Reads a job's next to EOF or error, keeping the bytes."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.fd = os.open(path, os.O_RDONLY)
        self.data = bytearray()
        self.error = None

    def run(self):
        try:
            while True:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    break
                self.data += chunk
        except OSError as e:
            self.error = e
        finally:
            try:
                os.close(self.fd)
            except OSError:
                pass  # ENOTCONN once the daemon is dead


class CrashTest(TierTestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-tiers-")
        cls.source, cls.order = harness.make_dataset(
            os.path.join(cls._data, "src"), N_CRASH, classes=5, seed=21)
        cls.small_source, _ = harness.make_dataset(
            os.path.join(cls._data, "small"), N_CORRUPT, classes=4, seed=22)
        cls._refs = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def ref(self, source, size, n):
        key = (source, size)
        if key not in self._refs:
            type(self)._refs[key] = self.reference(source, size, n=n)
        return self._refs[key]

    def assert_matches(self, got, ref, what):
        self.assertEqual(sorted(got), sorted(ref), "%s: ids delivered" % what)
        bad = [i for i in ref if got[i] != ref[i]]
        self.assertEqual(bad, [], "%s: %d records differ from the reference "
                         "(ids %s)" % (what, len(bad), bad[:20]))

    # ---------------------------------------------------------- crash

    def crash_while_writing(self, cache_dir, size, kill_at_writes, round_no):
        """Mounts, starts 3 jobs reading at full speed, SIGKILLs the daemon
        once /stats disk_writes >= kill_at_writes; returns stats seen last."""
        m = self.mount(self.source, {"cache_dir": cache_dir,
                                     "size": str(size), "base": str(size),
                                     "threads": "2", "seed": str(round_no),
                                     "ram_cache": "8M"})
        readers = []
        for k in range(3):
            m.mkjob("crash%d_%d" % (round_no, k),
                    spec="subset=random:0.8:%d" % (k + 1))
            readers.append(_Slurp(m.path("jobs", "crash%d_%d" % (round_no, k),
                                         "next")))
        for r in readers:
            r.start()
        last = {}

        def enough():
            st = m.stats()
            last.clear()
            last.update(st)
            return st["disk_writes"] >= kill_at_writes
        self.assertTrue(wait_for(enough, 60, step=0.005),
                        "disk_writes never reached %d: %s"
                        % (kill_at_writes, last))
        how = self.kill9(m)
        for r in readers:
            r.join(10)
        log("crash round %d: SIGKILL at disk_writes=%d decoded=%d "
            "delivered=%d disk_bytes=%d; unmounted with %s", round_no,
            last["disk_writes"], last["decoded"], last["delivered"],
            last["disk_bytes"], how)
        self.assertTrue(any(r.error is not None for r in readers) or
                        last["delivered"] < 3 * N_CRASH,
                        "the kill came after the epochs ended")
        return last

    def epoch_after_crash(self, cache_dir, size, what):
        ref = self.ref(self.source, size, N_CRASH)
        m = self.mount(self.source, {"cache_dir": cache_dir,
                                     "size": str(size), "base": str(size), "threads": "2",
                                     "ram_cache": "8M"})
        # Jobs survive restarts with their spec (size included): one per size.
        recs = self.read_job(m, "after-%d" % size)
        st = m.stats()
        log("%s, size %d: epoch of %d records; decoded %d, disk_hits %d, "
            "disk_corrupt %d", what, size, len(recs), st["decoded"],
            st["disk_hits"], st.get("disk_corrupt", -1))
        self.assert_matches(digests(recs), ref, "%s, size %d" % (what, size))
        self.assertEqual(st["decoded"] + st["disk_hits"], N_CRASH, st)
        self.clean_unmount(m)
        return st

    def test_kill9_while_writing_then_remount(self):
        cache_dir = self.tempdir()
        first, second = CRASH_SIZES
        # Round 1: crash into an empty tier.
        self.crash_while_writing(cache_dir, first, 130, 1)
        self.epoch_after_crash(cache_dir, first, "after crash 1")
        # The clean unmount above stored every sample at `first` (each round
        # mounts with base=size: entries are keyed by base). Round 2
        # crashes a daemon writing `second` into that reopened database.
        self.crash_while_writing(cache_dir, second, 60, 2)
        st = self.epoch_after_crash(cache_dir, first, "after crash 2")
        self.assertEqual(st["decoded"], 0,
                         "entries stored by a clean unmount were lost in a "
                         "later crash: %s" % st)
        self.epoch_after_crash(cache_dir, second, "after crash 2")

    # ---------------------------------------------------------- corruption

    def fill_tier(self, cache_dir):
        m = self.mount(self.small_source, {"cache_dir": cache_dir,
                                           "threads": "2"})
        self.assertEqual(len(self.read_job(m, "fill")), N_CORRUPT)
        self.clean_unmount(m)

    def read_after_damage(self, cache_dir, what):
        ref = self.ref(self.small_source, harness.SIZE, N_CORRUPT)
        m = self.mount(self.small_source, {"cache_dir": cache_dir,
                                           "threads": "2"})
        recs = self.read_job(m, "after")
        st = m.stats()
        log("%s: decoded %d, disk_hits %d, disk_corrupt %d, disk_misses %d",
            what, st["decoded"], st["disk_hits"], st.get("disk_corrupt", -1),
            st.get("disk_misses", -1))
        self.assert_matches(digests(recs), ref, what)
        self.assertTrue(st.get("disk_corrupt", 0) > 0 or st["decoded"] > 0,
                        "%s: the damage went unnoticed yet every record is "
                        "right?! %s" % (what, st))
        self.clean_unmount(m)
        return st

    def test_corrupt_slot_files(self):
        cache_dir = self.tempdir()
        self.fill_tier(cache_dir)
        blobs = harness.cache_files(cache_dir, prefix="slots-")
        self.assertTrue(blobs, "no slot files under %s" % cache_dir)
        for b in blobs:
            # Inside a slot's pixels: slots end in unread padding (their sizes
            # go in steps), where damage is harmless.
            size = os.path.getsize(b)
            offs = harness.flip_bytes(b, [
                (int(f * size / harness.SLOT) + 0.4) * harness.SLOT / size
                for f in (0.3, 0.5, 0.7)])
            log("flipped 3x64 bytes of %s (%d bytes) at %s",
                os.path.basename(b), os.path.getsize(b), offs)
        st = self.read_after_damage(cache_dir, "damaged slot files")
        # A second remount: the dropped entries were rewritten.
        ref = self.ref(self.small_source, harness.SIZE, N_CORRUPT)
        m = self.mount(self.small_source, {"cache_dir": cache_dir,
                                           "threads": "2"})
        recs = self.read_job(m, "again")
        st2 = m.stats()
        self.assert_matches(digests(recs), ref, "remount after repair")
        self.assertEqual(st2["decoded"], 0,
                         "entries dropped as corrupt (%d) should have been "
                         "stored again: %s" % (st.get("disk_corrupt", -1), st2))

    def test_corrupt_index_files(self):
        cache_dir = self.tempdir()
        self.fill_tier(cache_dir)
        ssts = (harness.cache_files(cache_dir, ".sst") +
                harness.cache_files(cache_dir, ".log"))
        self.assertTrue(ssts, "no index files under %s" % cache_dir)
        for f in ssts:
            offs = harness.flip_bytes(f, fractions=(0.5,), length=16)
            log("flipped 16 bytes of %s (%d bytes) at %s",
                os.path.basename(f), os.path.getsize(f), offs)
        st = self.read_after_damage(cache_dir, "damaged index files")
        # A second remount: what was dropped or lost was stored again.
        ref = self.ref(self.small_source, harness.SIZE, N_CORRUPT)
        m = self.mount(self.small_source, {"cache_dir": cache_dir,
                                           "threads": "2"})
        recs = self.read_job(m, "again")
        st2 = m.stats()
        self.assert_matches(digests(recs), ref, "remount after repair")
        self.assertEqual(st2["decoded"], 0,
                         "samples decoded again after the damage (%d) should "
                         "have been stored again: %s" % (st["decoded"], st2))


if __name__ == "__main__":
    unittest.main()
