"""Unit tests of the client's record parsing, on hand-built byte streams."""

from __future__ import annotations

import importlib.util
import io
import os
import struct
import tempfile
import threading
import unittest
from pathlib import Path

import numpy as np

import joaderfs


def make_record(sample_id: int, label: int, image: np.ndarray,
                epoch: int = 0, magic: bytes = b"JSF1",
                header_size: int = 64, dtype: int = 1,
                channels: int | None = None,
                payload_bytes: int | None = None) -> bytes:
    """One record as the daemon writes it (docs/design.md 2.4), fields overridable
    to build malformed ones."""
    height, width = image.shape[:2]
    payload = image.tobytes()
    header = struct.pack(
        "<4sIQqIIIIIIQQ", magic, header_size, sample_id, label, epoch, 0,
        height, width, image.shape[2] if channels is None else channels,
        dtype, len(payload) if payload_bytes is None else payload_bytes, 0)
    padding = b"\0" * (-len(payload) % 64)
    return header + payload + padding


def random_image(rng: np.random.Generator, height: int,
                 width: int) -> np.ndarray:
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


class TrickleFile(io.RawIOBase):
    """A file that returns at most ``chunk`` bytes per read, as a FUSE read
    may stop anywhere inside a record."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._chunk = chunk
        self.calls = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.calls += 1
        n = min(len(buffer), self._chunk, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


class ReadRecordsTest(unittest.TestCase):

    def setUp(self) -> None:
        rng = np.random.default_rng(7)
        # 5x7x3 = 105 bytes needs padding; 8x8x3 = 192 needs none.
        self.images = [random_image(rng, 5, 7), random_image(rng, 8, 8),
                       random_image(rng, 1, 1)]
        self.ids = [42, 7, 2**40]
        self.labels = [3, 0, -1]
        self.data = b"".join(
            make_record(i, label, image, epoch=2)
            for i, label, image in zip(self.ids, self.labels, self.images))

    def check(self, records: list[joaderfs.Record]) -> None:
        self.assertEqual([r.id for r in records], self.ids)
        self.assertEqual([r.label for r in records], self.labels)
        self.assertEqual([r.epoch for r in records], [2, 2, 2])
        for record, image in zip(records, self.images):
            self.assertEqual(record.image.dtype, np.uint8)
            np.testing.assert_array_equal(record.image, image)

    def test_well_formed(self) -> None:
        self.check(list(joaderfs.read_records(io.BytesIO(self.data))))

    def test_short_reads(self) -> None:
        for chunk in (1, 3, 63, 64, 65, 100):
            with self.subTest(chunk=chunk):
                raw = TrickleFile(self.data, chunk)
                self.check(list(joaderfs.read_records(raw)))

    def test_few_reads_when_reads_are_whole(self) -> None:
        raw = TrickleFile(self.data, 1 << 20)
        list(joaderfs.read_records(raw))
        # Header and payload per record (padding rides with the next
        # header), then the last record's padding and the read finding EOF.
        self.assertEqual(raw.calls, 2 * len(self.ids) + 2)

    def test_limit_reads_the_padding_and_no_byte_more(self) -> None:
        raw = io.BytesIO(self.data)
        records = list(joaderfs.read_records(raw, limit=1))
        self.assertEqual([r.id for r in records], self.ids[:1])
        # 105 payload bytes padded to 128: the record's 192 bytes, all read.
        self.assertEqual(raw.tell(), 64 + 128)
        self.assertEqual([r.id for r in joaderfs.read_records(raw)],
                         self.ids[1:])

    def test_empty_stream_is_an_empty_epoch(self) -> None:
        self.assertEqual(list(joaderfs.read_records(io.BytesIO(b""))), [])

    def test_records_are_independent_buffers(self) -> None:
        records = list(joaderfs.read_records(io.BytesIO(self.data)))
        records[0].image[:] = 0
        np.testing.assert_array_equal(records[1].image, self.images[1])


class MalformedTest(unittest.TestCase):

    def setUp(self) -> None:
        self.image = np.full((2, 3, 3), 9, np.uint8)
        self.good = make_record(1, 1, self.image)

    def assert_error(self, data: bytes, pattern: str) -> None:
        with self.assertRaisesRegex(joaderfs.StreamError, pattern):
            list(joaderfs.read_records(TrickleFile(data, 5)))

    def test_bad_magic(self) -> None:
        self.assert_error(self.good + make_record(2, 0, self.image,
                                                  magic=b"JSF2"),
                          r"byte 128: bad magic b'JSF2'")

    def test_bad_header_size(self) -> None:
        self.assert_error(make_record(1, 1, self.image, header_size=128),
                          "header size 128")

    def test_bad_dtype(self) -> None:
        self.assert_error(make_record(1, 1, self.image, dtype=2), "dtype 2")

    def test_bad_channels(self) -> None:
        self.assert_error(make_record(1, 1, self.image, channels=4),
                          "4 channels")

    def test_payload_size_mismatch(self) -> None:
        self.assert_error(make_record(1, 1, self.image, payload_bytes=17),
                          "does not match 2x3x3")

    def test_truncated_header(self) -> None:
        self.assert_error(self.good + self.good[:40],
                          "inside a record header at byte 128")

    def test_truncated_payload(self) -> None:
        self.assert_error(self.good[:64 + 10],
                          "inside the payload of sample 1")

    def test_truncated_padding(self) -> None:
        self.assert_error(self.good[:64 + 18 + 5], "inside the padding")

    def test_non_zero_padding(self) -> None:
        bad = bytearray(self.good)
        bad[-1] = 1
        self.assert_error(bytes(bad), "non-zero padding")

    def test_garbage(self) -> None:
        self.assert_error(b"<html>not a stream</html>" * 4, "bad magic")


def pipe_trickle(test: unittest.TestCase, data: bytes, chunk: int):
    """A pipe read end fed ``data`` in writes of ``chunk`` bytes by a
    thread: reads of it stop anywhere, as FUSE reads may."""
    read_fd, write_fd = os.pipe()

    def feed() -> None:
        with open(write_fd, "wb", buffering=0) as w:
            for i in range(0, len(data), chunk):
                w.write(data[i:i + chunk])

    thread = threading.Thread(target=feed)
    thread.start()
    test.addCleanup(thread.join)
    return open(read_fd, "rb", buffering=0)


class BatchesTest(unittest.TestCase):

    def write_stream(self, records: list[bytes]) -> Path:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        path = Path(folder.name) / "next"
        path.write_bytes(b"".join(records))
        return path

    def setUp(self) -> None:
        rng = np.random.default_rng(1)
        # 4x5x3 = 60 bytes: each record has 4 bytes of padding.
        self.images = [random_image(rng, 4, 5) for _ in range(7)]
        self.records = [make_record(10 + i, i % 3, im)
                        for i, im in enumerate(self.images)]

    def check(self, batches: list[joaderfs.Batch], sizes: list[int]) -> None:
        self.assertEqual([len(b.ids) for b in batches], sizes)
        for batch in batches:
            self.assertEqual(batch.images.dtype, np.uint8)
            self.assertEqual(batch.images.shape[1:], (4, 5, 3))
            self.assertTrue(batch.images.flags["C_CONTIGUOUS"])
            self.assertEqual(batch.ids.dtype, np.int64)
        n = sum(sizes)
        np.testing.assert_array_equal(
            np.concatenate([b.images for b in batches]),
            np.stack(self.images[:n]))
        np.testing.assert_array_equal(
            np.concatenate([b.ids for b in batches]), np.arange(10, 10 + n))
        np.testing.assert_array_equal(
            np.concatenate([b.labels for b in batches]), np.arange(n) % 3)

    def test_batches_and_remainder(self) -> None:
        path = self.write_stream(self.records)
        self.check(list(joaderfs.iter_batches(path, 3)), [3, 3, 1])
        self.check(list(joaderfs.iter_batches(path, 3, drop_last=True)),
                   [3, 3])
        self.check(list(joaderfs.iter_batches(path, 7)), [7])
        self.check(list(joaderfs.iter_batches(path, 100)), [7])

    def test_counted_batches_read_no_byte_more(self) -> None:
        # DataLoader workers read exact shares (joaderfs.shares): a batch of
        # k records must leave the next record unread, padding included.
        path = self.write_stream(self.records)
        with open(path, "rb", buffering=0) as raw:
            stream = joaderfs.BatchStream(raw, 3)
            batches = [stream.read_batch(2), stream.read_batch(1)]
            self.assertEqual(raw.tell(), 3 * len(self.records[0]))
            batches.append(stream.read_batch())
            self.check(batches, [2, 1, 3])
            with self.assertRaises(ValueError):
                stream.read_batch(4)  # more than the batch size

    def test_short_reads(self) -> None:
        data = b"".join(self.records)
        for chunk in (1, 7, 63, 64, 65, 100, 1000):
            with self.subTest(chunk=chunk):
                raw = pipe_trickle(self, data, chunk)
                with raw:
                    stream = joaderfs.BatchStream(raw, 3)
                    batches = []
                    while (batch := stream.read_batch()) is not None:
                        batches.append(batch)
                self.check(batches, [3, 3, 1])

    def test_empty_stream(self) -> None:
        self.assertEqual(list(joaderfs.iter_batches(
            self.write_stream([]), 4)), [])

    def test_batches_are_independent(self) -> None:
        batches = list(joaderfs.iter_batches(
            self.write_stream(self.records), 3))
        batches[0].images[:] = 0
        np.testing.assert_array_equal(batches[1].images[0], self.images[3])

    def test_mixed_sizes_are_an_error(self) -> None:
        rng = np.random.default_rng(2)
        path = self.write_stream([
            make_record(0, 0, random_image(rng, 4, 4)),
            make_record(1, 0, random_image(rng, 4, 4)),
            make_record(2, 0, random_image(rng, 4, 6))])
        with self.assertRaisesRegex(ValueError,
                                    "sample 2 is 4x6, the batch 4x4.*"
                                    "one output size"):
            list(joaderfs.iter_batches(path, 3))

    def test_malformed(self) -> None:
        bad_magic = make_record(12, 0, self.images[2], magic=b"JSF2")
        with self.assertRaisesRegex(joaderfs.StreamError, "dtype 2"):
            list(joaderfs.iter_batches(self.write_stream(
                [make_record(1, 1, self.images[0], dtype=2)]), 3))
        with self.assertRaisesRegex(joaderfs.StreamError,
                                    r"byte 256: bad magic b'JSF2'"):
            list(joaderfs.iter_batches(self.write_stream(
                self.records[:2] + [bad_magic]), 3))
        data = b"".join(self.records)
        with self.assertRaisesRegex(joaderfs.StreamError,
                                    "ends inside a record at byte 450"):
            list(joaderfs.iter_batches(self.write_stream([data[:450]]), 3))
        with self.assertRaisesRegex(joaderfs.StreamError,
                                    "inside a record header at byte 0"):
            list(joaderfs.iter_batches(self.write_stream([data[:40]]), 3))
        with self.assertRaises(ValueError):
            joaderfs.iter_batches(self.write_stream(self.records), 0)


class SharesTest(unittest.TestCase):

    def test_workers_take_whole_batches(self) -> None:
        from joaderfs.shares import batch_sizes
        for length in (1, 5, 51, 64, 150):
            for batch in (1, 4, 32):
                for workers in (1, 2, 3, 8):
                    shares = [list(batch_sizes(length, batch, k, workers))
                              for k in range(workers)]
                    # The DataLoader asks worker 0, 1, ... in turn.
                    order = [shares[i % workers][i // workers]
                             for i in range(sum(map(len, shares)))]
                    batches = -(-length // batch)
                    self.assertEqual(
                        order, [batch] * (batches - 1)
                        + [length - (batches - 1) * batch],
                        (length, batch, workers))


class JobReaderTest(unittest.TestCase):

    def test_each_iteration_reopens(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            job = Path(folder)
            image = np.zeros((2, 2, 3), np.uint8)
            (job / "next").write_bytes(make_record(5, 1, image)
                                       + make_record(6, 2, image))
            reader = joaderfs.JobReader(job)  # a job directory is accepted
            self.assertEqual(reader.path, job / "next")
            for _ in range(2):
                self.assertEqual([(label, i) for _, label, i in reader],
                                 [(1, 5), (2, 6)])


class TorchDatasetTest(unittest.TestCase):

    def setUp(self) -> None:
        if importlib.util.find_spec("torch") is None:
            self.skipTest("torch is not installed")
        rng = np.random.default_rng(4)
        self.images = [random_image(rng, 4, 6) for _ in range(5)]
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.job = Path(folder.name)
        (self.job / "next").write_bytes(b"".join(
            make_record(i, 10 + i, im) for i, im in enumerate(self.images)))

    def test_chw_batches(self) -> None:
        import torch
        from torch.utils.data import DataLoader
        loader = DataLoader(joaderfs.JobDataset(self.job), batch_size=2)
        batches = list(loader)
        self.assertEqual([len(ids) for _, _, ids in batches], [2, 2, 1])
        images, labels, ids = batches[0]
        self.assertEqual(images.dtype, torch.uint8)
        self.assertEqual(tuple(images.shape), (2, 3, 4, 6))
        np.testing.assert_array_equal(images[1].permute(1, 2, 0).numpy(),
                                      self.images[1])
        self.assertEqual(labels.tolist(), [10, 11])
        self.assertEqual(ids.tolist(), [0, 1])

    def test_batches(self) -> None:
        import torch
        from torch.utils.data import DataLoader
        dataset = joaderfs.JobDataset(self.job, batch_size=2)
        batches = list(DataLoader(dataset, batch_size=None))
        self.assertEqual([len(ids) for _, _, ids in batches], [2, 2, 1])
        images, labels, ids = batches[1]
        self.assertEqual(tuple(images.shape), (2, 3, 4, 6))
        self.assertTrue(images.is_contiguous(
            memory_format=torch.channels_last))
        np.testing.assert_array_equal(images[0].permute(1, 2, 0).numpy(),
                                      self.images[2])
        self.assertEqual(labels.dtype, torch.int64)
        self.assertEqual(labels.tolist(), [12, 13])
        self.assertEqual(ids.tolist(), [2, 3])
        hwc = joaderfs.JobDataset(self.job, batch_size=4, layout="HWC",
                                  drop_last=True,
                                  transform=lambda t: t.float().mean())
        means = [float(images) for images, _, _ in hwc]
        self.assertEqual(len(means), 1)
        self.assertAlmostEqual(
            means[0], float(np.stack(self.images[:4]).mean()), places=3)

    def test_hwc_and_transform(self) -> None:
        dataset = joaderfs.JobDataset(self.job, layout="HWC",
                                      transform=lambda t: t.sum().item())
        sums = [image for image, _, _ in dataset]
        self.assertEqual(sums, [int(im.sum()) for im in self.images])
        with self.assertRaises(ValueError):
            joaderfs.JobDataset(self.job, layout="NCHW")


class SpecTest(unittest.TestCase):

    def test_format_spec(self) -> None:
        self.assertEqual(
            joaderfs.format_spec({"subset": "classes:0-9", "epochs": 2}),
            "subset=classes:0-9\nepochs=2\n")
        self.assertEqual(joaderfs.format_spec("size=96"), "size=96")
        with self.assertRaises(ValueError):
            joaderfs.format_spec({"subset": "classes:0-1 epochs=3"})

    def test_make_job_on_a_plain_folder(self) -> None:
        with tempfile.TemporaryDirectory() as mount:
            (Path(mount) / "jobs").mkdir()
            job = joaderfs.make_job(mount, "a.b-c_1")
            self.assertEqual(job, Path(mount) / "jobs" / "a.b-c_1")
            (job / "spec").touch()  # the daemon provides it; a folder doesn't
            joaderfs.make_job(mount, "a.b-c_1", {"window": 1}, exist_ok=True)
            self.assertEqual((job / "spec").read_text(), "window=1\n")
            with self.assertRaises(FileExistsError):
                joaderfs.make_job(mount, "a.b-c_1")

    def test_bad_job_ids(self) -> None:
        for bad in ("", "..", "a/b", "x" * 65, "sp ace"):
            with self.subTest(job_id=bad), self.assertRaises(ValueError):
                joaderfs.job_dir("/mnt", bad)


if __name__ == "__main__":
    unittest.main()
