"""The client against a real daemon: mount a small ImageFolder and read it.

The daemon is ``$JOADERFS_BIN`` (default: build/joaderfs of this checkout),
daemonized as admins run it (no ``-f``), through the repository's daemon
harness, tests/harness (on PYTHONPATH): cleanup always unmounts, then reaps
the daemon and checks that it exited cleanly (or kills it after a grace
period).
"""

from __future__ import annotations

import errno
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

import numpy as np
from PIL import Image

import harness
import joaderfs

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:  # the torch test is skipped, the rest still runs
    torch = None

CLASSES = ("b-dogs", "a-cats", "c-eels")  # made unsorted; labels are sorted
PER_CLASS = 50
SIZE = 64
TEST_DEADLINE_S = 120


def colour_of(sample_key: int) -> tuple[int, int, int]:
    """A solid colour per image, to check each payload belongs to its id."""
    return (sample_key * 37 % 256, sample_key * 91 % 256,
            (sample_key * 53 + 100) % 256)


def make_image_folder(root: Path) -> dict[str, tuple[int, int, int]]:
    """Writes CLASSES x PER_CLASS JPEGs of varied sizes; returns relpath ->
    colour."""
    rng = np.random.default_rng(3)
    colours = {}
    key = 0
    for name in CLASSES:
        (root / name).mkdir()
        for i in range(PER_CLASS):
            width, height = (int(v) for v in rng.integers(48, 200, 2))
            relpath = f"{name}/img_{i:03d}.jpg"
            colours[relpath] = colour_of(key)
            Image.new("RGB", (width, height), colours[relpath]).save(
                root / relpath, quality=95)
            key += 1
    return colours


def unmount_cleanly(mount: harness.Mount) -> None:
    """Unmounts and reaps the daemon; a daemon that did not exit 0 fails
    the class, with its log."""
    status = mount.unmount()
    if status != 0:
        print(f"\njoaderfs exited with {status}:\n{mount.saved_log}",
              file=sys.stderr)
        raise RuntimeError(f"joaderfs exited with {status} after unmounting")


def start_second_worker_late(worker_id: int) -> None:
    """A DataLoader worker_init_fn: worker 1 starts a while after worker 0,
    as a worker of a loaded machine does."""
    if worker_id == 1:
        time.sleep(3)


def _deadline_passed(signum, frame):
    # A blocked read() of next is interrupted and the test fails instead of
    # hanging; cleanup then unmounts.
    raise TimeoutError(f"test took more than {TEST_DEADLINE_S} s")


class MountedCase(unittest.TestCase):
    """A daemonized mount of a generated ImageFolder for the class's tests
    (CLASSES x PER_CLASS images at size SIZE), and checks against its
    manifest; no tests of its own."""

    @classmethod
    def setUpClass(cls) -> None:
        harness.require_binary()
        folder = tempfile.mkdtemp(prefix="joaderfs-client-test-")
        cls.addClassCleanup(shutil.rmtree, folder, ignore_errors=True)
        cls.source = Path(folder) / "images"
        cls.source.mkdir()
        cls.colours = make_image_folder(cls.source)
        daemon = harness.Mount(
            str(cls.source), folder,
            {"cache_dir": "none", "ram_cache": "256M", "size": str(SIZE),
             "log_level": "info"}, defaults={})
        # Cleanups run last-in first-out: cleanup() only acts if the
        # clean unmount did not happen (a failure half-way).
        cls.addClassCleanup(daemon.cleanup)
        daemon.start()
        cls.addClassCleanup(unmount_cleanly, daemon)
        cls.mount = Path(daemon.mnt)
        cls.manifest = joaderfs.read_manifest(cls.mount)
        cls.labels = {e.id: e.label for e in cls.manifest}

    def setUp(self) -> None:
        signal.signal(signal.SIGALRM, _deadline_passed)
        signal.alarm(TEST_DEADLINE_S)
        self.addCleanup(signal.alarm, 0)

    def make_job(self, job_id: str, spec=None) -> Path:
        return joaderfs.make_job(self.mount, job_id, spec)

    def check_epoch(self, ids: list[int], labels: list[int],
                    expected: set[int] | None = None) -> None:
        """Each sample exactly once, with the manifest's label."""
        expected = set(self.labels) if expected is None else expected
        self.assertEqual(len(ids), len(expected), "samples in the epoch")
        self.assertEqual(set(ids), expected)
        self.assertEqual(labels, [self.labels[i] for i in ids])

    def check_pixels(self, image: np.ndarray, sample_id: int) -> None:
        """The payload is this sample's image: its colour, resized."""
        self.assertEqual(image.shape, (SIZE, SIZE, 3))
        relpath = self.manifest[sample_id].relpath
        mean = image.reshape(-1, 3).mean(axis=0)
        np.testing.assert_allclose(mean, self.colours[relpath], atol=6,
                                   err_msg=f"sample {sample_id} ({relpath})")



class MountTest(MountedCase):

    def test_dataset_files(self) -> None:
        info = joaderfs.dataset_info(self.mount)
        self.assertEqual(info["samples"], len(CLASSES) * PER_CLASS)
        self.assertEqual(info["classes"], len(CLASSES))
        self.assertEqual(info["size"], SIZE)
        relpaths = sorted(self.colours)
        class_names = sorted(CLASSES)
        self.assertEqual(
            self.manifest,
            [joaderfs.ManifestEntry(i, class_names.index(p.split("/")[0]), p)
             for i, p in enumerate(relpaths)])
        self.assertIn("next", (self.mount / "README").read_text())

    def test_reader_epochs(self) -> None:
        reader = joaderfs.JobReader(self.make_job("plain"))
        for epoch in range(2):
            records = list(reader.records())
            self.check_epoch([r.id for r in records],
                             [r.label for r in records])
            self.assertEqual({r.epoch for r in records}, {epoch})
            for record in records:
                self.check_pixels(record.image, record.id)

    def test_two_readers_share_an_epoch(self) -> None:
        reader = joaderfs.JobReader(self.make_job("two-readers"))
        streams = [reader.records(), reader.records()]  # both open now
        results: list[list[joaderfs.Record]] = [[], []]
        threads = [threading.Thread(target=lambda i=i: results[i].extend(
            streams[i])) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        records = results[0] + results[1]
        self.check_epoch([r.id for r in records], [r.label for r in records])

    def test_batches(self) -> None:
        job = self.make_job("batches")
        batches = list(joaderfs.iter_batches(job, 32))
        self.assertEqual([len(b.ids) for b in batches], [32] * 4 + [22])
        self.assertEqual(batches[0].images.shape, (32, SIZE, SIZE, 3))
        self.check_epoch(np.concatenate([b.ids for b in batches]).tolist(),
                         np.concatenate([b.labels for b in batches]).tolist())
        self.check_pixels(batches[0].images[5], int(batches[0].ids[5]))

    def test_batches_bigger_than_a_fuse_read(self) -> None:
        # 150 records of 12 KiB in one batch: more than one 1 MiB FUSE read.
        job = self.make_job("big-batches")
        batches = list(joaderfs.iter_batches(job, 400))
        self.assertEqual([len(b.ids) for b in batches], [150])
        self.assertTrue(batches[0].images.flags["C_CONTIGUOUS"])
        for image, sample_id in zip(batches[0].images, batches[0].ids):
            self.check_pixels(image, int(sample_id))

    def test_rank_selects_its_stream_file(self) -> None:
        job = self.make_job("no-ranks")
        with self.assertRaises(FileNotFoundError) as caught:
            next(joaderfs.iter_batches(job, 8, rank=0))
        self.assertEqual(Path(caught.exception.filename).name, "next.0")

    def epoch_by_sample(self, loader) -> dict[int, tuple[int, np.ndarray]]:
        """id -> (label, HWC pixels) of one epoch, each id exactly once."""
        seen: dict[int, tuple[int, np.ndarray]] = {}
        for images, labels, ids in loader:
            for image, label, sample_id in zip(images, labels.tolist(),
                                               ids.tolist()):
                self.assertNotIn(sample_id, seen, "delivered twice")
                seen[sample_id] = (label, image.permute(1, 2, 0).numpy())
        return seen

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_batch_path_matches_per_sample_path(self) -> None:
        for workers in (0, 2):
            with self.subTest(num_workers=workers):
                job = self.make_job(f"batch-vs-sample-w{workers}")
                per_sample = DataLoader(joaderfs.JobDataset(job),
                                        batch_size=32, num_workers=workers,
                                        timeout=60 if workers else 0)
                dataset = joaderfs.JobDataset(job, batch_size=32)
                batched = DataLoader(dataset, batch_size=None,
                                     num_workers=workers,
                                     timeout=60 if workers else 0)
                sizes = []
                for images, _, _ in batched:
                    self.assertEqual(images.dtype, torch.uint8)
                    self.assertEqual(tuple(images.shape[1:]),
                                     (3, SIZE, SIZE))
                    self.assertTrue(images.is_contiguous(
                        memory_format=torch.channels_last))
                    sizes.append(len(images))
                # That was epoch 0; compare the next two epochs.
                reference = self.epoch_by_sample(per_sample)
                result = self.epoch_by_sample(batched)
                # Workers take whole batches: only the last one is short.
                self.assertEqual(sizes, [32] * 4 + [150 - 4 * 32])
                self.assertEqual(set(reference), set(self.labels))
                self.assertEqual(set(result), set(self.labels))
                for sample_id, (label, pixels) in reference.items():
                    self.assertEqual(result[sample_id][0], label)
                    self.assertEqual(label, self.labels[sample_id])
                    np.testing.assert_array_equal(
                        result[sample_id][1], pixels,
                        err_msg=f"sample {sample_id}")
                    self.check_pixels(pixels, sample_id)

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_kept_batches_stay_intact(self) -> None:
        # Batch buffers are reused; one the training code still holds must
        # never be.  Batches of 4: each worker reads more batches than its
        # ring has buffers, so kept ones also go out in fresh memory.
        for workers in (0, 2):
            with self.subTest(num_workers=workers):
                job = self.make_job(f"kept-w{workers}")
                loader = DataLoader(joaderfs.JobDataset(job, batch_size=4),
                                    batch_size=None, num_workers=workers,
                                    timeout=60 if workers else 0)
                kept = list(loader)
                ids = [i for _, _, batch_ids in kept
                       for i in batch_ids.tolist()]
                self.check_epoch(ids, [label for _, labels, _ in kept
                                       for label in labels.tolist()])
                buffers = {images.data_ptr() for images, _, _ in kept}
                self.assertEqual(len(buffers), len(kept),
                                 "two kept batches share memory")
                for images, _, batch_ids in kept:
                    for image, sample_id in zip(images, batch_ids.tolist()):
                        self.check_pixels(image.permute(1, 2, 0).numpy(),
                                          sample_id)

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_dropped_batches_reuse_their_memory(self) -> None:
        # The batch path's speed rests on this: fresh memory for every batch
        # costs a page fault per 4 KiB, and a shared buffer sent to the
        # training process for every batch costs a file descriptor and a
        # mapping.
        for workers in (0, 2):
            with self.subTest(num_workers=workers):
                job = self.make_job(f"reuse-w{workers}")
                loader = DataLoader(joaderfs.JobDataset(job, batch_size=4),
                                    batch_size=None, num_workers=workers,
                                    timeout=60 if workers else 0)
                buffers = set()
                for epoch in range(2):
                    ids = []
                    for images, _, batch_ids in loader:
                        self.check_pixels(images[0].permute(1, 2, 0).numpy(),
                                          int(batch_ids[0]))
                        buffers.add(images.data_ptr())
                        ids += batch_ids.tolist()
                    self.assertEqual(sorted(ids), sorted(self.labels))
                # 38 batches an epoch.  w0, kept from epoch to epoch: the
                # batch in hand, the 2 read ahead (prefetch=2), the one being
                # read, and the previous one, still bound to the loop's
                # variable while the thread, given room by next(), goes on
                # to read; w2: per worker and epoch, the batch in hand, the
                # one being read and the DataLoader's 2 prefetched ones.
                self.assertLessEqual(len(buffers), 5 if workers == 0 else 16,
                                     f"{len(buffers)} buffers for 76 batches")

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_batch_options(self) -> None:
        job = self.make_job("batch-options")
        dataset = joaderfs.JobDataset(job, batch_size=40, drop_last=True,
                                      layout="HWC")
        loader = DataLoader(dataset, batch_size=None, num_workers=2,
                            persistent_workers=True, timeout=60)
        for epoch in range(2):
            with self.subTest(epoch=epoch):
                ids = []
                for images, _, batch_ids in loader:
                    self.assertEqual(tuple(images.shape),
                                     (40, SIZE, SIZE, 3))
                    ids += batch_ids.tolist()
                # The workers take whole batches: one short batch, dropped.
                self.assertEqual(len(ids), len(set(ids)))
                self.assertEqual(len(ids), 3 * 40)
                # The dropped batch was read: the epoch is over.
                status = joaderfs.job_status(self.mount, "batch-options")
                self.assertEqual((status["epoch"], status["remaining"]),
                                 (epoch, 0))
        pinned = joaderfs.JobDataset(job, batch_size=50, pin_memory=True)
        if torch.cuda.is_available():
            batches = iter(pinned)
            self.addCleanup(batches.close)
            images, _, _ = next(batches)
            self.assertTrue(images.is_pinned())
        else:
            # In the caller's thread, not the prefetch thread's.
            with self.assertWarnsRegex(UserWarning, "no CUDA device"):
                batches = iter(pinned)
            self.addCleanup(batches.close)
            images, _, _ = next(batches)
        self.assertEqual(tuple(images.shape), (50, 3, SIZE, SIZE))
        with self.assertRaises(ValueError):
            joaderfs.JobDataset(job, pin_memory=True)  # needs batch_size

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_dataloader_two_workers(self) -> None:
        job = self.make_job("torch")
        # Told the loader's batch size, the workers take whole batches.
        loader = DataLoader(joaderfs.JobDataset(job, loader_batch_size=32),
                            batch_size=32, num_workers=2, timeout=60)
        for epoch in range(2):
            ids, labels, sizes = [], [], []
            for images, batch_labels, batch_ids in loader:
                sizes.append(len(batch_ids))
                self.assertEqual(images.dtype, torch.uint8)
                self.assertEqual(tuple(images.shape[1:]), (3, SIZE, SIZE))
                self.check_pixels(images[0].permute(1, 2, 0).numpy(),
                                  int(batch_ids[0]))
                ids += batch_ids.tolist()
                labels += batch_labels.tolist()
            with self.subTest(epoch=epoch):
                self.check_epoch(ids, labels)
                self.assertEqual(sizes, [32] * 4 + [150 - 4 * 32])

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_persistent_workers(self) -> None:
        job = self.make_job("torch-persistent")
        loader = DataLoader(joaderfs.JobDataset(job, layout="HWC"),
                            batch_size=50, num_workers=2,
                            persistent_workers=True, timeout=60)
        for epoch in range(2):
            ids, labels = [], []
            for images, batch_labels, batch_ids in loader:
                self.assertEqual(tuple(images.shape[1:]), (SIZE, SIZE, 3))
                ids += batch_ids.tolist()
                labels += batch_labels.tolist()
            with self.subTest(epoch=epoch):
                self.check_epoch(ids, labels)

    def test_a_late_worker_takes_its_share_of_the_epoch(self) -> None:
        # Per sample, no loader_batch_size: worker 1 starts after worker 0
        # has read all it may. It must read the rest of this epoch, not the
        # whole next one within this pass.
        job = self.make_job("torch-late-worker")
        loader = DataLoader(joaderfs.JobDataset(job, layout="HWC"),
                            batch_size=50, num_workers=2,
                            persistent_workers=True, timeout=60,
                            worker_init_fn=start_second_worker_late)
        for epoch in range(2):
            ids, labels = [], []
            for _, batch_labels, batch_ids in loader:
                ids += batch_ids.tolist()
                labels += batch_labels.tolist()
            with self.subTest(epoch=epoch):
                self.check_epoch(ids, labels)

    def test_subset_spec(self) -> None:
        job = self.make_job("subset", {"subset": "classes:1-1"})
        records = list(joaderfs.JobReader(job).records())
        self.check_epoch([r.id for r in records], [r.label for r in records],
                         {i for i, label in self.labels.items() if label == 1})

    def test_ids_subset(self) -> None:
        job = self.make_job("ids")
        joaderfs.write_ids(job, [3, 7, self.manifest[120].relpath])
        records = list(joaderfs.JobReader(job).records())
        self.check_epoch([r.id for r in records], [r.label for r in records],
                         {3, 7, 120})

    def test_bad_spec_is_rejected(self) -> None:
        with self.assertRaisesRegex(ValueError, "rejected the spec"):
            self.make_job("bad-spec", {"subset": "everything"})

    def test_refused_spec_leaves_no_job(self) -> None:
        with self.assertRaises(joaderfs.RejectedWrite) as caught:
            self.make_job("refused", {"subset": "everything"})
        self.assertFalse((self.mount / "jobs" / "refused").exists())
        self.assertNotIn("refused", joaderfs.read_stats(self.mount)["jobs"])
        # The daemon's reason, where the daemon leaves it in the job's
        # `error` file (an older daemon has none: the message says so).
        reason = caught.exception.reason
        if reason is None:
            self.assertIn("the daemon log says why", str(caught.exception))
        else:
            self.assertRegex(reason, r"^spec: .*everything")
            self.assertIn(reason, str(caught.exception))
        # A job that already existed is kept, with its spec.
        job = self.make_job("kept-on-refusal", {"epochs": 3})
        with self.assertRaises(joaderfs.RejectedWrite):
            joaderfs.make_job(self.mount, "kept-on-refusal", "bogus=1",
                              exist_ok=True)
        self.assertIn("epochs=3", (job / "spec").read_text())

    def test_a_rerun_finds_its_job_or_names_the_fix(self) -> None:
        job = self.make_job("rerun", {"epochs": 2})
        self.assertEqual(self.make_job("rerun", {"epochs": 2}), job)
        # Not started: another spec would replace it silently; refused.
        with self.assertRaisesRegex(joaderfs.RejectedWrite, "new job id"):
            self.make_job("rerun", {"epochs": 3})
        self.assertIn("epochs=2", (job / "spec").read_text())
        next(joaderfs.JobReader(job).records())  # started
        self.assertEqual(self.make_job("rerun", {"epochs": 2}), job)
        with self.assertRaises(joaderfs.RejectedWrite) as caught:
            self.make_job("rerun", {"epochs": 3})
        self.assertIn("new job id", str(caught.exception))
        self.assertIn("rmdir", caught.exception.reason)  # the daemon's own reason
        with self.assertRaises(FileExistsError):
            self.make_job("rerun")

    def test_len_of_a_job_dataset(self) -> None:
        job = self.make_job("len")
        n = len(self.labels)
        self.assertEqual(len(joaderfs.JobDataset(job)), n)
        self.assertEqual(len(joaderfs.JobDataset(job, batch_size=7)), -(-n // 7))
        self.assertEqual(len(joaderfs.JobDataset(job, batch_size=7, drop_last=True)), n // 7)
        batches = list(joaderfs.JobDataset(job, batch_size=7))
        self.assertEqual(len(batches), -(-n // 7), "len() differs from the epoch read")
        subset = self.make_job("len-subset", {"subset": "classes:1-1"})
        self.assertEqual(len(joaderfs.JobDataset(subset)), PER_CLASS)

    def test_records_carry_flags_and_crop_box(self) -> None:
        plain = list(joaderfs.JobReader(self.make_job("flags-plain")).records())
        self.assertTrue(all(r.flags == 0 and r.crop_box is None and not r.flipped
                            for r in plain))
        cut = list(joaderfs.JobReader(self.make_job(
            "flags-cut", {"crop": "random", "flip": 1})).records())
        self.assertEqual(len(cut), len(self.labels))
        for r in cut:
            self.assertTrue(r.flipped, r.flags)
            self.assertFalse(r.repeat)
            self.assertIsNotNone(r.crop_box)
            x, y, w, h = r.crop_box
            self.assertGreater(w, 0)
            self.assertGreater(h, 0)

    def test_error_file_names_each_rejected_write(self) -> None:
        job = self.make_job("errors")
        self.assertEqual((job / "error").read_text(), "")
        with self.assertRaises(joaderfs.RejectedWrite) as caught:
            joaderfs.write_ids(job, [3, 10 ** 9])
        self.assertRegex(caught.exception.reason, r"^ids: ")
        with self.assertRaises(joaderfs.RejectedWrite) as caught:
            joaderfs.write_resume(job, 0, [10 ** 9])
        self.assertRegex(caught.exception.reason, r"^resume: ")
        with self.assertRaises(joaderfs.RejectedWrite) as caught:
            joaderfs.write_spec(job, "window=zero")
        self.assertRegex(caught.exception.reason, r"^spec: .*window")
        self.assertEqual((job / "error").read_text().strip(),
                         caught.exception.reason)
        joaderfs.write_spec(job, {"epochs": 1})  # a good write clears it
        self.assertEqual((job / "error").read_text(), "")

    def test_stats_and_status(self) -> None:
        job = self.make_job("stats")
        delivered = sum(1 for _ in joaderfs.JobReader(job))
        self.assertEqual(delivered, len(self.labels))
        status = joaderfs.job_status(self.mount, "stats")
        for key in ("epoch", "delivered", "remaining", "subset_size",
                    "readers"):
            self.assertIn(key, status)
        self.assertEqual(status["subset_size"], len(self.labels))
        self.assertEqual(status["readers"], 0)
        stats = joaderfs.read_stats(self.mount)
        for key in ("decoded", "delivered", "ram_hits", "disk_hits",
                    "ram_bytes", "ram_budget", "disk_bytes", "skipped"):
            self.assertIsInstance(stats[key], int, key)
        self.assertEqual(stats["ram_budget"], 256 << 20)
        self.assertGreaterEqual(stats["delivered"], len(self.labels))
        self.assertEqual(stats["skipped"], 0)
        self.assertIn("stats", stats["jobs"])
        joaderfs.remove_job(self.mount, "stats")
        self.assertNotIn("stats", joaderfs.read_stats(self.mount)["jobs"])


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t.name == "joaderfs-prefetch"]


@unittest.skipIf(torch is None, "torch is not installed")
class PrefetchTest(MountedCase):
    """JobDataset's batches in the training process (num_workers=0), read
    ahead by its prefetch thread: the README's setting."""

    BATCH = 4  # 38 batches an epoch, many more than are read ahead

    def loader(self, job: Path, **options) -> DataLoader:
        return DataLoader(joaderfs.JobDataset(job, batch_size=self.BATCH,
                                              **options),
                          batch_size=None, num_workers=0)

    def readers(self, job_id: str) -> int:
        return joaderfs.job_status(self.mount, job_id)["readers"]

    def test_each_sample_once_an_epoch(self) -> None:
        job = self.make_job("prefetch-epochs")
        loader = self.loader(job)
        for epoch in range(3):
            with self.subTest(epoch=epoch):
                ids, labels, threads = [], [], set()
                for images, batch_labels, batch_ids in loader:
                    threads.update(prefetch_threads())
                    for image, sample_id in zip(images, batch_ids.tolist()):
                        self.check_pixels(image.permute(1, 2, 0).numpy(),
                                          sample_id)
                    ids += batch_ids.tolist()
                    labels += batch_labels.tolist()
                self.check_epoch(ids, labels)
                self.assertEqual(len(threads), 1, "one prefetch thread")
                self.assertFalse(any(t.is_alive() for t in threads))
                self.assertEqual(self.readers("prefetch-epochs"), 0)
                status = joaderfs.job_status(self.mount, "prefetch-epochs")
                self.assertEqual((status["epoch"], status["remaining"]),
                                 (epoch, 0))

    def test_break_closes_next(self) -> None:
        job = self.make_job("prefetch-break")
        loader = self.loader(job)
        seen = []
        for i, (_, _, batch_ids) in enumerate(loader):
            seen += batch_ids.tolist()
            if i == 2:
                self.assertEqual(self.readers("prefetch-break"), 1)
                break
        # The loop's iterator is gone: the thread has ended and closed next.
        self.assertEqual(prefetch_threads(), [])
        self.assertEqual(self.readers("prefetch-break"), 0)
        # The next pass reads the rest of the epoch (the batches read ahead
        # are lost to it, as the user guide says), not a sample again; the
        # one after it the next epoch in full.
        rest = [i for _, _, batch_ids in loader for i in batch_ids.tolist()]
        self.assertEqual(len(rest), len(set(rest)))
        self.assertEqual(set(rest) & set(seen), set())
        lost = len(self.labels) - len(seen) - len(rest)
        self.assertLessEqual(lost, 3 * self.BATCH, "more than read ahead")
        status = joaderfs.job_status(self.mount, "prefetch-break")
        self.assertEqual((status["epoch"], status["remaining"]), (0, 0))
        ids, labels = [], []
        for _, batch_labels, batch_ids in loader:
            ids += batch_ids.tolist()
            labels += batch_labels.tolist()
        self.check_epoch(ids, labels)
        self.assertEqual(self.readers("prefetch-break"), 0)

    def test_read_error_reaches_the_consumer(self) -> None:
        job = self.make_job("prefetch-removed")
        batches = iter(self.loader(job))
        next(batches)
        joaderfs.remove_job(self.mount, "prefetch-removed")
        with self.assertRaises(OSError) as caught:
            for _ in batches:
                pass
        self.assertEqual(caught.exception.errno, errno.ENODEV)
        self.assertEqual(prefetch_threads(), [])
        # An error in the first batch: samples of several sizes.
        mixed = self.make_job("prefetch-sizes", {"size": 0})
        with self.assertRaisesRegex(ValueError, "one output size"):
            next(iter(self.loader(mixed)))
        self.assertEqual(prefetch_threads(), [])
        self.assertEqual(self.readers("prefetch-sizes"), 0)

    def test_a_kept_batch_stays_intact(self) -> None:
        job = self.make_job("prefetch-kept")
        batches = iter(self.loader(job))
        kept, _, kept_ids = next(batches)
        before = kept.numpy().copy()
        count = sum(1 for _ in batches)
        self.assertEqual(count, -(-len(self.labels) // self.BATCH) - 1)
        # The thread read every later batch while this one was kept: into
        # other buffers.
        np.testing.assert_array_equal(kept.numpy(), before)
        for image, sample_id in zip(kept, kept_ids.tolist()):
            self.check_pixels(image.permute(1, 2, 0).numpy(), sample_id)

    def test_without_prefetch(self) -> None:
        job = self.make_job("prefetch-off")
        ids, labels = [], []
        for _, batch_labels, batch_ids in self.loader(job, prefetch=0):
            self.assertEqual(prefetch_threads(), [])
            ids += batch_ids.tolist()
            labels += batch_labels.tolist()
        self.check_epoch(ids, labels)
        with self.assertRaises(ValueError):
            joaderfs.JobDataset(job, batch_size=4, prefetch=-1)


if __name__ == "__main__":
    unittest.main()
