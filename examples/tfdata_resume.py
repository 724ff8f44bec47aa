"""A plain tf.data training loop (no Keras) that survives being killed,
with every epoch whole.

The job is made with ``format=tfrecord``: TensorFlow's own TFRecord reader
reads it and parses the pixels, label and id in its threads, with no
Python call per sample.  The loop keeps its own checkpoint
(``tf.train.Checkpoint``: the weights and the epoch to start at), saved at
the end of each epoch.  A rerun restores it and writes ``epoch=E`` to the
job's ``resume`` file before reading: the job delivers that epoch again in
full, where without it the rerun's first epoch would be what the killed
run's reader (and TensorFlow's prefetch) had not taken.  Each epoch must
then have the job's epoch size; one of another length fails loudly.

    python3 examples/tfdata_resume.py /mnt/imagenet sweep-1 --epochs 3
    # killed (kill -9, a preemption), then the same command again

``--log FILE`` appends a JSON line per step (the epoch and the ids trained
on), per checkpoint and for the checkpoint a rerun resumed from (the tests
read it).
"""

from __future__ import annotations

import argparse

import tensorflow as tf

import joaderfs
from recipe_log import json_lines


def parse(serialized, size: int):
    """(image [size, size, 3] uint8, label, id) of a record's Example."""
    example = tf.io.parse_single_example(serialized, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/id": tf.io.FixedLenFeature([], tf.int64)})
    image = tf.reshape(tf.io.decode_raw(example["image/encoded"], tf.uint8),
                       [size, size, 3])
    return image, example["image/class/label"], example["image/id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mount", help="the joaderfs mount point")
    parser.add_argument("job_id", help="the job's id (the same for a rerun)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=64,
                        help="the images' output size")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="the checkpoints' folder (default: "
                             "./<job_id>-checkpoints)")
    parser.add_argument("--log", default=None, help="a JSON-lines log")
    args = parser.parse_args()
    log = json_lines(args.log)

    # The same spec again on a rerun returns the existing job.
    job = joaderfs.make_job(args.mount, args.job_id, {
        "format": "tfrecord", "size": args.size, "epochs": args.epochs})
    classes = joaderfs.dataset_info(args.mount)["classes"]
    samples = joaderfs.job_status(job)["subset_size"]

    conv = tf.Variable(tf.random.normal([3, 3, 3, 8], stddev=0.1, seed=0))
    weights = tf.Variable(tf.zeros([8, classes]))
    bias = tf.Variable(tf.zeros([classes]))
    next_epoch = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(conv=conv, weights=weights, bias=bias,
                                     next_epoch=next_epoch)
    manager = tf.train.CheckpointManager(
        checkpoint, args.checkpoint_dir or f"{args.job_id}-checkpoints",
        max_to_keep=1)
    checkpoint.restore(manager.latest_checkpoint)  # none on the first run
    start = int(next_epoch.numpy())
    # The epoch the checkpoint starts at, in full (and nothing is read yet).
    joaderfs.write_resume(job, start, [])
    if manager.latest_checkpoint:
        log(resumed=start, consumed=0)

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            x = tf.cast(images, tf.float32) / 255.0
            x = tf.nn.relu(tf.nn.conv2d(x, conv, 2, "VALID"))
            logits = tf.reduce_mean(x, axis=[1, 2]) @ weights + bias
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels,
                                                               logits))
        for variable, grad in zip(
                (conv, weights, bias),
                tape.gradient(loss, [conv, weights, bias])):
            variable.assign_sub(0.1 * grad)

    for epoch in range(start, args.epochs):
        # Each pass opens next again: one epoch of the job.
        dataset = (tf.data.TFRecordDataset(str(job / "next"))
                   .map(lambda s: parse(s, args.size),
                        num_parallel_calls=tf.data.AUTOTUNE)
                   .batch(args.batch_size)
                   .prefetch(tf.data.AUTOTUNE))
        seen = 0
        for images, labels, ids in dataset:
            train_step(images, labels)
            seen += len(ids)
            log(epoch=epoch, ids=ids.numpy().tolist())
        if seen != samples:
            raise RuntimeError(f"epoch {epoch} had {seen} samples, not the "
                               f"job's {samples}")
        next_epoch.assign(epoch + 1)
        manager.save()
        log(checkpoint=epoch + 1, consumed=0)


if __name__ == "__main__":
    main()
