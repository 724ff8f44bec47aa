"""A job as a ``tf.data.Dataset`` of ``(images, labels)`` batches for Keras.

With no joaderfs import at all, a job made with ``format=tfrecord`` is read
by TensorFlow's own TFRecord reader (docs/design.md 2.4): each record is a
``tf.train.Example`` whose ``image/encoded`` holds the raw HWC uint8 pixels.
The pure TensorFlow pipeline, feeding Keras::

    import keras
    import tensorflow as tf

    with open(f"{job}/spec", "w") as f:  # before the job's first read
        f.write(f"format=tfrecord size={size}")

    def parse(serialized):
        example = tf.io.parse_single_example(serialized, {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
        image = tf.io.decode_raw(example["image/encoded"], tf.uint8)
        return tf.reshape(image, [size, size, 3]), example["image/class/label"]

    dataset = (tf.data.TFRecordDataset(f"{job}/next")
               .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
               .batch(32)
               .prefetch(tf.data.AUTOTUNE))
    model = keras.Sequential([
        keras.Input((size, size, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    model.fit(dataset, epochs=epochs)

Reading and parsing run in TensorFlow's threads, with no Python call per
batch.  Each Keras epoch iterates the dataset again, which opens ``next``
again: one job epoch per Keras epoch.  For JAX, iterate
``dataset.as_numpy_iterator()`` into a jitted step (joaderfs.jax_data).

``tf_dataset(job, batch_size)`` builds that pipeline for a job with
``format=tfrecord`` (faster than reading the plain stream from Python,
docs/benchmarks.md "TensorFlow"), and for a plain job reads batches from
Python, one call per batch.  Keras::

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
weights.)  Each pass over it, one per Keras epoch, re-opens the job's
``next`` and so reads the next epoch of the job.  On the plain stream the
generator is called once per batch, not per sample: each batch is read with
a few large reads into one array (``iter_batches``), and ``prefetch``
batches are read ahead of the training step.  ``on_batch``, if given, sees
each ``Batch`` (with its ids) as it is handed to TensorFlow, for
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
from .stream import PathLike, next_path


def tf_dataset(job: PathLike, batch_size: int, drop_last: bool = False,
               prefetch: int = 2, size: int | None = None,
               rank: int | None = None,
               on_batch: Callable[[Batch], None] | None = None
               ) -> tf.data.Dataset:
    """``(images, labels)`` batches of ``job`` (a job directory), one epoch
    of the job per pass.  ``size`` is the job's output size, read from its
    spec (``size=``) or the mount's ``/dataset/info`` if not given; every
    sample must have it (N > 0).  ``rank=R`` reads ``next.R`` of a job with
    ``ranks=W``.  A job with ``format=tfrecord`` is read by the pure
    TensorFlow pipeline of the module's docstring (``on_batch`` then runs
    through ``tf.py_function``, once per batch)."""
    if size is None:
        size = _job_size(Path(job))
    if size <= 0:
        raise ValueError("batches need one output size: size=N with N > 0 "
                         "in the job spec or the mount options")
    if _spec_value(Path(job), "format") == "tfrecord":
        return _native_dataset(next_path(job, rank), batch_size, drop_last,
                               prefetch, size, on_batch)

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


def _native_dataset(path: Path, batch_size: int, drop_last: bool,
                    prefetch: int, size: int,
                    on_batch: Callable[[Batch], None] | None
                    ) -> tf.data.Dataset:
    """The pure TensorFlow pipeline of the module's docstring over a
    ``format=tfrecord`` stream."""
    def parse(serialized):
        example = tf.io.parse_single_example(serialized, _FEATURES)
        image = tf.reshape(tf.io.decode_raw(example["image/encoded"],
                                            tf.uint8), [size, size, 3])
        return image, example["image/class/label"], example["image/id"]

    dataset = (tf.data.TFRecordDataset(str(path))
               .map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=True)
               .batch(batch_size, drop_remainder=drop_last))
    if on_batch is None:
        dataset = dataset.map(lambda images, labels, ids: (images, labels))
    else:
        def note(images, labels, ids):
            on_batch(Batch(images.numpy(), labels.numpy(), ids.numpy()))
            return 0

        def tap(images, labels, ids):
            # In order, as each batch is made, like the plain path's yield.
            done = tf.py_function(note, [images, labels, ids], tf.int32)
            with tf.control_dependencies([done]):
                return tf.identity(images), tf.identity(labels)
        dataset = dataset.map(tap)
    return dataset.prefetch(prefetch) if prefetch else dataset


_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    "image/id": tf.io.FixedLenFeature([], tf.int64),
}


def _spec_value(job: Path, key: str) -> str | None:
    for token in (job / "spec").read_text().split():
        name, _, value = token.partition("=")
        if name == key:
            return value
    return None


def _job_size(job: Path) -> int:
    size = _spec_value(job, "size")
    if size is not None:
        return int(size)
    return int(dataset_info(job.parent.parent)["size"])
