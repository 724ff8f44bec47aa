"""Parsing the record stream of a job's ``next`` file (see joaderfs-stream(5)).

A stream is a sequence of records, each a 64-byte little-endian header, an
HWC uint8 RGB payload and zero padding up to a multiple of 64 bytes.  Payloads
are read with ``readinto`` straight into the numpy array that is handed to the
caller, so each payload byte is copied once, from the kernel.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO, Iterator, NamedTuple, Union

import numpy as np

MAGIC = b"JSF1"
HEADER_SIZE = 64
ALIGNMENT = 64  # records are padded to a multiple of this
CHANNELS = 3
DTYPE_UINT8 = 1
# The header's flags (joaderfs-stream(5)).
FLAG_FLIPPED = 1 << 0
FLAG_CROP_BOX = 1 << 1  # crop_box holds where the sample was cut
FLAG_REPEAT = 1 << 2  # the reader's previous record again, for a skipped sample

# The record header of joaderfs-stream(5), the one definition of it in
# Python: (field, struct code, numpy type), little-endian, in order.  HEADER
# unpacks one header; HEADER_DTYPE reads many at once (batches.py).
HEADER_FIELDS = (
    ("magic", "4s", "S4"), ("header_size", "I", "<u4"), ("id", "Q", "<u8"),
    ("label", "q", "<i8"), ("epoch", "I", "<u4"), ("flags", "I", "<u4"),
    ("height", "I", "<u4"), ("width", "I", "<u4"), ("channels", "I", "<u4"),
    ("dtype", "I", "<u4"), ("payload_bytes", "Q", "<u8"),
    ("crop_box", "Q", "<u8"))  # x | y << 16 | w << 32 | h << 48 when flags bit 1
HEADER = struct.Struct("<" + "".join(code for _, code, _ in HEADER_FIELDS))
HEADER_DTYPE = np.dtype([(name, dt) for name, _, dt in HEADER_FIELDS])
assert HEADER.size == HEADER_DTYPE.itemsize == HEADER_SIZE

PathLike = Union[str, "os.PathLike[str]"]


class StreamError(ValueError):
    """The bytes read are not a well-formed sequence of records."""


class RecordHeader(NamedTuple):
    """The fields of one record header that a reader needs."""

    id: int
    label: int
    epoch: int
    height: int
    width: int
    channels: int
    payload_bytes: int
    flags: int = 0
    crop_box: tuple[int, int, int, int] | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, self.channels)

    @property
    def padding(self) -> int:
        """Zero bytes after the payload (the header is already aligned)."""
        return -self.payload_bytes % ALIGNMENT


class Record(NamedTuple):
    """One decoded sample: ``image`` is an (H, W, 3) uint8 RGB array.

    ``flags`` are the header's (bit 0: flipped, bit 1: a crop box,
    bit 2: a repeat standing in for a skipped sample; joaderfs-stream(5));
    ``crop_box`` is where the sample was cut from its base image,
    ``(x, y, width, height)``, or None when the header carries none."""

    image: np.ndarray
    label: int
    id: int
    epoch: int
    flags: int = 0
    crop_box: tuple[int, int, int, int] | None = None

    @property
    def flipped(self) -> bool:
        return bool(self.flags & FLAG_FLIPPED)

    @property
    def repeat(self) -> bool:
        return bool(self.flags & FLAG_REPEAT)


def parse_header(data: bytes | bytearray | memoryview,
                 offset: int = 0) -> RecordHeader:
    """Validates and decodes a 64-byte header found at byte ``offset``.

    Raises StreamError naming the offset and the bad field.
    """
    (magic, header_size, sample_id, label, epoch, flags, height, width,
     channels, dtype, payload_bytes, crop_box) = HEADER.unpack(data)
    where = f"record header at byte {offset}"
    if magic != MAGIC:
        raise StreamError(f"{where}: bad magic {bytes(magic)!r}, "
                          f"expected {MAGIC!r}")
    if header_size != HEADER_SIZE:
        raise StreamError(f"{where}: header size {header_size}, "
                          f"expected {HEADER_SIZE}")
    if dtype != DTYPE_UINT8:
        raise StreamError(f"{where}: dtype {dtype}, expected "
                          f"{DTYPE_UINT8} (uint8)")
    if channels != CHANNELS:
        raise StreamError(f"{where}: {channels} channels, "
                          f"expected {CHANNELS}")
    if payload_bytes != height * width * channels:
        raise StreamError(f"{where}: payload of {payload_bytes} bytes does "
                          f"not match {height}x{width}x{channels}")
    box = None
    if flags & FLAG_CROP_BOX:
        box = tuple((crop_box >> shift) & 0xFFFF for shift in (0, 16, 32, 48))
    return RecordHeader(sample_id, label, epoch, height, width, channels,
                        payload_bytes, flags, box)


class RecordStream:
    """Reads records from a binary file object, one header then its payload.

    ``raw`` needs only ``readinto``; short reads are fine (a FUSE read may stop
    inside a record).  Use it as::

        import numpy as np
        from joaderfs import RecordStream, open_next

        with open_next(job) as raw:
            stream = RecordStream(raw)
            while (header := stream.read_header()) is not None:
                image = np.empty(header.shape, np.uint8)
                stream.read_payload(image)

    Not safe for concurrent use.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._offset = 0  # bytes consumed so far, for error messages
        # The previous record's padding and the next header are read with one
        # call, to save a FUSE round trip per record.
        self._scratch = bytearray(ALIGNMENT + HEADER_SIZE)
        self._padding_due = 0
        self._pending: RecordHeader | None = None

    def read_header(self) -> RecordHeader | None:
        """Returns the next header, or None at the clean end of the stream."""
        if self._pending is not None:
            raise RuntimeError("read_payload() must follow read_header()")
        padding = self._padding_due
        view = memoryview(self._scratch)[:padding + HEADER_SIZE]
        start = self._offset
        got = self._read_fully(view)
        if got < padding:
            raise StreamError(f"stream ends inside the padding of the record "
                              f"that ends at byte {start + got}")
        if any(view[:padding]):
            raise StreamError(f"non-zero padding at byte {start}")
        if got == padding:
            return None
        if got < len(view):
            raise StreamError(f"stream ends inside a record header at byte "
                              f"{start + padding} ({got - padding} of "
                              f"{HEADER_SIZE} bytes)")
        header = parse_header(view[padding:], start + padding)
        self._padding_due = header.padding
        self._pending = header
        return header

    def read_payload(self, out: np.ndarray | bytearray | memoryview) -> None:
        """Fills ``out``, C-contiguous and payload_bytes long, with it."""
        header = self._pending
        if header is None:
            raise RuntimeError("read_header() must precede read_payload()")
        view = memoryview(out).cast("B")
        if len(view) != header.payload_bytes:
            raise ValueError(f"buffer of {len(view)} bytes for a payload of "
                             f"{header.payload_bytes}")
        start = self._offset
        got = self._read_fully(view)
        if got < len(view):
            raise StreamError(f"stream ends inside the payload of sample "
                              f"{header.id} at byte {start + got} ({got} of "
                              f"{header.payload_bytes} bytes)")
        self._pending = None

    def read_padding(self) -> None:
        """Reads the padding of the last record read, which read_header()
        would read with the next header: call it after the last record of
        a count of records, so that none of their bytes is left unread."""
        if self._pending is not None:
            raise RuntimeError("read_payload() must follow read_header()")
        padding = self._padding_due
        view = memoryview(self._scratch)[:padding]
        start = self._offset
        if self._read_fully(view) < padding:
            raise StreamError(f"stream ends inside the padding of the record "
                              f"that ends at byte {start}")
        if any(view):
            raise StreamError(f"non-zero padding at byte {start}")
        self._padding_due = 0

    def _read_fully(self, view: memoryview) -> int:
        """Reads until ``view`` is full or EOF; returns the bytes read."""
        got = 0
        while got < len(view):
            n = self._raw.readinto(view[got:])
            if n is None:
                raise StreamError("non-blocking file objects are not "
                                  "supported")
            if n == 0:
                break
            got += n
        self._offset += got
        return got


def read_records(raw: BinaryIO, limit: int | None = None
                 ) -> Iterator[Record]:
    """Yields the records of ``raw`` until EOF, or until ``limit`` records
    (then reads no byte past the last); leaves ``raw`` open."""
    stream = RecordStream(raw)
    count = 0
    while count != limit and (header := stream.read_header()) is not None:
        image = np.empty(header.shape, dtype=np.uint8)
        stream.read_payload(image)
        count += 1
        yield Record(image, header.label, header.id, header.epoch, header.flags,
                     header.crop_box)
    if count == limit:
        stream.read_padding()


def next_path(path: PathLike, rank: int | None = None) -> Path:
    """The stream file of a job given either it or its job directory:
    ``next``, or ``next.<rank>`` for a rank of a job with ``ranks=W``."""
    path = Path(path)
    if not path.is_dir():
        if rank is not None:
            raise ValueError("rank= needs the job directory, not a file")
        return path
    if rank is None:
        return path / "next"
    if rank < 0:
        raise ValueError(f"rank must be >= 0, not {rank}")
    return path / f"next.{rank}"


def open_next(path: PathLike, rank: int | None = None) -> BinaryIO:
    """Opens a job's stream file unbuffered: one more reader of the job."""
    # Unbuffered, so that readinto goes to the kernel with the caller's
    # buffer and large reads stay large.
    return open(next_path(path, rank), "rb", buffering=0)


class JobReader:
    """A job's sample stream, iterable once per epoch.

    Iterating opens ``next`` (the daemon counts one more reader) and yields
    ``(image, label, id)`` with ``image`` an (H, W, 3) uint8 RGB numpy array,
    until EOF ends the epoch.  Iterating again re-opens the file and so reads
    the next epoch.  ``records()`` yields ``Record`` tuples, with the epoch.
    ``rank=R`` reads ``next.R`` of a job with ``ranks=W`` instead of ``next``::

        from joaderfs import JobReader

        reader = JobReader(job)  # e.g. "/mnt/imagenet/jobs/sweep-1"
        for epoch in range(epochs):
            for image, label, sample_id in reader:
                ...
    """

    def __init__(self, path: PathLike, rank: int | None = None) -> None:
        self.path = next_path(path, rank)

    def __iter__(self) -> Iterator[tuple[np.ndarray, int, int]]:
        return ((r.image, r.label, r.id) for r in self.records())

    def records(self) -> Iterator[Record]:
        """Opens the file now and returns an iterator over one epoch."""
        # Open eagerly rather than on the first next(): a reader that joins
        # after the others have taken every sample would start a new epoch.
        raw = open_next(self.path)
        return _owned_records(raw)


def _owned_records(raw: BinaryIO) -> Iterator[Record]:
    with raw:
        yield from read_records(raw)
