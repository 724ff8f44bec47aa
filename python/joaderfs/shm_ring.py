"""The shared-memory ring: how DataLoader workers hand JobDataset's
batches (``batch_size=B``, no ``transform``) to the training process
without a new shared-memory mapping per batch.  Imports torch; only
torch_dataset imports it.

What it owns: the worker's side (``WorkerRing``: up to SLOTS reusable
batch buffers in shared memory and their ``control`` bytes; the
``_WorkerBatch`` it yields for a batch), the training process's side
(``_receive``, which unpickles a ``_WorkerBatch`` into ``(images, labels,
ids)``; ``_rings``, the buffers mapped so far, by worker pid) and
``shared_empty``, a tensor in shared memory.  JobDataset decides when a
ring is used; BatchStream reads into its buffers.

Why: torch sends a tensor in shared memory to another process as a file
descriptor that the receiver maps; doing that per batch costs more than
reading the batch from the mount.  So each worker keeps up to SLOTS
buffers (WorkerRing) and sends each buffer once; the training process
keeps every buffer mapped (_RingView, in _rings) and later batches name
only (ring id, slot).

State: one shared uint8 array, ``control``, of 2 * SLOTS + 1 bytes:

- ``control[s]``: 1 while slot s holds a batch the training process has
  not finished with.  The worker sets it when it reads into the slot; the
  training process clears it when the last tensor made from the batch is
  freed (a weakref finalizer), or at once after copying into pinned
  memory.
- ``control[SLOTS + s]``: 1 once the training process has mapped slot s's
  buffer: the worker then stops sending it.
- ``control[2 * SLOTS]``: 1 once the training process has ``control``
  itself.

Lifetime: a ring lives for one iteration of the dataset in one worker; the
ring id (pid, serial, random bytes) tells a new one from an old one, and
the views of exited workers are dropped when a new ring arrives.  A tensor
the training code keeps holds its buffer's mapping, so its data stays
valid; that slot is simply not reused.  When every slot is in use, a batch
goes out in fresh shared memory (slot -1), the ordinary torch way.

Process safety: each ``control`` byte has one writer at a time (the
worker zeroes them all before it first sends ``control``; then a slot's
in-use byte changes hands with the batch, and the other bytes are written
only by the training process), so no lock is needed; a stale read only
makes the worker pick another slot or send a buffer or ``control`` once
more.

Thread safety: a WorkerRing belongs to the one iteration that made it, in
one thread of its worker.  In the training process ``_receive`` runs in the
thread that unpickles a DataLoader's batches (its iterating thread, or its
pin-memory thread with the DataLoader's ``pin_memory=True``), and the
finalizers that free a slot run in whichever thread drops the last tensor
of its batch (one byte written).  ``_rings`` is shared by every DataLoader
of the process, keyed by worker pid: a worker has one ring at a time (one
JobDataset iterated after another in a worker, as ChainDataset does, is
fine, two interleaved in one worker are not supported); ``_rings_lock``
guards the table, so loaders whose batches are unpickled in two threads at
once (two DataLoaders iterated by two threads) each find their own ring.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref

import numpy as np
import torch


class WorkerRing:
    """A DataLoader worker's reusable shared-memory batch buffers: the
    worker's side of the ring.  ``take`` is JobDataset's allocator for
    BatchStream; ``message`` is what the worker yields for the batch just
    read into the slot ``take`` gave."""

    SLOTS = 16

    def __init__(self) -> None:
        self.id = (os.getpid(), next(_ring_serials), os.urandom(8))
        self.control = shared_empty((2 * self.SLOTS + 1,))
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
                self.fresh = shared_empty(shape)
                return self.fresh.numpy()
            self.buffers.append(shared_empty(shape))
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
# pid: a worker has one ring at a time (the module's docstring).
_rings: dict[int, _RingView] = {}
_rings_lock = threading.Lock()


def _ring_view(ring_id: tuple) -> _RingView:
    with _rings_lock:
        view = _rings.get(ring_id[0])
        if view is None or view.id != ring_id:
            # A new ring: a new epoch's workers.  Forget the rings of
            # workers that have exited; tensors still in use keep their
            # memory.
            for pid in [p for p in _rings
                        if not os.path.exists(f"/proc/{p}")]:
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
            view.flags[WorkerRing.SLOTS + slot] = 1
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


def shared_empty(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised uint8 tensor of ``shape`` in shared memory, which
    torch sends to another process as a file descriptor, not a copy."""
    storage = torch.UntypedStorage._new_shared(int(np.prod(shape)))
    return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)
