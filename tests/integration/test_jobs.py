"""Jobs: /jobs mkdir/rmdir rules, spec and ids, subsets, status, /stats,
/README (docs/design.md 2.2, 2.3, 2.5)."""

import errno
import json
import os
import subprocess
import sys
import time
import unittest

import harness
from harness import DatasetMixin, JoaderTestCase, read_epoch, ids_of


class JobsTest(DatasetMixin, JoaderTestCase):

    def subset_ids(self, m, job, readers=1):
        """Reads one epoch of a job and returns its ids, checking each is
        delivered once and status.subset_size agrees."""
        st = m.status(job)
        ids = ids_of(read_epoch(m.path("jobs", job, "next"), readers))
        self.assertEqual(len(ids), len(set(ids)), "an id was given twice")
        self.assertEqual(st["subset_size"], len(ids),
                         "status.subset_size before the epoch: %s" % st)
        return sorted(ids)

    def ids_with_labels(self, labels):
        return [i for i, (_, label) in enumerate(self.order) if label in labels]

    # ---------------------------------------------------------- subsets

    def test_subset_forms(self):
        m = self.mount(self.source, {"size": "16"})
        cases = [
            ("default", None, list(range(self.N))),
            ("all", "subset=all", list(range(self.N))),
            ("cls12", "subset=classes:1-2", self.ids_with_labels({1, 2})),
            ("cls03", "subset=classes:0-0,3-3", self.ids_with_labels({0, 3})),
            ("cls_one", "subset=classes:2-2", self.ids_with_labels({2})),
            ("range", "subset=range:5-12", list(range(5, 13))),
            ("range1", "subset=range:0-0", [0]),
            ("rangeN", "subset=range:%d-%d" % (self.N - 3, self.N - 1),
             list(range(self.N - 3, self.N))),
        ]
        for job, spec, expected in cases:
            with self.subTest(spec=spec):
                m.mkjob(job, spec=spec)
                self.assertEqual(self.subset_ids(m, job, readers=2), expected)

    def test_subset_random(self):
        m = self.mount(self.source, {"size": "16"})
        m.mkjob("r03", spec="subset=random:0.3:11")
        s03 = self.subset_ids(m, "r03")
        self.assertEqual(len(s03), round(0.3 * self.N))
        m.mkjob("r075", spec="subset=random:0.75:11")
        self.assertEqual(len(self.subset_ids(m, "r075")), round(0.75 * self.N))

        m.mkjob("a", spec="subset=random:0.5:11")
        m.mkjob("b", spec="subset=random:0.5:11")
        m.mkjob("c", spec="subset=random:0.5:12")
        sa, sb, sc = (self.subset_ids(m, j, readers=2) for j in "abc")
        self.assertEqual(len(sa), round(0.5 * self.N))
        self.assertEqual(sa, sb, "same seed must select the same ids")
        self.assertEqual(len(sc), len(sa))
        self.assertNotEqual(sa, sc, "different seeds selected the same ids")
        self.assertTrue(set(sa) & set(sc), "different seeds: no overlap")
        # the subset survives the epoch: epoch 1 has the same ids
        self.assertEqual(self.subset_ids(m, "a"), sa)
        # ... and does not depend on the mount's seed
        m.unmount()
        m2 = self.mount(self.source, {"size": "16", "seed": "99"})
        m2.mkjob("a2", spec="subset=random:0.5:11")
        self.assertEqual(self.subset_ids(m2, "a2"), sa)

    def test_ids_file(self):
        m = self.mount(self.source, {"size": "16"})
        m.mkjob("byid", ids="3\n5\n7\n%d\n" % (self.N - 1))
        self.assertEqual(m.status("byid")["subset_size"], 4)
        self.assertEqual(self.subset_ids(m, "byid"), [3, 5, 7, self.N - 1])

        picks = [0, 6, 13, self.N - 1]
        m.mkjob("bypath", ids="".join(self.order[i][0] + "\n" for i in picks))
        self.assertEqual(m.status("bypath")["subset_size"], len(picks))
        self.assertEqual(self.subset_ids(m, "bypath", readers=2), picks)

    # ------------------------------------------------------------- spec

    def test_spec_bad_writes_fail_einval(self):
        m = self.mount(self.source)
        m.mkjob("s", spec="size=32 window=1")
        good = m.read_spec("s")
        bad = [
            "nosuchkey=1",
            "subset=all nosuchkey=1",
            "size=32 window=1 bogus=3",
            "size=abc",
            "size=-5",
            "size=12x",
            "epochs=abc",
            "epochs=-1",
            "window=0",
            "window=abc",
            "subset=bogus",
            "subset=range:5-2",
            "subset=range:0-%d" % self.N,          # id N does not exist
            "subset=range:a-b",
            "subset=classes:2-1",
            "subset=classes:0-%d" % self.C,         # class C does not exist
            "subset=classes:0-1,3-9",
            "subset=classes:",
            "subset=random:1.5:3",
            "subset=random:abc:3",
            "subset=random:0.5",
            "garbage",
            "size",
            "=5",
            "\xff\xfe\x00garbage",
        ]
        for text in bad:
            with self.subTest(spec=text):
                m.write_spec("s", "size=32 window=1")
                data = text.encode("latin-1")
                self.assertErrno(errno.EINVAL, m.write_spec, "s", data)
                self.assertEqual(m.read_spec("s"), good,
                                 "a failed write changed the spec")

    def test_spec_good_write_replaces(self):
        m = self.mount(self.source)
        os.mkdir(m.path("jobs", "s"))
        fresh = m.read_spec("s")
        self.assertIn(fresh.get("subset", "all"), ("all",), fresh)

        m.write_spec("s", "size=32 window=1")
        spec = m.read_spec("s")
        self.assertEqual((spec.get("size"), spec.get("window")), ("32", "1"),
                         spec)

        m.write_spec("s", "epochs=2\n")
        spec = m.read_spec("s")
        self.assertEqual(spec.get("epochs"), "2", spec)
        self.assertIn(spec.get("size", "64"), ("64",),
                      "the second write must replace the whole spec: %s" % spec)
        self.assertIn(spec.get("window", "64"), ("64",), spec)

        # newline-separated pairs, and the spec takes effect
        m.write_spec("s", "subset=range:0-9\nsize=48\n")
        spec = m.read_spec("s")
        self.assertEqual((spec.get("subset"), spec.get("size")),
                         ("range:0-9", "48"), spec)
        self.assertNotIn(spec.get("epochs"), ("2",), spec)
        recs = read_epoch(m.path("jobs", "s", "next"))[0]
        self.assertEqual(sorted(r.id for r in recs), list(range(10)))
        self.assertTrue(all((r.height, r.width) == (48, 48) for r in recs))

    def test_spec_with_shell_echo(self):
        m = self.mount(self.source)
        os.mkdir(m.path("jobs", "sh"))
        r = subprocess.run(["/bin/sh", "-c", 'echo "subset=classes:0-0" > "$1"',
                            "sh", m.path("jobs", "sh", "spec")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(m.read_spec("sh").get("subset"), "classes:0-0")
        self.assertEqual(m.status("sh")["subset_size"],
                         len(self.ids_with_labels({0})))

    def test_spec_busy_after_first_read(self):
        m = self.mount(self.source)
        path = m.mkjob("b", spec="window=1")
        fd = os.open(path, os.O_RDONLY)
        try:
            # opening alone does not freeze the spec: only a read does
            m.write_spec("b", "size=32")
            data = harness.read_exact(fd, 64)
            self.assertEqual(data[:4], b"JSF1")
            self.assertErrno(errno.EBUSY, m.write_spec, "b", "size=48")
            self.assertErrno(errno.EBUSY, m.write_file, "b", "ids", "1\n")
        finally:
            os.close(fd)
        self.assertErrno(errno.EBUSY, m.write_spec, "b", "size=48")
        self.assertEqual(m.read_spec("b").get("size"), "32")

    def test_same_spec_and_ids_again_after_first_read(self):
        """A training script run twice on its job writes the same spec and
        ids after the first read: accepted, changing nothing. A spec or
        subset that differs is refused with EBUSY and its reason, which
        the client raises as RejectedWrite."""
        import joaderfs
        m = self.mount(self.source)
        job = m.path("jobs", "rerun")
        joaderfs.make_job(m.mnt, "rerun", {"size": 32, "epochs": 3})
        joaderfs.write_ids(job, [0, 1, 2, 3])
        fd = os.open(m.path("jobs", "rerun", "next"), os.O_RDONLY)
        try:
            self.assertEqual(harness.read_exact(fd, 64)[:4], b"JSF1")
        finally:
            os.close(fd)
        shown = m.read_text("jobs", "rerun", "spec")
        # The second run of the script.
        joaderfs.make_job(m.mnt, "rerun", {"size": 32, "epochs": 3},
                          exist_ok=True)
        joaderfs.write_ids(job, [0, 1, 2, 3])
        m.write_spec("rerun", "epochs=3\nsize=32\n")
        m.write_file("rerun", "ids", "3\n2\n1\n0\n")
        self.assertEqual(m.read_text("jobs", "rerun", "error"), "")
        self.assertEqual(m.read_text("jobs", "rerun", "spec"), shown)
        self.assertEqual(m.status("rerun")["subset_size"], 4)

        with self.assertRaises(joaderfs.RejectedWrite) as cm:
            joaderfs.write_spec(job, {"size": 48, "epochs": 3})
        self.assertIn("spec is fixed", cm.exception.reason)
        self.assertIn("differs", str(cm.exception))
        self.assertIsInstance(cm.exception.__cause__, OSError)
        self.assertEqual(cm.exception.__cause__.errno, errno.EBUSY)
        with self.assertRaises(joaderfs.RejectedWrite) as cm:
            joaderfs.write_ids(job, [0, 1])  # judged whole, at close
        self.assertIn("subset is fixed", cm.exception.reason)
        with self.assertRaises(joaderfs.RejectedWrite) as cm:
            joaderfs.write_ids(job, [0, 9])  # 9 is refused by its write
        self.assertIn("id 9 is not in it", cm.exception.reason)
        self.assertErrno(errno.EBUSY, m.write_spec, "rerun", "size=48")
        self.assertEqual(m.read_text("jobs", "rerun", "spec"), shown)
        self.assertEqual(m.status("rerun")["subset_size"], 4)

        # What the spec file shows, written back; a subset named by the
        # spec must be the same one.
        read_epoch(m.mkjob("plain", spec="subset=range:0-5 flip=0.5"))
        m.write_spec("plain", m.read_text("jobs", "plain", "spec"))
        m.write_spec("plain", "flip=0.5 subset=range:0-5")
        self.assertErrno(errno.EBUSY, m.write_spec, "plain",
                         "subset=range:0-6 flip=0.5")
        self.assertErrno(errno.EBUSY, m.write_spec, "plain", "flip=0.5")

    def test_shell_writes_name_the_line_and_fail_at_once(self):
        """bash writes a line per write(): ids errors count lines from the
        open, and a resume line that is bad on its own fails the write()
        that completes it, so the shell's exit status tells."""
        m = self.mount(self.source)
        m.mkjob("sh")

        def sh(command):
            return subprocess.run(["bash", "-c", command],
                                  cwd=m.path("jobs", "sh"),
                                  capture_output=True, text=True)
        r = sh("printf '1\\n2\\n3\\nabc\\n' > ids")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertEqual(m.read_text("jobs", "sh", "error"),
                         "ids: line 4: 'abc' is neither an id nor a relpath\n")

        r = sh("printf 'hello world\\n' > resume")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("Invalid argument", r.stderr)
        self.assertIn("resume: line 1: expected epoch=E on the first line, got 'hello world'",
                      m.read_text("jobs", "sh", "error"))
        r = sh("printf 'epoch=0\\nrank=x\\n' > resume")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("resume: line 2: rank= expects a number",
                      m.read_text("jobs", "sh", "error"))
        r = sh("printf 'epoch=0\\n1\\n2\\nnope\\n' > resume")
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("resume: line 4: 'nope' is neither an id nor a relpath",
                      m.read_text("jobs", "sh", "error"))
        self.assertEqual(m.status("sh")["epoch"], 0)
        # A line the handle would have to hold without end.
        self.assertErrno(errno.EINVAL, m.write_file, "sh", "resume",
                         "epoch=0\n" + "1" * 5000)
        self.assertIn("longer than 4096 bytes",
                      m.read_text("jobs", "sh", "error"))
        # What needs the job is judged at close, where a shell does not
        # look: the error file tells.
        r = sh("printf 'epoch=0\\nrank=5\\n' > resume")
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("has no rank 5", m.read_text("jobs", "sh", "error"))
        r = sh("printf 'epoch=1\\n0\\n1\\n' > resume")
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual(m.read_text("jobs", "sh", "error"), "")
        self.assertEqual(m.status("sh")["epoch"], 1)

    def test_job_status_takes_the_job_path(self):
        import joaderfs
        m = self.mount(self.source)
        job = joaderfs.make_job(m.mnt, "st", {"subset": "range:0-4"})
        by_path = joaderfs.job_status(job)
        self.assertEqual(by_path["subset_size"], 5)
        self.assertEqual(joaderfs.job_status(str(job))["subset_size"], 5)
        self.assertEqual(joaderfs.job_status(m.mnt, "st"), by_path)

    # ----------------------------------------------------------- mkdir

    def test_job_id_rules(self):
        m = self.mount(self.source)
        good = ["x" * 64, "A.b_c-9", "-", "_", "0", ".hidden", "a..b"]
        for name in good:
            with self.subTest(good=name):
                os.mkdir(m.path("jobs", name))
                self.assertIn(name, os.listdir(m.path("jobs")))
                self.assertEqual(m.status(name)["epoch"], 0)
        bad = ["x" * 65, "a b", "bad!", "a:b", "semi;colon", "tab\tx", "\u00fc",
               "a*", "q?", "new\nline", "x" * 200]
        for name in bad:
            with self.subTest(bad=name):
                self.assertErrno(errno.EINVAL, os.mkdir, m.path("jobs", name))
                self.assertNotIn(name, os.listdir(m.path("jobs")))
        self.assertErrno(errno.EEXIST, os.mkdir, m.path("jobs", "A.b_c-9"))
        # jobs are made in /jobs only, as folders only
        for bad_path in (m.path("jobs", "A.b_c-9", "sub"), m.path("elsewhere"),
                         m.path("dataset", "x")):
            with self.subTest(mkdir=bad_path):
                self.assertRaises(OSError, os.mkdir, bad_path)
        self.assertRaises(OSError, os.open, m.path("jobs", "file"),
                          os.O_WRONLY | os.O_CREAT, 0o644)
        self.assertEqual(sorted(os.listdir(m.path("jobs"))), sorted(good))
        self.assertEqual(sorted(m.stats()["jobs"]), sorted(good))

    def test_rmdir_ends_job(self):
        m = self.mount(self.source)
        path = m.mkjob("gone", spec="window=1")
        m.mkjob("stays")
        fd = os.open(path, os.O_RDONLY)
        try:
            data = harness.read_exact(fd, harness.record_size(64 * 64 * 3))
            self.assertEqual(len(harness.parse_records(data)), 1)
            os.rmdir(m.path("jobs", "gone"))
            self.assertNotIn("gone", os.listdir(m.path("jobs")))
            self.assertNotIn("gone", m.stats()["jobs"])
            self.assertIn("stays", m.stats()["jobs"])
            self.assertFalse(os.path.exists(m.path("jobs", "gone")))
            self.assertErrno(errno.ENODEV, harness.read_exact, fd, 1 << 20,
                             timeout=15)
        finally:
            os.close(fd)
        self.assertErrno(errno.ENOENT, os.rmdir, m.path("jobs", "gone"))
        # the name can be used again, for a fresh job
        os.mkdir(m.path("jobs", "gone"))
        st = m.status("gone")
        self.assertEqual((st["epoch"], st["delivered"], st["remaining"]),
                         (0, 0, self.N), st)
        self.assertIn(m.read_spec("gone").get("window", "64"), ("64",))

    def test_rmdir_idle_job(self):
        m = self.mount(self.source)
        read_epoch(m.mkjob("done"), 1)
        os.rmdir(m.path("jobs", "done"))
        self.assertEqual(os.listdir(m.path("jobs")), [])
        self.assertEqual(m.stats()["jobs"], {})

    def test_idle_job_keeps_spec_and_position(self):
        m = self.mount(self.source, {"job_idle_timeout": "1"})
        path = m.mkjob("idle", spec="window=1 size=32")
        fd = os.open(path, os.O_RDONLY)
        try:
            head = harness.parse_records(harness.read_exact(
                fd, 4 * harness.record_size(32 * 32 * 3)))
        finally:
            os.close(fd)
        before = m.status("idle")
        time.sleep(2.5)   # > job_idle_timeout: references released
        after = m.status("idle")
        keys = ("epoch", "delivered", "remaining", "subset_size", "readers")
        self.assertEqual({k: after[k] for k in keys},
                         {k: before[k] for k in keys})
        self.assertEqual(m.read_spec("idle").get("size"), "32")
        rest = read_epoch(path, 1)[0]
        ids = [r.id for r in head + rest]
        self.assertEqual(len(rest), before["remaining"])
        self.assertEqual(len(ids), len(set(ids)), "an id was given twice")
        self.assertTrue(all((r.height, r.width, r.epoch) == (32, 32, 0)
                            for r in rest))
        self.assertEqual(m.status("idle")["remaining"], 0)

    def test_other_users(self):
        """A job belongs to its maker: others may read its files but not
        write its spec or remove it; they can make and run their own."""
        m = self.mount(self.source, {"allow_other": None})
        d = os.path.dirname(m.mnt)
        os.chmod(d, 0o755)
        m.mkjob("roots", spec="size=32")
        script = r"""
import errno, json, os, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
mnt = sys.argv[1]
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
j = os.path.join(mnt, "jobs")
attempt("read_status", lambda: open(os.path.join(j, "roots", "status")).read())
attempt("read_spec", lambda: open(os.path.join(j, "roots", "spec")).read())
attempt("write_spec", lambda: write(os.path.join(j, "roots", "spec"), "size=48"))
attempt("write_ids", lambda: write(os.path.join(j, "roots", "ids"), "1\n"))
attempt("rmdir", lambda: os.rmdir(os.path.join(j, "roots")))
attempt("open_next", lambda: os.close(os.open(os.path.join(j, "roots", "next"),
                                               os.O_RDONLY)))
attempt("mkdir_own", lambda: os.mkdir(os.path.join(j, "nobodys")))
attempt("write_own_spec",
        lambda: write(os.path.join(j, "nobodys", "spec"), "subset=range:0-3"))
attempt("read_own", lambda: len(open(os.path.join(j, "nobodys", "next"),
                                     "rb").read()))
print(json.dumps(out))
"""
        r = subprocess.run([sys.executable, "-c", script, m.mnt],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["read_status"], "ok", out)
        self.assertEqual(out["read_spec"], "ok", out)
        self.assertIn(out["write_spec"], ("EACCES", "EPERM"), out)
        self.assertIn(out["write_ids"], ("EACCES", "EPERM"), out)
        self.assertIn(out["rmdir"], ("EACCES", "EPERM"), out)
        # Reading would consume root's samples (and fix its spec).
        self.assertEqual(out["open_next"], "EACCES", out)
        self.assertEqual(m.status("roots")["delivered"], 0)
        self.assertEqual(out["mkdir_own"], "ok", out)
        self.assertEqual(out["write_own_spec"], "ok", out)
        self.assertEqual(out["read_own"], "ok", out)
        self.assertEqual(m.read_spec("roots").get("size"), "32")
        m.write_spec("roots", "size=40")  # still root's to change
        self.assertIn("roots", os.listdir(m.path("jobs")))
        self.assertEqual(m.status("nobodys")["subset_size"], 4)
        # root may still remove another user's job
        os.rmdir(m.path("jobs", "nobodys"))

    # ---------------------------------------------------- README, stats

    def test_rejected_ids_write_changes_nothing(self):
        """A write to `ids` that fails EINVAL leaves the job as it was: the
        lines before it, even a complete one, do not take effect on close."""
        m = self.mount(self.source)
        m.mkjob("r")
        fd = os.open(m.path("jobs", "r", "ids"), os.O_WRONLY | os.O_TRUNC)
        closed = False
        try:
            os.write(fd, b"5\n1")
            with self.assertRaises(OSError) as cm:
                os.write(fd, b"99999\n")  # completes the line "199999"
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            with self.assertRaises(OSError):
                os.write(fd, b"7\n")  # nothing more is taken
            try:
                os.close(fd)
            except OSError:
                pass  # close reports the rejection too
            closed = True
        finally:
            if not closed:
                os.close(fd)
        self.assertEqual(m.status("r")["subset_size"], self.N)

    def test_spec_after_ids_keeps_the_subset(self):
        m = self.mount(self.source)
        m.mkjob("r", ids="1\n2\n3\n")
        m.write_spec("r", "epochs=2")
        self.assertEqual(m.status("r")["subset_size"], 3)
        m.write_spec("r", "subset=range:0-4")
        self.assertEqual(m.status("r")["subset_size"], 5)

    def test_tree_changes_are_eperm(self):
        """Only mkdir and rmdir change the tree; the rest is EPERM, not
        ENOSYS."""
        m = self.mount(self.source)
        m.mkjob("t")
        jobs = m.path("jobs")
        self.assertErrno(errno.EPERM, os.unlink, m.path("jobs", "t", "spec"))
        self.assertErrno(errno.EPERM, os.rename, m.path("jobs", "t"),
                         m.path("jobs", "u"))
        self.assertErrno(errno.EPERM, os.symlink, "t", os.path.join(jobs, "s"))
        self.assertErrno(errno.EPERM, os.open, os.path.join(jobs, "f"),
                         os.O_WRONLY | os.O_CREAT, 0o644)
        self.assertEqual(sorted(os.listdir(jobs)), ["t"])

    def test_readme(self):
        m = self.mount(self.source)
        text = m.read_text("README")
        self.assertGreater(len(text.strip()), 100)
        self.assertNotIn("\0", text)
        for word in ("mkdir", "jobs", "next", "spec"):
            self.assertIn(word, text)
        # What train.py gets, as docs/user-guide.md says: the job folder.
        self.assertIn("python train.py --data jobs/myjob ", text)
        self.assertNotIn("--data jobs/myjob/next", text)

    def test_readme_lists_every_spec_key(self):
        """/README names each key the spec takes (docs/design.md 2.3), and the
        values it shows are taken."""
        m = self.mount(self.source)
        text = m.read_text("README")
        for key in ("subset", "size", "crop", "flip", "seed", "epochs",
                    "window", "ranks", "drop_last"):
            self.assertIn("  %s=" % key, text)
        self.assertNotIn("keeps the original", text)
        m.mkjob("keys", spec="subset=all size=0 crop=random:0.5-1:0.75-1.25 "
                "flip=0.5 seed=7 epochs=2 window=1 ranks=1 drop_last=0")

    def test_stats(self):
        m = self.mount(self.source)
        stats = m.stats()
        for key in ("decoded", "delivered", "ram_hits", "disk_hits",
                    "ram_bytes", "ram_budget", "disk_bytes", "skipped"):
            self.assertIn(key, stats)
            self.assertIsInstance(stats[key], int, key)
            self.assertGreaterEqual(stats[key], 0, key)
        self.assertEqual(stats["jobs"], {})
        self.assertIn(stats["ram_budget"], (64 << 20, 64 * 10 ** 6))
        self.assertEqual((stats["delivered"], stats["skipped"]), (0, 0))

        ids_one = ids_of(read_epoch(m.mkjob("one", spec="subset=range:0-9"), 2))
        m.mkjob("two", spec="subset=range:5-14")
        ids_two = ids_of(read_epoch(m.path("jobs", "two", "next"), 1))
        stats = m.stats()
        self.assertGreaterEqual(stats["decoded"], len(set(ids_one + ids_two)))
        self.assertEqual(stats["delivered"], 20)
        self.assertLessEqual(stats["ram_bytes"], stats["ram_budget"])
        self.assertEqual((stats["disk_hits"], stats["disk_bytes"]), (0, 0),
                         "cache_dir=none: no disk tier")
        self.assertEqual(sorted(stats["jobs"]), ["one", "two"])
        for job, st in stats["jobs"].items():
            self.assertEqual(st, {**st, "subset_size": 10, "readers": 0,
                                  "delivered": 10, "remaining": 0}, job)
            own = m.status(job)
            keys = ("epoch", "delivered", "remaining", "subset_size", "readers")
            self.assertEqual({k: st[k] for k in keys},
                             {k: own[k] for k in keys}, job)
        json.dumps(stats)


if __name__ == "__main__":
    unittest.main()
