"""mount(8), fstab and systemd after `cmake --install` (issue 16, door 2).

The documented install step, `cmake --install build` (prefix /usr/local),
runs into a temporary DESTDIR. Then, in a private mount namespace, overlays
put what it installed where it would be on this machine (DESTDIR/usr/local
over /usr/local, DESTDIR/sbin over /sbin: each folder it wrote to) and, as
an admin would:

- `mount -t joaderfs SOURCE MNT -o ...` and `mount -t fuse.joaderfs ...`
  mount (mount(8) finds the helpers in /sbin), a job delivers a record with
  the manifest's label, `umount MNT` unmounts and the daemon exits 0;
- fstab lines of both types with nosuid,nodev,allow_other (as in
  mount/fstab.example), through `mount -T FSTAB MNT`: the same, and the
  mount carries nosuid, nodev and allow_other;
- an fstab line of an s3:// SOURCE (a store of ours on loopback,
  harness/s3_hostile.py) with s3_credentials=FILE, mounted by `mount -T`
  in an empty environment (no HOME, no AWS_ variable, as systemd runs
  it): the same, every request signed with the file's key;
- `systemd-analyze verify` accepts the installed joaderfs@.service (it
  checks that ExecStart's binary exists and that man finds joaderfs(8));
  skipped where systemd-analyze is not installed.

Nothing is installed on the machine itself; the namespace, its overlays and
the mounts made in it end with the test.
"""

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
import harness
from harness import doors
from harness.s3_hostile import HostileS3

BUILD = os.environ.get("JOADERFS_BUILD_DIR",
                       os.path.join(HERE, "..", "..", "build"))
CMAKE = os.environ.get("CMAKE_COMMAND", "cmake")
PREFIX = "/usr/local"
INSTALLED_BIN = PREFIX + "/bin/joaderfs"
SIZE = 64
LAYOUT = {"ant": ["a0.jpg", "a1.jpg"], "bee": ["b0.jpg", "b1.jpg", "b2.jpg"]}
SCENARIO_TIMEOUT = 240.0
# The folders an install to PREFIX may write to (usr/local itself holds
# bin, sbin, lib, share under a /usr/local prefix).
INSTALL_ROOTS = ("usr/local", "sbin", "usr/sbin", "bin", "usr/bin", "lib",
                 "usr/lib", "etc")
# The mount/fstab.example options, plus the test's own.
FSTAB_OPTIONS = "nosuid,nodev,allow_other"


def mount_cycle(argv: List[str], mnt: str, workdir: str, job: str) -> Dict:
    """Runs `argv` (a mount command), reads a record, `umount MNT`, waits
    for the daemon; returns what happened."""
    out: Dict = {"argv": " ".join(argv)}
    daemons: List[int] = []
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        out.update(mount_rc=r.returncode, mount_stderr=r.stderr)
        if r.returncode != 0:
            return out
        out["fstype"] = doors.fstype_at(mnt)
        out["options"] = doors.mount_options_at(mnt)
        out["super_options"] = doors.super_options_at(mnt)
        daemons = doors.daemon_pids(INSTALLED_BIN, mnt)
        out["daemons"] = len(daemons)
        if len(daemons) != 1:
            return out
        out["record"] = doors.read_one_record(mnt, job, SIZE)
        u = subprocess.run(["umount", mnt], capture_output=True, text=True,
                           timeout=60)
        out.update(umount_rc=u.returncode, umount_stderr=u.stderr,
                   unmounted=doors.fstype_at(mnt) is None)
        try:
            out["daemon_exit"] = harness.DaemonProcess(daemons[0]).wait(15)
        except subprocess.TimeoutExpired:
            out["daemon_exit"] = "still running 15s after umount"
        return out
    except Exception as e:  # reported by the test
        out["error"] = repr(e)
        out["processes"] = doors.process_table(workdir)
        return out
    finally:
        doors.lazy_unmount(mnt)
        doors.kill_processes([p for p in daemons if doors.alive(p)])


def install_scenario(workdir: str, source: str, dest: str, s3_endpoint: str,
                     s3_credentials: str) -> Dict:
    """Runs in a private mount namespace: overlays DESTDIR's folders onto
    the machine's (/usr/local, /sbin), then mounts and checks as an admin
    would."""
    out: Dict = {}
    targets = []
    try:
        # Each folder the install wrote to, on top of the machine's own
        # (/sbin and /usr/sbin are one folder on a merged-/usr system).
        layers: Dict[str, List[str]] = {}
        for folder in INSTALL_ROOTS:
            installed = os.path.join(dest, folder)
            if os.path.isdir(installed):
                target = os.path.realpath("/" + folder)
                layers.setdefault(target, []).append(installed)
        out["overlays"] = layers
        for target, installed in layers.items():
            subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                            "lowerdir=" + ":".join(installed + [target]),
                            target],
                           check=True, capture_output=True, timeout=30)
            targets.append(target)
        opts = harness.format_options({
            "cache_dir": "none", "ram_cache": "64M", "size": SIZE,
            "base": SIZE, "seed": 1, "log_level": "debug"})
        cycles = {
            "mount_t_joaderfs": ["mount", "-t", "joaderfs"],
            "mount_t_fuse_joaderfs": ["mount", "-t", "fuse.joaderfs"],
        }
        for name, argv in cycles.items():
            mnt = os.path.join(workdir, name)
            os.mkdir(mnt)
            log = os.path.join(workdir, name + ".log")
            out[name] = mount_cycle(
                argv + [source, mnt, "-o", "%s,log=%s" % (opts, log)], mnt,
                workdir, name)
        for fstype in ("joaderfs", "fuse.joaderfs"):
            name = "fstab_" + fstype.replace(".", "_")
            mnt = os.path.join(workdir, name)
            os.mkdir(mnt)
            fstab = os.path.join(workdir, name + ".fstab")
            with open(fstab, "w") as f:
                f.write("%s %s %s %s,%s,log=%s 0 0\n" % (
                    source, mnt, fstype, FSTAB_OPTIONS, opts,
                    os.path.join(workdir, name + ".log")))
            out[name] = mount_cycle(["mount", "-T", fstab, mnt], mnt,
                                    workdir, name)
        # A crash: the daemon killed with SIGKILL leaves a dead mount
        # (ENOTCONN); mount -t detaches it and mounts again. Over a live
        # mount it is refused.
        name = "recover_after_kill9"
        mnt = os.path.join(workdir, name)
        os.mkdir(mnt)
        argv = ["mount", "-t", "joaderfs", source, mnt, "-o",
                "%s,log=%s" % (opts, os.path.join(workdir, name + ".log"))]
        first = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        crash = {"first_rc": first.returncode}
        again = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        crash.update(live_rc=again.returncode, live_stderr=again.stderr)
        for pid in doors.daemon_pids(INSTALLED_BIN, mnt):
            os.kill(pid, signal.SIGKILL)
            harness.DaemonProcess(pid).wait(15)
        try:
            os.stat(mnt)
            crash["stale_errno"] = 0
        except OSError as e:
            crash["stale_errno"] = e.errno
        out[name + "_crash"] = crash
        out[name] = mount_cycle(argv, mnt, workdir, name)
        # An s3:// SOURCE the documented way: its credentials named in the
        # fstab line, mount(8) run with no environment to speak of.
        name = "fstab_s3"
        mnt = os.path.join(workdir, name)
        os.mkdir(mnt)
        fstab = os.path.join(workdir, name + ".fstab")
        with open(fstab, "w") as f:
            f.write("s3://data/folder %s joaderfs %s,%s,_netdev,s3_endpoint=%s,"
                    "s3_credentials=%s,log=%s 0 0\n" % (
                        mnt, FSTAB_OPTIONS, opts, s3_endpoint, s3_credentials,
                        os.path.join(workdir, name + ".log")))
        out[name] = mount_cycle(["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                 "mount", "-T", fstab, mnt], mnt, workdir, name)
        analyze = shutil.which("systemd-analyze")
        if analyze:
            unit = os.path.join(PREFIX, "lib/systemd/system/joaderfs@.service")
            r = subprocess.run([analyze, "verify", unit], capture_output=True,
                               text=True, timeout=60)
            out["systemd_verify"] = {"rc": r.returncode,
                                     "output": r.stdout + r.stderr}
        return out
    except Exception as e:  # reported by the test
        out["error"] = repr(e)
        return out
    finally:
        for target in reversed(targets):
            doors.lazy_unmount(target)


class InstallTest(unittest.TestCase):
    """One install and one namespace for the class; each test checks one
    door of what the scenario saw."""

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        if os.geteuid() != 0:
            raise unittest.SkipTest("mount(8) needs root")
        if not os.path.isfile(os.path.join(BUILD, "cmake_install.cmake")):
            raise unittest.SkipTest("no build tree at %s (set "
                                    "JOADERFS_BUILD_DIR)" % BUILD)
        if not doors.can_unshare():
            raise unittest.SkipTest("unshare -m fails: no private mount "
                                    "namespace for the test")
        cls.workdir = tempfile.mkdtemp(prefix="joaderfs-install-")
        cls.dest = os.path.join(cls.workdir, "dest")
        r = subprocess.run([CMAKE, "--install", BUILD, "--prefix", PREFIX],
                           env=dict(os.environ, DESTDIR=cls.dest),
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            shutil.rmtree(cls.workdir, True)
            raise AssertionError("cmake --install failed:\n%s%s"
                                 % (r.stdout, r.stderr))
        cls.install_log = r.stdout
        cls.source = harness.make_imagefolder(
            os.path.join(cls.workdir, "src"), LAYOUT)
        cls.s3 = HostileS3()
        cls.s3.put_tree("folder", cls.source)
        credentials = os.path.join(cls.workdir, "s3.credentials")
        with open(os.open(credentials, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write("[default]\naws_access_key_id = AKIAFSTAB\n"
                    "aws_secret_access_key = fstab-secret-xxxxxxxxxxxxxxxxxxxx\n")
        try:
            cls.result = doors.run_private(
                __file__, "install_scenario",
                [cls.workdir, cls.source, cls.dest, cls.s3.endpoint, credentials],
                cls.workdir, SCENARIO_TIMEOUT)
        finally:
            cls.s3.stop()
        sys.stderr.write("\n[install] %s\n" % cls.install_log)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.workdir, True)

    def what(self, name: str) -> str:
        r = self.result.get(name, {})
        return "%s\n---- daemon log ----\n%s\n---- scenario ----\n%s" % (
            "\n".join("%s: %s" % kv for kv in r.items()),
            doors.tail(os.path.join(self.workdir, name + ".log")),
            {k: v for k, v in self.result.items() if k in ("error", "stderr")})

    def check_cycle(self, name: str, fstab: bool = False) -> None:
        self.assertNotIn("error", self.result, self.what(name))
        r = self.result[name]
        what = self.what(name)
        self.assertNotIn("error", r, what)
        self.assertEqual(r["mount_rc"], 0, what)
        self.assertEqual(r["fstype"], "fuse.joaderfs", what)
        self.assertEqual(r["daemons"], 1, what)
        rec = r["record"]
        self.assertEqual(rec["info"]["samples"], 5, what)
        self.assertEqual(rec["label"], rec["manifest_label"], what)
        self.assertEqual(rec["shape"], [SIZE, SIZE, 3], what)
        if fstab:
            for flag in ("nosuid", "nodev"):
                self.assertIn(flag, r["options"], what)
            self.assertIn("allow_other", r["super_options"], what)
        self.assertEqual(r["umount_rc"], 0, what)
        self.assertTrue(r["unmounted"], what)
        self.assertEqual(r["daemon_exit"], 0, what)

    def test_installed_files(self):
        helpers = os.path.join(self.dest, "sbin")
        helper = os.path.join(helpers, "mount.joaderfs")
        self.assertTrue(os.access(helper, os.X_OK), self.install_log)
        self.assertEqual(
            os.readlink(os.path.join(helpers, "mount.fuse.joaderfs")),
            "mount.joaderfs")
        with open(helper) as f:
            self.assertIn("installed=%s\n" % INSTALLED_BIN, f.read())
        local = os.path.join(self.dest, PREFIX.lstrip("/"))
        self.assertTrue(os.access(os.path.join(local, "bin", "joaderfs"),
                                  os.X_OK))
        self.assertTrue(os.access(os.path.join(local, "bin", "joaderfs-top"), os.X_OK))
        unit = os.path.join(local, "lib/systemd/system/joaderfs@.service")
        with open(unit) as f:
            self.assertIn("\nExecStart=%s -f " % INSTALLED_BIN, f.read())
        self.assertTrue(os.path.isfile(
            os.path.join(local, "share/man/man8/joaderfs.8")))

    def test_mount_t_joaderfs(self):
        self.check_cycle("mount_t_joaderfs")

    def test_mount_t_fuse_joaderfs(self):
        self.check_cycle("mount_t_fuse_joaderfs")

    def test_fstab_joaderfs(self):
        self.check_cycle("fstab_joaderfs", fstab=True)

    def test_fstab_fuse_joaderfs(self):
        self.check_cycle("fstab_fuse_joaderfs", fstab=True)

    def test_mount_t_recovers_after_kill_9(self):
        crash = self.result.get("recover_after_kill9_crash", {})
        what = self.what("recover_after_kill9") + "\n" + repr(crash)
        self.assertEqual(crash.get("first_rc"), 0, what)
        self.assertNotEqual(crash.get("live_rc"), 0, "a second mount over a live one: " + what)
        self.assertIn("already mounted by a running joaderfs", crash.get("live_stderr", ""), what)
        self.assertEqual(crash.get("stale_errno"), errno.ENOTCONN, what)
        self.check_cycle("recover_after_kill9")

    def test_fstab_s3_with_credentials_file(self):
        self.check_cycle("fstab_s3", fstab=True)
        self.assertEqual(self.s3.access_keys, {"AKIAFSTAB"}, self.what("fstab_s3"))

    def test_systemd_unit_verifies(self):
        self.assertNotIn("error", self.result, self.what("systemd_verify"))
        if "systemd_verify" not in self.result:
            self.skipTest("systemd-analyze is not installed: the unit is "
                          "not verified")
        r = self.result["systemd_verify"]
        self.assertEqual(r["rc"], 0, r["output"])
        self.assertEqual(r["output"].strip(), "", r["output"])


if __name__ == "__main__":
    unittest.main()
