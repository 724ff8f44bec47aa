"""Every call that reads a stream file delivers each record exactly once or
fails cleanly, taking nothing (docs/design.md 2.4 "File semantics"):
sendfile and splice (the page cache's reads) fail with EIO and take
nothing, so shutil.copyfile falls back to read() and copies the epoch
whole; a MAP_PRIVATE map faults without taking a record; concurrent preads
at one offset: one takes records, the others fail; io_submit with O_DIRECT
reads the stream in order. /dataset/manifest is read from the catalog as
it is asked for: 60 open handles of a 200k-sample manifest cost the daemon
nothing. Each mount daemonized, as users run it."""

import ctypes
import errno
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

import harness
from harness import DatasetMixin, JoaderTestCase


class Iocb(ctypes.Structure):
    """struct iocb (include/uapi/linux/aio_abi.h), little-endian."""
    _fields_ = [("data", ctypes.c_uint64), ("key", ctypes.c_uint32),
                ("rw_flags", ctypes.c_uint32), ("opcode", ctypes.c_uint16),
                ("reqprio", ctypes.c_int16), ("fildes", ctypes.c_uint32),
                ("buf", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("offset", ctypes.c_int64), ("reserved2", ctypes.c_uint64),
                ("flags", ctypes.c_uint32), ("resfd", ctypes.c_uint32)]


class StreamCallsTest(DatasetMixin, JoaderTestCase):

    def assert_whole_epoch(self, data, what):
        ids = sorted(r.id for r in harness.parse_records(data))
        self.assertEqual(ids, list(range(self.N)), "%s: not every id exactly once" % what)

    def rest_of_epoch(self, fd):
        return harness.read_to_eof(fd, (1 << 20,))

    def test_sendfile_and_splice_fail_and_take_nothing(self):
        m = self.mount(self.source)
        fd = os.open(m.mkjob("sf"), os.O_RDONLY)
        out = tempfile.TemporaryFile()
        r, w = os.pipe()
        try:
            self.assertErrno(errno.EIO, os.sendfile, out.fileno(), fd, None, 1 << 20)
            self.assertErrno(errno.EIO, os.splice, fd, w, 1 << 16)
            self.assert_whole_epoch(self.rest_of_epoch(fd), "read() after sendfile and splice")
        finally:
            for f in (fd, r, w):
                os.close(f)
            out.close()

    def test_shutil_copyfile_copies_the_whole_epoch(self):
        m = self.mount(self.source)
        with tempfile.TemporaryDirectory() as d:
            shutil.copyfile(m.mkjob("cp"), os.path.join(d, "epoch"))
            with open(os.path.join(d, "epoch"), "rb") as f:
                self.assert_whole_epoch(f.read(), "shutil.copyfile")

    def test_mmap_private_takes_nothing(self):
        m = self.mount(self.source)
        path = m.mkjob("mm")
        fd = os.open(path, os.O_RDONLY)
        try:
            # The map itself is the kernel's to allow; its first touch
            # faults (SIGBUS), in a child of its own.
            child = subprocess.run(
                [sys.executable, "-c",
                 "import mmap, os, sys\n"
                 "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
                 "m = mmap.mmap(fd, 8192, mmap.MAP_PRIVATE, mmap.PROT_READ)\n"
                 "m[0]\n", path], capture_output=True, timeout=60)
            self.assertEqual(child.returncode, -signal.SIGBUS, child.stderr)
            self.assert_whole_epoch(self.rest_of_epoch(fd), "read() after a private map")
        finally:
            os.close(fd)

    def test_concurrent_preads_at_one_offset(self):
        m = self.mount(self.source)
        fd = os.open(m.mkjob("pr"), os.O_RDONLY)
        data = b""
        doubles = 0
        try:
            for _ in range(10000):
                at = len(data)
                got, errors = [], []
                start = threading.Barrier(8)

                def pread():
                    start.wait()
                    try:
                        got.append(os.pread(fd, 1 << 16, at))
                    except OSError as e:
                        errors.append(e.errno)
                threads = [threading.Thread(target=pread) for _ in range(8)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                self.assertEqual(set(errors) - {errno.ESPIPE}, set(),
                                 "a pread failed otherwise than ESPIPE")
                doubles += sum(1 for g in got if g) > 1  # EOF, b"", takes nothing
                if not got:
                    continue  # each lost the race to a position since moved: again
                data += got[0]
                if not got[0]:
                    break
        finally:
            os.close(fd)
        self.assertEqual(doubles, 0, "several preads at one offset succeeded")
        self.assert_whole_epoch(data, "concurrent preads")

    def test_io_submit_with_o_direct(self):
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        ctx = ctypes.c_ulong(0)
        if syscall(206, 8, ctypes.byref(ctx)) != 0:  # io_setup
            self.skipTest("no native AIO here")
        self.addCleanup(syscall, 207, ctx)  # io_destroy
        m = self.mount(self.source)
        # 150 KB records: a 4 MiB read spans many of FUSE's requests.
        fd = os.open(m.mkjob("aio", spec="size=224"), os.O_RDONLY | os.O_DIRECT)
        size = 4 << 20
        buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        data = b""
        try:
            while True:
                iocb = Iocb(opcode=0, fildes=fd, buf=address, nbytes=size,  # IOCB_CMD_PREAD
                            offset=len(data))
                iocbs = (ctypes.c_void_p * 1)(ctypes.addressof(iocb))
                self.assertEqual(syscall(209, ctx, 1, iocbs), 1,  # io_submit
                                 os.strerror(ctypes.get_errno()))
                event = (ctypes.c_int64 * 4)()
                self.assertEqual(syscall(208, ctx, 1, 1, event, None), 1)  # io_getevents
                res = event[2]
                self.assertGreaterEqual(res, 0, "io_submit read failed: %s" % os.strerror(-res))
                if res == 0:
                    break
                data += buf[:res]
        finally:
            os.close(fd)
            buf.close()
        self.assert_whole_epoch(data, "io_submit with O_DIRECT")


class ManifestHandlesTest(JoaderTestCase):
    """/dataset/manifest is read from the catalog as asked: open handles
    cost nothing, however many, and the bytes are the manifest."""

    N = 200000

    @classmethod
    def setUpClass(cls):
        harness.require_binary()
        cls._data = tempfile.mkdtemp(prefix="joaderfs-manifest-")
        cls.source = os.path.join(cls._data, "src")
        for c in range(10):  # placeholder files: a scan needs no image
            d = os.path.join(cls.source, "class%d" % c)
            os.makedirs(d)
            for i in range(cls.N // 10):
                with open(os.path.join(d, "img%06d.jpg" % i), "wb") as f:
                    f.write(b"x")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls._data, True)

    def test_open_handles_cost_nothing(self):
        m = self.mount(self.source, {"cache_dir": "none", "ram_cache": "64M"})
        path = m.path("dataset", "manifest")
        with open(path, "rb") as f:
            whole = f.read()
        lines = whole.split(b"\n")[:-1]
        self.assertEqual(len(lines), self.N)
        self.assertEqual([int(l.split(b"\t")[0]) for l in lines], list(range(self.N)))
        self.assertEqual(lines[-1].split(b"\t")[2], b"class9/img%06d.jpg" % (self.N // 10 - 1))
        before = harness.rss_bytes(m.proc.pid)
        handles = [open(path, "rb") for _ in range(60)]
        try:
            for h in handles:
                self.assertEqual(h.read(7), whole[:7])
            grown = harness.rss_bytes(m.proc.pid) - before
        finally:
            for h in handles:
                h.close()
        harness.log("manifest: %.1f MB, 60 open handles grew the daemon %.1f MB",
                    len(whole) / 1e6, grown / 1e6)
        self.assertLess(grown, 50 << 20, "open manifest handles cost memory")


if __name__ == "__main__":
    unittest.main()
