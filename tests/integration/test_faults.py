"""Faults of the third hostile probe (issue 28): the identity of the bytes a
decode caches, crafted tar sizes, a full cache_dir, and a damaged job store.
Every mount is daemonized, as users run it.

Run: JOADERFS_BIN=build/joaderfs python3 -m unittest -v test_faults
(from tests/integration)."""

import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

import numpy as np

from harness import (DatasetMixin, JoaderTestCase, FUSERMOUNT, make_imagefolder,
                     read_epoch, reference_pixels)


class SwappedFileTest(DatasetMixin, JoaderTestCase):
    """A file swapped for another image while mounted, then put back with its
    inode, size and mtime, must never leave the other image in the disk tier
    under the original's identity (issue 28, failure 1)."""

    def mad(self, record, path):
        ref = reference_pixels(path, 64).astype(np.int16)
        return float(np.abs(record.pixels().astype(np.int16) - ref).mean())

    def test_a_swapped_file_never_reaches_the_disk_tier(self):
        cache_dir = self.tempdir()
        opts = {"cache_dir": cache_dir, "disk_cache": "64M"}
        victim, _ = self.order[0]
        other = next(rel for rel, label in self.order if label != self.order[0][1])
        victim_path = os.path.join(self.source, victim)
        other_path = os.path.join(self.source, other)
        aside = os.path.join(self.tempdir(), "aside.jpg")

        m = self.mount(self.source, opts)
        os.rename(victim_path, aside)
        self.addCleanup(lambda: os.path.exists(aside) and os.replace(aside, victim_path))
        shutil.copyfile(other_path, victim_path)
        swapped = {r.id: r for r in read_epoch(m.mkjob("swapped"))[0]}
        # The job gets what the path holds now; the disk tier must not keep
        # it under the identity the scan saw.
        self.assertEqual(sorted(swapped), list(range(self.N)))
        self.assertLess(self.mad(swapped[0], other_path), 6.0)
        os.replace(aside, victim_path)  # the original, with its inode, size and mtime
        m.unmount()

        m = self.mount(self.source, opts)
        records = {r.id: r for r in read_epoch(m.mkjob("after"))[0]}
        self.assertEqual(sorted(records), list(range(self.N)))
        self.assertEqual(records[0].label, self.order[0][1])
        self.assertLess(self.mad(records[0], victim_path), 6.0,
                        "id 0 delivered pixels that are not its file's")
        self.assertGreater(self.mad(records[0], other_path), 6.0)


def add_member(tar, name, data, pax=None):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_700_000_000
    if pax:
        info.pax_headers = pax
    tar.addfile(info, io.BytesIO(data))


def kill_daemons_of(mnt):
    """Kills what a test could not unmount: a daemon still scanning (no
    mount yet) or one that ignores SIGTERM, found by its mountpoint."""
    subprocess.run(["pkill", "-KILL", "-f", " " + mnt + "$"], check=False)
    subprocess.run([FUSERMOUNT, "-u", "-z", mnt], check=False,
                   stderr=subprocess.DEVNULL)


class CraftedShardTest(JoaderTestCase):
    """A pax size that wraps the offset arithmetic must not loop the scan;
    the members behind an implausible size still serve; labels outside
    0..2^24-1 count as no label (issue 28, failure 2)."""

    def test_a_wrapping_pax_size_costs_one_sample(self):
        src = self.tempdir()
        photos = make_imagefolder(os.path.join(self.tempdir(), "photos"),
                                  {"a": ["p%d.jpg" % i for i in range(4)]})
        jpegs = sorted(glob.glob(os.path.join(photos, "a", "*.jpg")))
        data = []
        for p in jpegs:
            with open(p, "rb") as f:
                data.append(f.read())
        with tarfile.open(os.path.join(src, "shard-000.tar"), "w",
                          format=tarfile.PAX_FORMAT) as tar:
            add_member(tar, "k0.jpg", data[0])
            add_member(tar, "k0.cls", b"1")
            add_member(tar, "k1.jpg", data[1], pax={"size": "18446744073709550080"})
            add_member(tar, "k1.cls", b"2")
            add_member(tar, "k2.jpg", data[2])
            add_member(tar, "k2.cls", b"2147483647")
            add_member(tar, "k3.jpg", data[3])
            add_member(tar, "k3.json", json.dumps({"cls": -5}).encode())
        m = self.mount(src, start=False)
        m.mount_timeout = 20
        self.addCleanup(kill_daemons_of, m.mnt)
        m.start()
        manifest = {rel: label for _, label, rel in m.manifest()}
        # k1's header claims more than the shard holds: k1 is lost, and the
        # scan finds k2 and k3 behind it instead of dropping the shard's rest.
        self.assertEqual(sorted(manifest), ["shard-000.tar/k0.jpg", "shard-000.tar/k2.jpg",
                                            "shard-000.tar/k3.jpg"])
        self.assertEqual(manifest["shard-000.tar/k0.jpg"], 1)
        self.assertEqual(manifest["shard-000.tar/k2.jpg"], -1)
        self.assertEqual(manifest["shard-000.tar/k3.jpg"], -1)
        self.assertEqual(m.info()["classes"], 2)
        records = read_epoch(m.mkjob("j"))[0]
        self.assertEqual(sorted(r.id for r in records), [0, 1, 2])


class FullCacheDirTest(JoaderTestCase):
    """A cache filesystem of 40 MiB: the default disk tier leaves room for
    its databases, and a daemon killed with the filesystem full starts again
    (issue 28, failure 3)."""

    N = 160

    @classmethod
    def setUpClass(cls):
        # 400 x 300 photos: 360 KB each decoded at base 256, 56 MiB in all,
        # more than the cache filesystem holds.
        from PIL import Image
        cls._data_dir = tempfile.mkdtemp(prefix="joaderfs-data-")
        cls.source = os.path.join(cls._data_dir, "src")
        rng = np.random.default_rng(0)
        y, x = np.mgrid[0:300, 0:400]
        for i in range(cls.N):
            os.makedirs(os.path.join(cls.source, "c%d" % (i % 4)), exist_ok=True)
            base = rng.integers(0, 255, 3)
            img = np.stack([(x * (k + 1) + y * (3 - k) + base[k]) % 256 for k in range(3)],
                           axis=-1).astype(np.uint8)
            Image.fromarray(img).save(
                os.path.join(cls.source, "c%d" % (i % 4), "p%03d.jpg" % i), quality=90)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data_dir, True)

    def small_fs(self, mib):
        d = self.tempdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % mib, "tmpfs", d],
                       check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", d], check=False)
        return d

    def test_a_full_cache_dir_does_not_stop_a_restart(self):
        cache_dir = self.small_fs(40)
        # base 256: 160 images of ~256 KiB decoded, more than the 40 MiB.
        opts = {"cache_dir": cache_dir, "base": "256", "ram_cache": "16M"}
        m = self.mount(self.source, opts)
        self.assertEqual(len(read_epoch(m.mkjob("j"))[0]), self.N)
        m.proc.kill()  # kill -9, as the probe did
        m.wait_exit(10)
        st = os.statvfs(cache_dir)
        self.assertGreater(st.f_bavail * st.f_frsize, 16 << 20,
                           "the default disk tier left its databases no room")

        # Fill what is left, then start again on the full filesystem.
        with open(os.path.join(cache_dir, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        started = time.monotonic()
        m = self.mount(self.source, opts)
        took = time.monotonic() - started
        print("\nstart on a full cache_dir: %.2f s" % took)
        self.assertEqual(sorted(r.id for r in read_epoch(m.mkjob("k"))[0]),
                         list(range(self.N)))
        with open(m.log_path) as f:
            log = f.read()
        self.assertRegex(log, "disk cache .* (afresh|without a disk tier)")


class DamagedJobStoreTest(DatasetMixin, JoaderTestCase):
    """Garbage inside the job store's WAL must not roll a finished epoch
    back silently: the store is refused and the log says so (issue 28)."""

    def test_wal_garbage_never_repeats_an_epoch_silently(self):
        cache_dir = self.tempdir()
        opts = {"cache_dir": cache_dir}
        m = self.mount(self.source, opts)
        nxt = m.mkjob("j")
        with open(nxt, "rb") as f:  # one epoch, read in small replies
            while f.read(4096):
                pass
        self.assertEqual(m.status("j")["remaining"], 0)
        m.proc.kill()
        m.wait_exit(10)
        (wal,) = glob.glob(os.path.join(cache_dir, "*-jobs1", "*.log"))
        size = os.path.getsize(wal)
        with open(wal, "r+b") as f:  # garbage over a middle stretch
            f.seek(size // 2)
            f.write(os.urandom(64))

        m = self.mount(self.source, opts)
        with open(m.log_path) as f:
            log = f.read()
        if os.path.isdir(m.path("jobs", "j")):
            self.assertEqual(m.status("j")["remaining"], 0,
                             "the finished epoch came back: its samples would repeat")
        else:
            self.assertRegex(log, "job store .*(orrupt|damaged)")


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# What each of uid 65534's writers runs: argv[1] the job folder, argv[2] the
# seconds to run. 64 KiB specs of 16000 class ranges, rewritten again and
# again through fresh handles, as the probe did.
SPEC_WRITER = r"""
import json, os, sys, time
os.mkdir(sys.argv[1])
spec = os.path.join(sys.argv[1], "spec")
chunk = ("subset=classes:" + ",".join(["0-0"] * 16000) + "\n").encode()
end = time.monotonic() + float(sys.argv[2])
writes = 0
while time.monotonic() < end:
    fd = os.open(spec, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, chunk)
        writes += 1
    except OSError:
        pass
    os.close(fd)
print(json.dumps({"writes": writes}))
"""


class ControlWriteCostTest(JoaderTestCase):
    """Control writes cost time linear in their input: twelve users' 64 KiB
    class-range specs over 200k samples must not starve root's reads and
    its /stats (issue 28, failure 6: 28-64 s per `cat /stats`)."""

    def test_range_specs_do_not_starve_root(self):
        root = self.tempdir()
        photos = make_imagefolder(os.path.join(root, "photos"),
                                  {"c%d" % c: ["p%d.jpg" % i for i in range(3)]
                                   for c in range(4)})
        rels = sorted(os.path.relpath(p, root)
                      for p in glob.glob(os.path.join(photos, "*", "*.jpg")))
        manifest = os.path.join(root, "manifest.tsv")
        with open(manifest, "w") as f:
            for i in range(200_000):
                rel = rels[i % len(rels)]
                f.write("%s\t%s\n" % (rel, rel.split("/")[1][1:]))
        m = self.mount(manifest, {"allow_other": None, "threads": "2"})
        os.chmod(m.workdir, 0o755)
        nxt = m.mkjob("root", spec="subset=range:0-199")
        read_epoch(nxt)  # decoded and cached: what follows measures the daemon

        def stats_seconds():
            t0 = time.monotonic()
            m.stats()
            return time.monotonic() - t0

        def epoch_seconds():
            t0 = time.monotonic()
            self.assertEqual(len(read_epoch(nxt)[0]), 200)
            return time.monotonic() - t0

        alone = sorted(epoch_seconds() for _ in range(3))[1]
        writers = []
        for k in range(12):
            job = m.path("jobs", "w%d" % k)
            writers.append(subprocess.Popen(
                NOBODY + [sys.executable, "-c", SPEC_WRITER, job, "8"],
                stdout=subprocess.PIPE, text=True))
        try:
            time.sleep(1.0)
            stats = [stats_seconds() for _ in range(3)]
            loaded = sorted(epoch_seconds() for _ in range(3))[1]
            stats += [stats_seconds() for _ in range(3)]
            writes = [json.loads(p.communicate(timeout=60)[0])["writes"] for p in writers]
        finally:
            for p in writers:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        sys.stderr.write(
            "\n[control writes] %d spec writes of 16000 ranges; root's epoch of 200: "
            "%.3f s alone, %.3f s under the writers; /stats worst %.3f s\n"
            % (sum(writes), alone, loaded, max(stats)))
        self.assertGreater(sum(writes), 12, "the writers hardly wrote")
        self.assertLess(max(stats), 2.0, "root's /stats waited behind other users' writes")
        self.assertLess(loaded, 10 * alone + 2.0)


# uid 65534's readers: argv[1] the job's next, argv[2] how many. Each opens
# the stream, reads one byte, and holds it open until stdin closes.
ONE_BYTE_READERS = r"""
import os, sys, threading
fds = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(int(sys.argv[2]))]
def one(fd):
    try:
        os.read(fd, 1)
    except OSError:
        pass
for fd in fds:
    threading.Thread(target=one, args=(fd,), daemon=True).start()
print(len(fds), flush=True)
sys.stdin.read()
"""

# uid 65534's resume handles: argv[1] the job folder, argv[2] how many.
# Half write 64 MiB with no line end, half 64 MiB of id lines; the handles
# stay open until stdin closes.
RESUME_HOARDERS = r"""
import os, sys
fds = [os.open(os.path.join(sys.argv[1], "resume"), os.O_WRONLY) for _ in range(int(sys.argv[2]))]
refused = 0
for k, fd in enumerate(fds):
    chunk = b"7" * (1 << 20) if k % 2 else b"epoch=0\n" + b"0\n" * ((1 << 20) // 2 - 4)
    for _ in range(64):
        try:
            os.write(fd, chunk)
        except OSError:
            refused += 1
            break
        chunk = chunk if k % 2 else b"0\n" * ((1 << 20) // 2)
print(refused, flush=True)
sys.stdin.read()
"""


class MemoryBoundTest(DatasetMixin, JoaderTestCase):
    """Inside a 300 MiB cgroup at the default limits, uid 65534's 256
    one-byte readers of a size=2364 job and its resume handles keep the
    daemon alive and within the bound (issue 28, failure 5: OOM-killed
    within 5 s; resume handles took RSS from 40 to 2326 MiB)."""

    def test_readers_and_resume_handles_stay_within_a_small_cgroup(self):
        launcher, _ = self.memory_cgroup_launcher(300 << 20)
        m = self.mount(self.source, {"ram_cache": False, "allow_other": None},
                       start=False)
        m.argv[0] = launcher
        m.start()
        os.chmod(m.workdir, 0o755)
        ram_cache = m.stats()["ram_budget"]
        self.assertEqual(ram_cache, 75 << 20)
        attack = os.path.join(m.mnt, "jobs", "big")
        subprocess.run(NOBODY + ["mkdir", attack], check=True)
        subprocess.run(NOBODY + ["sh", "-c", "echo size=2364 > %s/spec" % attack], check=True)
        readers = subprocess.Popen(
            NOBODY + [sys.executable, "-c", ONE_BYTE_READERS, os.path.join(attack, "next"), "256"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hoarders = subprocess.Popen(
            NOBODY + [sys.executable, "-c", RESUME_HOARDERS, attack, "8"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(readers.stdout.readline().strip(), "256")
            hoarders.stdout.readline()
            time.sleep(5)  # the probe's daemon was dead by now
            self.assertIsNone(m.proc.poll(), "the daemon died (OOM?)")
            hwm_mib = m.hwm_kib() / 1024
            # root still gets its epoch meanwhile
            self.assertEqual(len(read_epoch(m.mkjob("root"))[0]), self.N)
        finally:
            for p in (readers, hoarders):
                p.kill()
                p.wait()
        sys.stderr.write("\n[memory] daemon peak RSS %.0f MiB in a 300 MiB cgroup "
                         "(ram_cache %d MiB)\n" % (hwm_mib, ram_cache >> 20))
        # docs/admin-guide.md "Limits": fixed + 1.25 x ram_cache + threads x D + one
        # user's (allowance + D + streams): well inside the cgroup.
        self.assertLess(hwm_mib, 250)


if __name__ == "__main__":
    unittest.main()
