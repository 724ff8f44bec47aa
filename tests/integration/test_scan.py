"""The scan of SOURCE cannot be trapped (issue 20, failure 3), and a SOURCE
without samples says which layouts it expects (issue 16, item 7).

Every link shape the hostile probe used is put into an ImageFolder SOURCE,
then the dataset is mounted daemonized, as users do. The mount must come up
within a bounded time, list exactly the samples outside the loops, deliver
each of them once per epoch, and log one line per cause of what it left
out. A scan that hangs is killed, so that the test fails instead of hanging.
"""

import os
import signal
import subprocess
import sys
import time
import unittest

import harness
from harness import (BIN, FUSERMOUNT, JoaderTestCase,
                      daemon_pid, imagefolder_order, is_mounted,
                      make_imagefolder, read_epoch)

# Seconds a SOURCE of a few folders may take to mount, loops and all.
MOUNT_BOUND = 20.0

LAYOUT = {"a": ["1.jpg", "2.jpg"], "b": ["3.jpg", "4.jpg"], "d": ["5.jpg"]}


class LinkShapesTest(JoaderTestCase):
    """One link shape per test, in a fresh copy of LAYOUT."""

    def setUp(self):
        harness.require_binary()
        self.source = make_imagefolder(os.path.join(self.tempdir(), "src"),
                                       LAYOUT)
        self.plain = imagefolder_order(self.source)  # before any link

    def link(self, target, rel):
        os.symlink(target, os.path.join(self.source, rel))

    def mount_untrapped(self):
        """Mounts self.source daemonized; fails (killing a scan still under
        way) unless the mount is up within MOUNT_BOUND seconds."""
        m = self.mount(self.source, start=False)
        m.mount_timeout = MOUNT_BOUND
        started = time.monotonic()
        try:
            m.start()
        except (AssertionError, subprocess.TimeoutExpired) as e:
            # The launcher was killed or failed; its child, still scanning
            # or not, is now ours (harness makes us a subreaper).
            try:
                pid = daemon_pid(m.mnt, timeout=1.0)
            except AssertionError:
                pid = None
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            self.fail("no mount within %.0f s: %s" % (MOUNT_BOUND, e))
        sys.stderr.write("\n[scan] %s mounted in %.2f s\n"
                         % (self.id().rsplit(".", 1)[-1],
                            time.monotonic() - started))
        return m

    def check_serves(self, m, expected):
        """The manifest lists `expected` [(relpath, label)] in id order, and
        one epoch delivers each of them once with its label."""
        self.assertEqual([(rel, label) for _, label, rel in m.manifest()],
                         expected)
        self.assertEqual(m.info()["samples"], len(expected))
        records = read_epoch(m.mkjob("epoch", spec="epochs=1"))[0]
        self.assertEqual(sorted(r.id for r in records),
                         list(range(len(expected))))
        for r in records:
            self.assertEqual(r.label, expected[r.id][1], r)

    def assertLogged(self, m, words):
        lines = [l for l in m.log_problems() if words in l]
        self.assertEqual(len(lines), 1, "want one line naming %r:\n%s"
                         % (words, "\n".join(m.log_problems())))

    def test_self_link(self):
        self.link("self", "a/self")
        self.link("loop", "loop")  # a class name whose link loops
        m = self.mount_untrapped()
        self.check_serves(m, self.plain)
        self.assertLogged(m, "left out 2 symlinks that loop")

    def test_class_folder_linking_to_itself(self):
        self.link(os.path.join(self.source, "b"), "b/b")
        self.link(".", "a/again")
        m = self.mount_untrapped()
        self.check_serves(m, self.plain)
        self.assertLogged(m, "did not enter 2 folders a second time")

    def test_link_to_a_parent(self):
        # The probe's shape: 3 samples became 123 with one such link, and
        # two of them never finished the scan.
        self.link("..", "d/up")
        os.makedirs(os.path.join(self.source, "b", "deep"))
        self.link("../..", "b/deep/up")
        m = self.mount_untrapped()
        self.check_serves(m, self.plain)
        self.assertLogged(m, "did not enter 2 folders a second time")

    def test_loop_of_two(self):
        self.link("../b", "a/to-b")
        self.link("../a", "b/to-a")
        self.link("two", "d/one")
        self.link("one", "d/two")
        m = self.mount_untrapped()
        self.check_serves(m, self.plain)
        self.assertLogged(m, "did not enter 2 folders a second time")
        self.assertLogged(m, "left out 2 symlinks that loop")

    def test_dangling(self):
        missing = os.path.join(self.tempdir(), "gone")
        self.link(missing, "a/gone")
        self.link(missing + ".jpg", "a/gone.jpg")
        self.link(missing, "lost-class")
        m = self.mount_untrapped()
        self.check_serves(m, self.plain)
        self.assertLogged(m, "left out 2 broken symlinks")
        self.assertLogged(m, "left out 1 image names that are not regular")

    def test_link_to_a_file_outside_source(self):
        outside = make_imagefolder(os.path.join(self.tempdir(), "far"),
                                   {"x": ["far.jpg"]}, seed=7)
        far = os.path.join(outside, "x", "far.jpg")
        self.link(far, "b/far.jpg")
        # The same bytes as a plain file in another class, to compare.
        with open(far, "rb") as f, \
                open(os.path.join(self.source, "d", "copy.jpg"), "wb") as g:
            g.write(f.read())
        m = self.mount_untrapped()
        expected = imagefolder_order(self.source)
        self.assertIn(("b/far.jpg", 1), expected)
        self.check_serves(m, expected)
        records = read_epoch(m.mkjob("pixels", spec="epochs=1"))[0]
        by_rel = {expected[r.id][0]: r.pixels() for r in records}
        self.assertTrue((by_rel["b/far.jpg"] == by_rel["d/copy.jpg"]).all())
        self.assertEqual(m.log_problems(), [])

    def test_source_full_of_loops_mounts_in_bounded_time(self):
        classes = ["c%d" % i for i in range(10)]
        self.source = make_imagefolder(
            os.path.join(self.tempdir(), "loops"),
            {c: ["%s.jpg" % c] for c in classes})
        expected = imagefolder_order(self.source)
        for c in classes:
            for other in classes:
                self.link("../" + other, "%s/to-%s" % (c, other))
            self.link("..", c + "/up")
            self.link("self", c + "/self")
        m = self.mount_untrapped()
        self.check_serves(m, expected)
        self.assertLogged(m, "did not enter 110 folders a second time")
        self.assertLogged(m, "left out 10 symlinks that loop")

    def test_names_with_control_characters(self):
        """Files and folders whose names hold a control character would
        forge lines of /dataset/manifest: left out as hidden names are,
        counted."""
        with open(os.path.join(self.source, "a", "1.jpg"), "rb") as f:
            jpeg = f.read()
        for rel in ("a/x.jpg\n99\t0\ta/1.jpg", "a/tab\t.jpg", "b/cr\r.jpg",
                    "b/sub\x1b[2J/y.jpg", "c\x7f/z.jpg"):
            os.makedirs(os.path.dirname(os.path.join(self.source, rel)), exist_ok=True)
            with open(os.path.join(self.source, rel), "wb") as f:
                f.write(jpeg)
        m = self.mount_untrapped()
        self.check_serves(m, self.plain)
        self.assertEqual(m.stats()["scan_skips"]["unprintable"], 5)
        self.assertLogged(m, "left out 5 names holding a control character")
        import joaderfs
        self.assertEqual([(e.relpath, e.label) for e in joaderfs.read_manifest(m.mnt)],
                         self.plain)


class LayoutErrorTest(JoaderTestCase):
    """A SOURCE with no sample: exit 1 before mounting, with one line that
    names the layouts it expects."""

    LAYOUT_WORDS = ("SOURCE/<class>/<image>", "manifest", "SOURCE/*.tar")

    def setUp(self):
        harness.require_binary()

    def run_bad(self, source):
        mnt = os.path.join(self.tempdir(), "mnt")
        os.mkdir(mnt)
        self.addCleanup(lambda: is_mounted(mnt) and subprocess.run(
            [FUSERMOUNT, "-u", "-z", mnt]))
        r = subprocess.run([BIN, "-o", "cache_dir=none,ram_cache=64M",
                            source, mnt], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL, text=True)
        self.assertFalse(is_mounted(mnt))
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, r.stderr)
        for words in self.LAYOUT_WORDS:
            self.assertIn(words, lines[0])
        sys.stderr.write("\n[layout error] %s\n" % lines[0])
        return lines[0]

    def test_flat_source(self):
        flat = os.path.join(self.tempdir(), "flat")
        make_imagefolder(flat, {"x": ["1.jpg", "2.jpg", "3.jpg"]})
        for name in os.listdir(os.path.join(flat, "x")):
            os.rename(os.path.join(flat, "x", name), os.path.join(flat, name))
        os.rmdir(os.path.join(flat, "x"))
        line = self.run_bad(flat)
        self.assertIn("3 images but no class folder", line)

    def test_empty_source(self):
        empty = os.path.join(self.tempdir(), "empty")
        os.makedirs(os.path.join(empty, "class-without-images"))
        self.assertIn("holds no image", self.run_bad(empty))


if __name__ == "__main__":
    unittest.main()
