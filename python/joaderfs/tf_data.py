"""A job as a ``tf.data.Dataset`` of ``(images, labels)`` batches for Keras.

Keras::

    import keras
    import joaderfs

    model = keras.Sequential([
        keras.Input((size, size, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    model.fit(joaderfs.tf_dataset(job, 30), epochs=epochs)

The dataset yields ``(images, labels)`` only: ``images`` [B, H, W, 3] uint8,
``labels`` [B] int64.  (A third element would be taken by Keras as sample
weights.)  Each pass over it, one per Keras epoch, calls the generator
again, which re-opens the job's ``next`` and so reads the next epoch of the
job.  The generator is called once per batch, not per sample: each batch is
read with a few large reads into one array (``iter_batches``), and
``prefetch`` batches are read ahead of the training step.  ``on_batch``, if
given, sees each ``Batch`` (with its ids) as it is handed to TensorFlow, for
bookkeeping such as the ids consumed.  Keras, not told the dataset's
length, may warn "Your input ran out of data" when the first epoch ends; the
next epoch still runs in full.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import tensorflow as tf

from .batches import Batch, iter_batches
from .control import dataset_info
from .stream import PathLike


def tf_dataset(job: PathLike, batch_size: int, drop_last: bool = False,
               prefetch: int = 2, size: int | None = None,
               rank: int | None = None,
               on_batch: Callable[[Batch], None] | None = None
               ) -> tf.data.Dataset:
    """``(images, labels)`` batches of ``job`` (a job directory), one epoch
    of the job per pass.  ``size`` is the job's output size, read from its
    spec (``size=``) or the mount's ``/dataset/info`` if not given; every
    sample must have it (N > 0).  ``rank=R`` reads ``next.R`` of a job with
    ``ranks=W``."""
    if size is None:
        size = _job_size(Path(job))
    if size <= 0:
        raise ValueError("batches need one output size: size=N with N > 0 "
                         "in the job spec or the mount options")

    def generate():
        for batch in iter_batches(job, batch_size, drop_last, rank):
            if on_batch is not None:
                on_batch(batch)
            yield batch.images, batch.labels

    dataset = tf.data.Dataset.from_generator(
        generate, output_signature=(
            tf.TensorSpec([None, size, size, 3], tf.uint8),
            tf.TensorSpec([None], tf.int64)))
    return dataset.prefetch(prefetch) if prefetch else dataset


def _job_size(job: Path) -> int:
    for token in (job / "spec").read_text().split():
        key, _, value = token.partition("=")
        if key == "size":
            return int(value)
    return int(dataset_info(job.parent.parent)["size"])
