"""Keras ``model.fit`` that survives being killed, with every epoch whole.

``keras.callbacks.BackupAndRestore`` saves the weights and the epoch at the
end of each epoch; a rerun of this script restores them and starts again at
the epoch that was cut short, from its first batch.  The job must then
deliver that epoch again in full: the killed run's readers had taken part
of it (some of it prefetched by TensorFlow and never trained on), and the
daemon does not restart an epoch by itself.  So the callback writes
``epoch=E`` to the job's ``resume`` file before fit reads anything.  The
number of steps of an epoch is fixed from the job's epoch size
(``assert_cardinality``), never learnt from an epoch that a crash cut
short; an epoch of another length fails loudly instead.

    python3 examples/keras_resume.py /mnt/imagenet sweep-1 --epochs 3
    # killed (kill -9, a preemption), then the same command again

The job is made with ``epochs=`` so that it ends with the training;
Keras epoch E is the job's epoch E.  ``--log FILE`` appends a JSON line per
batch handed to TensorFlow (its ids) and per step and epoch end (the tests
read it).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import keras
import tensorflow as tf

import joaderfs
from recipe_log import json_lines


class RestartEpoch(keras.callbacks.BackupAndRestore):
    """BackupAndRestore, and the job delivers the epoch fit starts at in
    full."""

    def __init__(self, job: Path, backup_dir: str) -> None:
        super().__init__(backup_dir)
        self.job = job

    def on_train_begin(self, logs=None) -> None:
        super().on_train_begin(logs)  # the weights, and the epoch to restart
        # fit starts at this epoch (0 without a backup); no reader is open
        # yet: its dataset iterator is made when the epoch begins.
        epoch = self.model._initial_epoch or 0
        joaderfs.write_resume(self.job, epoch, [])


class Log(keras.callbacks.Callback):
    """What fit did, for the tests: each step, each epoch's steps."""

    def __init__(self, log) -> None:
        super().__init__()
        self.log = log
        self.steps = 0

    def on_train_begin(self, logs=None) -> None:
        self.log(start=self.model._initial_epoch or 0)

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.steps += 1
        self.log(step=self.steps)

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.log(epoch_end=epoch, steps=self.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mount", help="the joaderfs mount point")
    parser.add_argument("job_id", help="the job's id (the same for a rerun)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=64,
                        help="the images' output size")
    parser.add_argument("--backup-dir", default=None,
                        help="BackupAndRestore's folder (default: "
                             "./<job_id>-backup)")
    parser.add_argument("--log", default=None, help="a JSON-lines log")
    args = parser.parse_args()
    log = json_lines(args.log)

    # The same spec again on a rerun returns the existing job.
    job = joaderfs.make_job(args.mount, args.job_id,
                            {"size": args.size, "epochs": args.epochs})
    classes = joaderfs.dataset_info(args.mount)["classes"]
    # A whole epoch of the job: the steps of every Keras epoch.
    samples = joaderfs.job_status(job)["subset_size"]
    steps = math.ceil(samples / args.batch_size)
    dataset = joaderfs.tf_dataset(
        job, args.batch_size,
        on_batch=lambda batch: log(handed=batch.ids.tolist()))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(steps))

    model = keras.Sequential([
        keras.Input((args.size, args.size, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    backup_dir = args.backup_dir or f"{args.job_id}-backup"
    model.fit(dataset, epochs=args.epochs, verbose=0,
              callbacks=[RestartEpoch(job, backup_dir), Log(log)])


if __name__ == "__main__":
    main()
