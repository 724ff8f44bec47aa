"""Training frameworks over a real mount: Keras ``model.fit`` on
``tf_dataset``, a jitted JAX step on ``jax_batches``, torch 2.x DataLoader
options and torchdata's StatefulDataLoader, and every example in the
package's docstrings, run as written.

A framework that does not import is skipped, unless
$JOADERFS_REQUIRE_FRAMEWORKS names it (comma-separated; ctest sets it for
the test venv, where every one is installed): then its tests fail.
"""

from __future__ import annotations

import ast
import os
import pkgutil
import re
import tempfile
import textwrap
import unittest
from pathlib import Path

import numpy as np

import joaderfs
from frameworks import framework
from test_mount import CLASSES, PER_CLASS, SIZE, MountedCase

SAMPLES = len(CLASSES) * PER_CLASS

torch = framework("torch")
tf = framework("tensorflow")
jax = framework("jax")
torchdata = framework("torchdata") if torch is not None else None


class FrameworkTest(MountedCase):

    def ids_labels(self, pairs) -> tuple[list[int], list[int]]:
        ids, labels = [], []
        for batch_ids, batch_labels in pairs:
            ids += np.asarray(batch_ids).tolist()
            labels += np.asarray(batch_labels).tolist()
        return ids, labels

    @unittest.skipIf(tf is None, "tensorflow is not installed")
    def test_keras_fit_two_epochs(self) -> None:
        import keras
        job = self.make_job("keras")
        handed: list[list] = [[]]      # per epoch: (ids, labels) per batch
        received: list[np.ndarray] = []  # the labels train_step got

        class Model(keras.Sequential):
            def train_step(inner, data):
                # Only (x, y): a third element would be sample weights.
                self.assertEqual(len(data), 2)
                x, y = data
                self.assertEqual(tuple(x.shape[1:]), (SIZE, SIZE, 3))
                received.append(np.asarray(y))
                return super().train_step(data)

        class EpochEnd(keras.callbacks.Callback):
            def on_epoch_end(inner, epoch, logs=None):
                handed.append([])

        model = Model([keras.Input((SIZE, SIZE, 3)),
                       keras.layers.Rescaling(1 / 255),
                       keras.layers.GlobalAveragePooling2D(),
                       keras.layers.Dense(len(CLASSES))])
        # Eager steps, so that train_step sees the values.
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), run_eagerly=True)
        dataset = joaderfs.tf_dataset(
            job, 32, on_batch=lambda b: handed[-1].append((b.ids, b.labels)))
        self.assertEqual(len(dataset.element_spec), 2)
        history = model.fit(dataset, epochs=2, verbose=0,
                            callbacks=[EpochEnd()])
        self.assertEqual(len(history.history["loss"]), 2)
        self.assertEqual(handed[-1], [])
        for epoch in range(2):
            with self.subTest(epoch=epoch):
                ids, labels = self.ids_labels(handed[epoch])
                self.check_epoch(ids, labels)
                self.assertEqual([len(i) for i, _ in handed[epoch]],
                                 [32] * 4 + [SAMPLES - 4 * 32])
        # What Keras trained on is what the stream handed out, in order.
        sent = [labels for epoch in handed[:2] for _, labels in epoch]
        self.assertEqual(len(received), len(sent))
        for got, want in zip(received, sent):
            np.testing.assert_array_equal(got, want)
        status = joaderfs.job_status(self.mount, "keras")
        self.assertEqual((status["epoch"], status["remaining"]), (1, 0))

    @unittest.skipIf(jax is None, "jax is not installed")
    def test_jax_jitted_steps(self) -> None:
        import jax.numpy as jnp
        job = self.make_job("jax")
        traces = []

        @jax.jit
        def train_step(params, images, labels):
            traces.append(images.shape)  # runs once per compilation
            def loss(params):
                x = images.astype(jnp.float32).mean(axis=(1, 2)) / 255.0
                logits = x @ params["w"] + params["b"]
                return -jnp.mean(jnp.take_along_axis(
                    jax.nn.log_softmax(logits), labels[:, None], axis=1))
            grads = jax.grad(loss)(params)
            return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

        params = {"w": jnp.zeros((3, len(CLASSES))),
                  "b": jnp.zeros(len(CLASSES))}
        device = jax.devices()[0]
        for epoch in range(2):
            seen = []
            for images, labels, ids in joaderfs.jax_batches(
                    job, 30, prefetch=2, device=device):
                self.assertIsInstance(images, jax.Array)
                self.assertEqual(images.devices(), {device})
                self.assertEqual(images.shape, (30, SIZE, SIZE, 3))
                if not seen and epoch == 0:
                    # The batch in hand and 2 more on their way: 3 read.
                    status = joaderfs.job_status(self.mount, "jax")
                    self.assertEqual(status["delivered"], 90)
                seen.append((ids, np.asarray(labels)))
                params = train_step(params, images, labels)
            with self.subTest(epoch=epoch):
                self.check_epoch(*self.ids_labels(seen))
        self.assertEqual(len(traces), 1, "the step was compiled again")
        self.assertTrue(np.isfinite(np.asarray(params["w"])).all())

    @unittest.skipIf(jax is None, "jax is not installed")
    def test_jax_rank_follows_process_index(self) -> None:
        # One process here: index 0 of 1.  A job without ranks reads next;
        # one with ranks=1 reads next.0; ranks=2 does not match.
        self.assertEqual((jax.process_index(), jax.process_count()), (0, 1))
        plain = self.make_job("jax-rank-none")
        self.assertIsNone(joaderfs.jax_rank(plain))
        one = self.make_job("jax-rank-one", {"ranks": 1})
        self.assertEqual(joaderfs.jax_rank(one), 0)
        ids = [i for _, _, batch_ids in joaderfs.jax_batches(one, 50)
               for i in batch_ids.tolist()]
        self.assertEqual(sorted(ids), sorted(self.labels))
        self.assertEqual(joaderfs.job_status(
            self.mount, "jax-rank-one")["ranks"][0]["epoch"], 0)
        two = self.make_job("jax-rank-two", {"ranks": 2})
        with self.assertRaisesRegex(ValueError, "jax.process_count"):
            joaderfs.jax_rank(two)

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch_loader_options(self) -> None:
        from torch.utils.data import DataLoader
        for workers, persistent, prefetch in ((2, True, 4), (2, False, 1),
                                              (0, False, None)):
            with self.subTest(workers=workers, persistent=persistent,
                              prefetch=prefetch):
                job = self.make_job(f"options-{workers}-{persistent}")
                extra = {} if prefetch is None else {
                    "prefetch_factor": prefetch}
                loader = DataLoader(
                    joaderfs.JobDataset(job, batch_size=25),
                    batch_size=None, num_workers=workers,
                    persistent_workers=persistent, pin_memory=True,
                    timeout=60 if workers else 0, **extra)
                for epoch in range(2):
                    seen = []
                    for images, labels, ids in loader:
                        self.assertEqual(tuple(images.shape),
                                         (25, 3, SIZE, SIZE))
                        self.check_pixels(images[0].permute(1, 2, 0).numpy(),
                                          int(ids[0]))
                        seen.append((ids, labels))
                    self.check_epoch(*self.ids_labels(seen))

    @unittest.skipIf(torchdata is None, "torchdata is not installed")
    def test_stateful_dataloader(self) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader
        for workers in (0, 2):
            with self.subTest(workers=workers):
                job = self.make_job(f"stateful-{workers}")
                loader = StatefulDataLoader(
                    joaderfs.JobDataset(job, batch_size=30),
                    batch_size=None, num_workers=workers,
                    persistent_workers=workers > 0,
                    timeout=60 if workers else 0)
                for epoch in range(2):
                    seen = []
                    for images, labels, ids in loader:
                        seen.append((ids, labels))
                        self.assertIsInstance(loader.state_dict(), dict)
                    self.check_epoch(*self.ids_labels(seen))
                    state = loader.state_dict()
                    torch.save(state, os.devnull)  # checkpointable
                if workers == 0:
                    # A state taken after the epoch's loop loads; the next
                    # epoch is whole.  (With 2 workers the pass after such a
                    # load was short, 30 of 150: not claimed here.)
                    loader.load_state_dict(state)
                    seen = [(ids, labels) for _, labels, ids in loader]
                    self.check_epoch(*self.ids_labels(seen))
                # A mid-epoch state cannot resume exactly: refused, where
                # StatefulDataLoader would read and drop the 2 batches seen.
                batches = iter(loader)
                seen = [next(batches)[2], next(batches)[2]]
                state = loader.state_dict()
                seen += [ids for _, _, ids in batches]
                self.check_epoch(*self.ids_labels(
                    [(ids, [self.labels[i] for i in ids.tolist()])
                     for ids in seen]))
                resumed = StatefulDataLoader(
                    joaderfs.JobDataset(job, batch_size=30),
                    batch_size=None, num_workers=workers,
                    timeout=60 if workers else 0)
                resumed.load_state_dict(state)
                with self.assertRaisesRegex(RuntimeError, "StreamState"):
                    next(iter(resumed))

    def test_docstring_examples(self) -> None:
        """Each ``::`` block of every docstring in joaderfs runs, given
        ``job`` (a fresh job), ``epochs``, ``size``, ``classes`` and, for
        the resume example, ``model``; run again, the resume example goes on
        from its checkpoint's epoch."""
        examples = list(docstring_examples())
        self.assertGreaterEqual(len(examples), 8)
        for n, (where, code) in enumerate(examples):
            with self.subTest(example=where):
                needs = {m for m in ("torch", "tensorflow", "keras", "jax",
                                     "grain")
                         if re.search(rf"\b(import|from) {m}\b", code)}
                missing = [m for m in needs
                           if framework("tensorflow" if m == "keras" else m)
                           is None]
                if missing:
                    self.skipTest(f"{', '.join(missing)} not installed")
                job = self.make_job(f"doc-{n}")
                folder = tempfile.TemporaryDirectory()
                self.addCleanup(folder.cleanup)
                names = self.run_example(code, job, folder.name, epochs=2)
                # Examples with `epochs` read that many, the others one.
                status = joaderfs.job_status(self.mount, job.name)
                self.assertEqual(
                    (status["epoch"], status["remaining"]),
                    (1 if re.search(r"\bepochs\b", code) else 0, 0),
                    "the epochs read")
                if "StreamState" in code:
                    # The checkpoint is of epoch 1 (after 4 batches of 5):
                    # run with epochs=3, the example reads the rest of 1
                    # and all of 2, and no epoch from 0.
                    names = self.run_example(code, job, folder.name,
                                             epochs=3)
                    self.assertEqual(names["state"].epoch, 3)
                    status = joaderfs.job_status(self.mount, job.name)
                    self.assertEqual((status["epoch"], status["remaining"]),
                                     (2, 0))

    def run_example(self, code: str, job: Path, folder: str,
                    epochs: int) -> dict:
        names = {"job": str(job), "epochs": epochs, "size": SIZE,
                 "classes": len(CLASSES), "__name__": "__example__"}
        if torch is not None:
            names["model"] = torch.nn.Linear(4, 2)
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            exec(compile(code, "<docstring example>", "exec"), names)
        finally:
            os.chdir(cwd)
        return names


def docstring_examples():
    """(where, code) for each literal block (after ``::``) of every
    docstring of every module of joaderfs, its classes and functions."""
    package = Path(joaderfs.__file__).parent
    for info in sorted(pkgutil.iter_modules([str(package)]),
                       key=lambda m: m.name):
        source = (package / f"{info.name}.py").read_text()
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef,
                                     ast.FunctionDef)):
                continue
            doc = ast.get_docstring(node, clean=True)
            if not doc:
                continue
            name = getattr(node, "name", info.name)
            for i, block in enumerate(literal_blocks(doc)):
                yield f"{info.name}.{name}[{i}]", block


def literal_blocks(doc: str):
    """The literal blocks of reStructuredText: after a paragraph ending in
    ``::``, the lines indented more than it, up to the next line that is
    not."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if not line.rstrip().endswith("::"):
            continue
        indent = len(line) - len(line.lstrip())
        block = []
        for following in lines[i + 1:]:
            if following.strip() and \
                    len(following) - len(following.lstrip()) <= indent:
                break
            block.append(following)
        yield textwrap.dedent("\n".join(block)).strip("\n")


if __name__ == "__main__":
    unittest.main()
