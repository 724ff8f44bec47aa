"""A PyTorch IterableDataset over one job; imports torch, unlike the rest.

Batches (the fast path)::

    import torch
    from torch.utils.data import DataLoader
    from joaderfs import JobDataset

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dataset = JobDataset(job, batch_size=30,
                         pin_memory=torch.cuda.is_available())
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    for epoch in range(epochs):
        for images, labels, ids in loader:  # images: [B, 3, H, W] uint8
            images = images.to(device, non_blocking=True)
            ...

The dataset reads whole batches (``batch_size=B``) with a few large reads
straight into one array, so the DataLoader must not batch again
(``batch_size=None``).  ``images`` is a dense tensor in PyTorch's
``channels_last`` layout (the stream's HWC records, permuted without a copy);
models and ``.to(device)`` accept it as is.  No batch is copied on its way
to the training loop: batch buffers are reused once every tensor made from
one has been dropped (fresh memory costs a page fault per 4 KiB); a tensor
the training code keeps stays valid, its buffer is simply not reused.

``num_workers=0`` is the fast setting for batches: the daemon decodes, so
there is nothing for worker processes to do but copy, and on a machine
where the daemon's decode threads need the cores, workers compete with them
(on 2 cores one job's cold epoch ran 5-30 % faster without them, at 6-21 %
less CPU a sample, docs/benchmarks.md).  The training process reads the
batches itself, on a thread of the dataset's own (``prefetch=2``: up to 2
batches read ahead), so that reading overlaps the training step.  With workers
(``num_workers=K``) each worker reads into shared-memory buffers that the
training process maps once, the first time it receives each, and then
hands out as they are.

Per sample::

    from torch.utils.data import DataLoader
    from joaderfs import JobDataset

    loader = DataLoader(JobDataset(job, loader_batch_size=30), batch_size=30,
                        num_workers=2, persistent_workers=True)
    for epoch in range(epochs):
        for images, labels, ids in loader:
            ...

yields the same tuples, but every sample is read, converted and stacked on
its own, which costs about ten times the client CPU of the batch path
(docs/benchmarks.md).  Use it for a per-sample transform of your own.

Each DataLoader worker opens ``next`` on its own, so the daemon sees one
reader per worker and divides the job's samples among them: within an epoch
each sample reaches exactly one worker, once.  With two workers or more, the
workers take whole batches (joaderfs.shares): worker k reads batches k,
k + K, ... of the epoch's ceil(N/B) and not a sample more, so the loader
yields ceil(N/B) batches, only the last one short, whatever the workers'
speeds: the ranks of a data-parallel job run the same number of steps.  The
per-sample dataset needs the DataLoader's batch size for that
(``loader_batch_size=B``); without it each worker reads its share of single
samples (samples k, k + K, ... of the epoch's N, never more), so the epoch
still ends whole however late a worker starts, but each worker makes its own
short last batch.

With workers, use ``persistent_workers=True``: each ``for`` over the loader
then makes the same workers iterate the dataset again, which re-opens
``next`` and so reads the next epoch.  Without it every epoch starts fresh
workers and pays their start-up: on a 16-core GPU machine, going from 2 to 8
workers over 6000-image epochs cut throughput from 5758 to 2785 samples/s
that way.  (Without workers each ``for`` iterates the dataset again in the
training process: the next epoch too.)
Samples are not shuffled on the client: the daemon already hands each job a
uniformly random order.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import warnings
import weakref
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .batches import BatchStream
from .distributed import default_rank
from .shares import batch_sizes, epoch_length
from .shm_ring import WorkerRing, shared_empty
from .stream import PathLike, next_path, open_next, read_records

Transform = Callable[[torch.Tensor], Any]


class JobDataset(IterableDataset):
    """Yields one epoch of a job per iteration, by sample or by batch.

    Without ``batch_size``: ``(image, label, id)`` per sample, ``image`` a
    uint8 RGB tensor ``[3, H, W]`` (``layout="CHW"``, a view of the
    ``[H, W, 3]`` record, not a copy) or ``[H, W, 3]`` (``layout="HWC"``),
    ``label`` and ``id`` ints.

    With ``batch_size=B``: ``(images, labels, ids)`` per batch of B samples
    (the last one of an epoch may be shorter, or dropped with
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
    ``loader_batch_size=B`` (per sample only): the DataLoader's
    ``batch_size``, so that its workers take whole batches, as the batch
    path's do.

    ``prefetch=P`` (batches, in the training process: ``num_workers=0`` or
    the dataset iterated directly): a thread reads up to P batches ahead of
    the caller, so that reading overlaps the training step; 0 reads each
    batch when it is asked for.  Within an epoch every sample is still
    handed out once; a ``break`` ends the thread and closes ``next`` at
    once (the batches read ahead are lost for that epoch, as a worker's
    are).  A read error is raised in the caller.  Workers read ahead
    already (the DataLoader's ``prefetch_factor``) and ignore it, as does
    the per-sample path.

    One iteration is for one thread; iterations in several threads at once
    share the buffer pool safely.
    """

    def __init__(self, job: PathLike, layout: str = "CHW",
                 transform: Transform | None = None,
                 batch_size: int | None = None, drop_last: bool = False,
                 pin_memory: bool = False, rank: int | None = None,
                 loader_batch_size: int | None = None,
                 prefetch: int = 2) -> None:
        super().__init__()
        if layout not in ("CHW", "HWC"):
            raise ValueError(f"layout must be 'CHW' or 'HWC', not {layout!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if batch_size is None and (drop_last or pin_memory):
            raise ValueError("drop_last and pin_memory need batch_size")
        if loader_batch_size is not None and (batch_size is not None or
                                              loader_batch_size < 1):
            raise ValueError("loader_batch_size is for a per-sample dataset "
                             "and must be positive")
        if prefetch < 0:
            raise ValueError(f"prefetch must be 0 or more, not {prefetch}")
        self._path = next_path(job, default_rank(job, rank))
        self._chw = layout == "CHW"
        self._transform = transform
        self._batch_size = batch_size
        self._loader_batch_size = loader_batch_size
        self._drop_last = drop_last
        self._pin_memory = pin_memory
        self._prefetch = prefetch
        # The training process's batch buffers, kept from epoch to epoch.
        self._pool: _BufferPool | None = None
        # Items handed out in the pass under way, and of how many if known
        # (state_dict).
        self._yielded = 0
        self._total: int | None = None

    def __len__(self) -> int:
        """Samples of the epoch a pass reads now (batches, with
        ``batch_size``), from the job's status: for progress bars and
        Lightning's ETA. A pass of a ranked job's stream counts its share."""
        try:
            length = epoch_length(self._path)
        except (OSError, ValueError, KeyError) as e:
            # No status to tell (a copy of a stream, an old daemon): no
            # length, which list() and DataLoader take as unknown.
            raise TypeError(f"the epoch's length is unknown: {e}") from e
        if self._batch_size is None:
            return length
        if self._drop_last:
            return length // self._batch_size
        return -(-length // self._batch_size)

    def __getstate__(self) -> dict[str, Any]:
        # A spawned worker gets the settings, not the buffers.
        return dict(self.__dict__, _pool=None)

    def __iter__(self) -> Iterator[tuple[Any, Any, Any]]:
        if (self._batch_size is not None and self._pool is None
                and get_worker_info() is None):
            # Here, not in the prefetch thread: a warning about pinned
            # memory reaches the caller's thread.
            self._pool = _BufferPool(self._allocator())
        # The file is opened now, when the worker starts, so that no worker
        # joins after the others have emptied the epoch.
        raw = open_next(self._path)
        try:
            share = self._share()
            sizes = None if share is None else list(share)
        except BaseException:
            raw.close()
            raise
        if self._batch_size is None:
            limit = None if sizes is None else sum(sizes)
            return self._counted(self._samples(raw, limit), limit)
        total = None
        if sizes is not None:
            short = self._drop_last and sizes and sizes[-1] < self._batch_size
            total = len(sizes) - short
        batches = self._batches(raw, sizes)
        if self._prefetch and get_worker_info() is None:
            batches = _prefetched(batches, self._prefetch)
        return self._counted(batches, total)

    # torchdata's StatefulDataLoader uses these two (its Stateful protocol).
    # Without them it would resume a pass by reading and dropping as many
    # items as the state says were seen: samples the daemon hands out once
    # per epoch, lost.  A mid-epoch state is refused instead: StreamState
    # resumes exactly.
    # A pass's items are known in advance only for a worker's share; a state
    # taken at the last item of a pass of unknown length counts as mid-epoch.
    def state_dict(self) -> dict[str, int | None]:
        return {"yielded": self._yielded, "of": self._total}

    def load_state_dict(self, state: dict[str, int | None]) -> None:
        if state.get("yielded") and state["yielded"] != state.get("of"):
            raise RuntimeError(
                f"a joaderfs job cannot resume mid-epoch from a "
                f"StatefulDataLoader state ({state['yielded']} items of the "
                f"epoch seen): use joaderfs.StreamState, which writes the "
                f"ids consumed to the job's resume file")

    def _counted(self, items: Iterator[Any], total: int | None
                 ) -> Iterator[Any]:
        self._yielded, self._total = 0, total
        for item in items:
            self._yielded += 1
            yield item
        self._yielded = 0

    def _share(self) -> Iterator[int] | None:
        """This worker's batch sizes, of the epoch it has just opened; None
        (read until EOF) for the only reader of the loader.  A per-sample
        dataset without ``loader_batch_size`` takes single samples: a worker
        that reads until EOF would, if it started after the others had
        emptied the epoch, read the whole next one within this pass."""
        info = get_worker_info()
        if info is None or info.num_workers == 1:
            return None
        length = epoch_length(self._path)
        batch_size = self._batch_size or self._loader_batch_size
        if batch_size is None:
            # Samples k, k + K, ...: their count alone (sizes of 1 would make
            # a list as long as the share).
            return iter([len(range(info.id, length, info.num_workers))])
        return batch_sizes(length, batch_size, info.id, info.num_workers)

    def _samples(self, raw, limit: int | None
                 ) -> Iterator[tuple[Any, int, int]]:
        with raw:
            for record in read_records(raw, limit):
                image: Any = torch.from_numpy(record.image)
                if self._chw:
                    image = image.permute(2, 0, 1)
                if self._transform is not None:
                    image = self._transform(image)
                yield image, record.label, record.id

    def _batches(self, raw, sizes: Iterator[int] | None) -> Iterator[Any]:
        in_worker = get_worker_info() is not None
        # A worker hands its batches out through its ring (shm_ring).  A
        # transform's output may alias its input, so a worker with one
        # hands out fresh shared memory that torch sends as usual.
        ring = WorkerRing() if in_worker and self._transform is None else None
        pool = None if in_worker else self._pool
        allocate = (ring.take if ring else shared_empty if in_worker
                    else pool.take)
        if sizes is None:
            sizes = itertools.repeat(self._batch_size)
        with raw:
            stream = BatchStream(raw, self._batch_size, allocate)
            for count in sizes:
                batch = stream.read_batch(count)
                if batch is None:
                    return
                if self._drop_last and len(batch.ids) < self._batch_size:
                    return
                if ring is not None:
                    yield ring.message(batch, self._chw, self._pin_memory)
                    continue
                images = batch.images
                if pool is not None:
                    images = pool.tensor(images)
                if self._chw:
                    images = images.permute(0, 3, 1, 2)
                yield self._finish(images, batch.labels, batch.ids)

    def _finish(self, images: torch.Tensor, labels: np.ndarray,
                ids: np.ndarray) -> tuple[Any, torch.Tensor, torch.Tensor]:
        if self._transform is not None:
            images = self._transform(images)
        return images, torch.from_numpy(labels), torch.from_numpy(ids)

    def _allocator(self) -> Callable[[tuple[int, ...]], np.ndarray]:
        if self._pin_memory:
            if torch.cuda.is_available():
                return _pinned_empty
            warnings.warn("pin_memory=True but no CUDA device: batches are "
                          "read into ordinary memory")
        return _numpy_empty


class _BufferPool:
    """The training process's batch buffers (numpy arrays, page-locked with
    pin_memory).  A buffer goes back to the pool once the last tensor made
    from it is gone: ``tensor()`` hands out ``torch.from_numpy`` of a fresh
    view, and the tensor's storage holds that view until it is freed.  Safe
    for iterations in several threads at once (list appends and pops are
    atomic)."""

    def __init__(self, empty: Callable[[tuple[int, ...]], np.ndarray]) -> None:
        self._empty = empty
        self._free: list[np.ndarray] = []  # appended to by finalizers

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        while True:
            try:
                buffer = self._free.pop()
            except IndexError:
                return self._empty(shape)
            if buffer.shape == shape:
                return buffer

    def tensor(self, images: np.ndarray) -> torch.Tensor:
        """``images``: a slice of a buffer from take(), hence its base."""
        view = images[:]
        weakref.finalize(view, self._free.append, images.base)
        return torch.from_numpy(view)


# What the prefetch thread puts in its queue: (_BATCH, batch), then
# (_END, None) or (_ERROR, exception).
_BATCH, _END, _ERROR = range(3)


def _prefetched(batches: Iterator[Any], depth: int) -> Iterator[Any]:
    """Yields the items of ``batches``, read ahead by a thread of its own, at
    most ``depth`` of them waiting, so that reading (readv releases the GIL)
    overlaps the training step.  Owns ``batches``: the thread closes it, and
    so the job's ``next``, when the epoch ends, on an error (raised here, in
    the consumer) or when this iterator is closed or dropped (a ``break``),
    which waits for the thread to end (its read under way first): a later
    ``iter()`` then opens ``next`` as the only reader again.  Buffers are never written while
    handed out: the thread reads into buffers from the dataset's pool, which
    holds only those whose tensors are all gone.  One consumer thread."""
    ready: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    thread = threading.Thread(target=_prefetch, args=(batches, ready, stop),
                              name="joaderfs-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = ready.get()
            if kind == _END:
                return
            if kind == _ERROR:
                raise value
            yield value
            del value  # the caller's batch alone decides when it is freed
    finally:
        stop.set()
        # Frees the thread from a put into a full queue; it then sees stop
        # (it puts at most once more, into the room made here).
        try:
            while True:
                ready.get_nowait()
        except queue.Empty:
            pass
        thread.join()


def _prefetch(batches: Iterator[Any], ready: queue.Queue,
              stop: threading.Event) -> None:
    """The prefetch thread of _prefetched."""
    try:
        try:
            for batch in batches:
                ready.put((_BATCH, batch))
                del batch  # else it would hold a buffer through the next read
                if stop.is_set():
                    return
        finally:
            batches.close()  # closes next: the daemon's reader count
        ready.put((_END, None))
    except BaseException as e:  # whatever it is, the consumer raises it
        if not stop.is_set():
            ready.put((_ERROR, e))


def _pinned_empty(shape: tuple[int, ...]) -> np.ndarray:
    return torch.empty(shape, dtype=torch.uint8, pin_memory=True).numpy()


def _numpy_empty(shape: tuple[int, ...]) -> np.ndarray:
    return np.empty(shape, np.uint8)
