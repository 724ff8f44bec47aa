"""autofs (issue 16, door 1): a dataset mounted on first access.

Debian's automount runs in the foreground (`automount -f`) on a private
master map whose one entry names a map in the style of mount/auto.joaderfs
(`small -fstype=fuse.joaderfs,... :SOURCE`) with a 2-second --timeout. Then,
as a user would:

- a plain `ls ROOT/small` mounts the dataset: it must return within
  TRIGGER_TIMEOUT (run as a subprocess that is killed past it: the bug this
  guards against left it, and the daemon, waiting for good);
- the daemon has left automount's session once mounted (it daemonizes);
- a job made in the mount delivers a record with a label of the manifest;
- with nothing open, autofs expires the mount and the daemon exits 0;
- a second `ls` mounts it again, and stopping automount ends that daemon.

autofs lets only automount's process group (which its mount helpers share)
touch a mountpoint being mounted; anyone else waits until the mount is up.
A daemon that leaves the group before mounting waits on itself.

It all runs in a private mount namespace (doors.run_private), where
/usr/local/bin holds a `joaderfs` link to the binary under test: mount.fuse3
runs `joaderfs` through /bin/sh, which finds it there as it finds the
installed one. automount, the daemons and every mount are gone when the
test ends, passed or not.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Dict

HERE = os.path.dirname(os.path.abspath(__file__))
import harness
from harness import doors

EXPIRE = 2               # the map's --timeout, seconds
TRIGGER_TIMEOUT = 30.0   # for `ls` to mount the dataset
EXPIRE_TIMEOUT = 30.0    # for autofs to expire an idle mount
EXIT_TIMEOUT = 15.0      # for the daemon to exit once unmounted
SCENARIO_TIMEOUT = 200.0
SIZE = 64
LAYOUT = {"ant": ["a0.jpg", "a1.jpg", "a2.jpg"], "bee": ["b0.jpg", "b1.jpg"]}


def trigger(path: str) -> Dict:
    """`ls path` in a child killed after TRIGGER_TIMEOUT."""
    start = time.monotonic()
    try:
        r = subprocess.run(["ls", path], capture_output=True, text=True,
                           timeout=TRIGGER_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"hung": True, "seconds": TRIGGER_TIMEOUT}
    return {"hung": False, "rc": r.returncode, "out": r.stdout.split(),
            "err": r.stderr, "seconds": round(time.monotonic() - start, 2)}


def autofs_scenario(workdir: str, source: str, binary: str) -> Dict:
    """The whole life cycle; runs in a private mount namespace. Returns
    what it saw, stopping at the first thing that went wrong."""
    out: Dict = {}
    root = os.path.join(workdir, "root")
    mnt = os.path.join(root, "small")
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir)
    os.makedirs(root)
    os.symlink(binary, os.path.join(bindir, "joaderfs"))
    master = os.path.join(workdir, "auto.master")
    amap = os.path.join(workdir, "auto.joaderfs")
    with open(master, "w") as f:
        f.write("%s  file:%s  --timeout=%d\n" % (root, amap, EXPIRE))
    options = harness.format_options({
        "-fstype": "fuse.joaderfs", "nosuid": None, "nodev": None,
        "cache_dir": "none", "ram_cache": "64M",
        "size": SIZE, "base": SIZE, "seed": 1,
        "log": os.path.join(workdir, "joaderfs.log"), "log_level": "debug"})
    with open(amap, "w") as f:
        f.write("small  %s  :%s\n" % (options, source))
    automount = None
    log = open(os.path.join(workdir, "automount.log"), "wb")
    daemons = []
    try:
        subprocess.run(["mount", "--bind", bindir, "/usr/local/bin"],
                       check=True)
        # Its own session, as a service runs: processes in automount's
        # process group see the autofs folder as it is and mount nothing.
        # -C: a system automount (the autofs package's service) may run.
        automount = subprocess.Popen(
            ["automount", "-f", "-d", "-C", "-t", str(EXPIRE), "-p",
             os.path.join(workdir, "automount.pid"), master],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        if not doors.wait_until(
                lambda: doors.fstype_at(root) == "autofs", 15):
            out["error"] = "automount did not mount %s in 15s" % root
            return out
        # --- first access mounts
        out["trigger"] = trigger(mnt)
        if out["trigger"]["hung"]:
            out["processes"] = doors.process_table(workdir)
            return out
        out["fstype"] = doors.fstype_at(mnt)
        out["options"] = doors.mount_options_at(mnt)
        daemons = doors.daemon_pids(binary, mnt)
        out["daemons"] = len(daemons)
        if len(daemons) != 1:
            return out
        pid = daemons[0]
        fields = harness.proc_stat_fields(pid)
        out["daemon_is_session_leader"] = int(fields[3]) == pid
        out["automount_pgrp"] = os.getpgid(automount.pid)
        out["daemon_pgrp"] = int(fields[2])
        # --- a job delivers a record
        rec = doors.read_one_record(mnt, "j", SIZE)
        out["info"] = rec.pop("info")
        out["record"] = rec
        # --- idle: autofs expires the mount, the daemon exits
        start = time.monotonic()
        out["expired"] = doors.wait_until(
            lambda: doors.fstype_at(mnt) is None, EXPIRE_TIMEOUT, 0.2)
        out["expired_after"] = round(time.monotonic() - start, 1)
        if not out["expired"]:
            out["holders"] = doors.holders(mnt)
            return out
        proc = harness.DaemonProcess(pid)
        try:
            out["daemon_exit"] = proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            out["daemon_exit"] = "still running %.0fs after expiry" % EXIT_TIMEOUT
            return out
        # --- a second access mounts again; stopping automount ends it
        out["trigger2"] = trigger(mnt)
        if out["trigger2"]["hung"]:
            out["processes"] = doors.process_table(workdir)
            return out
        daemons = doors.daemon_pids(binary, mnt)
        out["daemons2"] = len(daemons)
        if len(daemons) != 1:
            return out
        automount.terminate()
        try:
            out["automount_exit"] = automount.wait(30)
        except subprocess.TimeoutExpired:
            out["automount_exit"] = "still running 30s after SIGTERM"
            return out
        proc = harness.DaemonProcess(daemons[0])
        try:
            out["daemon2_exit"] = proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            out["daemon2_exit"] = "still running %.0fs after automount" \
                % EXIT_TIMEOUT
        out["left_mounted"] = [p for p in (mnt, root)
                               if doors.fstype_at(p) is not None]
        return out
    except Exception as e:  # reported by the test
        out["error"] = repr(e)
        out["processes"] = doors.process_table(workdir)
        return out
    finally:
        if automount is not None and automount.poll() is None:
            doors.kill_processes([automount.pid], grace=10)
            # A killed automount leaves its fifo for the mount point.
            fifo = "/run/autofs.fifo-" + root.strip("/").replace("/", "-")
            if os.path.exists(fifo):
                os.unlink(fifo)
        doors.kill_processes(doors.pids_mentioning(workdir))
        for path in (mnt, root, "/usr/local/bin"):
            doors.lazy_unmount(path)
        log.close()


class AutofsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        if os.geteuid() != 0:
            raise unittest.SkipTest("automount needs root")
        if shutil.which("automount", path="/usr/sbin:/sbin") is None:
            raise unittest.SkipTest("automount is not installed (Debian "
                                    "package autofs; scripts/setup.sh "
                                    "installs it)")
        if not os.path.exists("/dev/autofs"):
            raise unittest.SkipTest("no /dev/autofs: the kernel has no autofs")
        if not doors.can_unshare():
            raise unittest.SkipTest("unshare -m fails: no private mount "
                                    "namespace for the test")
        cls.data = tempfile.mkdtemp(prefix="joaderfs-autofs-data-")
        cls.source = harness.make_imagefolder(
            os.path.join(cls.data, "src"), LAYOUT)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.data, True)

    def test_mount_read_expire_remount(self):
        workdir = tempfile.mkdtemp(prefix="joaderfs-autofs-")
        self.addCleanup(shutil.rmtree, workdir, True)
        r = doors.run_private(
            __file__, "autofs_scenario",
            [workdir, self.source, os.path.abspath(harness.BIN)], workdir,
            SCENARIO_TIMEOUT)
        what = "%s\n---- automount log ----\n%s\n---- daemon log ----\n%s" % (
            "\n".join("%s: %s" % kv for kv in r.items()),
            doors.tail(os.path.join(workdir, "automount.log")),
            doors.tail(os.path.join(workdir, "joaderfs.log")))
        sys.stderr.write("\n[autofs] %s\n" % {
            k: r.get(k) for k in ("trigger", "expired_after", "daemon_exit",
                                  "trigger2", "daemon2_exit")})
        self.assertNotIn("error", r, what)
        self.assertFalse(r["trigger"]["hung"], "`ls` of the autofs key was "
                         "still blocked after %.0fs\n%s" % (TRIGGER_TIMEOUT, what))
        self.assertEqual(r["trigger"]["rc"], 0, what)
        self.assertEqual(sorted(r["trigger"]["out"]),
                         ["README", "dataset", "jobs", "metrics", "stats"], what)
        self.assertEqual(r["fstype"], "fuse.joaderfs", what)
        for flag in ("nosuid", "nodev"):
            self.assertIn(flag, r["options"], what)
        self.assertEqual(r["daemons"], 1, what)
        self.assertTrue(r["daemon_is_session_leader"], what)
        self.assertNotEqual(r["daemon_pgrp"], r["automount_pgrp"], what)
        self.assertEqual(r["info"]["samples"], 5, what)
        rec = r["record"]
        self.assertEqual(rec["label"], rec["manifest_label"], what)
        self.assertEqual(rec["shape"], [SIZE, SIZE, 3], what)
        self.assertTrue(r["expired"], "autofs did not expire the idle mount "
                        "in %.0fs\n%s" % (EXPIRE_TIMEOUT, what))
        self.assertEqual(r["daemon_exit"], 0, what)
        self.assertFalse(r["trigger2"]["hung"], what)
        self.assertEqual(r["trigger2"]["rc"], 0, what)
        self.assertEqual(r["daemons2"], 1, what)
        self.assertEqual(r["automount_exit"], 0, what)
        self.assertEqual(r["daemon2_exit"], 0, what)
        self.assertEqual(r["left_mounted"], [], what)


if __name__ == "__main__":
    unittest.main()
