"""Datasets the tests and benchmarks generate: small ImageFolder trees of
structured JPEGs (PIL), their torchvision order and reference pixels, and
the textures dataset of the convergence-parity test and benchmark."""

from __future__ import annotations

import math
import os

import numpy as np
from PIL import Image, ImageDraw

from .daemon import SIZE


def _image(rng, w, h, gray=False):
    """Gradient + shapes + mild noise: structure that survives resizing."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0 = rng.uniform(0, 255, 3)
    cx = rng.uniform(-120, 120, 3)
    cy = rng.uniform(-120, 120, 3)
    img = c0 + cx * (xx / w)[..., None] + cy * (yy / h)[..., None]
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(pil)
    for _ in range(3):
        x0, y0 = rng.integers(0, w - 8), rng.integers(0, h - 8)
        x1 = x0 + rng.integers(8, max(9, w // 2))
        y1 = y0 + rng.integers(8, max(9, h // 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
    arr = np.asarray(pil).astype(np.float32)
    arr += rng.normal(0, 6.0, arr.shape)
    pil = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    return pil.convert("L") if gray else pil


SIZES = [(80, 60), (300, 200), (120, 200), (160, 120), (200, 200),
         (96, 150), (250, 90), (64, 64), (180, 240), (140, 100)]


def make_imagefolder(root, layout, seed=0, gray=()):
    """Writes SOURCE/<class>/<file> JPEGs; layout: {class: [file names]}.

    gray: relpaths to save as single-channel (grayscale) JPEGs.
    """
    rng = np.random.default_rng(seed)
    k = 0
    for cls, names in layout.items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            w, h = SIZES[k % len(SIZES)]
            k += 1
            rel = cls + "/" + name
            _image(rng, w, h, gray=rel in gray).save(
                os.path.join(root, cls, name), "JPEG", quality=90)
    return root


# Class names chosen so that comparing whole relpath strings ('bee-x/..' <
# 'bee/..' because '-' < '/') and comparing path components ('bee' <
# 'bee-x') disagree; file names mix upper and lower case and numbers.
DEFAULT_LAYOUT = {
    "ant": ["a0.jpg", "a1.jpg", "a10.jpg", "a2.jpg", "B3.jpg", "b4.jpg"],
    "bee": ["img_9.jpg", "img_10.jpg", "Zed.jpg", "alpha.jpg", "x.jpg"],
    "bee-x": ["p.jpg", "q.jpg", "r.jpg", "s.jpg", "t.jpg", "u.jpg",
              "v.jpg"],
    "cat": ["c1.jpg", "c2.jpg", "c3.jpg", "c4.jpg", "c5.jpg", "c6.jpg"],
}


def imagefolder_order(root):
    """[(relpath, label)] in torchvision ImageFolder order.

    Classes are the sub-folders sorted by name (labels 0..C-1); samples are
    sorted by relative path compared component by component (class, then
    file name), which is what ImageFolder's nested sorted() walk yields.
    """
    classes = sorted(d for d in os.listdir(root)
                     if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            out.append((cls + "/" + name, label))
    assert [r for r, _ in out] == sorted(
        (r for r, _ in out), key=lambda r: r.split("/"))
    return out


def reference_pixels(path, size):
    """Independent decode: torchvision Resize(size) + CenterCrop(size).

    Resize: the shorter side becomes `size`, the longer one
    int(size * long / short), PIL bilinear (antialiased when shrinking).
    CenterCrop: top-left at round((H - size) / 2), round((W - size) / 2).
    size 0 means the decoded image as it is.
    """
    with Image.open(path) as im:
        im = im.convert("RGB")
        if size:
            w, h = im.size
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = size, int(size * long / short)
            nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
            if (nw, nh) != (w, h):
                im = im.resize((nw, nh), Image.BILINEAR)
            top = int(round((nh - size) / 2.0))
            left = int(round((nw - size) / 2.0))
            im = im.crop((left, top, left + size, top + size))
        return np.asarray(im, dtype=np.uint8)


def small_layout(n, classes=4, prefix="img"):
    """{class: [names]} with n images spread over `classes` classes."""
    layout = {}
    for k in range(n):
        cls = "c%02d" % (k % classes)
        layout.setdefault(cls, []).append("%s%04d.jpg" % (prefix, k))
    return layout


def make_dataset(root, n, classes=4, seed=0, shape=(SIZE, SIZE)):
    """n JPEGs of `shape` (width, height; make_imagefolder's generator) in
    ImageFolder layout; returns (root, [(relpath, label)] in id order). At
    the suite's base=SIZE each SIZE x SIZE image is one cache entry of
    PIXELS bytes, as the tiers' byte counts assume."""
    rng = np.random.default_rng(seed)
    for cls, names in small_layout(n, classes).items():
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for name in names:
            _image(rng, *shape).save(os.path.join(root, cls, name), "JPEG", quality=90)
    return root, imagefolder_order(root)


def rewrite_image(path, seed):
    """Rewrites `path` in place (same name, same inode) with other pixels
    of the same dimensions."""
    with Image.open(path) as im:
        w, h = im.size
    rng = np.random.default_rng(seed)
    _image(rng, w, h).save(path, "JPEG", quality=90)


# ------------------------------------------------ the textures dataset

# A small, learnable image-classification dataset for the convergence-parity
# test and benchmark: OUTDIR/train/<class>/<i>.jpg and OUTDIR/val/<class>/<i>.jpg
# (ImageFolder layout, JPEG quality 75-95). Each image, 64-96 px a side and
# not square, is a texture of its class (horizontal, vertical or diagonal
# stripes, checks, dots, concentric rings) at a random period, phase, tilt and
# edge sharpness, in two random colour gradients of random contrast, with
# noise and two class-independent strokes. Colour and mean brightness say
# nothing about the class: a model must learn oriented and periodic structure.
# Every class is closed under horizontal mirroring (the diagonal class takes
# either diagonal), so a random flip keeps labels true, and a texture fills
# the image, so a random crop keeps its class. Every image is a function of
# (seed, split, class, index) alone.

TEXTURE_CLASSES = ("hstripes", "vstripes", "dstripes", "checks", "dots",
                   "rings")
TEXTURE_SPLITS = {"train": 0, "val": 1}


def _texture_pattern(kind: str, rng: np.random.Generator, w: int, h: int
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


def texture_image(seed: int, split: str, label: int, index: int) -> Image.Image:
    """One image of class `label`; a pure function of its arguments."""
    rng = np.random.default_rng([seed, TEXTURE_SPLITS[split], label, index])
    w, h = (int(v) for v in rng.integers(64, 97, 2))
    t = _texture_pattern(TEXTURE_CLASSES[label], rng, w, h)[..., None]
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


def make_textures(out_dir: str, classes: int = len(TEXTURE_CLASSES),
                  train: int = 150, val: int = 50,
                  seed: int = 1) -> tuple[str, str]:
    """Writes both splits; returns (train_dir, val_dir)."""
    if not 2 <= classes <= len(TEXTURE_CLASSES):
        raise ValueError(f"classes must be 2..{len(TEXTURE_CLASSES)}")
    dirs = []
    for split, count in (("train", train), ("val", val)):
        split_dir = os.path.join(out_dir, split)
        for label in range(classes):
            class_dir = os.path.join(split_dir, "%d-%s" % (label, TEXTURE_CLASSES[label]))
            os.makedirs(class_dir, exist_ok=True)
            for i in range(count):
                rng = np.random.default_rng([seed, TEXTURE_SPLITS[split], label, i, 1])
                texture_image(seed, split, label, i).save(
                    os.path.join(class_dir, "%05d.jpg" % i), "JPEG",
                    quality=int(rng.integers(75, 96)))
        dirs.append(split_dir)
    return dirs[0], dirs[1]
