"""The daemon's life: start-up errors, fstab mounts, unmount and signals,
bad samples, interrupted reads (docs/design.md 2.1, 2.4)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from harness import (BIN, FUSERMOUNT, DatasetMixin, JoaderTestCase,
                      format_options, ids_of, is_mounted, read_epoch)

# /bin/sh's PATH when the environment has none (mount(8) runs its helpers
# with a sanitized environment, and mount.fuse3 runs the daemon via sh -c).
SH_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def daemon_pids(mnt):
    """Pids of joaderfs processes whose command line names mnt."""
    want = os.path.realpath(BIN)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            exe = os.path.realpath(os.readlink("/proc/%s/exe" % entry))
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if exe == want and os.fsencode(mnt) in argv:
            pids.append(int(entry))
    return pids


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def fstab_cycle(fstab, mnt, bind_src=None, bind_dst=None):
    """mount -T fstab mnt; read /dataset/info; umount; wait for the daemon.

    Runs in the test process or, for bind mounts, in a private mount
    namespace (unshare -m). Returns what happened as a dict."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(BIN)) + ":" + \
        env.get("PATH", SH_DEFAULT_PATH)
    out = {}
    pids = []
    try:
        if bind_src:
            subprocess.run(["mount", "--bind", bind_src, bind_dst], check=True)
        r = subprocess.run(["mount", "-T", fstab, mnt], env=env,
                           capture_output=True, text=True, timeout=60)
        out.update(mount_rc=r.returncode, mount_stderr=r.stderr)
        if r.returncode != 0:
            return out
        wait_until(lambda: is_mounted(mnt), 10)
        pids = daemon_pids(mnt)
        out["daemons"] = len(pids)
        with open(os.path.join(mnt, "dataset", "info")) as f:
            out["info"] = json.load(f)
        # Read an epoch, so that disk writes are queued at the umount.
        os.mkdir(os.path.join(mnt, "jobs", "f"))
        with open(os.path.join(mnt, "jobs", "f", "next"), "rb") as f:
            out["records"] = len(harness.parse_records(f.read()))
        u = subprocess.run(["umount", mnt], capture_output=True, text=True)
        out.update(umount_rc=u.returncode, umount_stderr=u.stderr,
                   unmounted=not is_mounted(mnt))
        out["daemon_exited"] = wait_until(
            lambda: not any(alive(p) for p in pids), 15)
        return out
    except Exception as e:  # reported by the caller
        out["error"] = repr(e)
        return out
    finally:
        if is_mounted(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


class StartupErrorTest(DatasetMixin, JoaderTestCase):
    LAYOUT = {"a": ["1.jpg", "2.jpg"], "b": ["3.jpg"]}

    def run_bad(self, source, options, foreground, keywords):
        d = self.tempdir()
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        log = os.path.join(d, "log.txt")
        argv = [BIN] + (["-f"] if foreground else []) + [
            "-o", "log=%s,log_level=debug" % log]
        for opt in options:
            argv += ["-o", opt]
        argv += [source, mnt]

        def cleanup():
            if is_mounted(mnt):
                subprocess.run([FUSERMOUNT, "-u", "-z", mnt])
        self.addCleanup(cleanup)
        try:
            r = subprocess.run(argv, capture_output=True, timeout=30,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.fail("%s still running after 30s (should exit 1 at once)"
                      % argv)
        err = r.stderr.decode("utf-8", "replace")
        what = "%s\nstatus %d\nstderr: %r\nstdout: %r" % (
            " ".join(argv), r.returncode, err, r.stdout)
        self.assertFalse(is_mounted(mnt), "mounted anyway: " + what)
        self.assertEqual(r.returncode, 1, what)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, "want one line on stderr: " + what)
        self.assertTrue(any(k.lower() in lines[0].lower() for k in keywords),
                        "the message should name the problem (one of %s): %s"
                        % (keywords, what))
        return lines[0]

    def test_bad_options(self):
        base = "cache_dir=none,ram_cache=64M,size=64"
        cases = [
            (["cache_dir=none,ram_cache=banana"], ["ram_cache", "banana"]),
            ([base, "nosuchoption=1"], ["nosuchoption"]),
            ([base + ",size=abc"], ["size", "abc"]),
        ]
        for options, keywords in cases:
            for fg in (True, False):
                with self.subTest(options=options, foreground=fg):
                    msg = self.run_bad(self.source, options, fg, keywords)
                    sys.stderr.write("\n[startup error] %s -> %s" % (options, msg))

    def test_missing_source(self):
        missing = os.path.join(self.tempdir(), "no-such-dataset")
        for fg in (True, False):
            with self.subTest(foreground=fg):
                self.run_bad(missing, ["cache_dir=none,ram_cache=64M"], fg,
                             [missing, "no-such-dataset"])

    def test_empty_dataset(self):
        d = self.tempdir()
        empty = os.path.join(d, "empty")
        os.makedirs(os.path.join(empty, "some-class"))
        bare = os.path.join(d, "bare")
        os.makedirs(bare)
        for src in (empty, bare):
            for fg in (True, False):
                with self.subTest(source=src, foreground=fg):
                    self.run_bad(src, ["cache_dir=none,ram_cache=64M"], fg,
                                 [src, "empty", "no sample", "no image",
                                  "0 sample", "no class"])

    def test_empty_manifest(self):
        manifest = os.path.join(self.tempdir(), "train.tsv")
        open(manifest, "w").close()
        for fg in (True, False):
            with self.subTest(foreground=fg):
                self.run_bad(manifest, ["cache_dir=none,ram_cache=64M"], fg,
                             [manifest, "empty", "no sample", "0 sample"])

    def test_unwritable_log(self):
        for fg in (True, False):
            with self.subTest(foreground=fg):
                self.run_bad(self.source, ["cache_dir=none,log=/proc/nolog"], fg,
                             ["/proc/nolog"])

    def test_unwritable_cache_dir(self):
        a_file = os.path.join(self.tempdir(), "a-file")
        open(a_file, "w").close()
        for cache_dir in ("/proc/joaderfs-cache", a_file):
            for fg in (True, False):
                with self.subTest(cache_dir=cache_dir, foreground=fg):
                    self.run_bad(self.source,
                                 ["cache_dir=%s,ram_cache=64M" % cache_dir], fg,
                                 [cache_dir, "cache_dir"])


class LifecycleTest(DatasetMixin, JoaderTestCase):
    LAYOUT = {"a": ["1.jpg", "2.jpg", "3.jpg"], "b": ["4.jpg", "5.jpg"],
              "c": ["6.jpg", "7.jpg", "8.jpg"]}

    # ------------------------------------------------------------ fstab

    def fstab_test(self, line_format, namespace_bin_dir=None):
        """Mounts through `mount -T FSTAB MNT`, checks, unmounts with
        umount(8) and waits for the (daemonized) daemon to exit."""
        helptext = subprocess.run(["mount", "--help"], capture_output=True,
                                  text=True).stdout
        if "--fstab" not in helptext:
            self.skipTest("mount(8) has no -T/--fstab")
        d = self.tempdir()
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        log = os.path.join(d, "log.txt")
        # With a disk tier: its writer thread must survive daemonizing and
        # be drained before the daemon exits after umount.
        opts = format_options({"cache_dir": os.path.join(d, "cache"),
                               "ram_cache": "64M", "size": "64", "seed": "1",
                               "log": log, "log_level": "debug"})
        fstab = os.path.join(d, "fstab")
        with open(fstab, "w") as f:
            f.write(line_format.format(bin=BIN, source=self.source, mnt=mnt,
                                       opts=opts) + "\n")
        if namespace_bin_dir is None:
            result = fstab_cycle(fstab, mnt)
        else:
            # In a private mount namespace, bind a folder holding a
            # `joaderfs` link over /usr/local/sbin (in sh's default PATH).
            links = os.path.join(d, "bin")
            os.mkdir(links)
            os.symlink(os.path.abspath(BIN), os.path.join(links, "joaderfs"))
            r = subprocess.run(
                ["unshare", "-m", "--propagation", "private", sys.executable,
                 "-c", "import json, sys, test_daemon; print(json.dumps("
                 "test_daemon.fstab_cycle(*sys.argv[1:])))",
                 fstab, mnt, links, namespace_bin_dir],
                cwd=os.path.dirname(os.path.abspath(__file__)),
                capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            result = json.loads(r.stdout.splitlines()[-1])
        try:
            with open(log) as f:
                text = f.read()[-20000:]
        except OSError as e:
            text = str(e)
        with open(fstab) as f:
            what = "fstab: %sresult: %s\nlog:\n%s" % (f.read(), result, text)
        self.assertEqual(result.get("mount_rc"), 0, what)
        self.assertNotIn("error", result, what)
        self.assertEqual(result["daemons"], 1, what)
        self.assertEqual(result["info"]["samples"], len(self.order), what)
        self.assertEqual(result["records"], len(self.order), what)
        self.assertEqual(result["info"]["size"], 64, what)
        self.assertEqual(result["umount_rc"], 0, what)
        self.assertTrue(result["unmounted"], what)
        self.assertTrue(result["daemon_exited"],
                        "daemon still running 15s after umount\n" + what)

    def test_fstab_mount_fuse_dot_joaderfs(self):
        """fstab `SOURCE MNT fuse.joaderfs OPTS`: mount(8) runs mount.fuse3,
        which runs `joaderfs` from sh's PATH; the daemon daemonizes."""
        installed = shutil.which("joaderfs", path=SH_DEFAULT_PATH)
        line = "{source} {mnt} fuse.joaderfs {opts} 0 0"
        if installed is not None and os.path.samefile(installed, BIN):
            self.fstab_test(line)
            return
        # mount(8) runs its helper with a sanitized environment (no PATH),
        # so a PATH naming the build folder does not reach mount.fuse3.
        if installed is not None:
            self.skipTest("a different joaderfs is installed at %s" % installed)
        if subprocess.run(["unshare", "-m", "true"]).returncode != 0:
            self.skipTest("joaderfs is not installed in sh's default PATH and "
                          "unshare -m (to put it there privately) fails")
        self.fstab_test(line, namespace_bin_dir="/usr/local/sbin")

    def test_fstab_mount_absolute_binary(self):
        """fstab `BIN#SOURCE MNT fuse OPTS` (mount.fuse3's form naming the
        program): the daemon gets `-o rw,...,dev,suid`."""
        self.fstab_test("{bin}#{source} {mnt} fuse {opts} 0 0")

    # ---------------------------------------------------- unmount, signals

    def open_reader_with_one_record(self, m):
        """An open reader of a job that has read one record; close() it
        with .close() (done in cleanup otherwise)."""
        reader = Fd(os.open(m.mkjob("r", spec="window=1"), os.O_RDONLY))
        self.addCleanup(reader.close)
        data = harness.read_exact(reader.fd, harness.record_size(64 * 64 * 3))
        self.assertEqual(len(harness.parse_records(data)), 1)
        return reader

    def test_fusermount_with_open_reader(self):
        m = self.mount(self.source)
        reader = self.open_reader_with_one_record(m)
        r = subprocess.run([FUSERMOUNT, "-u", m.mnt], capture_output=True,
                           text=True)
        if r.returncode != 0:
            # The kernel refuses a plain unmount while a file is open; a lazy
            # unmount detaches now and ends when the reader closes.
            self.assertIn("busy", r.stderr.lower(), r.stderr)
            r = subprocess.run([FUSERMOUNT, "-u", "-z", m.mnt],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(is_mounted(m.mnt))
        reader.close()
        rc = m.wait_exit(15)
        self.assertEqual(rc, 0, "daemon exit status after unmount")

    def test_sigterm_unmounts(self):
        m = self.mount(self.source)
        reader = self.open_reader_with_one_record(m)
        m.proc.send_signal(signal.SIGTERM)
        try:
            rc = m.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.fail("daemon still running 15s after SIGTERM")
        self.assertFalse(is_mounted(m.mnt), "SIGTERM left the mount behind")
        self.assertEqual(rc, 0, "daemon exit status after SIGTERM")
        reader.close()   # the connection is gone: close() may fail ENOTCONN

    def test_sigterm_idle(self):
        m = self.mount(self.source)
        os.mkdir(m.path("jobs", "idle"))
        m.proc.send_signal(signal.SIGTERM)
        try:
            rc = m.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.fail("daemon still running 15s after SIGTERM")
        self.assertFalse(is_mounted(m.mnt), "SIGTERM left the mount behind")
        self.assertEqual(rc, 0, "daemon exit status after SIGTERM")


class DaemonizedDiskTierTest(DatasetMixin, JoaderTestCase):
    """The default (daemonized) mode with a disk tier, as users run it: the
    daemon forks before any thread starts, so its disk tier writes, it holds
    the cache_dir's lock, and it exits after unmount or SIGTERM with the tier
    closed cleanly. Each of these failed when the daemon forked after
    opening the disk tier (issue 8)."""

    LAYOUT = {c: ["%s%d.jpg" % (c, i) for i in range(6)] for c in "abc"}

    def disk_mount(self, cache_dir, **options):
        opts = {"cache_dir": cache_dir, "ram_cache": "1M"}
        opts.update(options)
        return self.mount(self.source, opts)

    def wait_disk_entries(self, m, n):
        ok = wait_until(lambda: m.stats()["disk_entries"] >= n, 15)
        self.assertTrue(ok, "disk tier holds %s of %d samples: %s"
                        % (m.stats()["disk_entries"], n, m.stats()))

    def read_one_epoch(self, m, job):
        records = harness.read_epoch(m.mkjob(job))[0]
        self.assertEqual(sorted(r.id for r in records),
                         list(range(len(self.order))))

    def test_disk_tier_writes_and_serves_after_remount(self):
        cache = self.tempdir()
        n = len(self.order)
        m = self.disk_mount(cache)
        self.read_one_epoch(m, "a")
        self.wait_disk_entries(m, n)
        stats = m.stats()
        self.assertEqual(stats["disk_writes"], n, stats)
        self.assertEqual(stats["disk_write_drops"], 0, stats)
        self.assertEqual(m.unmount(), 0, "daemon exit status after unmount")
        m2 = self.disk_mount(cache)
        self.read_one_epoch(m2, "b")
        stats = m2.stats()
        self.assertEqual(stats["decoded"], 0, stats)
        self.assertEqual(stats["disk_hits"], n, stats)

    def test_second_daemon_on_the_cache_dir_exits_1(self):
        """One daemon per cache_dir (docs/design.md 2.1), whatever its SOURCE:
        they would share one disk budget."""
        cache = self.tempdir()
        first = self.disk_mount(cache)
        other = harness.make_imagefolder(os.path.join(self.tempdir(), "o"),
                                          {"x": ["1.jpg", "2.jpg"]})
        for source in (self.source, other):
            d = self.tempdir()
            mnt = os.path.join(d, "mnt")
            os.mkdir(mnt)
            r = subprocess.run([BIN, "-o", "cache_dir=%s,ram_cache=1M" % cache,
                                source, mnt], capture_output=True, text=True,
                               timeout=30)
            if is_mounted(mnt):
                subprocess.run([FUSERMOUNT, "-u", "-z", mnt])
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertFalse(is_mounted(mnt))
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertIn("in use by another joaderfs (pid %d)" % first.proc.pid,
                          lines[0])

    def test_relative_paths(self):
        """SOURCE, MOUNTPOINT, cache_dir and log relative to the caller's
        folder still name the same places once the daemon has left it, up
        to the unmount that SIGTERM makes."""
        d = self.tempdir()
        os.symlink(self.source, os.path.join(d, "src"))
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        r = subprocess.run([BIN, "-o", "cache_dir=cache,log=log.txt,"
                            "ram_cache=64M,size=64", "src", "mnt"], cwd=d,
                           capture_output=True, text=True, timeout=60)
        daemon = harness.DaemonProcess(harness.daemon_pid(mnt, cwd=d))
        self.addCleanup(daemon.kill)
        self.addCleanup(lambda: is_mounted(mnt) and subprocess.run(
            [FUSERMOUNT, "-u", "-z", mnt]))
        self.assertEqual(r.returncode, 0, r.stderr)
        os.mkdir(os.path.join(mnt, "jobs", "j"))
        records = harness.read_epoch(os.path.join(mnt, "jobs", "j", "next"))[0]
        self.assertEqual(sorted(r.id for r in records), list(range(len(self.order))))
        daemon.send_signal(signal.SIGTERM)
        self.assertEqual(daemon.wait(10), 0)
        self.assertFalse(is_mounted(mnt), "SIGTERM left the mount behind")
        with open(os.path.join(d, "log.txt")) as f:
            self.assertIn("started", f.read())
        self.assertTrue(os.path.exists(os.path.join(d, "cache", "joaderfs.lock")))

    def end_and_reopen(self, end):
        """Ends a daemon with `end` right after an epoch (its disk writes
        may still be queued), checks it is gone within 10 s with status 0,
        and that a new daemon opens the same cache_dir and serves every
        sample from it: the tier was closed cleanly."""
        cache = self.tempdir()
        m = self.disk_mount(cache)
        self.read_one_epoch(m, "a")
        start = time.monotonic()
        end(m)
        try:
            rc = m.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.fail("daemon still running 10 s after it was told to end")
        self.assertEqual(rc, 0)
        self.assertFalse(is_mounted(m.mnt))
        self.assertLess(time.monotonic() - start, 10)
        m2 = self.disk_mount(cache)
        self.read_one_epoch(m2, "b")
        self.assertEqual(m2.stats()["decoded"], 0, m2.stats())

    def test_fusermount_ends_the_daemon(self):
        self.end_and_reopen(lambda m: subprocess.run(
            [FUSERMOUNT, "-u", m.mnt], check=True))

    def test_lazy_umount_ends_the_daemon(self):
        self.end_and_reopen(lambda m: subprocess.run(
            ["umount", "-l", m.mnt], check=True))

    def test_sigterm_ends_the_daemon(self):
        self.end_and_reopen(lambda m: m.proc.send_signal(signal.SIGTERM))


def in_fuse_wait(pid):
    try:
        with open("/proc/%d/wchan" % pid) as f:
            return f.read().strip() == "request_wait_answer"
    except OSError:
        return False


def wchan_hidden(pid):
    try:
        with open("/proc/%d/wchan" % pid) as f:
            return f.read().strip() in ("", "0")
    except OSError:
        return True


def child_state(child):
    try:
        with open("/proc/%d/wchan" % child.pid) as f:
            return "wchan %s, exit %s" % (f.read(), child.poll())
    except OSError as e:
        return "%s, exit %s" % (e, child.poll())


class Fd:
    """An fd closed once; close() ignores errors of a dead connection."""

    def __init__(self, fd):
        self.fd = fd

    def close(self):
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                os.close(fd)
            except OSError:
                pass


class BadSamplesTest(JoaderTestCase):
    """A truncated JPEG and a text file named .jpg are skipped."""

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._dir = tempfile.mkdtemp(prefix="joaderfs-data-")
        cls.source = harness.make_imagefolder(
            os.path.join(cls._dir, "src"),
            {"a": ["1.jpg", "2.jpg", "broken.jpg", "3.jpg"],
             "b": ["4.jpg", "notes.jpg", "5.jpg"],
             "c": ["6.jpg", "7.jpg"]})
        broken = os.path.join(cls.source, "a", "broken.jpg")
        with open(broken, "rb") as f:
            data = f.read()
        with open(broken, "wb") as f:
            f.write(data[:len(data) // 2])
        with open(os.path.join(cls.source, "b", "notes.jpg"), "w") as f:
            f.write("these are my notes, not a JPEG\n" * 20)
        cls.order = harness.imagefolder_order(cls.source)
        cls.bad = {i for i, (rel, _) in enumerate(cls.order)
                   if rel in ("a/broken.jpg", "b/notes.jpg")}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._dir, True)

    def test_bad_samples_skipped(self):
        m = self.mount(self.source)
        n = len(self.order)
        self.assertEqual(m.info()["samples"], n)
        self.assertEqual([rel for _, _, rel in m.manifest()],
                         [rel for rel, _ in self.order])
        good = sorted(set(range(n)) - self.bad)
        for job, readers in (("one", 1), ("two", 2)):
            m.mkjob(job)
        ids = ids_of(read_epoch(m.path("jobs", "one", "next"), 1))
        self.assertEqual(sorted(ids), good)
        ids = ids_of(read_epoch(m.path("jobs", "two", "next"), 2))
        self.assertEqual(sorted(ids), good)
        stats = m.stats()
        self.assertEqual(stats["skipped"], 2, stats)
        for job in ("one", "two"):
            st = m.status(job)
            self.assertEqual(st["remaining"], 0, st)
            self.assertEqual(st["subset_size"], n, st)
        # the next epoch completes too, still without them
        ids = ids_of(read_epoch(m.path("jobs", "one", "next"), 1))
        self.assertEqual(sorted(ids), good)
        self.assertGreaterEqual(m.stats()["skipped"], 2)


    def test_missing_file_in_manifest_skipped(self):
        """A manifest line whose file is gone is a sample that cannot be
        read: skipped, counted, the epoch goes on."""
        d = self.tempdir()
        manifest = os.path.join(d, "train.tsv")
        os.symlink(self.source, os.path.join(d, "src"))
        rows = [("src/a/1.jpg", 0), ("src/a/gone.jpg", 0), ("src/b/4.jpg", 1),
                ("src/c/7.jpg", 2)]
        with open(manifest, "w") as f:
            f.writelines("%s\t%d\n" % row for row in rows)
        m = self.mount(manifest)
        self.assertEqual(m.info()["samples"], len(rows))
        ids = ids_of(read_epoch(m.mkjob("j"), 2))
        self.assertEqual(sorted(ids), [0, 2, 3])
        self.assertEqual(m.stats()["skipped"], 1)
        self.assertEqual(m.status("j")["remaining"], 0)


class SlowSampleTest(JoaderTestCase):
    """Readers blocked in read() on a sample that is not ready.

    The slow sample lives on a second (inner) joaderfs mount whose daemon the
    test stops with SIGSTOP: the outer daemon's loader blocks reading it, so
    the outer job's reader blocks in read() until the test sends SIGCONT."""

    def setUp(self):
        harness.require_binary()
        d = self.tempdir()
        images = harness.make_imagefolder(os.path.join(d, "imgs"),
                                           {"a": ["1.jpg", "2.jpg"]})
        self.inner = self.mount(images)
        # The outer SOURCE: a manifest beside links to the images and to the
        # inner mount; id 1 is the inner mount's README (not an image).
        outer_dir = os.path.join(d, "outer")
        os.mkdir(outer_dir)
        os.symlink(images, os.path.join(outer_dir, "imgs"))
        os.symlink(self.inner.mnt, os.path.join(outer_dir, "inner"))
        manifest = os.path.join(outer_dir, "train.tsv")
        with open(manifest, "w") as f:
            f.write("imgs/a/1.jpg\t0\ninner/README\t1\n")
        self.outer = self.mount(manifest, {"threads": "2"})
        self.stopped = False
        self.addCleanup(self.resume)   # runs before both unmounts (LIFO)

    def resume(self):
        if self.stopped:
            os.kill(self.inner.proc.pid, signal.SIGCONT)
            self.stopped = False

    def start_blocked_reader(self, job):
        """Stops the inner daemon, makes `job` of the slow sample only and
        starts a child process blocked reading its next."""
        os.kill(self.inner.proc.pid, signal.SIGSTOP)
        self.stopped = True
        path = self.outer.mkjob(job, spec="window=1", ids="inner/README\n")
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import errno, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "print('open', flush=True)\n"
             "try:\n"
             "    data = os.read(fd, 1 << 20)\n"
             "    print('read returned %d bytes' % len(data), flush=True)\n"
             "except OSError as e:\n"
             "    print('read failed ' + errno.errorcode[e.errno], flush=True)\n",
             path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: child.poll() is None and child.kill())
        # The child blocks in read(); wait until the kernel says so.
        if not wait_until(lambda: in_fuse_wait(child.pid), 10):
            self.assertTrue(wchan_hidden(child.pid),
                            "reader not blocked in a FUSE request (%s)"
                            % child_state(child))
        time.sleep(0.5)
        self.assertIsNone(child.poll(), "read() returned although the only "
                          "sample cannot be ready")
        return child

    def check_outer_still_works(self):
        """Resumed, the slow sample (a text file) fails to decode: it is
        skipped and the outer daemon goes on working."""
        self.resume()
        self.assertTrue(
            wait_until(lambda: self.outer.stats()["skipped"] >= 1, 15),
            "the README sample was not counted as skipped")
        self.assertEqual(
            ids_of(read_epoch(self.outer.mkjob("after", ids="0\n"), 1)), [0])

    def test_blocked_read_is_interruptible(self):
        child = self.start_blocked_reader("slow")
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("a reader blocked in read() ignored SIGINT for 10s")
        self.assertIn("KeyboardInterrupt", err, out)
        self.assertNotIn("read returned", out)
        self.check_outer_still_works()

    def test_window_delivers_ready_samples_first(self):
        """window=64 (default): within a window, samples come in the order
        they become ready, so the ready id 0 is not held up by the slow one,
        whatever the planned order."""
        os.kill(self.inner.proc.pid, signal.SIGSTOP)
        self.stopped = True
        path = self.outer.mkjob("w", ids="0\ninner/README\n")
        fd = os.open(path, os.O_RDONLY)
        try:
            data = harness.read_exact(fd, harness.record_size(64 * 64 * 3),
                                       timeout=15)
            self.assertEqual([r.id for r in harness.parse_records(data)], [0])
            self.resume()
            # The slow sample is not an image: skipped. This lone reader
            # was told the size of two records, so it gets id 0 again,
            # flagged as a repeat (docs/design.md 2.4 "File semantics").
            rest = harness.parse_records(harness.read_to_eof(fd, timeout=15))
            self.assertEqual([(r.id, r.flags) for r in rest],
                             [(0, harness.records.REPEAT)])
        finally:
            os.close(fd)
        self.assertEqual(self.outer.stats()["skipped"], 1)

    def test_rmdir_fails_blocked_read(self):
        child = self.start_blocked_reader("slow")
        os.rmdir(self.outer.path("jobs", "slow"))
        try:
            out, err = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("a reader blocked in read() of a removed job still "
                      "blocked 10s after rmdir")
        self.assertEqual(out.splitlines()[-1:], ["read failed ENODEV"], err)
        self.check_outer_still_works()


if __name__ == "__main__":
    unittest.main()
