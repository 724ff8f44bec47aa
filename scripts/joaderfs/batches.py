"""Framework-neutral numpy batches of one epoch of a job.

JAX::

    import jax.numpy as jnp
    import joaderfs

    for epoch in range(epochs):
        for images, labels, ids in joaderfs.iter_batches(job, 128,
                                                         drop_last=True):
            x = jnp.asarray(images, jnp.float32) / 255.0  # [B, H, W, 3]
            state = train_step(state, x, jnp.asarray(labels))

``drop_last=True`` keeps every batch the same shape, so the jitted step is
compiled once.

tf.data (each repetition calls the generator again, which re-opens ``next``
and so reads the next epoch)::

    import tensorflow as tf
    import joaderfs

    size = 224  # the job's output size
    dataset = tf.data.Dataset.from_generator(
        lambda: joaderfs.iter_batches(job, 128),
        output_signature=(
            tf.TensorSpec([None, size, size, 3], tf.uint8),
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.int64)))
    model.fit(dataset.prefetch(2), epochs=10)
"""

from __future__ import annotations

from typing import BinaryIO, Iterator, NamedTuple

import numpy as np

from .stream import PathLike, RecordStream, open_next


class Batch(NamedTuple):
    """``images`` [B, H, W, 3] uint8 RGB, ``labels`` and ``ids`` [B] int64."""

    images: np.ndarray
    labels: np.ndarray
    ids: np.ndarray


def iter_batches(job: PathLike, batch_size: int,
                 drop_last: bool = False) -> Iterator[Batch]:
    """Opens ``job``'s ``next`` file now and yields one epoch in batches.

    ``job`` is a job directory or its ``next`` file.  Every sample must have
    the same size (a job with ``size=N``, N > 0); each payload is read
    straight into its slot of the batch.  The last, smaller batch is yielded
    unless ``drop_last``.  Each batch is freshly allocated, so it may be kept.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, not {batch_size}")
    return _batches(open_next(job), batch_size, drop_last)


def _batches(raw: BinaryIO, batch_size: int,
             drop_last: bool) -> Iterator[Batch]:
    with raw:
        stream = RecordStream(raw)
        shape: tuple[int, int, int] | None = None
        batch: Batch | None = None
        filled = 0
        while (header := stream.read_header()) is not None:
            if shape is None:
                shape = header.shape
            elif header.shape != shape:
                raise ValueError(
                    f"sample {header.id} is {header.shape[:2]}, the batch "
                    f"{shape[:2]}: batches need one output size (size=N with "
                    f"N > 0 in the job spec or mount options)")
            if batch is None:
                batch = Batch(np.empty((batch_size, *shape), np.uint8),
                              np.empty(batch_size, np.int64),
                              np.empty(batch_size, np.int64))
            stream.read_payload(batch.images[filled])
            batch.labels[filled] = header.label
            batch.ids[filled] = header.id
            filled += 1
            if filled == batch_size:
                yield batch
                batch, filled = None, 0
        if batch is not None and not drop_last:
            yield Batch(batch.images[:filled], batch.labels[:filled],
                        batch.ids[:filled])
