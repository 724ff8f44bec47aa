"""A job's batches on a JAX device, the next ones already on their way.

Where TensorFlow is installed, a job made with ``format=tfrecord`` feeds a
jitted step with no joaderfs import and no Python call per sample:
TensorFlow's TFRecord reader reads and parses in its own threads
(joaderfs.tf_data), and ``as_numpy_iterator`` hands the batches over::

    import jax
    import jax.numpy as jnp
    import tensorflow as tf

    with open(f"{job}/spec", "w") as f:  # before the job's first read
        f.write(f"format=tfrecord size={size}")

    def parse(serialized):
        example = tf.io.parse_single_example(serialized, {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
        image = tf.io.decode_raw(example["image/encoded"], tf.uint8)
        return tf.reshape(image, [size, size, 3]), example["image/class/label"]

    @jax.jit
    def train_step(params, images, labels):  # images: [B, H, W, 3] uint8
        def loss(params):
            x = images.astype(jnp.float32).mean(axis=(1, 2)) / 255.0
            logits = x @ params["w"] + params["b"]
            return -jnp.mean(jnp.take_along_axis(
                jax.nn.log_softmax(logits), labels[:, None], axis=1))
        grads = jax.grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w": jnp.zeros((3, classes)), "b": jnp.zeros(classes)}
    for epoch in range(epochs):  # each pass opens next: one job epoch
        dataset = (tf.data.TFRecordDataset(f"{job}/next")
                   .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
                   .batch(30, drop_remainder=True)  # one shape: one compile
                   .prefetch(tf.data.AUTOTUNE))
        for images, labels in dataset.as_numpy_iterator():
            params = train_step(params, images, labels)

Without TensorFlow, ``jax_batches`` reads the plain stream, one Python call
per batch::

    import jax
    import jax.numpy as jnp
    import joaderfs

    @jax.jit
    def train_step(params, images, labels):  # images: [B, H, W, 3] uint8
        def loss(params):
            x = images.astype(jnp.float32).mean(axis=(1, 2)) / 255.0
            logits = x @ params["w"] + params["b"]
            return -jnp.mean(jnp.take_along_axis(
                jax.nn.log_softmax(logits), labels[:, None], axis=1))
        grads = jax.grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    params = {"w": jnp.zeros((3, classes)), "b": jnp.zeros(classes)}
    for epoch in range(epochs):
        for images, labels, ids in joaderfs.jax_batches(job, 30):
            params = train_step(params, images, labels)

``jax_batches`` reads whole batches (``iter_batches``) and puts each on the
device (``jax.device_put``, which returns at once) ``prefetch`` batches ahead
of the one the loop holds: while a step runs, the next batches are read and
copied.  ``drop_last=True`` (the default here) keeps every batch the same
shape, so the jitted step is compiled once.  In a multi-process program
(``jax.distributed.initialize()``), make the job with
``ranks=jax.process_count()`` on every host's mount; each process then reads
its own stream, ``next.<jax.process_index()>`` (``jax_rank``).
"""

from __future__ import annotations

import collections
from typing import Any, Iterator

import jax
import numpy as np

from .batches import iter_batches
from .distributed import jax_rank
from .stream import PathLike


def jax_batches(job: PathLike, batch_size: int, drop_last: bool = True,
                prefetch: int = 2, device: Any = None,
                rank: int | None = None
                ) -> Iterator[tuple[jax.Array, jax.Array, np.ndarray]]:
    """One epoch of ``job`` as ``(images, labels, ids)``: ``images``
    [B, H, W, 3] uint8 and ``labels`` [B] int32 on ``device`` (JAX's default
    device if None), ``ids`` [B] int64 in numpy, for ``StreamState``-style
    bookkeeping.  Opens the stream now.  ``prefetch`` batches beyond the one
    handed out are on their way to the device.  ``rank`` defaults to
    ``jax_rank(job)``."""
    if prefetch < 0:
        raise ValueError(f"prefetch must be >= 0, not {prefetch}")
    batches = iter_batches(job, batch_size, drop_last,
                           rank=jax_rank(job) if rank is None else rank)
    return _prefetched(batches, prefetch, device)


def _prefetched(batches, prefetch: int, device: Any):
    ahead: collections.deque = collections.deque()
    for batch in batches:
        # Labels as int32: JAX's default integer (int64 would be truncated
        # with a warning unless jax_enable_x64 is set).
        ahead.append((jax.device_put(batch.images, device),
                      jax.device_put(batch.labels.astype(np.int32), device),
                      batch.ids))
        if len(ahead) > prefetch:
            yield ahead.popleft()
    while ahead:
        yield ahead.popleft()

