"""Standard readers on a job's stream, with no joaderfs import on the
reading side (docs/design.md 2.4 "File semantics", "format=tfrecord"):
TensorFlow's FixedLengthRecordDataset and TFRecordDataset, numpy.fromfile,
pread/lseek, ranks, resume after a killed reader, Keras fit and a jitted
JAX step on the pure tf.data pipeline.

The client is used here only to make jobs and to read the reference plain
stream.  Tests that need TensorFlow or JAX skip where it is not installed,
unless $JOADERFS_REQUIRE_FRAMEWORKS names it (ctest sets it for the venv).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import numpy as np
from PIL import Image

import harness
import joaderfs
from harness.records import REPEAT
from frameworks import framework
from test_mount import SIZE, MountedCase, unmount_cleanly

tf = framework("tensorflow")
jax = framework("jax")

RECORD = 64 + 3 * SIZE * SIZE  # a JSF1 record of SIZE x SIZE (64-aligned)
HEADER = np.dtype([("magic", "S4"), ("header_size", "<u4"), ("id", "<u8"),
                   ("label", "<i8"), ("epoch", "<u4"), ("flags", "<u4"),
                   ("height", "<u4"), ("width", "<u4"), ("channels", "<u4"),
                   ("dtype", "<u4"), ("payload_bytes", "<u8"),
                   ("reserved", "<u8")])
RECORD_DTYPE = np.dtype([("header", HEADER),
                         ("pixels", np.uint8, (SIZE, SIZE, 3))])
assert RECORD_DTYPE.itemsize == RECORD

# tf.train.Example features of format=tfrecord, as a user parses them.
FEATURES = None if tf is None else {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64),
    "image/width": tf.io.FixedLenFeature([], tf.int64),
    "image/channels": tf.io.FixedLenFeature([], tf.int64),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    "image/id": tf.io.FixedLenFeature([], tf.int64),
    "image/epoch": tf.io.FixedLenFeature([], tf.int64),
}
AUGMENT_FEATURES = None if tf is None else {
    "image/crop/x": tf.io.FixedLenFeature([], tf.int64),
    "image/crop/y": tf.io.FixedLenFeature([], tf.int64),
    "image/crop/width": tf.io.FixedLenFeature([], tf.int64),
    "image/crop/height": tf.io.FixedLenFeature([], tf.int64),
    "image/flipped": tf.io.FixedLenFeature([], tf.int64),
}


def parse_fixed(records) -> list[tuple[int, int, int, bytes]]:
    """(id, label, epoch, pixels) of whole JSF1 records of SIZE."""
    out = []
    for record in records:
        array = np.frombuffer(record, RECORD_DTYPE)[0]
        header = array["header"]
        assert header["magic"] == b"JSF1", header
        out.append((int(header["id"]), int(header["label"]),
                    int(header["epoch"]), array["pixels"].tobytes()))
    return out


def native_pipeline(paths, batch_size: int):
    """The documented pure TensorFlow pipeline (docs/user-guide.md, tf_data.py)."""
    def parse(serialized):
        example = tf.io.parse_single_example(serialized, {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)})
        image = tf.reshape(tf.io.decode_raw(example["image/encoded"], tf.uint8),
                           [SIZE, SIZE, 3])
        return image, example["image/class/label"]

    return (tf.data.TFRecordDataset(paths)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size)
            .prefetch(tf.data.AUTOTUNE))


class NativeReaderTest(MountedCase):

    def plain_epochs(self, job, epochs: int) -> list[dict[int, tuple]]:
        """Per epoch: id -> (label, flags, reserved, pixels) of the plain
        stream."""
        out = []
        for _ in range(epochs):
            records = np.fromfile(job / "next", dtype=RECORD_DTYPE)
            out.append({int(r["header"]["id"]): (
                int(r["header"]["label"]), int(r["header"]["flags"]),
                int(r["header"]["reserved"]), r["pixels"].tobytes())
                for r in records})
        return out

    # -- file semantics, no TensorFlow needed

    def test_pread_lseek_and_position(self) -> None:
        job = self.make_job("seek")
        path = str(job / "next")
        self.assertEqual(os.stat(path).st_size, len(self.labels) * RECORD)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 0)
            # Anywhere but the reader's position: ESPIPE, nothing taken.
            for offset in (64, RECORD, 1 << 40):
                with self.assertRaises(OSError) as caught:
                    os.pread(fd, 4096, offset)
                self.assertEqual(caught.exception.errno, errno.ESPIPE)
            self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 0)
            data = os.pread(fd, 1000, 0)  # at the position: a read
            self.assertEqual(data[:4], b"JSF1")
            self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 0)  # pread keeps it
            with self.assertRaises(OSError) as caught:
                os.read(fd, 10)  # the file position is still 0, the reader's 1000
            self.assertEqual(caught.exception.errno, errno.ESPIPE)
            self.assertEqual(os.lseek(fd, 1000, os.SEEK_SET), 1000)
            data += os.read(fd, 1000)
            self.assertEqual(os.lseek(fd, 0, os.SEEK_CUR), 2000)
            # A seek back is accepted by the kernel; the read there is not.
            os.lseek(fd, 0, os.SEEK_SET)
            with self.assertRaises(OSError) as caught:
                os.read(fd, 10)
            self.assertEqual(caught.exception.errno, errno.ESPIPE)
            os.lseek(fd, 2000, os.SEEK_SET)
            # SEEK_END: the reader's position plus what it has yet to read.
            self.assertEqual(os.lseek(fd, 0, os.SEEK_END),
                             len(self.labels) * RECORD)
            os.lseek(fd, 2000, os.SEEK_SET)
            while chunk := os.read(fd, 1 << 20):
                data += chunk
        finally:
            os.close(fd)
        # Nothing was lost to the refused offsets: one whole epoch.
        self.assertEqual(len(data), len(self.labels) * RECORD)
        records = parse_fixed(data[i:i + RECORD]
                              for i in range(0, len(data), RECORD))
        self.check_epoch([r[0] for r in records], [r[1] for r in records])

    def test_numpy_fromfile(self) -> None:
        job = self.make_job("numpy")
        for epoch in range(2):
            with self.subTest(epoch=epoch):
                records = np.fromfile(job / "next", dtype=RECORD_DTYPE)
                ids = records["header"]["id"].tolist()
                self.check_epoch(ids, records["header"]["label"].tolist())
                self.assertEqual(set(records["header"]["epoch"].tolist()),
                                 {epoch})
                self.assertEqual(records["pixels"].shape[1:], (SIZE, SIZE, 3))
        # Python's buffered file: tell() follows the reads.
        with open(job / "next", "rb") as f:
            self.assertEqual(f.tell(), 0)
            f.read(RECORD + 5)
            self.assertEqual(f.tell(), RECORD + 5)
            self.assertEqual(len(f.read()), (len(self.labels) - 1) * RECORD - 5)

    def test_size_is_the_next_openers_share(self) -> None:
        subset = set(range(20, 60))
        job = self.make_job("sizes", {"subset": "range:20-59", "epochs": 2})
        size = len(subset) * RECORD
        self.assertEqual(os.stat(job / "next").st_size, size)
        with open(job / "next", "rb", buffering=0) as f:
            first = f.read(RECORD)
            # Another opener now shares the rest of the epoch: the most it
            # could be handed is what is not handed out yet.
            handed = len(first) // RECORD
            self.assertLessEqual(os.stat(job / "next").st_size,
                                 (len(subset) - handed) * RECORD)
            rest = f.read()
        self.assertEqual(len(first + rest), size)
        # Between epochs: the whole next epoch; after the last: 0.
        self.assertEqual(os.stat(job / "next").st_size, size)
        self.assertEqual(len(np.fromfile(job / "next", np.uint8)), size)
        self.assertEqual(os.stat(job / "next").st_size, 0)
        # Records of no one size (size=0) and TFRecords: size 0.
        self.assertEqual(os.stat(self.make_job("size0", {"size": 0}) / "next")
                         .st_size, 0)
        self.assertEqual(os.stat(self.make_job(
            "tfr0", {"format": "tfrecord"}) / "next").st_size, 0)

    def test_several_readers_each_stop_at_eof(self) -> None:
        # Two readers opened together, each sized for the whole epoch: the
        # samples are divided between them and each gets EOF early, cleanly.
        job = self.make_job("two")
        size = os.stat(job / "next").st_size
        self.assertEqual(size, len(self.labels) * RECORD)
        a = open(job / "next", "rb")
        b = open(job / "next", "rb")
        with a, b:
            self.assertEqual(os.fstat(b.fileno()).st_size, size)
            got = a.read(3 * RECORD)
            got_b = b.read()
            got += a.read()
        records = parse_fixed((got + got_b)[i:i + RECORD]
                              for i in range(0, len(got + got_b), RECORD))
        self.check_epoch([r[0] for r in records], [r[1] for r in records])

    # -- TensorFlow

    @unittest.skipIf(tf is None, "tensorflow is not installed")
    def test_fixed_length_record_dataset(self) -> None:
        job = self.make_job("fixed")
        for epoch in range(2):
            with self.subTest(epoch=epoch):
                dataset = tf.data.FixedLengthRecordDataset(
                    str(job / "next"), RECORD)
                records = parse_fixed(r.numpy() for r in dataset)
                self.check_epoch([r[0] for r in records],
                                 [r[1] for r in records])
                self.assertEqual({r[2] for r in records}, {epoch})
        # tf.io.read_file and GFile size the file, then read it.
        data = tf.io.read_file(str(job / "next")).numpy()
        self.assertEqual(len(data), len(self.labels) * RECORD)
        with tf.io.gfile.GFile(str(job / "next"), "rb") as f:
            self.assertEqual(len(f.read()), len(self.labels) * RECORD)

    @unittest.skipIf(tf is None, "tensorflow is not installed")
    def test_tfrecord_two_epochs_match_plain(self) -> None:
        spec = {"crop": "random", "flip": 0.5, "seed": 11}
        tfr = self.make_job("tfr", {**spec, "format": "tfrecord"})
        plain = self.plain_epochs(self.make_job("plain", spec), 2)
        path = str(tfr / "next")
        features = {**FEATURES, **AUGMENT_FEATURES}
        dataset = tf.data.TFRecordDataset([path, path]).map(
            lambda s: tf.io.parse_single_example(s, features))
        epochs: list[list] = [[], []]
        for example in dataset.as_numpy_iterator():
            epochs[int(example["image/epoch"])].append(example)
        for epoch, examples in enumerate(epochs):
            with self.subTest(epoch=epoch):
                ids = [int(e["image/id"]) for e in examples]
                self.check_epoch(ids, [int(e["image/class/label"])
                                       for e in examples])
                flipped = 0
                for e in examples:
                    label, flags, box, pixels = plain[epoch][int(e["image/id"])]
                    self.assertEqual(e["image/format"], b"raw")
                    self.assertEqual((e["image/height"], e["image/width"],
                                      e["image/channels"]), (SIZE, SIZE, 3))
                    # Same seed, epoch and id: the same crop, flip, pixels.
                    self.assertEqual(e["image/encoded"], pixels)
                    self.assertEqual(int(e["image/flipped"]), flags & 1)
                    self.assertEqual(
                        [int(e[f"image/crop/{k}"])
                         for k in ("x", "y", "width", "height")],
                        [box & 0xffff, box >> 16 & 0xffff, box >> 32 & 0xffff,
                         box >> 48])
                    flipped += flags & 1
                self.assertTrue(0 < flipped < len(examples), flipped)

    @unittest.skipIf(tf is None, "tensorflow is not installed")
    def test_four_ranks_natively(self) -> None:
        subset = set(range(10, 110))
        job = self.make_job("ranked", {"subset": "range:10-109", "ranks": 4})
        shares = []
        for rank in range(4):
            path = str(job / f"next.{rank}")
            self.assertEqual(os.stat(path).st_size, 25 * RECORD)
            shares.append([r[0] for r in parse_fixed(
                r.numpy() for r in tf.data.FixedLengthRecordDataset(path, RECORD))])
        self.assertEqual([len(s) for s in shares], [25] * 4)
        self.assertEqual(set().union(*shares), subset)
        # The same through TFRecords.
        job = self.make_job("ranked_tfr", {"subset": "range:10-109", "ranks": 4,
                                           "format": "tfrecord"})
        shares = []
        for rank in range(4):
            dataset = tf.data.TFRecordDataset(str(job / f"next.{rank}")).map(
                lambda s: tf.io.parse_single_example(s, FEATURES)["image/id"])
            shares.append(list(dataset.as_numpy_iterator()))
        self.assertEqual([len(s) for s in shares], [25] * 4)
        self.assertEqual(set().union(*shares), subset)

    @unittest.skipIf(tf is None, "tensorflow is not installed")
    def test_killed_native_reader_resumes(self) -> None:
        job = self.make_job("killed", {"format": "tfrecord"})
        # A training process reading TFRecordDataset(next) reports each id
        # it has taken, and is killed mid-epoch.
        script = textwrap.dedent(f"""
            import sys, tensorflow as tf
            spec = {{"image/id": tf.io.FixedLenFeature([], tf.int64)}}
            for s in tf.data.TFRecordDataset({str(job / "next")!r}):
                print(int(tf.io.parse_single_example(s, spec)["image/id"]),
                      flush=True)
                sys.stdin.readline()
            """)
        proc = subprocess.Popen([sys.executable, "-c", script],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        consumed = []
        try:
            for _ in range(40):
                consumed.append(int(proc.stdout.readline()))
                proc.stdin.write("\n")
                proc.stdin.flush()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()
        # (write_resume retries while the killed reader's release is on
        # its way to the daemon: EBUSY.)
        joaderfs.write_resume(job, 0, consumed)
        path = str(job / "next")
        rest = [int(e["image/id"]) for e in tf.data.TFRecordDataset(path).map(
            lambda s: tf.io.parse_single_example(s, FEATURES))
            .as_numpy_iterator()]
        self.assertEqual(len(rest), len(self.labels) - len(consumed))
        self.assertEqual(set(rest), set(self.labels) - set(consumed))
        # The same with fixed-size records: the size shows the rest.
        job = self.make_job("killed_plain")
        with open(job / "next", "rb", buffering=0) as f:
            taken = [r[0] for r in parse_fixed([f.read(RECORD)
                                                for _ in range(30)])]
        joaderfs.write_resume(job, 0, taken)
        path = str(job / "next")
        self.assertEqual(os.stat(path).st_size,
                         (len(self.labels) - 30) * RECORD)
        rest = [r[0] for r in parse_fixed(
            r.numpy() for r in tf.data.FixedLengthRecordDataset(path, RECORD))]
        self.assertEqual(sorted(rest), sorted(set(self.labels) - set(taken)))

    @unittest.skipIf(tf is None, "tensorflow is not installed")
    def test_keras_fit_on_the_native_pipeline(self) -> None:
        import keras
        job = self.make_job("keras_native", {"format": "tfrecord"})
        model = keras.Sequential([
            keras.Input((SIZE, SIZE, 3)),
            keras.layers.Rescaling(1 / 255),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        # One pass of the dataset per Keras epoch: each re-opens next.
        history = model.fit(native_pipeline(str(job / "next"), 32),
                            epochs=2, verbose=0)
        self.assertEqual(len(history.history["loss"]), 2)
        status = joaderfs.job_status(self.mount, "keras_native")
        self.assertEqual((status["epoch"], status["remaining"],
                          status["delivered_total"]),
                         (1, 0, 2 * len(self.labels)))

    @unittest.skipIf(tf is None, "tensorflow is not installed")
    def test_tf_dataset_takes_the_native_path(self) -> None:
        job = self.make_job("tf_dataset_native", {"format": "tfrecord"})
        handed = []
        dataset = joaderfs.tf_dataset(
            job, 32, on_batch=lambda b: handed.append((b.ids, b.labels)))
        labels = []
        for images, batch_labels in dataset:
            self.assertEqual(tuple(images.shape[1:]), (SIZE, SIZE, 3))
            labels += batch_labels.numpy().tolist()
        ids = [i for batch_ids, _ in handed for i in batch_ids.tolist()]
        self.check_epoch(ids, labels)
        self.assertEqual([len(i) for i, _ in handed],
                         [32] * 4 + [len(self.labels) - 4 * 32])

    @unittest.skipIf(tf is None or jax is None,
                     "tensorflow or jax is not installed")
    def test_jax_jitted_step_on_the_native_pipeline(self) -> None:
        import jax.numpy as jnp
        job = self.make_job("jax_native", {"format": "tfrecord"})
        traces = []

        @jax.jit
        def step(w, images, labels):
            traces.append(images.shape)  # once per compilation
            x = images.astype(jnp.float32).mean(axis=(1, 2)) / 255.0
            logits = x @ w
            loss = lambda w: -jnp.mean(jnp.take_along_axis(  # noqa: E731
                jax.nn.log_softmax(x @ w), labels[:, None], axis=1))
            return w - 0.1 * jax.grad(loss)(w), logits.argmax(axis=1)

        w = jnp.zeros((3, 3))
        labels_seen = []
        dataset = native_pipeline(str(job / "next"), 25)  # 150 = 6 x 25
        for images, labels in dataset.as_numpy_iterator():
            w, _ = step(w, images, labels)
            labels_seen += labels.tolist()
        self.assertEqual(traces, [(25, SIZE, SIZE, 3)])
        self.assertEqual(sorted(labels_seen), sorted(self.labels.values()))


class SkippedSampleTest(unittest.TestCase):
    """A reader that sized the file reads its size even when a sample is
    skipped: a lone reader's last record is repeated, flagged, in place of
    the bad one; with several readers each gets EOF early."""

    GOOD = 12

    @classmethod
    def setUpClass(cls) -> None:
        harness.require_binary()
        folder = tempfile.mkdtemp(prefix="joaderfs-native-skip-")
        cls.addClassCleanup(shutil.rmtree, folder, ignore_errors=True)
        source = Path(folder) / "images"
        (source / "a").mkdir(parents=True)
        for i in range(cls.GOOD):
            Image.new("RGB", (80, 60), (i * 20, 0, 0)).save(
                source / "a" / f"{i:02d}.jpg")
        (source / "a" / "99-bad.jpg").write_bytes(b"\xff\xd8 not a jpeg" * 8)
        daemon = harness.Mount(
            str(source), folder, {"cache_dir": "none", "size": str(SIZE)},
            defaults={})
        cls.addClassCleanup(daemon.cleanup)
        daemon.start()
        cls.addClassCleanup(unmount_cleanly, daemon)
        cls.mount = Path(daemon.mnt)

    def check(self, records, repeats: int) -> None:
        ids = [r[0] for r in records]
        flags = np.array([f for _, _, _, f in records])
        self.assertEqual(sorted(i for i, f in zip(ids, flags) if not f & REPEAT),
                         list(range(self.GOOD)))
        self.assertEqual(int((flags & REPEAT != 0).sum()), repeats)

    def fixed(self, data: bytes) -> list[tuple]:
        array = np.frombuffer(data, RECORD_DTYPE)
        return [(int(h["id"]), int(h["label"]), int(h["epoch"]),
                 int(h["flags"])) for h in array["header"]]

    def test_lone_reader_reads_the_size(self) -> None:
        job = joaderfs.make_job(self.mount, "lone")
        size = os.stat(job / "next").st_size
        self.assertEqual(size, (self.GOOD + 1) * RECORD)
        data = np.fromfile(job / "next", np.uint8).tobytes()
        self.assertEqual(len(data), size)
        self.check(self.fixed(data), 1)
        self.assertEqual(joaderfs.job_status(self.mount, "lone")["skipped"], 1)
        if tf is not None:  # and TensorFlow's sized readers end cleanly
            data = tf.io.read_file(str(job / "next")).numpy()
            self.check(self.fixed(data), 1)
            self.check(self.fixed(b"".join(
                r.numpy() for r in tf.data.FixedLengthRecordDataset(
                    str(job / "next"), RECORD))), 1)

    def test_several_readers_end_early(self) -> None:
        job = joaderfs.make_job(self.mount, "several")
        with open(job / "next", "rb", buffering=0) as a, \
                open(job / "next", "rb") as b:
            first = a.read(RECORD)  # one record: the rest is b's
            data = first + b.read() + a.read()
        self.check(self.fixed(data), 0)


if __name__ == "__main__":
    unittest.main()
