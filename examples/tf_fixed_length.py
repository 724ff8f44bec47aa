"""The plain record stream read by ``tf.data.FixedLengthRecordDataset``
with no joaderfs import on the reading side: a complete parser of the JSF1
record (joaderfs-stream(5)) in TensorFlow ops, and a training loop that
survives being killed in the middle of an epoch.

Every record of a job with ``size=N`` is 64 header bytes, then the N x N
x 3 pixels, padded to a multiple of 64.  ``parse_record`` decodes each
header field: the unsigned 32-bit ones (``tf.io.decode_raw`` has no
uint32) from their four little-endian bytes into int64, the 64-bit id and
payload size likewise (exact below 2**63), the label as int64, the crop
box as four uint16; it checks the magic, header size, channels, dtype and
payload size, and the pixels' shape.

The loop records the ids it has trained on (``joaderfs.StreamState``) and
checkpoints them with the weights every ``--checkpoint-every`` steps (one
``tf.train.Checkpoint``).  A rerun restores both; ``load_state_dict``
writes them to the job's ``resume`` file, so the job's stream then holds
exactly the rest of that epoch (its size says so, and the reader reads that
much), then the later epochs in full.

    python3 examples/tf_fixed_length.py /mnt/imagenet sweep-1 --epochs 3
    # killed (kill -9, a preemption), then the same command again

``--log FILE`` appends a JSON line per step (the epoch and the ids trained
on), per checkpoint and for the checkpoint a rerun resumed from (the tests
read it).
"""

from __future__ import annotations

import argparse
import json

import tensorflow as tf

import joaderfs
from recipe_log import json_lines

HEADER_BYTES = 64
MAGIC = b"JSF1"
DTYPE_UINT8 = 1
FLAG_CROP_BOX = 2  # bit 1 of flags: crop_box holds the crop


def record_bytes(size: int) -> int:
    """The length of every record of a job with ``size=N``."""
    payload = size * size * 3
    return HEADER_BYTES + payload + -payload % 64


def parse_record(record, size: int) -> dict:
    """Every field of a record's header, and its ``image`` [size, size, 3]
    uint8: ``magic`` (a string), ``header_size``, ``id``, ``label``,
    ``epoch``, ``flags``, ``height``, ``width``, ``channels``, ``dtype``,
    ``payload_bytes`` (int64) and ``crop_box`` ([x, y, width, height]
    int32, zeros unless bit 1 of flags is set)."""
    header = tf.cast(tf.io.decode_raw(
        tf.strings.substr(record, 0, HEADER_BYTES), tf.uint8), tf.int64)

    def u32(offset: int):
        return tf.reduce_sum(header[offset:offset + 4] *
                             tf.constant([1, 1 << 8, 1 << 16, 1 << 24],
                                         tf.int64))

    def u64(offset: int):
        return u32(offset) + u32(offset + 4) * (1 << 32)

    fields = {
        "magic": tf.strings.substr(record, 0, 4),
        "header_size": u32(4),
        "id": u64(8),
        "label": tf.io.decode_raw(tf.strings.substr(record, 16, 8),
                                  tf.int64)[0],
        "epoch": u32(24),
        "flags": u32(28),
        "height": u32(32),
        "width": u32(36),
        "channels": u32(40),
        "dtype": u32(44),
        "payload_bytes": u64(48),
        # x | y << 16 | width << 32 | height << 48: four little-endian u16.
        "crop_box": tf.cast(tf.io.decode_raw(
            tf.strings.substr(record, 56, 8), tf.uint16), tf.int32),
    }
    payload = size * size * 3
    checks = [
        tf.debugging.assert_equal(fields["magic"], MAGIC,
                                  message="not a JSF1 record"),
        tf.debugging.assert_equal(fields["header_size"],
                                  tf.constant(HEADER_BYTES, tf.int64)),
        tf.debugging.assert_equal(fields["dtype"],
                                  tf.constant(DTYPE_UINT8, tf.int64)),
        tf.debugging.assert_equal(fields["channels"],
                                  tf.constant(3, tf.int64)),
        tf.debugging.assert_equal(
            fields["payload_bytes"],
            fields["height"] * fields["width"] * fields["channels"]),
        tf.debugging.assert_equal(fields["payload_bytes"],
                                  tf.constant(payload, tf.int64),
                                  message="a record of another size"),
    ]
    with tf.control_dependencies(checks):
        pixels = tf.io.decode_raw(
            tf.strings.substr(record, HEADER_BYTES, payload), tf.uint8)
        fields["image"] = tf.reshape(pixels, [size, size, 3])
    return fields


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
    parser.add_argument("--checkpoint-every", type=int, default=100,
                        help="steps between checkpoints")
    parser.add_argument("--log", default=None, help="a JSON-lines log")
    args = parser.parse_args()
    log = json_lines(args.log)

    # The same spec again on a rerun returns the existing job.
    job = joaderfs.make_job(args.mount, args.job_id,
                            {"size": args.size, "epochs": args.epochs})
    classes = joaderfs.dataset_info(args.mount)["classes"]

    def batches():
        """One epoch of the job: the reader reads the stream's size."""
        return (tf.data.FixedLengthRecordDataset(str(job / "next"),
                                                 record_bytes(args.size))
                .map(lambda r: parse_record(r, args.size),
                     num_parallel_calls=tf.data.AUTOTUNE)
                .map(lambda f: (f["image"], f["label"], f["id"]))
                .batch(args.batch_size)
                .prefetch(tf.data.AUTOTUNE)
                .as_numpy_iterator())

    conv = tf.Variable(tf.random.normal([3, 3, 3, 8], stddev=0.1, seed=0))
    weights = tf.Variable(tf.zeros([8, classes]))
    bias = tf.Variable(tf.zeros([classes]))
    data = tf.Variable("", dtype=tf.string)  # the stream's state, as JSON
    checkpoint = tf.train.Checkpoint(conv=conv, weights=weights, bias=bias,
                                     data=data)
    manager = tf.train.CheckpointManager(
        checkpoint, args.checkpoint_dir or f"{args.job_id}-checkpoints",
        max_to_keep=1)
    checkpoint.restore(manager.latest_checkpoint)  # none on the first run
    state = joaderfs.StreamState(job)
    if data.numpy():
        state.load_state_dict(json.loads(data.numpy()))  # resume: the rest
        log(resumed=state.epoch, consumed=len(state.consumed))

    def save() -> None:
        data.assign(json.dumps(state.state_dict()))
        manager.save()
        log(checkpoint=state.epoch, consumed=len(state.consumed))

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

    for _ in range(state.epoch or 0, args.epochs):
        steps = 0
        for images, labels, ids in state.track(batches()):
            train_step(images, labels)
            steps += 1
            log(epoch=state.epoch, ids=ids.tolist())
            if steps % args.checkpoint_every == 0:
                save()
        save()  # the pass is over: the state is of the next epoch


if __name__ == "__main__":
    main()
