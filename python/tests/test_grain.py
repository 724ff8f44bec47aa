"""``joaderfs.grain_dataset`` over a real mount: epochs in one process and
under ``mp_prefetch`` (no absl flags parsed, no set_slice of the user's),
and states that resume the job exactly, as JSON, in both.

Skipped where grain is not installed, unless $JOADERFS_REQUIRE_FRAMEWORKS
names it (ctest sets it for the venv).
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import threading
import time
import unittest
from pathlib import Path

import numpy as np

import joaderfs
from frameworks import framework
from test_mount import SIZE, MountedCase

grain = framework("grain")


def workers(count: int):
    return grain.MultiprocessingOptions(num_workers=count)


@unittest.skipIf(grain is None, "grain is not installed")
class GrainTest(MountedCase):

    def setUp(self) -> None:
        super().setUp()
        self.folder = Path(tempfile.mkdtemp(prefix="joaderfs-grain-test-"))
        self.addCleanup(shutil.rmtree, self.folder, True)

    def check_elements(self, elements, epochs: list[int]) -> None:
        """Every id once per epoch, the epochs in order, labels and
        pixels of the manifest's sample."""
        ids = np.concatenate([np.asarray(e["id"]).reshape(-1)
                              for e in elements])
        labels = np.concatenate([np.asarray(e["label"]).reshape(-1)
                                 for e in elements])
        of = np.concatenate([np.broadcast_to(e["epoch"], np.shape(e["id"]))
                             .reshape(-1) for e in elements])
        self.assertTrue((np.diff(of) >= 0).all(), "an element of an "
                        "earlier epoch came after a later one")
        self.assertEqual(sorted(set(of.tolist())), epochs)
        for epoch in epochs:
            with self.subTest(epoch=epoch):
                self.check_epoch(ids[of == epoch].tolist(),
                                 labels[of == epoch].tolist())
        first = elements[0]
        image = np.asarray(first["image"]).reshape(-1, SIZE, SIZE, 3)[0]
        self.check_pixels(image, int(ids[0]))

    def test_samples_and_batches_in_one_process(self) -> None:
        job = self.make_job("samples")
        dataset = joaderfs.grain_dataset(job, epochs=2)
        self.assertIsInstance(dataset, grain.IterDataset)
        elements = list(dataset)
        self.assertEqual(np.shape(elements[0]["image"]), (SIZE, SIZE, 3))
        self.check_elements(elements, [0, 1])
        # Another iterator starts where the job is; batches from grain's
        # own batch() after it, and whole batches read by the dataset.
        batched = list(joaderfs.grain_dataset(job).batch(64))
        self.assertEqual([len(b["id"]) for b in batched], [64, 64, 22])
        self.check_elements(batched, [2])
        job = self.make_job("batches")
        batches = list(joaderfs.grain_dataset(job, batch_size=32, epochs=2))
        self.assertEqual([len(b["id"]) for b in batches],
                         [32, 32, 32, 32, 22] * 2)
        self.assertEqual(batches[0]["image"].shape, (32, SIZE, SIZE, 3))
        self.check_elements(batches, [0, 1])
        job = self.make_job("drop-last")
        batches = list(joaderfs.grain_dataset(job, batch_size=32,
                                              drop_last=True))
        self.assertEqual([len(b["id"]) for b in batches], [32] * 4)
        # The short batch was read and dropped: the epoch is over.
        status = joaderfs.job_status(job)
        self.assertEqual((status["epoch"], status["remaining"]), (0, 0))

    def test_state_round_trip_in_one_process(self) -> None:
        job = self.make_job("state")
        iterator = iter(joaderfs.grain_dataset(job, epochs=2))
        before = [next(iterator) for _ in range(40)]
        state = json.loads(json.dumps(iterator.get_state()))
        # Taken after the state: they must come again after a restore.
        after = [next(iterator) for _ in range(25)]
        iterator.close()
        restored = iter(joaderfs.grain_dataset(job, epochs=2))
        restored.set_state(state)
        rest = list(restored)
        self.check_elements(before + rest, [0, 1])
        again = {int(e["id"]) for e in after} & {
            int(e["id"]) for e in rest if int(e["epoch"]) == 0}
        self.assertEqual(len(again), 25)
        # A state taken at the end of an epoch goes on with the next one.
        job = self.make_job("state-end")
        iterator = iter(joaderfs.grain_dataset(job, batch_size=50, epochs=3))
        first = [next(iterator) for _ in range(3)]
        state = json.loads(json.dumps(iterator.get_state()))
        iterator.close()
        self.assertEqual((state["epoch"], len(state["consumed"])), (0, 150))
        restored = iter(joaderfs.grain_dataset(job, batch_size=50, epochs=3))
        restored.set_state(state)
        self.check_elements(first + list(restored), [0, 1, 2])

    def test_mp_prefetch_and_its_state(self) -> None:
        # Two workers, in turns: batches of 35 of 150 samples, 5 an epoch,
        # the last one short; the next epoch's turns go on from there.
        job = self.make_job("mp")
        dataset = joaderfs.grain_dataset(job, batch_size=35, epochs=2)
        iterator = iter(dataset.mp_prefetch(workers(2)))
        before = [next(iterator) for _ in range(2)]
        state = json.loads(json.dumps(iterator.get_state()))
        [next(iterator) for _ in range(2)]  # the workers read further still
        iterator.close()
        restored = iter(joaderfs.grain_dataset(job, batch_size=35, epochs=2)
                        .mp_prefetch(workers(2)))
        restored.set_state(state)
        rest = list(restored)
        restored.close()
        self.assertEqual([len(b["id"]) for b in before + rest],
                         [35, 35] + [35, 35, 10] + [35, 35, 35, 35, 10])
        self.check_elements(before + rest, [0, 1])
        status = joaderfs.job_status(job)
        self.assertEqual((status["epoch"], status["remaining"],
                          status["readers"]), (1, 0, 0))

    def test_worker_waiting_at_an_epoch_end_ends_on_close(self) -> None:
        # Worker 0 of 2, in this process: its share of epoch 0 is batches 0
        # and 2 of 3; then it waits for worker 1 to take batch 1, as long as
        # the training process takes elements, which ends when it closes
        # the pipeline (the flag a _TrackedIterator's close makes).
        job = self.make_job("waiting")
        worker = copy.copy(joaderfs.grain_dataset(job, batch_size=50,
                                                  epochs=2))
        worker.set_slice(slice(0, None, 2))
        worker.tracked_elsewhere = True
        worker.stop_flag = str(self.folder / "stop")
        iterator = iter(worker)
        self.assertEqual([len(next(iterator)["id"]) for _ in range(2)],
                         [50, 50])
        flag = threading.Timer(1.0, Path(worker.stop_flag).touch)
        flag.start()
        self.addCleanup(flag.cancel)
        started = time.monotonic()
        with self.assertRaises(StopIteration):
            next(iterator)
        self.assertGreater(time.monotonic() - started, 0.9)
        status = joaderfs.job_status(job)
        self.assertEqual((status["remaining"], status["readers"]), (50, 0))

    def test_map_before_mp_prefetch_cannot_resume(self) -> None:
        # Each worker then knows only its own ids: a restore would deliver
        # the others' again, so it is refused.
        job = self.make_job("mapped")
        iterator = iter(joaderfs.grain_dataset(job).map(lambda e: e)
                        .mp_prefetch(workers(2)))
        first = [next(iterator) for _ in range(3)]
        state = iterator.get_state()
        iterator.close()
        restored = iter(joaderfs.grain_dataset(job).map(lambda e: e)
                        .mp_prefetch(workers(2)))
        restored.set_state(state)
        with self.assertRaisesRegex(RuntimeError, "mp_prefetch on"):
            list(restored)
        restored.close()
        self.assertEqual(len({int(e["id"]) for e in first}), 3)

if __name__ == "__main__":
    unittest.main()
