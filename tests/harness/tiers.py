"""The disk tier's files seen from outside: the bytes a sample takes,
the files under cache_dir, and damage done to them on purpose."""

import os

from .daemon import PIXELS


def slot_bytes(pixels):
    """Disk bytes a sample takes: its slot, a 32-byte header and the pixels
    rounded up to a step of 1/16 to 1/8 of their size (a power of two), as
    the disk tier's budget and disk_bytes count them."""
    need, step = 32 + pixels, 64
    while step * 16 < need:
        step *= 2
    return (need + step - 1) // step * step


SLOT = slot_bytes(PIXELS)


def cache_files(cache_dir, suffix="", prefix=""):
    """Files anywhere under cache_dir whose names start with `prefix` and
    end with `suffix` (slot files are `slots-<bytes>`; the RocksDB index
    lives in <folder>/index/)."""
    out = []
    for root, _, names in os.walk(cache_dir):
        for name in sorted(names):
            if name.startswith(prefix) and name.endswith(suffix):
                out.append(os.path.join(root, name))
    return sorted(out)


def flip_bytes(path, fractions=(0.3, 0.5, 0.7), length=64):
    """XORs `length` bytes with 0xFF at each fraction of the file's size;
    returns the offsets damaged."""
    size = os.path.getsize(path)
    offsets = []
    with open(path, "r+b") as f:
        for frac in fractions:
            off = max(0, min(size - length, int(size * frac)))
            f.seek(off)
            data = bytearray(f.read(length))
            for i in range(len(data)):
                data[i] ^= 0xFF
            f.seek(off)
            f.write(bytes(data))
            offsets.append(off)
        f.flush()
        os.fsync(f.fileno())
    return offsets
