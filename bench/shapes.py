#!/usr/bin/python3
"""A small, learnable image-classification dataset for convergence tests.

    bench/shapes.py OUTDIR [--classes 8] [--train 200] [--val 60] [--seed 1]

writes OUTDIR/train/<class>/<i>.jpg and OUTDIR/val/<class>/<i>.jpg
(ImageFolder layout, JPEG). Each image, 64-96 px a side and not square, holds
6-12 copies of one shape (the class: disc, ring, triangle, square, plus,
star), each of random size, rotation and colour, over a random
gradient with noise and two class-independent distractor strokes. Colour and
mean brightness say nothing about the class, so a model must learn the
shapes; every class is closed under horizontal mirroring (random rotation of
shapes that have a mirror axis), so a random flip keeps labels true, and
there are several shapes per image, so a random crop usually keeps one.

Every image is a function of (seed, split, class, index) alone.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("disc", "ring", "triangle", "square", "plus", "star")
SPLITS = {"train": 0, "val": 1}
SUPERSAMPLE = 3  # shapes are drawn at 3x and shrunk: antialiased edges


def _polygon(cx, cy, radius, angle, points):
    """Vertices of `points` (list of (r, theta) in unit radius, radians)
    scaled by radius, rotated by angle and centred on (cx, cy)."""
    return [(cx + radius * r * math.cos(t + angle),
             cy + radius * r * math.sin(t + angle)) for r, t in points]


def _regular(n, inner=None):
    """Unit regular n-gon, or an n-pointed star with inner radius `inner`."""
    if inner is None:
        return [(1.0, 2 * math.pi * k / n) for k in range(n)]
    return [(1.0 if k % 2 == 0 else inner, math.pi * k / n)
            for k in range(2 * n)]


def _draw_shape(draw, kind, cx, cy, radius, angle, ink):
    r = radius
    if kind == "disc":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=ink)
    elif kind == "ring":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=ink,
                     width=max(1, int(r * 0.3)))
    elif kind == "triangle":
        draw.polygon(_polygon(cx, cy, r, angle, _regular(3)), fill=ink)
    elif kind == "square":
        draw.polygon(_polygon(cx, cy, r, angle, _regular(4)), fill=ink)
    elif kind == "plus":
        arm = 0.28
        pts = [(arm, arm), (1, arm), (1, -arm), (arm, -arm), (arm, -1),
               (-arm, -1), (-arm, -arm), (-1, -arm), (-1, arm), (-arm, arm),
               (-arm, 1), (arm, 1)]
        c, s = math.cos(angle), math.sin(angle)
        draw.polygon([(cx + r * (x * c - y * s), cy + r * (x * s + y * c))
                      for x, y in pts], fill=ink)
    elif kind == "star":
        draw.polygon(_polygon(cx, cy, r, angle, _regular(5, 0.42)), fill=ink)
    else:
        raise ValueError(kind)


def make_image(seed: int, split: str, label: int, index: int) -> Image.Image:
    """One image of class `label`; a pure function of its arguments."""
    rng = np.random.default_rng([seed, SPLITS[split], label, index])
    w, h = (int(v) for v in rng.integers(64, 97, 2))
    s = SUPERSAMPLE
    # Background: a linear gradient between two random colours.
    yy, xx = np.mgrid[0:h * s, 0:w * s].astype(np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    t = ((xx / (w * s) - 0.5) * math.cos(angle)
         + (yy / (h * s) - 0.5) * math.sin(angle) + 0.5)
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    bg = c0 + (c1 - c0) * np.clip(t, 0, 1)[..., None]
    canvas = Image.fromarray(bg.astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(canvas)
    # Distractors: two strokes of random colour, in every class alike.
    for _ in range(2):
        x0, x1 = rng.uniform(0, w * s, 2)
        y0, y1 = rng.uniform(0, h * s, 2)
        draw.line([(x0, y0), (x1, y1)],
                  fill=tuple(int(v) for v in rng.integers(0, 256, 3)),
                  width=int(rng.integers(1, 3)) * s)
    kind = CLASSES[label]
    for _ in range(int(rng.integers(6, 13))):
        radius = rng.uniform(5, 10) * s
        cx, cy = rng.uniform(0, w * s), rng.uniform(0, h * s)
        mean = bg[int(min(cy, h * s - 1)), int(min(cx, w * s - 1))]
        # Ink at least 80 levels away from the local background, on average.
        while True:
            ink = rng.integers(0, 256, 3)
            if np.abs(ink - mean).mean() >= 80:
                break
        _draw_shape(draw, kind, cx, cy, radius, rng.uniform(0, 2 * math.pi),
                    tuple(int(v) for v in ink))
    image = canvas.resize((w, h), Image.LANCZOS)
    noisy = np.asarray(image, np.float32) + rng.normal(0, 8, (h, w, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")


def generate(out_dir: str, classes: int = 8, train: int = 200, val: int = 60,
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
    parser.add_argument("--train", type=int, default=200,
                        help="training images per class")
    parser.add_argument("--val", type=int, default=60,
                        help="validation images per class")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    train_dir, val_dir = generate(args.out_dir, args.classes, args.train,
                                  args.val, args.seed)
    print(train_dir)
    print(val_dir)


if __name__ == "__main__":
    main()
