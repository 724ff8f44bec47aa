"""Exact mid-epoch resume (docs/design.md 2.7): what the training process has
received, as a ``state_dict`` for its checkpoints, and the ``resume`` file::

    import os
    import torch
    from torch.utils.data import DataLoader
    import joaderfs

    loader = DataLoader(joaderfs.JobDataset(job, batch_size=30),
                        batch_size=None, num_workers=0)
    state = joaderfs.StreamState(job)                  # or rank=R
    if os.path.exists("checkpoint.pt"):
        checkpoint = torch.load("checkpoint.pt")
        model.load_state_dict(checkpoint["model"])
        state.load_state_dict(checkpoint["data"])      # resumes the epoch
    for epoch in range(state.epoch or 0, epochs):      # from the checkpoint's
        for step, (images, labels, ids) in enumerate(state.track(loader)):
            ...
            if step % 3 == 0:
                torch.save({"model": model.state_dict(),
                            "data": state.state_dict()}, "checkpoint.pt")

``track`` wraps any iterable of batches or samples whose third item is the
ids (``JobDataset``'s tuples, through a DataLoader with any ``num_workers``)
and records the ids as the training process receives them, so what a
checkpoint holds is what was consumed, whatever the workers (or the
dataset's prefetch thread) had read ahead.
``load_state_dict`` writes ``epoch=E`` (and ``rank=R``) and those ids to the
job's ``resume`` file before the next read: the job then delivers exactly
the rest of epoch E, then E+1 in full.  Samples the workers had read but the
training process never received are delivered again; none is delivered
twice within what the checkpoints record.

Resume on another number of ranks (elastic): ``elastic_state_dict()`` is a
state of no rank, the union of the ids every rank of the job consumed in the
epoch, gathered through torch.distributed (``all_gather_object``; every rank
calls it) or from the ranks' ``state_dict()``s the caller gathered.  Loaded
into a ``StreamState`` of a job of any number of ranks, it writes ``resume``
without ``rank=``: the new ranks then deliver exactly the rest of the epoch
between them, in equal shares (docs/ranks.md).  So at a checkpoint every
rank calls ``data = state.elastic_state_dict()`` and rank 0 saves ``data``;
the new run, a job made with ``ranks=`` its world size, calls
``state.load_state_dict(data)`` on every rank before reading.
"""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .control import REJECTED_ERRNOS, rejected_write
from .distributed import default_rank, initialised_process_group
from .stream import PathLike

# The reader of a killed training process (its DataLoader workers) may still
# hold the stream open for a moment; the daemon refuses a resume until then.
_BUSY_RETRY_S = 30.0


def _ids_of_item(item: Any) -> Iterable[int]:
    ids = item[2]
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    return ids if isinstance(ids, (list, tuple)) else [ids]


class StreamState:
    """The ids of the current epoch the training process has received from
    one stream of a job (``next``, or ``next.R`` of rank R; the rank
    defaults as ``JobDataset``'s does)."""

    def __init__(self, job: PathLike, rank: int | None = None,
                 ids_of: Callable[[Any], Iterable[int]] = _ids_of_item
                 ) -> None:
        self.job = Path(job)
        self.rank = default_rank(self.job, rank)
        self._ids_of = ids_of
        self.epoch: int | None = None  # of the ids below, once known
        self.consumed: list[int] = []

    def track(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yields ``iterable``'s items, recording their ids; one pass is one
        epoch of the stream."""
        first = True
        for item in iterable:
            if first:
                first = False
                epoch = self._current_epoch()
                if epoch != self.epoch:
                    self.epoch, self.consumed = epoch, []
            self.consumed.extend(int(i) for i in self._ids_of(item))
            yield item
        if not first:
            # The epoch is over: a checkpoint now resumes at the next one.
            self.epoch, self.consumed = self.epoch + 1, []

    def state_dict(self) -> dict[str, Any]:
        """This stream's state: its rank's ids of the epoch."""
        return {"epoch": self.epoch, "rank": self.rank,
                "consumed": list(self.consumed)}

    def elastic_state_dict(self, states: Iterable[dict[str, Any]] | None = None
                           ) -> dict[str, Any]:
        """A state of no rank: the union of the ids every rank consumed in
        the epoch, which resumes the job on any number of ranks.  ``states``
        are every rank's ``state_dict()``, gathered by the caller; without
        them they are gathered through torch.distributed (a collective:
        every rank of the process group calls it)."""
        if states is None:
            states = _all_gather(self.state_dict())
        return merge_states(states)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Takes a checkpoint's state and makes the job deliver the rest of
        its epoch: writes the ``resume`` file (call it before reading).

        A state of no rank (``elastic_state_dict()``, or that of a job
        without ranks) is written without ``rank=``: on a job with ranks, the
        rest is split anew among them.  Every process writes it (to its own
        mount, if the ranks have several); with a torch.distributed process
        group they then wait for each other, so that no rank reads before
        every write is done."""
        rank = state.get("rank")
        if rank is not None and rank != self.rank:
            raise ValueError(f"the state is of rank {rank}, "
                             f"this stream of rank {self.rank}")
        self.epoch = state["epoch"]
        self.consumed = [int(i) for i in state["consumed"]]
        if self.epoch is not None:
            write_resume(self.job, self.epoch, self.consumed, rank)
        if rank is None and self.rank is not None:
            # Writes of the same ids add up until a rank reads: wait until
            # every rank has written before any reads.
            _barrier()

    def _current_epoch(self) -> int:
        # Read once the first item of the pass has arrived: the stream is in
        # that item's epoch, or has just ended it (then status shows it).
        status = json.loads((self.job / "status").read_bytes())
        if self.rank is not None:
            status = status["ranks"][self.rank]
        return int(status["epoch"])


def merge_states(states: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The state of no rank that the ranks' ``state_dict()``s make
    together: their epoch and the union of their ids (sorted).  The states
    must be of one epoch; a rank that has received nothing yet (epoch None)
    adds nothing."""
    epochs: set[int] = set()
    consumed: set[int] = set()
    for state in states:
        if state["epoch"] is None:
            continue
        epochs.add(state["epoch"])
        consumed.update(int(i) for i in state["consumed"])
    if len(epochs) > 1:
        raise ValueError(f"the ranks' states are of epochs {sorted(epochs)}: "
                         f"checkpoint them at the same step")
    epoch = epochs.pop() if epochs else None
    return {"epoch": epoch, "rank": None, "consumed": sorted(consumed)}


def _all_gather(state: dict[str, Any]) -> list[dict[str, Any]]:
    dist = initialised_process_group()
    if dist is None:
        raise ValueError("no torch.distributed process group: pass the "
                         "ranks' state_dict()s")
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def _barrier() -> None:
    dist = initialised_process_group()
    if dist is not None:
        dist.barrier()


def write_resume(job: PathLike, epoch: int, consumed: Iterable[int],
                 rank: int | None = None) -> None:
    """Writes ``resume``: the job's stream (rank's, if given) delivers
    exactly the rest of ``epoch`` after ``consumed``; without ``rank`` on a
    job with ranks, its ranks deliver the rest between them in equal shares
    (``consumed`` counts what any earlier ranks consumed).  Retries while a
    reader of a killed process still holds the stream (EBUSY)."""
    text = f"epoch={epoch}\n" + (f"rank={rank}\n" if rank is not None else "")
    data = (text + "".join(f"{i}\n" for i in consumed)).encode()
    deadline = time.monotonic() + _BUSY_RETRY_S
    while True:
        try:
            fd = os.open(Path(job) / "resume", os.O_WRONLY | os.O_TRUNC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)  # the daemon applies the file here
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                if e.errno in REJECTED_ERRNOS:
                    raise rejected_write(job, "resume", text) from e
                raise
            time.sleep(0.1)
