#!/usr/bin/python3
"""Convergence parity: training on joaderfs's augmented stream reaches the
same accuracy as training on torchvision's own augmentation.

    bench/parity.py [--data DIR] [--epochs 16] [--seeds 1,2,3] [--batch 32]
                    [--train 150] [--val 50] [--systems torchvision,joaderfs]
                    [--docs docs]

The JOADER paper claims sharing data preparation costs no accuracy; with
per-job augmentation in the daemon (issue 11) that has to hold for random
crops and flips too. This trains one small CNN on the CPU (2 threads) over
the textures dataset of bench/textures.py (generated into a temporary folder
unless --data names one with train/ and val/), once per seed and system:

- torchvision: DataLoader(ImageFolder(train, RandomResizedCrop(64) +
  RandomHorizontalFlip() + PILToTensor()), shuffle=True, num_workers=1).
- joaderfs: a daemonized mount of train/ (tests/integration/mountlib.py),
  a job with spec ``crop=random flip=0.5 size=64 seed=S``, read as
  DataLoader(JobDataset(job, batch_size=B), batch_size=None).

Everything else is the same for both: the model and its initialisation
(torch.manual_seed(S)), SGD with momentum and a one-cycle schedule over the
same number of steps, the epochs, and the evaluation after every epoch on
val/ through plain torchvision Resize(64) + CenterCrop(64). It prints a
Markdown table (final validation accuracy per seed, the means, their
difference) and, with --docs, writes DOCS/parity.png (loss and accuracy
curves, gnuplot), DOCS/parity.md (the table and the set-up) and
DOCS/bench/parity.dat (the curves). The default configuration took 14
minutes on 2 cores shared with other builds. Run it with /usr/bin/python3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms as T

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(HERE))

import textures  # noqa: E402

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
        import mountlib
        mountlib.require_binary()
        self.workdir = tempfile.mkdtemp(prefix="joaderfs-parity-")
        self.mount = mountlib.Mount(
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


def write_curves(result: dict, dat: Path, png: Path) -> None:
    """gnuplot data (one block per run, then one mean block per system) and
    a two-panel PNG: training loss and validation accuracy per epoch."""
    systems = [s for s in SYSTEMS if final_accuracies(result, s)]
    blocks = []
    for system in systems:
        runs = [r for r in result["runs"] if r["system"] == system]
        for r in runs + [None]:
            title = ("%s seed %d" % (system, r["seed"]) if r
                     else "%s mean" % system)
            rows = ["# %s: epoch train_loss val_loss val_acc" % title]
            for e in range(len(runs[0]["val_acc"])):
                pick = [r] if r else runs
                rows.append("%d %.5f %.5f %.5f" % (
                    e + 1, *(statistics.mean(x[k][e] for x in pick)
                             for k in ("train_loss", "val_loss", "val_acc"))))
            blocks.append((system, r is None, "\n".join(rows)))
    dat.parent.mkdir(parents=True, exist_ok=True)
    dat.write_text("\n\n\n".join(b[2] for b in blocks) + "\n")
    colours = {"torchvision": "#1f77b4", "joaderfs": "#d62728"}

    def plot(column: int, scale: str) -> str:
        parts = []
        for i, (system, mean, _) in enumerate(blocks):
            style = ("lw 2.5 title '%s (mean)'" % system if mean
                     else "lw 0.8 dt 2 notitle")
            parts.append("'%s' index %d using 1:($%d%s) with linespoints "
                         "pt 7 ps %s lc rgb '%s' %s"
                         % (dat, i, column, scale, "0.6" if mean else "0.3",
                            colours[system], style))
        return "plot " + ", \\\n     ".join(parts)

    script = "\n".join([
        "set terminal pngcairo size 1100,420 font 'sans,10'",
        "set output '%s'" % png,
        "set multiplot layout 1,2 title 'Convergence parity: %s, %d seeds "
        "(thin: each seed)'" % (", ".join(systems),
                                len(result["runs"]) // max(1, len(systems))),
        "set grid", "set key top right", "set xlabel 'epoch'",
        "set ylabel 'training loss'", "set title 'training loss'",
        plot(2, ""),
        "set key bottom right", "set ylabel 'validation accuracy (%)'",
        "set title 'validation accuracy (centre crop)'",
        "set yrange [0:100]",
        plot(4, "*100"),
        "unset multiplot", ""])
    subprocess.run(["gnuplot"], input=script.encode(), check=True)


def verdict(result: dict) -> str:
    """One paragraph: whether the means are within 2 points, and the
    seed-to-seed spread that the comparison has to be read against."""
    accs = {s: final_accuracies(result, s) for s in SYSTEMS}
    if not all(accs.values()):
        return ""
    diff = 100 * (statistics.mean(accs["joaderfs"])
                  - statistics.mean(accs["torchvision"]))
    spread = ", ".join("%s %.1f-%.1f%%" % (s, 100 * min(a), 100 * max(a))
                       for s, a in accs.items())
    met = "meets" if abs(diff) <= 2 else "misses"
    return ("The difference of the means, %+.1f points, %s the 2-point "
            "target. Final accuracies across seeds span %s." % (diff, met,
                                                                spread))


def write_markdown(result: dict, args, path: Path, seconds: float) -> None:
    skipped = "".join("\n%s was not run: %s.\n" % (s, why)
                      for s, why in result["skipped"].items())
    path.write_text(f"""# Convergence parity: joaderfs augmentation vs torchvision

Issue 11 moves RandomResizedCrop and RandomHorizontalFlip into the daemon,
per job and seeded, cut from the shared decode. The JOADER paper claims that
sharing data preparation costs no accuracy; this checks that claim for the
augmented stream: the same small CNN, trained the same way, once on
joaderfs's stream and once on torchvision's own augmentation, reaches the
same final accuracy. Target: the means over 3 seeds within 2 points.

![loss and accuracy curves](parity.png)

{summary_table(result, args.seeds)}

{verdict(result)}
{skipped}
## Set-up

- Data: `bench/textures.py` (seed 1), {result['classes']} classes of
  textures (horizontal, vertical, diagonal stripes, checks, dots, rings at a
  random period, phase, tilt and sharpness, in random colour gradients with
  noise and distractor strokes), 64-96 px JPEGs, {args.train} training
  and {args.val} validation images per class. Chance is {100 * result['chance']:.1f}%.
- Model: 3 conv layers (24-96 channels, batch norm), global pooling, one
  linear layer; SGD (momentum 0.9, Nesterov, weight decay 5e-4), one-cycle
  learning rate peaking at {args.lr}, batch {args.batch}, {args.epochs} epochs;
  `torch.manual_seed(seed)` before building the model, so both systems start
  from the same weights for a seed. CPU, `torch.set_num_threads(2)`.
- torchvision: `ImageFolder` + `RandomResizedCrop(64)` +
  `RandomHorizontalFlip()`, `DataLoader(shuffle=True, num_workers=1)`.
- joaderfs: daemonized mount of the training split (`size=64`,
  `seed=<seed>`, `ram_cache=256M`, `cache_dir=none`), one job with spec
  `{JOADERFS_SPEC % (SIZE, 0)}` (seed = the run's seed), read through
  `DataLoader(JobDataset(job, batch_size={args.batch}), batch_size=None)`.
- Both: pixels scaled to [-1, 1]; validation after every epoch on the
  validation split through `Resize(64)` + `CenterCrop(64)` (PIL), the
  accuracy above being that of the last epoch.

Reproduce (about {seconds / 60:.0f} minutes on this 2-core machine, which
was shared with other builds while it ran):

    /usr/bin/python3 bench/parity.py --docs docs

`ctest -R parity` runs a reduced configuration (tests/parity).
""")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="folder with train/ and val/ "
                        "(default: generate bench/textures.py's into a "
                        "temporary folder)")
    parser.add_argument("--train", type=int, default=150,
                        help="generated training images per class")
    parser.add_argument("--val", type=int, default=50,
                        help="generated validation images per class")
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--docs", help="write parity.png, parity.md and "
                        "bench/parity.dat here")
    parser.add_argument("--json", help="write every run's curves here")
    parser.add_argument("--replot", metavar="JSON", help="no training: "
                        "rewrite --docs from a --json of an earlier run "
                        "(run with the same --epochs, --batch, --lr, "
                        "--train, --val)")
    args = parser.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    systems = args.systems.split(",")
    if set(systems) - set(SYSTEMS):
        parser.error("systems are %s" % ", ".join(SYSTEMS))

    if args.replot:
        result = json.loads(Path(args.replot).read_text())
        seconds = result.get("seconds",
                             sum(r["seconds"] for r in result["runs"]))
        print(summary_table(result, args.seeds))
        if args.docs:
            write_docs(result, args, seconds)
        return
    started = time.monotonic()
    tmp = None
    try:
        if args.data:
            data = args.data
        else:
            tmp = tempfile.mkdtemp(prefix="joaderfs-parity-data-")
            data = tmp
            textures.generate(data, train=args.train, val=args.val, seed=1)
        result = run_experiment(os.path.join(data, "train"),
                                os.path.join(data, "val"), args.seeds,
                                systems, args.epochs, args.batch, args.lr)
    finally:
        if tmp:
            shutil.rmtree(tmp, True)
    seconds = time.monotonic() - started
    result["seconds"] = seconds
    print()
    print(summary_table(result, args.seeds))
    for system, why in result["skipped"].items():
        print("\n%s was not run: %s" % (system, why))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.docs:
        write_docs(result, args, seconds)
    print("\n%.0f s in all" % seconds)


def write_docs(result: dict, args, seconds: float) -> None:
    docs = Path(args.docs)
    write_curves(result, docs / "bench" / "parity.dat", docs / "parity.png")
    write_markdown(result, args, docs / "parity.md", seconds)


if __name__ == "__main__":
    main()
