"""A job as a Grain ``IterDataset``; imports grain (and so JAX), unlike the
rest.

Whole batches, checkpointed with the model::

    import json
    import grain
    import joaderfs

    dataset = joaderfs.grain_dataset(job, batch_size=30, epochs=epochs)
    assert isinstance(dataset, grain.IterDataset)
    iterator = iter(dataset)
    for step, batch in enumerate(iterator):
        images = batch["image"]  # [30, H, W, 3] uint8; "label", "id" [30]
        if step % 2 == 0:
            saved = json.dumps(iterator.get_state())

After a restart, ``iterator.set_state(json.loads(saved))`` on a new
iterator, before its first ``next``, writes the job's ``resume`` file with
the epoch and the ids consumed up to that state: the job delivers exactly
the rest of that epoch, then the later ones in full.  That is the state
Grain's checkpointing (``get_state``/``set_state``, Orbax) saves.

In worker processes, with ``mp_prefetch`` called on the dataset itself,
``grain_dataset(job, batch_size=30).mp_prefetch(
grain.MultiprocessingOptions(num_workers=2))``, each worker opens the
stream (one reader each) and reads an equal share of each epoch, in turns,
so that the elements come out in epoch order; the training process records
the ids it takes, so the state's resume is exact whatever the workers had
read ahead.  No absl flags need parsing and no ``set_slice`` of the
user's.  Put per-element maps after ``mp_prefetch`` (the daemon already
decoded, cropped and flipped): a pipeline that maps before it reads one
epoch per iterator, and its mid-epoch states cannot be restored
(``set_state`` says so), since each worker then knows only its own ids.
Close an iterator under ``mp_prefetch`` (``iterator.close()``) rather than
leave it to the garbage collector, as Grain advises.  A sample the daemon
skips (it cannot be decoded) shortens one worker's share; the epochs'
boundaries then come out of turn by an element, and a state taken there
may resume one element of an epoch twice or not at all.

Elements are dicts: per sample (``batch_size=None``) ``image`` [H, W, 3]
uint8, ``label``, ``id`` and ``epoch`` int64 scalars; per batch the same
with a leading batch axis, ``epoch`` a scalar (a batch is of one epoch; the
last batch of an epoch is shorter, or dropped with ``drop_last``).  One
iterator reads ``epochs`` epochs of the job (None: until the job ends);
each ``iter()`` starts where the job is.  A job with ``ranks=W`` is read
through ``next.<jax.process_index()>`` (``jax_rank``) unless ``rank`` is
given.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import grain
import numpy as np
from absl import flags

from .batches import BatchStream
from .distributed import jax_rank
from .resume import write_resume
from .shares import next_epoch, stream_status
from .stream import PathLike, next_path, open_next, read_records

# The key that marks this module's states inside a pipeline's state.
_MARK = "joaderfs"
# How often a worker that read its share checks whether the others have
# taken theirs, or whether the training process is closing the pipeline.
_EPOCH_END_POLL_S = 0.005


def grain_dataset(job: PathLike, batch_size: int | None = None,
                  drop_last: bool = False, epochs: int | None = 1,
                  rank: int | None = None) -> "JobIterDataset":
    """``job`` (a job directory) as a Grain ``IterDataset`` of samples, or
    of whole batches with ``batch_size`` (read with a few large reads, as
    ``iter_batches``; every sample needs one output size)."""
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be positive, not {batch_size}")
    if epochs is not None and epochs < 1:
        raise ValueError(f"epochs must be positive or None, not {epochs}")
    _allow_unparsed_flags()
    stream = next_path(job, jax_rank(job) if rank is None else rank)
    return JobIterDataset(stream, batch_size, drop_last, epochs)


def _allow_unparsed_flags() -> None:
    # Grain's mp_prefetch reads this absl flag in the training process, which
    # raises UnparsedFlagAccessError in a program that never parsed flags
    # (one not started by absl.app).  Marking the one flag as given makes its
    # default readable without parsing the program's flags.
    name = "grain_enable_multiprocess_worker_profiling"
    if not flags.FLAGS.is_parsed() and name in flags.FLAGS:
        flags.FLAGS[name].present = max(flags.FLAGS[name].present, 1)


class JobIterDataset(grain.IterDataset):
    """One job's stream as a Grain source (``grain_dataset``).  Each
    iterator reads the stream from its own open file."""

    def __init__(self, stream: Path, batch_size: int | None, drop_last: bool,
                 epochs: int | None) -> None:
        super().__init__()
        self.stream = stream
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.epochs = epochs
        # Set by set_slice in a worker of mp_prefetch: worker k of K.
        self.worker, self.workers = 0, 1
        # Set on the copy that mp_prefetch sends to its workers, whose ids
        # the training process records (_TrackedIterator), with the file
        # whose existence tells them that it closes the pipeline.
        self.tracked_elsewhere = False
        self.stop_flag: str | None = None

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Grain's mp_prefetch in each worker: this copy is worker
        ``sl.start`` of ``sl.step``, and reads that share of each epoch."""
        del sequential_slice  # shares are always taken in turns
        if sl.stop is not None or (sl.step or 1) < 1:
            raise ValueError(f"a joaderfs stream is divided among workers "
                             f"by slice(k, None, K), not {sl}")
        self.worker, self.workers = sl.start or 0, sl.step or 1

    def mp_prefetch(self, options: grain.MultiprocessingOptions | None = None,
                    worker_init_fn=None, sequential_slice: bool = False
                    ) -> grain.IterDataset:
        """Grain's ``mp_prefetch``, its output tracked in this process so
        that its states restore exactly (see the module's docstring)."""
        options = options or grain.MultiprocessingOptions(num_workers=10)
        if options.num_workers == 0:
            return self
        workers = copy.copy(self)
        workers.tracked_elsewhere = True
        inner = grain.IterDataset.mp_prefetch(workers, options,
                                              worker_init_fn,
                                              sequential_slice)
        return _TrackedIterDataset(inner, self, workers)

    def __iter__(self) -> "_JobIterator":
        return _JobIterator(self)

    def __str__(self) -> str:
        return (f"JobIterDataset(stream={str(self.stream)!r}, "
                f"batch_size={self.batch_size}, epochs={self.epochs})")


class _JobIterator(grain.DatasetIterator):
    """Reads its share of each epoch: the elements of the iterator's output
    are numbered across epochs (positions); worker k of K reads positions
    k, k + K, ... and so hands out every K-th element in turn.  The stream
    is opened on the first ``next``, so that ``set_state`` can write
    ``resume`` before it; states are JSON-able dicts.  Not thread-safe."""

    def __init__(self, dataset: JobIterDataset) -> None:
        super().__init__()
        self._ds = dataset
        self._raw = None
        self._stream: BatchStream | Iterator | None = None
        self._epoch: int | None = None  # of the file open now, else the last
        self._until: int | None = None  # the first epoch not to read
        self._start = 0     # the open epoch's first position
        self._samples = 0   # its samples,
        self._elements = 0  # elements
        self._dropped = 0   # and samples to read and drop (drop_last) after
        self._got_any = False  # whether a read of the open epoch got data
        self._next = dataset.worker  # the next position this iterator yields
        self._ended = False
        # This iterator's own account of the ids handed out in the epoch
        # (_consumed_epoch), unless the training process keeps it.
        self._tracking = not dataset.tracked_elsewhere and dataset.workers == 1
        if dataset.workers > 1 and not dataset.tracked_elsewhere and \
                dataset.epochs != 1:
            # Between epochs a worker waits for the others to take their
            # shares, which only a closing _TrackedIterator can cut short.
            raise ValueError("a joaderfs.grain_dataset of several epochs "
                             "needs mp_prefetch called on it itself (map "
                             "after it)")
        self._consumed: list[int] = []
        self._consumed_epoch: int | None = None

    def __next__(self) -> dict[str, Any]:
        while True:
            if self._ended:
                raise StopIteration
            if self._raw is None and not self._begin_epoch():
                self._ended = True
                raise StopIteration
            if self._next < self._start + self._elements:
                element = self._read_element()
                if element is not None:
                    self._got_any = True
                    return element
                if not self._got_any:
                    # End of file at once: the job has no more epochs.
                    self._close()
                    self._ended = True
                    raise StopIteration
            self._end_epoch()

    def _begin_epoch(self) -> bool:
        """Opens the stream for the next epoch; False when there is none."""
        if self._until is not None and self._epoch is not None and \
                self._epoch + 1 >= self._until:
            return False
        self._raw = open_next(self._ds.stream)
        try:
            epoch, samples = next_epoch(stream_status(self._ds.stream))
        except BaseException:
            self._close()
            raise
        if self._until is None:
            self._until = (None if self._ds.epochs is None
                           else epoch + self._ds.epochs)
        elif epoch >= self._until:
            self._close()
            return False
        self._epoch = epoch
        self._got_any = False
        size = self._ds.batch_size or 1
        self._elements, self._dropped = divmod(samples, size)
        if self._dropped and not self._ds.drop_last:
            self._elements, self._dropped = self._elements + 1, 0
        self._samples = samples
        self._stream = (BatchStream(self._raw, size) if self._ds.batch_size
                        else read_records(self._raw))
        return True

    def _element_size(self, position: int) -> int:
        size = self._ds.batch_size or 1
        index = position - self._start
        return min(size, self._samples - index * size)

    def _read_element(self) -> dict[str, Any] | None:
        """The element at position self._next, or None at an early end of
        the epoch (a sample the daemon skipped)."""
        if self._ds.batch_size:
            batch = self._stream.read_batch(self._element_size(self._next))
            if batch is None:
                return None
            element = {"image": batch.images, "label": batch.labels,
                       "id": batch.ids, "epoch": np.int64(self._epoch)}
            ids = batch.ids.tolist()
        else:
            record = next(self._stream, None)
            if record is None:
                return None
            element = {"image": record.image, "label": np.int64(record.label),
                       "id": np.int64(record.id),
                       "epoch": np.int64(self._epoch)}
            ids = [record.id]
        self._next += self._ds.workers
        if self._tracking:
            if self._consumed_epoch != self._epoch:
                self._consumed_epoch, self._consumed = self._epoch, []
            self._consumed.extend(ids)
        return element

    def _end_epoch(self) -> None:
        """After this iterator's share: reads the short batch to drop if it
        is this one's to read, closes, and, if it reads another epoch,
        waits until this one is handed out, so that its next open starts
        the next epoch."""
        end = self._start + self._elements
        if self._dropped and end % self._ds.workers == self._ds.worker and \
                self._ds.batch_size:
            self._stream.read_batch(self._dropped)
        self._close()
        self._start = end
        self._next = _first_position(end, self._ds.worker, self._ds.workers)
        if self._until is not None and self._epoch + 1 >= self._until:
            return
        while self._ds.workers > 1:
            status = stream_status(self._ds.stream)
            if status["epoch"] > self._epoch or status["remaining"] == 0:
                break
            # The others take their shares only while the training process
            # takes elements: once it closes the pipeline, end here.
            if os.path.exists(self._ds.stop_flag):
                self._ended = True
                raise StopIteration
            time.sleep(_EPOCH_END_POLL_S)

    def _close(self) -> None:
        if self._raw is not None:
            self._raw.close()
        self._raw = self._stream = None

    def close(self) -> None:
        self._close()
        super().close()

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {_MARK: 1, "until": self._until,
                                 "position": self._next}
        if self._tracking:
            state["epoch"] = self._consumed_epoch
            state["consumed"] = list(self._consumed)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """A state of this iterator, or one that ``_TrackedIterator`` made
        for the workers (``restart``).  Closes the stream if it is open:
        the next ``next`` opens it again, after the resume."""
        self._close()
        restart = state.get("restart")
        if restart is None:
            if self._tracking:
                restart = {"epoch": state["epoch"],
                           "consumed": state["consumed"],
                           "position": state["position"],
                           "until": state["until"]}
                if restart["epoch"] is not None:
                    write_resume(self._ds.stream.parent, restart["epoch"],
                                 restart["consumed"], _rank(self._ds.stream))
                self._consumed_epoch = restart["epoch"]
                self._consumed = list(restart["consumed"])
            elif state.get("until") is None:
                return  # nothing was read: a fresh start
            else:
                raise RuntimeError(
                    "this joaderfs iterator ran in an mp_prefetch worker "
                    "whose ids only the worker knew, so its state cannot "
                    "resume the epoch exactly: call mp_prefetch on "
                    "joaderfs.grain_dataset(...) itself (map after it)")
        self._until = restart["until"]
        # Resume at the first position of ours at or after the one due next.
        self._start = restart["position"]
        self._next = _first_position(self._start, self._ds.worker,
                                     self._ds.workers)
        self._epoch = None if restart["epoch"] is None else \
            restart["epoch"] - 1
        self._ended = False

    def __str__(self) -> str:
        return f"_JobIterator(worker={self._ds.worker} of {self._ds.workers})"


def _first_position(start: int, worker: int, workers: int) -> int:
    """The first position at or after ``start`` that is ``worker``'s."""
    return start + (worker - start) % workers


def _rank(stream: Path) -> int | None:
    _, dot, rank = stream.name.partition(".")
    return int(rank) if dot else None


class _TrackedIterDataset(grain.IterDataset):
    """``mp_prefetch``'s output, tracked: the ids of the elements this
    process takes, for states that resume exactly."""

    def __init__(self, parent: grain.IterDataset, source: JobIterDataset,
                 workers: JobIterDataset) -> None:
        super().__init__(parent)
        self._source = source
        self._workers = workers  # the copy the workers unpickle

    def __iter__(self) -> "_TrackedIterator":
        # The workers of this iterator, started by its first next, take the
        # flag's name with the rest of the dataset.  The file exists only
        # while the iterator closes: a killed process leaves none behind.
        flag = os.path.join(tempfile.gettempdir(),
                            f"joaderfs-grain-{uuid.uuid4().hex}.stop")
        self._workers.stop_flag = flag
        return _TrackedIterator(self._parent.__iter__(), self._source, flag)

    def __str__(self) -> str:
        return f"_TrackedIterDataset({self._source})"


class _TrackedIterator(grain.DatasetIterator):
    """Records the epoch and ids of each element taken from the workers.
    ``set_state`` writes the job's ``resume`` once, here, and then gives
    each worker where to go on: the position due next, which of them reads
    it (the workers' turns are Grain's interleave, restored with the rest of
    the state)."""

    def __init__(self, parent: grain.DatasetIterator, source: JobIterDataset,
                 flag: str) -> None:
        super().__init__(parent)
        self._source = source
        self._flag = flag  # the workers' stop flag
        self._epoch: int | None = None
        self._consumed: list[int] = []
        self._taken = 0  # elements, i.e. the position due next
        self._until: int | None = None

    def __next__(self) -> dict[str, Any]:
        element = self._parent.__next__()
        epoch = int(element["epoch"])
        if self._until is None and self._source.epochs is not None:
            self._until = epoch + self._source.epochs
        if epoch != self._epoch:
            self._epoch, self._consumed = epoch, []
        self._consumed.extend(np.asarray(element["id"]).reshape(-1).tolist())
        self._taken += 1
        return element

    def get_state(self) -> dict[str, Any]:
        return {"pipeline": self._parent.get_state(), "epoch": self._epoch,
                "consumed": list(self._consumed), "position": self._taken,
                "until": self._until}

    def set_state(self, state: dict[str, Any]) -> None:
        if state["epoch"] is not None:
            write_resume(self._source.stream.parent, state["epoch"],
                         state["consumed"], _rank(self._source.stream))
        restart = {"epoch": state["epoch"], "position": state["position"],
                   "until": state["until"]}
        self._epoch, self._consumed = state["epoch"], list(state["consumed"])
        self._taken, self._until = state["position"], state["until"]
        self._parent.set_state(_with_restart(state["pipeline"], restart))

    def close(self) -> None:
        # Grain's close waits for each worker's element under way; a worker
        # waiting for the others at an epoch's end sees the flag and ends.
        if not self._closed:
            open(self._flag, "w").close()
            try:
                super().close()
            finally:
                os.unlink(self._flag)


def _with_restart(state: Any, restart: dict[str, Any]) -> Any:
    """``state`` with each of this module's worker states in it replaced by
    ``{"joaderfs": 1, "restart": restart}``."""
    if isinstance(state, dict):
        if _MARK in state:
            return {_MARK: 1, "restart": restart}
        return {k: _with_restart(v, restart) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_with_restart(v, restart) for v in state)
    return state
