"""The convergence-parity experiment: one small CNN trained on the CPU on
joaderfs's augmented stream (a job with ``crop=random flip=0.5``) and on
torchvision's own RandomResizedCrop + RandomHorizontalFlip, everything else
the same (model, initialisation, SGD with a one-cycle schedule, epochs, and
the evaluation on val/ through Resize + CenterCrop).

tests/parity runs a reduced experiment and bounds the difference;
bench/parity/convergence.py runs the full one and writes docs/parity.md.
Imports torch, so the package's __init__ does not import it.
"""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
import time

import torch
import torch.nn as nn
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms as T

from .daemon import Mount, require_binary

SIZE = 64
SYSTEMS = ("torchvision", "joaderfs")
JOADERFS_SPEC = "crop=random flip=0.5 size=%d seed=%d"


class Unavailable(Exception):
    """A system cannot run here (e.g. the daemon lacks crop=random)."""


def make_model(classes: int) -> nn.Module:
    """A small CNN that trains at 64 px on 2 CPU cores in minutes."""
    def block(cin, cout, **kw):
        return [nn.Conv2d(cin, cout, bias=False, **kw), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True)]
    return nn.Sequential(
        *block(3, 24, kernel_size=5, stride=2, padding=2), nn.MaxPool2d(2),
        *block(24, 48, kernel_size=3, padding=1), nn.MaxPool2d(2),  # 8 x 8
        *block(48, 96, kernel_size=3, padding=1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(96, classes))


def to_input(images: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> float in [-1, 1]; the same for both systems."""
    return images.float().div_(127.5).sub_(1.0).contiguous()


def load_val(val_dir: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The validation split through plain torchvision: Resize + CenterCrop."""
    folder = torchvision.datasets.ImageFolder(
        val_dir, transform=T.Compose([T.Resize(SIZE), T.CenterCrop(SIZE),
                                      T.PILToTensor()]))
    images = torch.stack([folder[i][0] for i in range(len(folder))])
    return images, torch.tensor(folder.targets)


@torch.no_grad()
def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor
             ) -> tuple[float, float]:
    model.eval()
    loss = correct = 0.0
    for start in range(0, len(labels), 256):
        logits = model(to_input(images[start:start + 256]))
        y = labels[start:start + 256]
        loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(1) == y).sum())
    model.train()
    return loss / len(labels), correct / len(labels)


class TorchvisionLoader:
    """torchvision's own augmentation: the baseline."""

    def __init__(self, train_dir: str, seed: int, batch: int) -> None:
        folder = torchvision.datasets.ImageFolder(
            train_dir, transform=T.Compose([T.RandomResizedCrop(SIZE),
                                            T.RandomHorizontalFlip(),
                                            T.PILToTensor()]))
        self.samples = len(folder)
        self.loader = DataLoader(folder, batch_size=batch, shuffle=True,
                                 num_workers=1,
                                 generator=torch.Generator().manual_seed(seed))

    def epochs(self, count: int):
        for _ in range(count):
            yield ((images, labels) for images, labels in self.loader)

    def close(self) -> None:
        pass


class JoaderfsLoader:
    """A job with crop=random flip=0.5 on a daemonized mount of train/."""

    def __init__(self, train_dir: str, seed: int, batch: int) -> None:
        import joaderfs
        require_binary()
        self.workdir = tempfile.mkdtemp(prefix="joaderfs-parity-")
        self.mount = Mount(
            train_dir, self.workdir,
            {"size": SIZE, "seed": seed, "ram_cache": "256M",
             "cache_dir": "none", "log_level": "info"})
        self.mount.start()
        try:
            job = joaderfs.make_job(self.mount.mnt, "parity-%d" % seed)
            try:
                joaderfs.write_spec(job, JOADERFS_SPEC % (SIZE, seed))
            except ValueError as e:
                raise Unavailable(
                    "the daemon rejects %r (%s): it lacks issue 11's "
                    "per-job augmentation" % (JOADERFS_SPEC % (SIZE, seed), e))
            self.samples = joaderfs.dataset_info(self.mount.mnt)["samples"]
            self.loader = DataLoader(joaderfs.JobDataset(job, batch_size=batch),
                                     batch_size=None, num_workers=0)
        except BaseException:
            self.close()
            raise

    def epochs(self, count: int):
        for _ in range(count):  # each pass re-opens next: the next epoch
            yield ((images, labels) for images, labels, _ in self.loader)

    def close(self) -> None:
        self.mount.cleanup()
        shutil.rmtree(self.workdir, True)


LOADERS = {"torchvision": TorchvisionLoader, "joaderfs": JoaderfsLoader}


def train_run(system: str, seed: int, train_dir: str, val: tuple, classes: int,
              epochs: int, batch: int, lr: float) -> dict:
    """Trains one model; returns its per-epoch curves."""
    torch.manual_seed(seed)
    model = make_model(classes)
    loader = LOADERS[system](train_dir, seed, batch)
    started = time.monotonic()
    try:
        steps_per_epoch = math.ceil(loader.samples / batch)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9,
                                    nesterov=True, weight_decay=5e-4)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=lr, total_steps=epochs * steps_per_epoch + 1)
        curves = {"train_loss": [], "train_acc": [], "val_loss": [],
                  "val_acc": []}
        for epoch_batches in loader.epochs(epochs):
            loss_sum = correct = seen = 0.0
            for images, labels in epoch_batches:
                logits = model(to_input(images))
                loss = nn.functional.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if schedule.last_epoch + 1 < schedule.total_steps:
                    schedule.step()
                loss_sum += float(loss) * len(labels)
                correct += int((logits.argmax(1) == labels).sum())
                seen += len(labels)
            if seen != loader.samples:
                raise AssertionError("%s delivered %d samples in an epoch, "
                                     "not %d" % (system, seen, loader.samples))
            val_loss, val_acc = evaluate(model, *val)
            curves["train_loss"].append(loss_sum / seen)
            curves["train_acc"].append(correct / seen)
            curves["val_loss"].append(val_loss)
            curves["val_acc"].append(val_acc)
    finally:
        loader.close()
    curves.update(system=system, seed=seed,
                  seconds=time.monotonic() - started)
    return curves


def run_experiment(train_dir: str, val_dir: str, seeds, systems, epochs: int,
                   batch: int, lr: float, log=print) -> dict:
    """Every (system, seed) run; {"runs": [...], "skipped": {system: why}}."""
    torch.set_num_threads(2)
    val = load_val(val_dir)
    classes = int(val[1].max()) + 1
    runs, skipped = [], {}
    for seed in seeds:
        for system in systems:
            if system in skipped:
                continue
            try:
                run = train_run(system, seed, train_dir, val, classes, epochs,
                                batch, lr)
            except Unavailable as e:
                skipped[system] = str(e)
                log("parity: %s skipped: %s" % (system, e))
                continue
            log("parity: %-11s seed %d  val acc %.3f  (%.0f s)"
                % (system, seed, run["val_acc"][-1], run["seconds"]))
            runs.append(run)
    return {"runs": runs, "skipped": skipped, "classes": classes,
            "chance": 1.0 / classes}


def final_accuracies(result: dict, system: str) -> list[float]:
    return [r["val_acc"][-1] for r in result["runs"] if r["system"] == system]


def summary_table(result: dict, seeds) -> str:
    """Markdown: final validation accuracy (%) per seed and system."""
    systems = [s for s in SYSTEMS if final_accuracies(result, s)]
    by = {(r["system"], r["seed"]): r for r in result["runs"]}
    lines = ["| seed | " + " | ".join(systems) + " |",
             "| --- |" + " ---: |" * len(systems)]
    for seed in seeds:
        cells = ["%.1f" % (100 * by[s, seed]["val_acc"][-1])
                 if (s, seed) in by else "-" for s in systems]
        lines.append("| %d | %s |" % (seed, " | ".join(cells)))
    means = {s: statistics.mean(final_accuracies(result, s)) for s in systems}
    lines.append("| mean | %s |" % " | ".join("**%.1f**" % (100 * means[s])
                                               for s in systems))
    if len(systems) == 2:
        diff = 100 * (means["joaderfs"] - means["torchvision"])
        lines.append("")
        lines.append("joaderfs - torchvision: **%+.1f points** (chance: %.1f%%)"
                     % (diff, 100 * result["chance"]))
    return "\n".join(lines)
