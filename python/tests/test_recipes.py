"""The training recipes of examples/, each run as a user runs it against a
real daemonized mount, killed (SIGKILL to its process group: the training
process, TensorFlow's threads, Grain's workers) in the middle of an epoch,
and run again to the end.  The rerun must train on whole epochs: in the
epoch it restarts, every sample exactly once counting what the killed run
had trained on before its last checkpoint (none for a recipe that restarts
the epoch), the later epochs whole, and as many steps in each as the job's
epoch size gives, never a count learnt from an epoch cut short.  The ids
are those of the records, as each recipe logs them (``--log``).  Also:
``tf_fixed_length.parse_record`` against the client's own parser, field by
field, on the same records of an augmented job.

Needs TensorFlow, JAX and Grain: skipped where one is missing, unless
$JOADERFS_REQUIRE_FRAMEWORKS names it (ctest sets it for the venv).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import numpy as np

import joaderfs
from frameworks import framework
from test_mount import CLASSES, PER_CLASS, SIZE, MountedCase

tf = framework("tensorflow")
jax = framework("jax")
grain = framework("grain")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SAMPLES = len(CLASSES) * PER_CLASS
EPOCHS = 3
BATCH = 5  # 30 steps an epoch: room for the kill to land inside one
STEPS = math.ceil(SAMPLES / BATCH)  # of a whole epoch
KILLED_IN = 1  # the epoch the first run is killed in
RUN_DEADLINE_S = 90
ATTEMPTS = 3  # a kill that landed outside the epoch, or on a checkpoint, is tried again


def read_log(path: Path) -> list[dict]:
    """The recipe's JSON lines (a killed run may leave a partial last one)."""
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            break
    return lines


def steps_of(log: list[dict], epoch: int) -> list[list[int]]:
    """The ids of each step a run trained on in ``epoch``."""
    return [line["ids"] for line in log if line.get("epoch") == epoch
            and "ids" in line]


@unittest.skipIf(tf is None or jax is None or grain is None,
                 "tensorflow, jax or grain is not installed")
class RecipeTest(MountedCase):

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # XLA's compilations, kept on disk for the class's later JAX runs:
        # jax_resume.py and grain_resume.py train the same jax_model, so
        # only the first run compiles, most of a run's start-up; the others
        # load it. Every compile, hence every write to the cache, is done
        # in the first steps of epoch 0, before any kill can land.
        cls.jax_cache = tempfile.mkdtemp(prefix="joaderfs-recipe-jax-")
        cls.addClassCleanup(shutil.rmtree, cls.jax_cache, ignore_errors=True)

    def setUp(self) -> None:
        super().setUp()
        self.folder = Path(tempfile.mkdtemp(prefix="joaderfs-recipe-"))
        self.addCleanup(lambda: subprocess.run(["rm", "-rf",
                                                str(self.folder)]))

    def run_recipe(self, script: str, job_id: str, args: list[str],
                   kill_when=None) -> list[dict]:
        """Runs examples/``script`` to the end, or until ``kill_when(log)``
        holds, then SIGKILLs its process group; returns its log."""
        log_path = self.folder / f"{job_id}.log"
        log_path.unlink(missing_ok=True)
        output = open(self.folder / f"{job_id}.out", "ab")
        self.addCleanup(output.close)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                   JAX_COMPILATION_CACHE_DIR=self.jax_cache,
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLES / script), str(self.mount), job_id,
             "--epochs", str(EPOCHS), "--batch-size", str(BATCH),
             "--size", str(SIZE), "--log", str(log_path), *args],
            cwd=self.folder, stdout=output, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self.addCleanup(self.reap, proc)
        deadline = time.monotonic() + RUN_DEADLINE_S
        while proc.poll() is None and time.monotonic() < deadline:
            if kill_when is not None and log_path.exists() and \
                    kill_when(read_log(log_path)):
                self.reap(proc)
                return read_log(log_path)
            time.sleep(0.005)
        if proc.poll() is None:
            self.reap(proc)
            self.fail(f"{script} ran past {RUN_DEADLINE_S} s:\n"
                      f"{self.output(job_id)}")
        self.assertIsNone(kill_when, f"{script} ended before it was killed:"
                          f"\n{self.output(job_id)}")
        self.assertEqual(proc.returncode, 0,
                         f"{script} failed:\n{self.output(job_id)}")
        return read_log(log_path)

    @staticmethod
    def reap(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def output(self, job_id: str) -> str:
        return (self.folder / f"{job_id}.out").read_text(errors="replace")

    def killed_mid_epoch(self, script: str, job_id: str, args: list[str],
                         kill_when, mid_epoch) -> tuple[str, list[dict]]:
        """The first run's log, killed where ``mid_epoch(log)`` says it
        should be: a kill that came later (the run went on while the test
        looked) is tried again with a new job."""
        for attempt in range(ATTEMPTS):
            name = f"{job_id}-{attempt}"
            first = self.run_recipe(script, name, args, kill_when)
            if mid_epoch(first):
                return name, first
        self.fail(f"{script}: no kill landed inside epoch {KILLED_IN}")

    def check_rerun(self, first: list[dict], rerun: list[dict]) -> None:
        """The rerun goes on from the killed run's last checkpoint: the
        epoch it restarts and the ids then consumed; its ids of that epoch
        and those make the whole epoch, each sample once; later epochs are
        whole; each epoch has the steps its samples make."""
        logged = [line for line in first if "checkpoint" in line][-1]
        trained = [i for ids in steps_of(first, logged["checkpoint"])
                   for i in ids]
        if logged["checkpoint"] == KILLED_IN and logged["consumed"]:
            self.assertGreater(len(trained), logged["consumed"],
                               "nothing was trained on after the last "
                               "checkpoint")
        # The checkpoint the rerun resumed from: the last one logged, or a
        # later one whose save the kill let finish but not its log line.
        resumed = [line for line in rerun if "resumed" in line]
        self.assertEqual(len(resumed), 1, "the rerun resumed no checkpoint")
        restart, consumed = resumed[0]["resumed"], resumed[0]["consumed"]
        self.assertGreaterEqual((restart, consumed),
                                (logged["checkpoint"], logged["consumed"]))
        trained = [i for ids in steps_of(first, restart) for i in ids]
        self.assertGreaterEqual(len(trained), consumed)
        epochs = sorted({line["epoch"] for line in rerun if "ids" in line})
        self.assertEqual(epochs, list(range(restart, EPOCHS)))
        for epoch in epochs:
            with self.subTest(epoch=epoch):
                steps = steps_of(rerun, epoch)
                before = trained[:consumed] if epoch == restart else []
                ids = before + [i for step in steps for i in step]
                self.assertEqual(sorted(ids), sorted(self.labels),
                                 "not every sample exactly once")
                self.assertEqual(len(steps),
                                 math.ceil((SAMPLES - len(before)) / BATCH))

    def check_job_ended(self, job_id: str) -> None:
        status = joaderfs.job_status(self.mount / "jobs" / job_id)
        self.assertEqual((status["epoch"], status["remaining"],
                          status["readers"]), (EPOCHS - 1, 0, 0))

    # A run is killed once it has trained on a few steps of KILLED_IN after
    # a checkpoint in it; the kill counts if it came before that epoch ended.

    def resume_mid_epoch(self, script: str, job_id: str, args=()) -> None:
        args = ["--checkpoint-every", "4", *args]

        def after_a_checkpoint(log):
            marks = [n for n, line in enumerate(log)
                     if line.get("checkpoint") == KILLED_IN and
                     line["consumed"]]
            return bool(marks) and len(steps_of(log[marks[-1]:],
                                                KILLED_IN)) >= 2

        def mid_epoch(log):
            # Also: it trained on something after its last checkpoint. The
            # run goes on between the test's look and the kill, so a kill
            # can land just after the next checkpoint: tried again, as one
            # that came after the epoch is.
            checkpoints = [n for n, line in enumerate(log)
                           if "checkpoint" in line]
            return (0 < len(steps_of(log, KILLED_IN)) < STEPS and
                    bool(checkpoints) and
                    len(steps_of(log[checkpoints[-1]:], KILLED_IN)) > 0)

        name, first = self.killed_mid_epoch(script, job_id, args,
                                            after_a_checkpoint, mid_epoch)
        rerun = self.run_recipe(script, name, args)
        self.check_rerun(first, rerun)
        self.check_job_ended(name)

    def test_jax_resume(self) -> None:
        self.resume_mid_epoch("jax_resume.py", "jax")

    def test_grain_resume_with_workers(self) -> None:
        self.resume_mid_epoch("grain_resume.py", "grain", ["--workers", "2"])

    def test_tf_fixed_length(self) -> None:
        self.resume_mid_epoch("tf_fixed_length.py", "fixed")

    def test_tfdata_resume(self) -> None:
        # Its checkpoint is of whole epochs: it restarts KILLED_IN in full.
        def in_epoch(log):
            return len(steps_of(log, KILLED_IN)) >= 3

        def mid_epoch(log):
            return len(steps_of(log, KILLED_IN)) < STEPS

        name, first = self.killed_mid_epoch("tfdata_resume.py", "tfdata", [],
                                            in_epoch, mid_epoch)
        rerun = self.run_recipe("tfdata_resume.py", name, [])
        self.check_rerun(first, rerun)
        self.check_job_ended(name)

    def test_keras_resume(self) -> None:
        def steps_since_epoch_end(log):
            ends = [n for n, line in enumerate(log) if "epoch_end" in line]
            return (len(ends), sum("step" in line
                                   for line in log[ends[-1]:]) if ends else 0)

        def in_epoch(log):
            ends, steps = steps_since_epoch_end(log)
            return ends == KILLED_IN and steps >= 3

        def mid_epoch(log):
            ends, steps = steps_since_epoch_end(log)
            return ends == KILLED_IN and steps < STEPS

        name, first = self.killed_mid_epoch("keras_resume.py", "keras", [],
                                            in_epoch, mid_epoch)
        rerun = self.run_recipe("keras_resume.py", name, [])
        # fit restarts the epoch it was killed in, from BackupAndRestore.
        self.assertEqual([line["start"] for line in first + rerun
                          if "start" in line], [0, KILLED_IN])
        # Every epoch of both runs took the steps of a whole epoch.
        self.assertEqual([(line["epoch_end"], line["steps"])
                          for line in first + rerun if "epoch_end" in line],
                         [(e, STEPS) for e in range(EPOCHS)])
        # The batches handed to TensorFlow by the rerun: whole epochs, one
        # after the other (the step count holds each to a whole epoch).
        handed = [line["handed"] for line in rerun if "handed" in line]
        self.assertEqual(len(handed), STEPS * (EPOCHS - KILLED_IN))
        for epoch in range(KILLED_IN, EPOCHS):
            with self.subTest(epoch=epoch):
                chunk = handed[(epoch - KILLED_IN) * STEPS:][:STEPS]
                self.assertEqual(sorted(i for ids in chunk for i in ids),
                                 sorted(self.labels))
        self.check_job_ended(name)

    def test_fixed_length_parser_matches_the_client(self) -> None:
        spec = importlib.util.spec_from_file_location(
            "tf_fixed_length", EXAMPLES / "tf_fixed_length.py")
        recipe = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(EXAMPLES))  # its recipe_log
        self.addCleanup(sys.path.remove, str(EXAMPLES))
        spec.loader.exec_module(recipe)
        # Random crops and flips: flags and crop boxes that are not 0.
        job = self.make_job("parsed", {"size": SIZE, "crop": "random",
                                       "flip": 0.5, "seed": 5})
        record = recipe.record_bytes(SIZE)
        with open(job / "next", "rb") as f:
            data = f.read()
        self.assertEqual(len(data), SAMPLES * record)
        records = [data[i:i + record] for i in range(0, len(data), record)]
        parsed = tf.data.Dataset.from_tensor_slices(records).map(
            lambda r: recipe.parse_record(r, SIZE))
        flipped = boxes = 0
        for raw, fields in zip(records, parsed.as_numpy_iterator()):
            header = joaderfs.parse_header(raw[:joaderfs.stream.HEADER_SIZE])
            self.assertEqual(
                {k: int(fields[k]) for k in (
                    "id", "label", "epoch", "flags", "height", "width",
                    "channels", "payload_bytes")},
                {"id": header.id, "label": header.label,
                 "epoch": header.epoch, "flags": header.flags,
                 "height": header.height, "width": header.width,
                 "channels": header.channels,
                 "payload_bytes": header.payload_bytes})
            self.assertEqual((fields["magic"], int(fields["header_size"]),
                              int(fields["dtype"])),
                             (joaderfs.stream.MAGIC,
                              joaderfs.stream.HEADER_SIZE,
                              joaderfs.stream.DTYPE_UINT8))
            self.assertEqual(tuple(fields["crop_box"].tolist()),
                             header.crop_box or (0, 0, 0, 0))
            pixels = np.frombuffer(raw, np.uint8, header.payload_bytes,
                                   joaderfs.stream.HEADER_SIZE)
            np.testing.assert_array_equal(fields["image"].reshape(-1), pixels)
            flipped += header.flags & joaderfs.stream.FLAG_FLIPPED
            boxes += header.crop_box is not None
        self.assertTrue(0 < flipped < SAMPLES, flipped)
        self.assertEqual(boxes, SAMPLES)
        # Labels past 2**31 and ids past 2**32 need the wide fields: a
        # header made by hand (the client's own struct) with such values.
        values = {"id": 2**40 + 7, "label": -(2**35), "epoch": 2**32 - 1,
                  "flags": 3, "height": SIZE, "width": SIZE, "channels": 3,
                  "payload_bytes": SIZE * SIZE * 3}
        box = (1, 2, 300, 65535)
        header = joaderfs.stream.HEADER.pack(
            joaderfs.stream.MAGIC, 64, values["id"], values["label"],
            values["epoch"], values["flags"], SIZE, SIZE, 3, 1,
            values["payload_bytes"],
            box[0] | box[1] << 16 | box[2] << 32 | box[3] << 48)
        fields = recipe.parse_record(tf.constant(
            header + records[0][64:]), SIZE)
        self.assertEqual({k: int(fields[k]) for k in values}, values)
        self.assertEqual(tuple(fields["crop_box"].numpy().tolist()), box)
        self.assertEqual(joaderfs.parse_header(header).crop_box, box)


if __name__ == "__main__":
    unittest.main()
