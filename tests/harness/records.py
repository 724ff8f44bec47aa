"""Reading and checking a job's record stream (joaderfs-stream(5)) from
outside: strict framing, threads that read to EOF with deadlines, and
digests of the pixels.  The header layout is the client's own
(joaderfs.stream.HEADER)."""

import hashlib
import itertools
import os
import threading
import time

import numpy as np

from joaderfs.stream import HEADER, HEADER_FIELDS, HEADER_SIZE, MAGIC

from .daemon import PIXELS

assert HEADER_SIZE == 64
EPOCH_TIMEOUT = 90.0   # seconds for one epoch of a small dataset


class Record:
    """One record of a stream: the header's fields by name, its payload
    and the padding after it."""

    __slots__ = tuple(name for name, _, _ in HEADER_FIELDS) + (
        "payload", "padding")

    def __init__(self, fields, payload, padding):
        (self.magic, self.header_size, self.id, self.label, self.epoch,
         self.flags, self.height, self.width, self.channels, self.dtype,
         self.payload_bytes, self.crop_box) = fields
        self.payload = payload
        self.padding = padding

    def pixels(self):
        return np.frombuffer(self.payload, np.uint8).reshape(
            self.height, self.width, self.channels)

    def __repr__(self):
        return ("Record(id=%d label=%d epoch=%d %dx%dx%d dtype=%d bytes=%d)"
                % (self.id, self.label, self.epoch, self.height, self.width,
                   self.channels, self.dtype, self.payload_bytes))


class StreamError(AssertionError):
    pass


def parse_records(data):
    """Splits a reader's whole byte stream into Records; strict framing."""
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        if n - pos < 64:
            raise StreamError("stream ends inside a header at byte %d "
                              "(%d bytes left)" % (pos, n - pos))
        fields = HEADER.unpack_from(data, pos)
        if fields[0] != MAGIC:
            raise StreamError("bad magic %r at byte %d" % (fields[0], pos))
        if fields[1] != 64:
            raise StreamError("header size %d at byte %d" % (fields[1], pos))
        payload_bytes = fields[10]
        if payload_bytes > 1 << 30:
            raise StreamError("absurd payload size %d" % payload_bytes)
        padded = (payload_bytes + 63) // 64 * 64
        end = pos + 64 + padded
        if end > n:
            raise StreamError("stream ends inside a record at byte %d "
                              "(record needs %d bytes, %d left)"
                              % (pos, 64 + padded, n - pos))
        payload = data[pos + 64:pos + 64 + payload_bytes]
        padding = data[pos + 64 + payload_bytes:end]
        out.append(Record(fields, payload, padding))
        pos = end
    return out


def record_size(payload_bytes):
    return 64 + (payload_bytes + 63) // 64 * 64


def _read_in_thread(fd, more, timeout, stuck):
    """Reads fd in a thread while more(bytes so far) gives a read size (0:
    stop), up to EOF; raises AssertionError(stuck) past `timeout`, or the
    read's own OSError."""
    box = {}

    def run():
        buf = bytearray()
        try:
            while (n := more(buf)) > 0:
                chunk = os.read(fd, n)
                if not chunk:
                    break
                buf += chunk
        except OSError as e:
            box["error"] = e
        box["data"] = bytes(buf)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise AssertionError(stuck)
    if "error" in box:
        raise box["error"]
    return box["data"]


def read_exact(fd, nbytes, timeout=EPOCH_TIMEOUT):
    """Reads exactly nbytes (or up to EOF) from a stream fd in a thread."""
    return _read_in_thread(fd, lambda buf: nbytes - len(buf), timeout,
                           "read of %d bytes still blocked after %.0fs"
                           % (nbytes, timeout))


def read_to_eof(fd, sizes=(1 << 20,), timeout=EPOCH_TIMEOUT):
    """Reads fd until EOF with read() sizes cycling through `sizes`."""
    reads = itertools.count()
    return _read_in_thread(fd, lambda buf: sizes[next(reads) % len(sizes)],
                           timeout, "no EOF after %.0fs" % timeout)


class _Reader(threading.Thread):
    def __init__(self, fd, chunk):
        super().__init__(daemon=True)
        self.fd = fd
        self.chunk = chunk
        self.data = bytearray()
        self.error = None

    def run(self):
        try:
            while True:
                chunk = os.read(self.fd, self.chunk)
                if not chunk:
                    return
                self.data += chunk
        except OSError as e:
            self.error = e


def read_epoch(next_path, readers=1, timeout=EPOCH_TIMEOUT, chunk=1 << 20):
    """Opens `readers` fds on next (all before any read), reads each to EOF
    in its own thread, closes them; returns one record list per reader."""
    fds = [os.open(next_path, os.O_RDONLY) for _ in range(readers)]
    threads = [_Reader(fd, chunk) for fd in fds]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [i for i, t in enumerate(threads) if t.is_alive()]
        if stuck:
            raise AssertionError(
                "readers %s of %s did not reach EOF within %.0fs (records so "
                "far: %s)" % (stuck, next_path, timeout,
                              [len(t.data) for t in threads]))
        for t in threads:
            if t.error is not None:
                raise AssertionError("reader of %s failed: %r"
                                     % (next_path, t.error))
        return [parse_records(bytes(t.data)) for t in threads]
    finally:
        for i, fd in enumerate(fds):
            if not threads[i].is_alive():
                os.close(fd)
            # A stuck reader keeps its fd; the unmount in the cleanup aborts
            # the connection, which ends the read.


REPEAT = 1 << 2  # header flag: a repeat padding a lone reader's epoch


def ids_of(records_per_reader):
    """The ids delivered: records flagged REPEAT, which stand in for
    skipped samples (docs/design.md 2.4 "File semantics"), are left out."""
    return [r.id for rs in records_per_reader for r in rs
            if not r.flags & REPEAT]


RECORD = record_size(PIXELS)


def payload_digest(record):
    return hashlib.sha1(record.payload).hexdigest()


def digests(records):
    """{id: sha1 of pixels}; asserts no id twice."""
    out = {}
    for r in records:
        assert r.id not in out, "id %d delivered twice in one epoch" % r.id
        out[r.id] = payload_digest(r)
    return out


class PacedReader(threading.Thread):
    """One reader of one job: reads one record at a time and sleeps
    `delay` seconds per record received, until EOF."""

    def __init__(self, next_path, delay, record_bytes=RECORD, on_eof=None):
        super().__init__(daemon=True)
        self.next_path = next_path
        self.delay = delay
        self.record_bytes = record_bytes
        self.on_eof = on_eof
        self.data = bytearray()
        self.error = None
        self.fd = os.open(next_path, os.O_RDONLY)  # opened before any read
        self.finished_at = None
        self.eof_stats = None

    def run(self):
        seen = 0
        try:
            while True:
                chunk = os.read(self.fd, self.record_bytes)
                if not chunk:
                    break
                self.data += chunk
                complete = len(self.data) // self.record_bytes
                if complete > seen and self.delay:
                    time.sleep(self.delay * (complete - seen))
                seen = complete
            self.finished_at = time.monotonic()
            if self.on_eof:
                self.eof_stats = self.on_eof()
        except OSError as e:
            self.error = e
        finally:
            try:
                os.close(self.fd)
            except OSError:
                pass

    def records(self):
        return parse_records(bytes(self.data))
