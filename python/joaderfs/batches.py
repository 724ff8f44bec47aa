"""Whole batches of one job's stream, read with few large reads.

Records of one job at one output size all have the same length, so a batch
of B records is B * record_size bytes.  ``BatchStream`` reads them with
``readv``, scattering each record's header into a header table and its
payload into slot i of one dense [B, H, W, 3] array (padding goes to a
scratch buffer): the payload bytes are copied once, by the kernel, and the
batch needs no per-sample copy or stacking.  All B headers are then checked
at once through a numpy view.

Plain numpy (JAX and Keras: ``jax_batches`` and ``tf_dataset``, built on
this)::

    import joaderfs

    for epoch in range(epochs):
        for images, labels, ids in joaderfs.iter_batches(job, 30):
            assert images.shape[1:] == (size, size, 3)  # uint8, HWC
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Callable, Iterator, NamedTuple

import numpy as np

from .stream import (ALIGNMENT, HEADER_DTYPE, HEADER_SIZE, PathLike,
                     StreamError, open_next, parse_header)


# The header's 32-bit words that must equal the first record's: magic, header
# size, height, width, channels, dtype and payload bytes (two words).
_CHECKED_WORDS = np.array([0, 1, 8, 9, 10, 11, 12, 13])

# Linux refuses a readv of more buffers than this.
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names \
    else 1024

Allocate = Callable[[tuple[int, ...]], Any]


class Batch(NamedTuple):
    """``images`` [B, H, W, 3] uint8 RGB, ``labels`` and ``ids`` [B] int64."""

    images: Any
    labels: np.ndarray
    ids: np.ndarray


def _numpy_empty(shape: tuple[int, ...]) -> np.ndarray:
    return np.empty(shape, np.uint8)


class BatchStream:
    """Reads batches of ``batch_size`` records from one open ``next`` file.

    ``allocate(shape)`` makes each batch's image array (numpy by default; the
    torch adapter passes shared or pinned tensors); it must return a
    C-contiguous uint8 object that ``np.asarray`` views without copying.
    Every record must have the first record's shape: a batch is one array.
    Not safe for concurrent use.
    """

    def __init__(self, raw: BinaryIO, batch_size: int,
                 allocate: Allocate = _numpy_empty) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        self._fd = raw.fileno()
        self._batch_size = batch_size
        self._allocate = allocate
        # Reused: labels and ids are copied out of it for every batch.
        self._headers = np.empty(batch_size, HEADER_DTYPE)
        self._header_views = [memoryview(h) for h in np.split(
            self._headers.view(np.uint8), batch_size)]
        self._shape: tuple[int, int, int] | None = None
        self._expected_words: np.ndarray | None = None
        self._padding = memoryview(bytearray(ALIGNMENT))
        self._offset = 0  # bytes consumed so far, for error messages
        self._ended = False

    def read_batch(self, records: int | None = None) -> Batch | None:
        """The next batch of ``records`` records (``batch_size`` by
        default, at most that; shorter at EOF), or None once the stream
        ended.  No byte past the batch's last record is read."""
        if records is None:
            records = self._batch_size
        elif not 1 <= records <= self._batch_size:
            raise ValueError(f"records must be 1 to {self._batch_size}, "
                             f"not {records}")
        if self._ended:
            return None
        first_header_read = False
        if self._shape is None:
            # The first header fixes the shape, hence the record size.
            got = self._readv([self._header_views[0]])
            if got == 0:
                self._ended = True
                return None
            if got < HEADER_SIZE:
                raise StreamError(f"stream ends inside a record header at "
                                  f"byte {self._offset - got}")
            header = parse_header(self._header_views[0], self._offset - got)
            self._shape = header.shape
            self._expected_words = self._header_words(1)[0, _CHECKED_WORDS]
            first_header_read = True

        height, width, channels = self._shape
        payload = height * width * channels
        padding = self._padding[:-payload % ALIGNMENT]
        record_size = HEADER_SIZE + payload + len(padding)
        images = self._allocate((self._batch_size, height, width, channels))
        slots = np.asarray(images).reshape(self._batch_size, payload)
        buffers = []
        for i in range(records):
            if i or not first_header_read:
                buffers.append(self._header_views[i])
            buffers.append(memoryview(slots[i]))
            if padding:
                buffers.append(padding)
        start = self._offset - (HEADER_SIZE if first_header_read else 0)
        got = self._readv(buffers) + (HEADER_SIZE if first_header_read else 0)
        count, partial = divmod(got, record_size)
        if count < records:
            self._ended = True
            if partial:
                raise StreamError(
                    f"stream ends inside a record at byte {start + got} "
                    f"({partial} of {record_size} bytes)")
            if count == 0:
                return None
        self._check_headers(count, start, record_size)
        headers = self._headers[:count]
        return Batch(images[:count], headers["label"].astype(np.int64),
                     headers["id"].astype(np.int64))

    def _check_headers(self, count: int, start: int,
                       record_size: int) -> None:
        words = self._header_words(count)[:, _CHECKED_WORDS]
        bad = (words != self._expected_words).any(axis=1)
        if not bad.any():
            return
        # Name the first bad record's fault, as the per-record parser does.
        i = int(bad.argmax())
        header = parse_header(self._header_views[i], start + i * record_size)
        raise ValueError(
            f"sample {header.id} is {header.height}x{header.width}, the "
            f"batch {self._shape[0]}x{self._shape[1]}: batches need one "
            f"output size (size=N with N > 0 in the job spec or mount "
            f"options)")

    def _header_words(self, count: int) -> np.ndarray:
        """The first ``count`` headers as rows of 16 little-endian u32."""
        return self._headers[:count].view(np.uint8).view("<u4").reshape(
            count, HEADER_SIZE // 4)

    def _readv(self, buffers: list[memoryview]) -> int:
        """Fills ``buffers`` in order until all are full or EOF; returns the
        bytes read.  A read may stop anywhere, even inside a buffer."""
        total = 0
        i = 0
        while i < len(buffers):
            n = os.readv(self._fd, buffers[i:i + _IOV_MAX])
            if n == 0:
                break
            total += n
            while n:
                size = len(buffers[i])
                if n < size:
                    buffers[i] = buffers[i][n:]
                    break
                n -= size
                i += 1
        self._offset += total
        return total


def iter_batches(job: PathLike, batch_size: int, drop_last: bool = False,
                 rank: int | None = None) -> Iterator[Batch]:
    """Opens ``job``'s ``next`` file now and yields one epoch in batches.

    ``job`` is a job directory or its ``next`` file; ``rank=R`` reads
    ``next.R`` of a job with ``ranks=W``.  ``images`` is a dense
    [B, H, W, 3] uint8 array; every sample must have the same size (a job
    with ``size=N``, N > 0).  The last, smaller batch is yielded unless
    ``drop_last``.  Each batch is freshly allocated, so it may be kept.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, not {batch_size}")
    return _batches(open_next(job, rank), batch_size, drop_last)


def _batches(raw: BinaryIO, batch_size: int, drop_last: bool,
             allocate: Allocate = _numpy_empty) -> Iterator[Batch]:
    with raw:
        stream = BatchStream(raw, batch_size, allocate)
        while (batch := stream.read_batch()) is not None:
            if len(batch.ids) < batch_size and drop_last:
                return
            yield batch
