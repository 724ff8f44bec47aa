#!/usr/bin/python3
"""A small, learnable image-classification dataset for convergence tests.

    bench/textures.py OUTDIR [--classes 8] [--train 200] [--val 60] [--seed 1]

writes OUTDIR/train/<class>/<i>.jpg and OUTDIR/val/<class>/<i>.jpg
(ImageFolder layout, JPEG quality 75-95). Each image, 64-96 px a side and
not square, is a texture of its class (horizontal, vertical or diagonal
stripes, checks, dots, concentric rings) at a random period, phase, tilt and
edge sharpness, in two random colour gradients of random contrast, with
noise and two class-independent strokes. Colour and mean brightness say
nothing about the class: a model must learn oriented and periodic structure.
Every class is closed under horizontal mirroring (the diagonal class takes
either diagonal), so a random flip keeps labels true, and a texture fills
the image, so a random crop keeps its class.

Every image is a function of (seed, split, class, index) alone.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("hstripes", "vstripes", "dstripes", "checks", "dots", "rings")
SPLITS = {"train": 0, "val": 1}


def _pattern(kind: str, rng: np.random.Generator, w: int, h: int
             ) -> np.ndarray:
    """A [h, w] float pattern in [0, 1] of the class `kind`, at a random
    period (6-16 px), phase and slight tilt."""
    period = rng.uniform(6, 16)
    k = 2 * math.pi / period
    tilt = rng.uniform(-0.17, 0.17)  # about +-10 degrees
    if kind == "dstripes":  # either diagonal: the class is closed under flip
        tilt += math.pi / 4 * rng.choice((-1, 1))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    c, s = math.cos(tilt), math.sin(tilt)
    u, v = xx * c + yy * s, -xx * s + yy * c
    phase = rng.uniform(0, 2 * math.pi, 2)
    if kind == "hstripes":
        wave = np.sin(k * v + phase[0])
    elif kind in ("vstripes", "dstripes"):
        wave = np.sin(k * u + phase[0])
    elif kind == "checks":
        wave = np.sin(k * u + phase[0]) * np.sin(k * v + phase[1]) * 2
    elif kind == "dots":
        wave = (np.cos(k * u + phase[0]) + np.cos(k * v + phase[1])) - 1
    elif kind == "rings":
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        wave = np.sin(k * np.hypot(xx - cx, yy - cy) + phase[0])
    else:
        raise ValueError(kind)
    sharp = rng.uniform(1, 6)  # soft waves to hard-edged bands
    return 0.5 + 0.5 * np.tanh(sharp * wave)


def make_image(seed: int, split: str, label: int, index: int) -> Image.Image:
    """One image of class `label`; a pure function of its arguments."""
    rng = np.random.default_rng([seed, SPLITS[split], label, index])
    w, h = (int(v) for v in rng.integers(64, 97, 2))
    t = _pattern(CLASSES[label], rng, w, h)[..., None]
    # Two colours, each a random gradient, so neither colour nor brightness
    # tells the class; contrast varies from faint to strong.
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    ramp = ((xx / w - 0.5) * math.cos(rng.uniform(0, 2 * math.pi))
            + (yy / h - 0.5) * math.sin(rng.uniform(0, 2 * math.pi)))[..., None]
    a = rng.uniform(0, 255, 3) + rng.uniform(-80, 80, 3) * ramp
    b = a + rng.uniform(40, 160, 3) * rng.choice((-1, 1), 3)
    pixels = a + (b - a) * t + rng.normal(0, 16, (h, w, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    # Distractors: two strokes of random colour, in every class alike.
    draw = ImageDraw.Draw(image)
    for _ in range(2):
        draw.line([tuple(rng.uniform(0, (w, h))), tuple(rng.uniform(0, (w, h)))],
                  fill=tuple(int(v) for v in rng.integers(0, 256, 3)),
                  width=int(rng.integers(1, 4)))
    return image


def generate(out_dir: str, classes: int = len(CLASSES), train: int = 150,
             val: int = 50,
             seed: int = 1) -> tuple[str, str]:
    """Writes both splits; returns (train_dir, val_dir)."""
    if not 2 <= classes <= len(CLASSES):
        raise ValueError(f"classes must be 2..{len(CLASSES)}")
    dirs = []
    for split, count in (("train", train), ("val", val)):
        split_dir = os.path.join(out_dir, split)
        for label in range(classes):
            class_dir = os.path.join(split_dir, "%d-%s" % (label, CLASSES[label]))
            os.makedirs(class_dir, exist_ok=True)
            for i in range(count):
                rng = np.random.default_rng([seed, SPLITS[split], label, i, 1])
                make_image(seed, split, label, i).save(
                    os.path.join(class_dir, "%05d.jpg" % i), "JPEG",
                    quality=int(rng.integers(75, 96)))
        dirs.append(split_dir)
    return dirs[0], dirs[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--classes", type=int, default=len(CLASSES))
    parser.add_argument("--train", type=int, default=150,
                        help="training images per class")
    parser.add_argument("--val", type=int, default=50,
                        help="validation images per class")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    train_dir, val_dir = generate(args.out_dir, args.classes, args.train,
                                  args.val, args.seed)
    print(train_dir)
    print(val_dir)


if __name__ == "__main__":
    main()
