"""A PyTorch IterableDataset over one job; imports torch, unlike the rest.

Batches (the fast path)::

    import torch
    from torch.utils.data import DataLoader
    from joaderfs import JobDataset

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dataset = JobDataset(job, batch_size=30)
    loader = DataLoader(dataset, batch_size=None, num_workers=2,
                        persistent_workers=True,
                        pin_memory=torch.cuda.is_available())
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
one has been dropped (fresh memory costs a page fault per 4 KiB).  A worker
reads into shared-memory buffers that the training process maps once, the
first time it receives each, and then hands out as they are; a tensor the
training code keeps stays valid, its buffer is simply not reused.

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
(``loader_batch_size=B``); without it each worker reads until EOF and makes
its own short last batch.

Use ``persistent_workers=True``: each ``for`` over the loader then makes the
same workers iterate the dataset again, which re-opens ``next`` and so reads
the next epoch.  Without it every epoch starts fresh workers and pays their
start-up: on a 16-core GPU machine, going from 2 to 8 workers over
6000-image epochs cut throughput from 5758 to 2785 samples/s that way.
Samples are not shuffled on the client: the daemon already hands each job a
uniformly random order.
"""

from __future__ import annotations

import itertools
import os
import warnings
import weakref
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .batches import BatchStream
from .distributed import default_rank
from .shares import batch_sizes, epoch_length
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
    """

    def __init__(self, job: PathLike, layout: str = "CHW",
                 transform: Transform | None = None,
                 batch_size: int | None = None, drop_last: bool = False,
                 pin_memory: bool = False, rank: int | None = None,
                 loader_batch_size: int | None = None) -> None:
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
        self._path = next_path(job, default_rank(job, rank))
        self._chw = layout == "CHW"
        self._transform = transform
        self._batch_size = batch_size
        self._loader_batch_size = loader_batch_size
        self._drop_last = drop_last
        self._pin_memory = pin_memory
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
        return self._counted(self._batches(raw, sizes), total)

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
        (read until EOF) for the only reader of the loader."""
        info = get_worker_info()
        batch_size = self._batch_size or self._loader_batch_size
        if info is None or info.num_workers == 1 or batch_size is None:
            return None
        return batch_sizes(epoch_length(self._path), batch_size, info.id,
                           info.num_workers)

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
        # A transform's output may alias its input, so a worker with one
        # hands out fresh shared memory that torch sends as usual.
        ring = _WorkerRing() if in_worker and self._transform is None else None
        if not in_worker and self._pool is None:
            self._pool = _BufferPool(self._allocator())
        pool = None if in_worker else self._pool
        allocate = (ring.take if ring else _shared_empty if in_worker
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


# Design note: the shared-memory ring (workers > 0, no transform).
#
# Why: torch sends a tensor in shared memory to another process as a file
# descriptor that the receiver maps; doing that per batch costs more than
# reading the batch from the mount.  So each worker keeps up to SLOTS
# buffers (_WorkerRing) and sends each buffer once; the training process
# keeps every buffer mapped (_RingView, in _rings) and later batches name
# only (ring id, slot).
#
# State: one shared uint8 array, ``control``, of 2 * SLOTS + 1 bytes:
#   control[s]          1 while slot s holds a batch the training process
#                       has not finished with.  The worker sets it when it
#                       reads into the slot; the training process clears it
#                       when the last tensor made from the batch is freed
#                       (a weakref finalizer), or at once after copying into
#                       pinned memory.
#   control[SLOTS + s]  1 once the training process has mapped slot s's
#                       buffer: the worker then stops sending it.
#   control[2 * SLOTS]  1 once the training process has ``control`` itself.
# Each byte has one writer at a time (a slot's in-use byte changes hands
# with the batch), so no lock is needed; a stale read only makes the worker
# pick another slot or send a buffer or ``control`` once more.
#
# Lifetime: a ring lives for one iteration of the dataset in one worker; the
# ring id (pid, serial, random bytes) tells a new one from an old one, and
# the views of exited workers are dropped when a new ring arrives.  A tensor
# the training code keeps holds its buffer's mapping, so its data stays
# valid; that slot is simply not reused.  When every slot is in use, a batch
# goes out in fresh shared memory (slot -1), the ordinary torch way.
class _WorkerRing:
    """A DataLoader worker's reusable shared-memory batch buffers: the
    worker's side of the ring (see the design note above)."""

    SLOTS = 16

    def __init__(self) -> None:
        self.id = (os.getpid(), next(_ring_serials), os.urandom(8))
        self.control = _shared_empty((2 * self.SLOTS + 1,))
        self.control.zero_()
        self.flags = self.control.numpy()
        self.buffers: list[torch.Tensor] = []
        self.slot = -1
        self.fresh: torch.Tensor | None = None

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        for slot, buffer in enumerate(self.buffers):
            if not self.flags[slot] and buffer.numel() == size:
                break
        else:
            slot = len(self.buffers)
            if slot == self.SLOTS:
                self.slot = -1
                self.fresh = _shared_empty(shape)
                return self.fresh.numpy()
            self.buffers.append(_shared_empty(shape))
        self.slot = slot
        self.flags[slot] = 1
        return self.buffers[slot].numpy()

    def message(self, batch, chw: bool, pin_memory: bool) -> "_WorkerBatch":
        slot = self.slot
        if slot < 0:
            buffer = self.fresh
        else:
            known = self.flags[self.SLOTS + slot]
            buffer = None if known else self.buffers[slot]
        control = None if self.flags[2 * self.SLOTS] else self.control
        return _WorkerBatch((self.id, slot, buffer, control,
                             batch.images.shape, batch.labels, batch.ids,
                             chw, pin_memory))


_ring_serials = itertools.count()


class _WorkerBatch:
    """What a worker hands the DataLoader: unpickled in the training process
    as the ``(images, labels, ids)`` tuple, by _receive."""

    def __init__(self, args: tuple) -> None:
        self.args = args

    def __reduce__(self):
        return _receive, self.args


class _RingView:
    """The training process's side of one worker's ring: its buffers as
    numpy arrays, mapped once."""

    def __init__(self, ring_id: tuple) -> None:
        self.id = ring_id
        self.control: torch.Tensor | None = None
        self.flags: np.ndarray | None = None
        self.buffers: dict[int, np.ndarray] = {}


# The rings of the workers this process receives batches from, by worker
# pid: a worker has one ring at a time (one per iteration of the dataset;
# one JobDataset iterated after another in a worker, as ChainDataset does,
# is fine, two interleaved in one worker are not supported).
_rings: dict[int, _RingView] = {}


def _ring_view(ring_id: tuple) -> _RingView:
    view = _rings.get(ring_id[0])
    if view is None or view.id != ring_id:
        # A new ring: a new epoch's workers.  Forget the rings of workers
        # that have exited; tensors still in use keep their memory.
        for pid in [p for p in _rings if not os.path.exists(f"/proc/{p}")]:
            del _rings[pid]
        view = _rings[ring_id[0]] = _RingView(ring_id)
    return view


def _release(flags: np.ndarray, slot: int) -> None:
    flags[slot] = 0


def _receive(ring_id: tuple, slot: int, buffer: torch.Tensor | None,
             control: torch.Tensor | None, shape: tuple[int, ...],
             labels: np.ndarray, ids: np.ndarray, chw: bool,
             pin_memory: bool) -> tuple:
    if slot < 0:  # fresh shared memory, not a ring buffer
        images = torch.from_numpy(
            buffer.numpy().reshape(-1)[:int(np.prod(shape))].reshape(shape))
    else:
        view = _ring_view(ring_id)
        if control is not None:
            view.control, view.flags = control, control.numpy()
            view.flags[-1] = 1
        if buffer is not None:
            view.buffers[slot] = buffer.numpy().reshape(-1)
            view.flags[_WorkerRing.SLOTS + slot] = 1
        array = view.buffers[slot][:int(np.prod(shape))].reshape(shape)
        if pin_memory and torch.cuda.is_available():
            # One copy into page-locked memory; the buffer is free again.
            images = torch.empty(shape, dtype=torch.uint8, pin_memory=True)
            images.numpy()[...] = array
            view.flags[slot] = 0
        else:
            weakref.finalize(array, _release, view.flags, slot)
            images = torch.from_numpy(array)
    if chw:
        images = images.permute(0, 3, 1, 2)
    return images, torch.from_numpy(labels), torch.from_numpy(ids)


def _shared_empty(shape: tuple[int, ...]) -> torch.Tensor:
    storage = torch.UntypedStorage._new_shared(int(np.prod(shape)))
    return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)


def _pinned_empty(shape: tuple[int, ...]) -> np.ndarray:
    return torch.empty(shape, dtype=torch.uint8, pin_memory=True).numpy()


def _numpy_empty(shape: tuple[int, ...]) -> np.ndarray:
    return np.empty(shape, np.uint8)
