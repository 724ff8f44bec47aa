"""How the DataLoader workers of one stream divide its epoch: in whole
batches, so that the loader makes ceil(N/B) batches (floor with drop_last)
whatever its ``num_workers`` and however fast each worker reads.

Without this, each worker reads the stream until EOF and makes its own last,
short batch: the number of batches of an epoch depends on how the workers'
reads interleaved, so the ranks of a data-parallel job may run different
numbers of steps, and DDP's last collective of the epoch hangs.

Each worker opens the stream, then reads its ``status`` to learn N, the
length of the epoch it opened (the one under way, or the one its first read
begins).  The epoch's batches are numbered 0 .. ceil(N/B) - 1, all of B
samples but the last; worker k of K takes batches k, k + K, k + 2K, ...
(the order in which the DataLoader asks its workers for batches) and reads
exactly their samples, never more: a fast worker cannot take a slow one's
share, so the epoch ends once every worker has read its share.  Which
samples make up a batch is still the daemon's doing: whichever worker reads
first gets the next ready samples.  So every sample of the epoch arrives
exactly once, and at most one batch of the epoch is short.

A sample the daemon skips (it cannot be decoded) shortens the epoch by one:
some worker then meets EOF before its share is full and its last batch is
short.  Several processes reading one stream (not DataLoader workers of one
loader) each count the whole epoch as theirs; they then meet EOF early too,
as they do without shares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator


def stream_status(stream: Path) -> dict:
    """The ``status`` of ``stream`` (a job's ``next`` or ``next.R``): the
    job's, or rank R's entry of it."""
    status = json.loads((stream.parent / "status").read_bytes())
    _, dot, rank = stream.name.partition(".")
    if dot:
        status = status["ranks"][int(rank)]
    return status


def next_epoch(status: dict) -> tuple[int, int]:
    """(epoch, samples) of the epoch that a reader which has just opened
    the stream of ``status`` (``stream_status``) reads."""
    if status["running"]:
        return status["epoch"], (status["delivered"] + status["skipped"] +
                                 status["remaining"])
    # Opening alone starts nothing.  Between epochs `remaining` is 0, the
    # epoch shown is the one that ended and the next is a full one; before
    # the first epoch or a resumed one it is the one to read, and
    # `remaining` what is left of it.
    if status["remaining"]:
        return status["epoch"], status["remaining"]
    return status["epoch"] + 1, status["subset_size"]


def epoch_length(stream: Path) -> int:
    """The number of samples of the epoch that a reader which has just
    opened ``stream`` (a job's ``next`` or ``next.R``) reads, from the
    job's ``status``."""
    return next_epoch(stream_status(stream))[1]


def batch_sizes(length: int, batch_size: int, worker: int,
                workers: int) -> Iterator[int]:
    """The sizes of the batches that worker ``worker`` of ``workers`` reads
    in an epoch of ``length`` samples: batches worker, worker + workers, ...
    of ceil(length / batch_size), the last one shorter."""
    batches = -(-length // batch_size)
    for index in range(worker, batches, workers):
        yield min(batch_size, length - index * batch_size)
