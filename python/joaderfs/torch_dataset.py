"""A PyTorch IterableDataset over one job; imports torch, unlike the rest.

Batches (the fast path)::

    from torch.utils.data import DataLoader
    from joaderfs import JobDataset

    dataset = JobDataset("/mnt/imagenet/jobs/sweep-1", batch_size=256)
    loader = DataLoader(dataset, batch_size=None, num_workers=2,
                        pin_memory=True)
    for epoch in range(epochs):
        for images, labels, ids in loader:  # images: [B, 3, H, W] uint8
            images = images.cuda(non_blocking=True)
            ...

The dataset reads whole batches (``batch_size=B``) with a few large reads
straight into one array, so the DataLoader must not batch again
(``batch_size=None``).  ``images`` is a dense tensor in PyTorch's
``channels_last`` layout (the stream's HWC records, permuted without a copy);
models and ``.to(device)`` accept it as is.  A worker reads into a ring of
four shared-memory buffers that it reuses (fresh shared memory costs a page
fault per 4 KiB); the training process copies each batch out once when it
receives it, which frees the buffer.

Per sample::

    loader = DataLoader(JobDataset(job), batch_size=256, num_workers=0)

yields the same tuples, but every sample is read, converted and stacked on
its own, which costs about ten times the client CPU of the batch path
(docs/benchmarks.md).  Use it for a per-sample transform of your own.

Each DataLoader worker opens ``next`` on its own, so the daemon sees one
reader per worker and divides the job's samples among them: within an epoch
each sample reaches exactly one worker, once.  The epoch ends when every
worker has seen EOF; with k workers the last k batches may be short.  The
next ``for`` over the loader starts fresh workers (``persistent_workers=
False``, the default) that re-open ``next`` and so read the next epoch; with
``persistent_workers=True`` the same workers iterate the dataset again,
which re-opens it just the same.  Samples are not shuffled on the client:
the daemon already hands each job a uniformly random order.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .batches import BatchStream
from .distributed import default_rank
from .stream import JobReader, PathLike, Record, open_next

Transform = Callable[[torch.Tensor], Any]


class JobDataset(IterableDataset):
    """Yields one epoch of a job per iteration, by sample or by batch.

    Without ``batch_size``: ``(image, label, id)`` per sample, ``image`` a
    uint8 RGB tensor ``[3, H, W]`` (``layout="CHW"``, a view of the
    ``[H, W, 3]`` record, not a copy) or ``[H, W, 3]`` (``layout="HWC"``),
    ``label`` and ``id`` ints.

    With ``batch_size=B``: ``(images, labels, ids)`` per batch of B samples
    (the last ones of an epoch may be shorter, or dropped with
    ``drop_last``), ``images`` ``[B, 3, H, W]`` (channels_last) or
    ``[B, H, W, 3]``, ``labels`` and ``ids`` int64 ``[B]``.  Every sample
    needs one output size (``size=N``, N > 0).  Use it with
    ``DataLoader(dataset, batch_size=None)``.  ``pin_memory=True`` reads the
    batches of the training process itself (``num_workers=0``) straight into
    page-locked memory, for a fast asynchronous copy to the GPU; with
    workers, the training process copies each batch it receives into
    page-locked memory instead of ordinary memory.  Either way no CUDA device
    means ordinary memory and a warning.

    ``transform``, if given, is applied in the worker to each image (per
    sample) or to each ``images`` tensor (per batch): torchvision transforms
    that take tensors (ConvertImageDtype, Normalize...) or any callable.
    ``rank=R`` reads ``next.R`` of a job with ``ranks=W``; by default the
    process's torch.distributed rank when a process group exists.
    """

    def __init__(self, job: PathLike, layout: str = "CHW",
                 transform: Transform | None = None,
                 batch_size: int | None = None, drop_last: bool = False,
                 pin_memory: bool = False, rank: int | None = None) -> None:
        super().__init__()
        if layout not in ("CHW", "HWC"):
            raise ValueError(f"layout must be 'CHW' or 'HWC', not {layout!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if batch_size is None and (drop_last or pin_memory):
            raise ValueError("drop_last and pin_memory need batch_size")
        self._job = job
        self._rank = rank = default_rank(job, rank)
        self._reader = JobReader(job, rank)
        self._chw = layout == "CHW"
        self._transform = transform
        self._batch_size = batch_size
        self._drop_last = drop_last
        self._pin_memory = pin_memory

    def __iter__(self) -> Iterator[tuple[Any, Any, Any]]:
        # The file is opened now, when the worker starts, so that no worker
        # joins after the others have emptied the epoch.
        if self._batch_size is None:
            return self._samples(self._reader.records())
        return self._batches(open_next(self._job, self._rank))

    def _samples(self, records: Iterator[Record]
                 ) -> Iterator[tuple[Any, int, int]]:
        for record in records:
            image: Any = torch.from_numpy(record.image)
            if self._chw:
                image = image.permute(2, 0, 1)
            if self._transform is not None:
                image = self._transform(image)
            yield image, record.label, record.id

    def _batches(self, raw) -> Iterator[Any]:
        in_worker = get_worker_info() is not None
        # A transform's output may alias its input, so a worker with one
        # hands out fresh shared memory rather than its ring's buffers.
        ring = _Ring() if in_worker and self._transform is None else None
        allocate = (ring.take if ring else _shared_empty if in_worker
                    else self._allocator())
        with raw:
            stream = BatchStream(raw, self._batch_size, allocate)
            while (batch := stream.read_batch()) is not None:
                if self._drop_last and len(batch.ids) < self._batch_size:
                    return
                images = batch.images
                if self._chw:
                    images = images.permute(0, 3, 1, 2)
                if ring is None:
                    yield self._finish(images, batch.labels, batch.ids)
                else:
                    yield _WorkerBatch(images, batch.labels, batch.ids,
                                       ring.flags, ring.slot, self._pin_memory)

    def _finish(self, images: torch.Tensor, labels: np.ndarray,
                ids: np.ndarray) -> tuple[Any, torch.Tensor, torch.Tensor]:
        if self._transform is not None:
            images = self._transform(images)
        return images, torch.from_numpy(labels), torch.from_numpy(ids)

    def _allocator(self) -> Callable[[tuple[int, ...]], torch.Tensor]:
        if self._pin_memory:
            if torch.cuda.is_available():
                return _pinned_empty
            warnings.warn("pin_memory=True but no CUDA device: batches are "
                          "read into ordinary memory")
        return _plain_empty


class _Ring:
    """A worker's reusable shared-memory batch buffers.  ``flags[i]`` is 1
    while buffer i is on its way to the training process, which clears it
    once it has copied the batch out (_receive)."""

    SLOTS = 4  # DataLoader's default prefetch_factor of 2, plus slack

    def __init__(self) -> None:
        self.flags = _shared_empty((self.SLOTS,))
        self.flags.zero_()
        self.buffers: list[torch.Tensor] = []
        self.slot = -1

    def take(self, shape: tuple[int, ...]) -> torch.Tensor:
        self.slot = (self.slot + 1) % self.SLOTS
        # Waits only if the training process has not taken its prefetched
        # batches (more than SLOTS - 1 of them, with a bigger prefetch_factor).
        while self.flags[self.slot]:
            time.sleep(0.001)
        if len(self.buffers) <= self.slot:
            self.buffers.append(_shared_empty(shape))
        self.flags[self.slot] = 1
        return self.buffers[self.slot]


class _WorkerBatch:
    """What a worker hands the DataLoader: unpickled in the training process
    as the ``(images, labels, ids)`` tuple, by _receive."""

    def __init__(self, images: torch.Tensor, labels: np.ndarray,
                 ids: np.ndarray, flags: torch.Tensor, slot: int,
                 pin_memory: bool) -> None:
        self.args = (images, labels, ids, flags, slot, pin_memory)

    def __reduce__(self):
        return _receive, self.args


def _receive(images: torch.Tensor, labels: np.ndarray, ids: np.ndarray,
             flags: torch.Tensor, slot: int, pin_memory: bool) -> tuple:
    # One copy per batch, into memory of this process (page-locked with
    # pin_memory), then the worker may reuse its buffer.
    layout = (torch.channels_last if images.dim() == 4 and images.stride(1) == 1
              else torch.contiguous_format)
    pin = pin_memory and torch.cuda.is_available()
    out = torch.empty(images.shape, dtype=images.dtype, pin_memory=pin,
                      memory_format=layout)
    out.copy_(images)
    flags[slot] = 0
    return out, torch.from_numpy(labels), torch.from_numpy(ids)

def _shared_empty(shape: tuple[int, ...]) -> torch.Tensor:
    storage = torch.UntypedStorage._new_shared(int(np.prod(shape)))
    return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)


def _pinned_empty(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.uint8, pin_memory=True)


def _plain_empty(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.uint8)
