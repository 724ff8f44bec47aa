"""The log of a daemonized mount where syslog cannot be reached (issue 16,
errors at the door).

Daemonized without log=, the daemon logs to syslog. Where /dev/log cannot
be reached (no syslog daemon: containers, minimal machines; this test hides
it when there is one), the mount says so in one line on stderr before it
detaches and logs to <cache_dir>/joaderfs.log instead, or, with
cache_dir=none, to the default cache folder's joaderfs-<mountpoint>.log
(/var/cache/joaderfs for root; one file per mount). Each case mounts, reads a record,
unmounts, and finds the daemon's start, its warning and its unmount in that
file.

Runs in a private mount namespace: a bind hides /dev/log, a tmpfs stands
in for /var/cache.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import unittest
from typing import Dict

HERE = os.path.dirname(os.path.abspath(__file__))
import harness
from harness import doors

SIZE = 64
LAYOUT = {"ant": ["a0.jpg", "a1.jpg"], "bee": ["b0.jpg", "b1.jpg"]}
DEV_LOG = "/dev/log"


def mount_file_name(mountpoint: str) -> str:
    """joaderfs(8): the mountpoint as the fallback log's name."""
    out = []
    for c in mountpoint.lstrip("/").encode():
        if c == ord("/"):
            out.append("-")
        elif chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_."):
            out.append(chr(c))
        else:
            out.append("%%%02X" % c)
    return "".join(out) or "root"


def mount_without_log(workdir: str, source: str, name: str,
                      cache_dir: str, log_file: str) -> Dict:
    out: Dict = {}
    m = harness.Mount(source, os.path.join(workdir, name),
                       {"cache_dir": cache_dir, "log": False,
                        "log_level": False})
    try:
        m.start()
        out["record"] = doors.read_one_record(m.mnt, "j", SIZE)
        out["exit"] = m.unmount()
    except Exception as e:  # reported by the test
        out["error"] = repr(e)
    finally:
        m.cleanup()
    with open(m.stderr_path, "rb") as f:
        out["stderr"] = f.read().decode("utf-8", "replace")
    out["log_file"] = log_file
    try:
        with open(log_file, "rb") as f:
            out["log"] = f.read().decode("utf-8", "replace")
    except OSError as e:
        out["log"] = None
        out["log_error"] = str(e)
    return out


def syslog_case(workdir: str, source: str) -> Dict:
    """With a /dev/log that answers (a socket of ours on a tmpfs /dev that
    keeps the machine's null, zero, urandom and fuse), the log goes there
    and the mount prints nothing. Runs in the private namespace."""
    old_dev = os.path.join(workdir, "old-dev")
    os.mkdir(old_dev)
    subprocess.run(["mount", "--bind", "/dev", old_dev], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/dev"], check=True)
    for name in ("null", "zero", "urandom", "fuse"):
        open(os.path.join("/dev", name), "w").close()
        subprocess.run(["mount", "--bind", os.path.join(old_dev, name),
                        os.path.join("/dev", name)], check=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(DEV_LOG)
    sock.settimeout(10)
    cache = os.path.join(workdir, "cache-syslog")
    out = mount_without_log(workdir, source, "with-syslog", cache,
                            os.path.join(cache, "joaderfs.log"))
    messages = []
    sock.settimeout(0.5)
    try:
        while True:
            messages.append(sock.recv(65536).decode("utf-8", "replace"))
    except socket.timeout:
        pass
    sock.close()
    out["syslog"] = messages
    return out


def log_sink_scenario(workdir: str, source: str) -> Dict:
    """Runs in a private mount namespace."""
    out: Dict = {}
    hidden = []
    try:
        if os.path.lexists(DEV_LOG):
            # A plain file over the socket: connect() is refused, as where
            # no syslog daemon runs.
            empty = os.path.join(workdir, "no-log")
            open(empty, "w").close()
            subprocess.run(["mount", "--bind", empty, DEV_LOG], check=True)
            hidden.append(DEV_LOG)
        out["dev_log_was_there"] = bool(hidden)
        cache = os.path.join(workdir, "cache")
        out["cache_dir"] = mount_without_log(
            workdir, source, "with-cache-dir", cache,
            os.path.join(cache, "joaderfs.log"))
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/var/cache"],
                       check=True)
        hidden.append("/var/cache")
        # Two mounts with cache_dir=none: each logs to a file of its own.
        for case, name in (("cache_dir_none", "with-cache-dir-none"),
                           ("cache_dir_none_2", "with-cache-dir-none-2")):
            mnt = os.path.join(workdir, name, "mnt")
            out[case] = mount_without_log(
                workdir, source, name, "none",
                "/var/cache/joaderfs/joaderfs-%s.log" % mount_file_name(mnt))
        hidden.append("/dev")  # the tmpfs syslog_case puts there
        out["syslog"] = syslog_case(workdir, source)
        return out
    except Exception as e:  # reported by the test
        out["error"] = repr(e)
        return out
    finally:
        for path in reversed(hidden):
            doors.lazy_unmount(path)


class LogRotationTest(harness.TierTestCase):
    """logrotate's way: the log file renamed, then SIGHUP. The daemon goes
    on serving (SIGHUP no longer unmounts) and writes a new file."""

    def test_sighup_reopens_the_log_and_keeps_the_mount(self):
        workdir = tempfile.mkdtemp(prefix="joaderfs-rotate-")
        self.addCleanup(shutil.rmtree, workdir, True)
        source = harness.make_imagefolder(os.path.join(workdir, "src"), LAYOUT)
        m = self.mount(source)
        rotated = m.log_path + ".1"
        os.rename(m.log_path, rotated)
        m.proc.send_signal(signal.SIGHUP)
        self.assertTrue(harness.wait_for(lambda: os.path.exists(m.log_path), 10),
                        "no new log after SIGHUP")
        self.assertTrue(harness.is_mounted(m.mnt), "SIGHUP unmounted the dataset")
        recs = harness.read_epoch(m.mkjob("after-hup"), 1, timeout=60)[0]
        self.assertEqual(len(recs), sum(len(v) for v in LAYOUT.values()))
        m.proc.send_signal(signal.SIGHUP)  # twice: nothing to rotate, same file
        self.clean_unmount(m)
        with open(m.log_path) as f:
            new = f.read()
        with open(rotated) as f:
            old = f.read()
        self.assertIn("reopened", new)
        self.assertIn("job after-hup created", new)
        self.assertIn("unmounting", new)
        self.assertIn("started", old)
        self.assertNotIn("after-hup", old)


class LogSinkTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        if os.geteuid() != 0:
            raise unittest.SkipTest("hiding /dev/log needs root")
        if not doors.can_unshare():
            raise unittest.SkipTest("unshare -m fails: no private mount "
                                    "namespace for the test")
        cls.workdir = tempfile.mkdtemp(prefix="joaderfs-logsink-")
        cls.source = harness.make_imagefolder(
            os.path.join(cls.workdir, "src"), LAYOUT)
        cls.result = doors.run_private(
            __file__, "log_sink_scenario", [cls.workdir, cls.source],
            cls.workdir, 180.0)
        sys.stderr.write("\n[log sink] /dev/log hidden: %s; stderr: %r\n" % (
            cls.result.get("dev_log_was_there"),
            cls.result.get("cache_dir", {}).get("stderr")))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.workdir, True)

    def check(self, case: str) -> None:
        self.assertNotIn("error", self.result, self.result)
        r = self.result[case]
        what = "\n".join("%s: %s" % kv for kv in r.items())
        self.assertNotIn("error", r, what)
        self.assertEqual(r["exit"], 0, what)
        self.assertEqual(r["record"]["label"], r["record"]["manifest_label"],
                         what)
        # One line, before detaching, naming the cause and the file.
        lines = [line for line in r["stderr"].splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, what)
        self.assertIn("syslog", lines[0], what)
        self.assertIn(DEV_LOG, lines[0], what)
        self.assertIn(r["log_file"], lines[0], what)
        self.assertIsNotNone(r["log"], what)
        self.assertIn("syslog is not available", r["log"], what)
        self.assertIn("started", r["log"], what)
        self.assertIn("unmounting", r["log"], what)

    def test_syslog_when_it_answers(self):
        self.assertNotIn("error", self.result, self.result)
        r = self.result["syslog"]
        what = "\n".join("%s: %s" % kv for kv in r.items())
        self.assertNotIn("error", r, what)
        self.assertEqual(r["exit"], 0, what)
        self.assertEqual(r["stderr"].strip(), "", what)
        self.assertIsNone(r["log"], what)  # no fallback file
        self.assertTrue(any("joaderfs[" in m and "started" in m
                            for m in r["syslog"]), what)
        self.assertTrue(any("unmounting" in m for m in r["syslog"]), what)

    def test_log_goes_to_the_cache_dir(self):
        self.check("cache_dir")

    def test_log_goes_to_the_default_cache_folder(self):
        self.check("cache_dir_none")

    def test_each_mount_without_cache_dir_has_its_own_log(self):
        self.check("cache_dir_none_2")
        first = self.result["cache_dir_none"]
        second = self.result["cache_dir_none_2"]
        self.assertNotEqual(first["log_file"], second["log_file"])
        self.assertTrue(second["log_file"].endswith(
            "-with%2Dcache%2Ddir%2Dnone%2D2-mnt.log"), second["log_file"])
        # Each daemon's lines (its start names its mountpoint) are in its
        # own file only.
        self.assertNotIn("with-cache-dir-none-2", first["log"])
        self.assertIn("with-cache-dir-none-2", second["log"])
        self.assertEqual(mount_file_name("/mnt/a-b"), "mnt-a%2Db")
        self.assertEqual(mount_file_name("/mnt/a/b"), "mnt-a-b")


if __name__ == "__main__":
    unittest.main()
