"""Errors at the door (issue 16 item 7, issue 20 items 5 and 6).

A rejected write to a job's spec, ids or resume fails with EINVAL and leaves
its reason in the job's read-only `error` file and in its status's "error"
key, never rate-limited away; a later good write to the same file clears
it. Rejections are logged rate-limited per uid and cause, so one user's
flood hides no other user's; job mkdir and rmdir lines are rate-limited per
uid. A non-owner's utime or chmod of a job's files fails with EPERM; an
epoch past the record's 32-bit field is refused.

Every mount is daemonized with allow_other; the other user is uid 65534,
run through `setpriv`, as in test_hostile.py.
"""

import errno
import json
import os
import re
import subprocess
import sys
import unittest

from harness import DatasetMixin, JoaderTestCase, parse_records, read_to_eof

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def as_nobody(script, *args, timeout=60):
    """Runs `script` as uid 65534; returns its last stdout line as JSON."""
    proc = subprocess.run(
        NOBODY + [sys.executable, "-c", script] + [str(a) for a in args],
        capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError("uid 65534's script failed: %s" % proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


class JobErrorsTest(DatasetMixin, JoaderTestCase):

    def shared_mount(self):
        m = self.mount(self.source, {"allow_other": None})
        os.chmod(m.workdir, 0o755)
        return m

    def rejected(self, m, job, name, text):
        """Writes `text` to the job's file `name`; asserts EINVAL."""
        self.assertErrno(errno.EINVAL, m.write_file, job, name, text)

    def test_rejected_writes_leave_their_reason_until_a_good_write(self):
        m = self.shared_mount()
        m.mkjob("e")
        self.assertEqual(m.read_text("jobs", "e", "error"), "")
        self.assertEqual(m.status("e")["error"], "")
        self.assertEqual(os.stat(m.path("jobs", "e", "error")).st_mode & 0o777, 0o444)
        self.assertErrno(errno.EACCES, os.open, m.path("jobs", "e", "error"), os.O_WRONLY)

        self.rejected(m, "e", "spec", "size=abc")
        error = m.read_text("jobs", "e", "error")
        self.assertTrue(error.startswith("spec: "), error)
        self.assertIn("size=abc", error)
        self.assertEqual(error.count("\n"), 1, error)
        self.assertEqual(m.status("e")["error"], error.rstrip("\n"))

        # A good write to another file leaves it; to the same file clears it.
        m.write_file("e", "ids", "0\n1\n2\n")
        self.assertEqual(m.read_text("jobs", "e", "error"), error)
        m.write_spec("e", "size=32")
        self.assertEqual(m.read_text("jobs", "e", "error"), "")
        self.assertEqual(m.status("e")["error"], "")

        self.rejected(m, "e", "ids", "0\nnot-an-id\n")
        self.assertTrue(m.read_text("jobs", "e", "error").startswith("ids: "))
        m.write_file("e", "ids", "3\n")
        self.assertEqual(m.read_text("jobs", "e", "error"), "")

        self.rejected(m, "e", "resume", "epoch=x\n")
        self.assertTrue(m.read_text("jobs", "e", "error").startswith("resume: "))
        m.write_file("e", "resume", "epoch=1\n")
        self.assertEqual(m.read_text("jobs", "e", "error"), "")

    def test_every_rejection_is_readable_however_fast_they_come(self):
        """Forty quick mistakes: each one's own reason is there right after
        it (the log may drop lines; the error file never does)."""
        m = self.shared_mount()
        m.mkjob("fast")
        for i in range(40):
            self.rejected(m, "fast", "spec", "window=%d" % (10 ** 9 + i))
            self.assertIn("window=%d" % (10 ** 9 + i),
                          m.read_text("jobs", "fast", "error"))

    def test_resume_epoch_past_32_bits_is_refused(self):
        m = self.shared_mount()
        m.mkjob("big", "subset=range:0-3")
        self.rejected(m, "big", "resume", "epoch=4294967296\n")
        self.assertIn("4294967296", m.read_text("jobs", "big", "error"))
        self.assertEqual(m.status("big")["epoch"], 0)
        m.write_file("big", "resume", "epoch=4294967295\n")
        self.assertEqual(m.status("big")["epoch"], 4294967295)
        self.rejected(m, "big", "resume", "epoch=99999999999999\n")
        self.assertEqual(m.status("big")["epoch"], 4294967295)
        # The last epoch a record can name is read whole, then the stream
        # ends: no record may say epoch 0 again.
        for expected in (4, 0):
            fd = os.open(m.path("jobs", "big", "next"), os.O_RDONLY)
            try:
                records = parse_records(read_to_eof(fd))
            finally:
                os.close(fd)
            self.assertEqual(len(records), expected)
            self.assertEqual({r.epoch for r in records}, {4294967295} if expected else set())

    def test_spec_epochs_past_32_bits_is_refused(self):
        m = self.shared_mount()
        m.mkjob("ep")
        self.rejected(m, "ep", "spec", "epochs=4294967297")
        self.assertIn("epochs=4294967297", m.read_text("jobs", "ep", "error"))
        m.write_spec("ep", "epochs=4294967296")  # epochs 0 to 2^32 - 1
        self.assertEqual(m.read_spec("ep")["epochs"], "4294967296")

    def test_other_users_rejections_are_logged_apart(self):
        """uid 65534 floods its own job with bad specs; root's one bad write
        right after still gets its own log line, and the flood is cut to a
        few lines."""
        m = self.shared_mount()
        out = as_nobody(r"""
import json, os, sys
job = os.path.join(sys.argv[1], "jobs", "flood")
os.mkdir(job)
refused = 0
for i in range(300):
    fd = os.open(os.path.join(job, "spec"), os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"size=bad")
    except OSError:
        refused += 1
    os.close(fd)
print(json.dumps({"refused": refused}))
""", m.mnt)
        self.assertEqual(out["refused"], 300)
        m.mkjob("mine")
        self.rejected(m, "mine", "ids", "no-such-id\n")
        with open(m.log_path) as f:
            lines = f.readlines()
        self.assertLess(sum("jobs/flood/spec" in line for line in lines), 10)
        self.assertEqual(sum("jobs/mine/ids" in line for line in lines), 1, "".join(lines[-20:]))

    def test_job_churn_by_one_user_does_not_flood_the_log(self):
        """uid 65534 makes, writes and removes 300 jobs: a few log lines."""
        m = self.shared_mount()
        before = os.path.getsize(m.log_path)
        out = as_nobody(r"""
import json, os, sys
jobs = os.path.join(sys.argv[1], "jobs")
for i in range(300):
    os.mkdir(os.path.join(jobs, "c%d" % i))
    for name, text in (("spec", "size=32"), ("ids", "1\n"), ("resume", "epoch=0\n")):
        fd = os.open(os.path.join(jobs, "c%d" % i, name), os.O_WRONLY | os.O_TRUNC)
        os.write(fd, text.encode())
        os.close(fd)
    os.rmdir(os.path.join(jobs, "c%d" % i))
    try:
        os.mkdir(os.path.join(jobs, "bad name %d" % i))
    except OSError:
        pass
print(json.dumps({"done": True}))
""", m.mnt)
        self.assertTrue(out["done"])
        # Root's job still shows up at once, beside the churn.
        m.mkjob("roots")
        with open(m.log_path) as f:
            f.seek(before)
            lines = f.readlines()
        churn = [l for l in lines if "uid 65534" in l or re.search(r"\bc\d+\b", l)]
        self.assertLess(len(churn), 20, "".join(churn[:40]))
        self.assertEqual(sum("job roots created" in l for l in lines), 1, "".join(lines))

    def test_non_owner_cannot_touch_or_chmod_a_jobs_files(self):
        m = self.shared_mount()
        m.mkjob("own")
        out = as_nobody(r"""
import errno, json, os, sys
job = os.path.join(sys.argv[1], "jobs", "own")
res = {}
for name in ("next", "spec", "status", "error", "resume", "ids", ""):
    path = os.path.join(job, name) if name else job
    for op, fn in (("utime", lambda: os.utime(path, (1, 1))),
                   ("chmod", lambda: os.chmod(path, 0o666))):
        try:
            fn()
            res[op + ":" + name] = "ok"
        except OSError as e:
            res[op + ":" + name] = errno.errorcode[e.errno]
print(json.dumps(res))
""", m.mnt)
        for key, value in out.items():
            self.assertEqual(value, "EPERM", key)
        os.utime(m.path("jobs", "own", "next"), (1, 1))  # the owner may


if __name__ == "__main__":
    unittest.main()
